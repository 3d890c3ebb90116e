"""Hypothesis strategies for kvcheck scenarios (installed as `kvcheck.strategies`).

A scenario is a `Config` plus a list of events (`kvcheck.core.scenario`). The strategies here draw
request lifecycles for 1-6 requests: admissions with short or long generations and optional EOS
positions, scheduler steps with per-row accept lengths, retractions (which re-admit the request
through prefill at a later step), aborts, and, when adaptive switching is on, stride switches
that land between a launch and its delivery.

Every branch shrinks towards the simplest scenario: `step` is the first event alternative, small
prompts, short generations, overlap on and stride 2 come first. That is why counterexamples come
out at the length of the minimal sequences in docs/semantics.md §3.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

import attrs
from hypothesis import event as hypothesis_event
from hypothesis import strategies as st

from kvcheck.core.scenario import (
    ALGORITHMS,
    ALLOCATION_RULES,
    MIN_POOL_TOKENS,
    Abort,
    Admit,
    Algorithm,
    AllocationRule,
    Config,
    Convention,
    Event,
    GlobalCounterMode,
    Grammar,
    Retract,
    Scenario,
    Step,
    SwitchStride,
)

MAX_REQUESTS: Final = 6
MIN_GENERATED_STRIDE: Final = 2
MAX_GENERATED_STRIDE: Final = 8
MAX_EVENTS: Final = 32
REQUEST_IDS: Final = tuple(f"r{i}" for i in range(MAX_REQUESTS))

# Situations the strategies must reach within the CI profile's budget (tests enforce it). The
# labels are emitted by the reference model as it reaches each situation, plus request counts.
COVERAGE_TARGETS: Final[tuple[str, ...]] = (
    *(f"{n} requests" for n in range(1, MAX_REQUESTS + 1)),
    "batch with 4+ live rows",
    "accept 1 on a live row",
    "accept 1 on a stale row",
    "full acceptance on a live row",
    "full acceptance on a stale row",
    *(f"stride {s}" for s in range(MIN_GENERATED_STRIDE, MAX_GENERATED_STRIDE + 1)),
    "finish on the prefill result",
    "eos finish",
    "length finish",
    "abort finish",
    "retract with its launch in flight",
    "re-admission",
    "second retraction of a request",
    "stale row of a finished request",
    "stale row of a retracted request",
)
ADAPTIVE_COVERAGE_TARGETS: Final[tuple[str, ...]] = ("stride switch with a launch in flight",)
# And for a target of today's shape (every algorithm, block/cap lengths, grammar requests): the
# situations of those paths, where SGLang's recent resolver bugs were.
SHAPE_COVERAGE_TARGETS: Final[tuple[str, ...]] = (
    *(f"algorithm {a}" for a in ALGORITHMS),
    "block/cap lengths",
    "grammar truncates a run",
    "grammar refusal",
    "grammar refuses the prefill token",
    "stale row of a grammar request",
)


def strides() -> st.SearchStrategy[int]:
    """Row widths of `next_token_ids` (speculative_num_draft_tokens), 2..8."""
    return _STRIDE


def configs(
    *,
    convention: Convention = "preclaim",
    global_counters: GlobalCounterMode = "ideal",
    adaptive: bool = False,
    algorithms: Sequence[Algorithm] = ("eagle",),
    block_cap: bool = False,
    allocation: bool = False,
) -> st.SearchStrategy[Config]:
    """Configs with the given judging options; overlap (on first) and initial stride vary, and
    so do the algorithm (among `algorithms`, EAGLE first), when `block_cap`, whether results
    carry block/cap lengths, and, when `allocation`, the allocation rule with its page size."""
    config = st.builds(
        Config,
        convention=st.just(convention),
        overlap=st.sampled_from((True, False)),
        stride=strides(),
        adaptive=st.just(adaptive),
        global_counters=st.just(global_counters),
        algorithm=st.sampled_from(tuple(algorithms)) if len(algorithms) > 1 else st.just("eagle"),
        block_cap=st.booleans() if block_cap else st.just(False),
    )
    if not allocation:
        return config
    return st.tuples(config, _ALLOCATION).map(_with_allocation)


# Allocation rules (off first, so shrinking drops allocation) and page sizes. The 0.5.6 rule has
# no clamp and never met adaptive switching in SGLang (adaptive spec v2 starts with 0.5.12), so
# it is drawn without adaptive only; pages larger than 1 only with the 0.5.16 page rounding.
# The pool is unbounded (first) or holds 128 or 192 tokens, small enough that six requests
# meet memory pressure (retraction, admission waiting for memory).
_PAGE_SIZE: Final = st.sampled_from((1, 2, 4))
_POOL_TOKENS: Final = st.sampled_from((0, MIN_POOL_TOKENS, MIN_POOL_TOKENS * 3 // 2))
_ALLOCATION: Final = st.tuples(st.sampled_from(ALLOCATION_RULES), _PAGE_SIZE, _POOL_TOKENS)


def _with_allocation(drawn: tuple[Config, tuple[AllocationRule, int, int]]) -> Config:
    config, (rule, page, pool_tokens) = drawn
    if rule == "0.5.6" and config.adaptive:
        rule = "0.5.12"
    return attrs.evolve(
        config,
        allocation=rule,
        page_size=page if rule == "0.5.16" else 1,
        max_stride=MAX_GENERATED_STRIDE if config.adaptive and rule != "off" else None,
        pool_pages=0 if rule == "off" else pool_tokens // (page if rule == "0.5.16" else 1),
    )


# Relative frequencies of event kinds. `step` is first so shrinking turns other events into steps.
_EVENT_KINDS: Final = ("step",) * 6 + ("admit",) * 3 + ("retract",) * 3 + ("abort",)
_ADAPTIVE_EVENT_KINDS: Final = (*_EVENT_KINDS, "switch_stride", "switch_stride")
_MAX_ACCEPT_CODE: Final = MAX_GENERATED_STRIDE**MAX_REQUESTS - 1
# Block-accept and cap lengths, one base-(stride + 1) digit per row (0..8), towards 0.
_LENGTH_BASE: Final = MAX_GENERATED_STRIDE + 1
_LENGTH_CODE: Final = st.integers(0, _LENGTH_BASE**MAX_REQUESTS - 1)

# Events are drawn from a few integers each, with strategies built once here: Hypothesis draws
# through `builds`/`lists`/`flatmap`, or strategies created inside a composite on every call,
# cost several times more, and generation dominates the time of a search.
_PROMPT_LEN: Final = st.integers(1, 64)
_MAX_NEW_TOKENS: Final = st.integers(1, 24)
_EOS_AT_OR_ZERO: Final = st.integers(0, 24)
_ACCEPT_CODE: Final = st.integers(0, _MAX_ACCEPT_CODE)
_STRIDE: Final = st.integers(MIN_GENERATED_STRIDE, MAX_GENERATED_STRIDE)
_INDEX_BELOW: Final = {n: st.integers(0, n - 1) for n in range(1, len(_ADAPTIVE_EVENT_KINDS) + 1)}
# Grammars: none (first, so shrinking drops them), accept-all, terminate at output position
# 2..24, reject at 1..24.
_GRAMMAR_KIND: Final = st.integers(0, 3)
# Output positions, the earliest most often (about one draw in four): a grammar that refuses the
# prefill token or ends at the first decode token is where the finish-order cases are.
_GRAMMAR_AT: Final = st.integers(-5, 24)


def _draw_grammar(draw: st.DrawFn) -> Grammar | None:
    kind = draw(_GRAMMAR_KIND)
    if kind == 0:
        return None
    if kind == 1:
        return Grammar("accept")
    if kind == 2:
        return Grammar("terminate", max(2, draw(_GRAMMAR_AT)))
    return Grammar("reject", max(1, draw(_GRAMMAR_AT)))


def _draw_admit(draw: st.DrawFn, rids: Sequence[str], grammar: bool = False) -> Admit:
    rid = rids[draw(_INDEX_BELOW[len(rids)])]
    prompt_len = draw(_PROMPT_LEN)
    max_new_tokens = draw(_MAX_NEW_TOKENS)
    eos_at = draw(_EOS_AT_OR_ZERO) or None
    drawn = _draw_grammar(draw) if grammar else None
    return Admit(rid, prompt_len, max_new_tokens, eos_at, drawn)


def _digits(code: int, base: int) -> list[int]:
    digits: list[int] = []
    while code:
        code, digit = divmod(code, base)
        digits.append(digit)
    return digits


def _draw_step(draw: st.DrawFn, block_cap: bool = False) -> Step:
    # One integer read as base-8 digits (digit + 1 per row): shrinks towards accept length 1.
    accepts = tuple(d + 1 for d in _digits(draw(_ACCEPT_CODE), MAX_GENERATED_STRIDE))
    if not block_cap:
        return Step(accepts)
    blocks = tuple(_digits(draw(_LENGTH_CODE), _LENGTH_BASE))
    caps = tuple(_digits(draw(_LENGTH_CODE), _LENGTH_BASE))
    return Step(accepts, blocks, caps)


@st.composite
def admits(draw: st.DrawFn, rids: Sequence[str] = REQUEST_IDS) -> Admit:
    """A request with a short or medium generation and sometimes an EOS position.

    `max_new_tokens == 1` or `eos_at == 1` makes it finish on its prefill result; generations up
    to 24 tokens keep several requests alive at once, so batches of 4+ live rows occur.
    """
    return _draw_admit(draw, rids)


@st.composite
def steps(draw: st.DrawFn) -> Step:
    """One scheduler iteration with accept lengths for up to six rows, towards 1 when shrunk;
    values above the launch stride clamp to full acceptance."""
    return _draw_step(draw)


def _draw_event(
    draw: st.DrawFn,
    rids: Sequence[str],
    kinds: Sequence[str],
    block_cap: bool = False,
    grammar: bool = False,
) -> Event:
    kind = kinds[draw(_INDEX_BELOW[len(kinds)])]
    if kind == "step":
        return _draw_step(draw, block_cap)
    if kind == "admit":
        return _draw_admit(draw, rids, grammar)
    if kind == "switch_stride":
        return SwitchStride(draw(_STRIDE))
    rid = rids[draw(_INDEX_BELOW[len(rids)])]
    return Retract(rid) if kind == "retract" else Abort(rid)


@st.composite
def events(
    draw: st.DrawFn,
    rids: Sequence[str] = REQUEST_IDS,
    *,
    adaptive: bool = False,
    block_cap: bool = False,
    grammar: bool = False,
) -> Event:
    """One event about the requests `rids`; steps are the most frequent kind (with block/cap
    lengths when `block_cap`; admissions sometimes with a grammar when `grammar`)."""
    kinds = _ADAPTIVE_EVENT_KINDS if adaptive else _EVENT_KINDS
    return _draw_event(draw, rids, kinds, block_cap, grammar)


_REQUEST_COUNT: Final = st.integers(1, MAX_REQUESTS)
_UP_TO: Final = {n: st.integers(0, n) for n in range(MAX_EVENTS + 1)}
_EVENTS: Final[dict[tuple[int, bool, bool, bool], st.SearchStrategy[Event]]] = {
    (n, adaptive, block_cap, grammar): events(
        REQUEST_IDS[:n], adaptive=adaptive, block_cap=block_cap, grammar=grammar
    )
    for n in range(1, MAX_REQUESTS + 1)
    for adaptive in (False, True)
    for block_cap in (False, True)
    for grammar in (False, True)
}


@st.composite
def event_lists(
    draw: st.DrawFn,
    *,
    adaptive: bool = False,
    max_events: int = MAX_EVENTS,
    block_cap: bool = False,
    grammar: bool = False,
) -> tuple[Event, ...]:
    """Lifecycles of 1-6 requests, up to `max_events` events.

    The number of requests, an opening burst of admissions and a minimum length are drawn first:
    Hypothesis's plain lists average a handful of elements, too few to reach re-admissions or
    batches of four live rows.
    """
    requests = draw(_REQUEST_COUNT)
    rids = REQUEST_IDS[:requests]
    # Usually every request is admitted up front (Hypothesis favours 0 for the skipped count).
    opening = requests - draw(_UP_TO[requests])
    drawn: list[Event] = [_draw_admit(draw, rids[i : i + 1], grammar) for i in range(opening)]
    budget = max(max_events - opening, 0)
    min_events = draw(_UP_TO[budget] if budget <= MAX_EVENTS else st.integers(0, budget))
    one_event = _EVENTS[(requests, adaptive, block_cap, grammar)]
    drawn.extend(draw(st.lists(one_event, min_size=min_events, max_size=budget)))
    return tuple(drawn)


def scenarios(
    *,
    convention: Convention = "preclaim",
    global_counters: GlobalCounterMode = "ideal",
    adaptive: bool = False,
    max_events: int = MAX_EVENTS,
    algorithms: Sequence[Algorithm] = ("eagle",),
    block_cap: bool = False,
    grammar: bool = False,
    allocation: bool | Sequence[AllocationRule] = False,
) -> st.SearchStrategy[Scenario]:
    """Whole scenarios: a config and up to `max_events` events. `algorithms`, `block_cap` and
    `grammar` say what the target's API generation supports (`ApiShape.algorithms`,
    `.block_cap`, `.grammar`: admissions then sometimes carry a grammar); `allocation` draws
    the scheduler's allocation rule, page size and pool too, after the events (so the rest of
    a scenario is drawn as it is without allocation); a sequence of rules draws among those
    only (a target bringing its own allocation path implements those)."""
    config = configs(
        convention=convention,
        global_counters=global_counters,
        adaptive=adaptive,
        algorithms=algorithms,
        block_cap=block_cap,
    )
    drawn: st.SearchStrategy[Scenario]
    if not block_cap:
        drawn = st.builds(
            Scenario,
            config=config,
            events=event_lists(adaptive=adaptive, max_events=max_events, grammar=grammar),
        )
    else:
        drawn = _scenarios_with_lengths(config, adaptive, max_events, grammar)
    if not allocation:
        return drawn
    choices = _ALLOCATION
    if not isinstance(allocation, bool):
        choices = st.tuples(st.sampled_from(tuple(allocation)), _PAGE_SIZE, _POOL_TOKENS)
    return st.tuples(drawn, choices).map(
        lambda pair: Scenario(_with_allocation((pair[0].config, pair[1])), pair[0].events)
    )


@st.composite
def _scenarios_with_lengths(
    draw: st.DrawFn,
    config: st.SearchStrategy[Config],
    adaptive: bool,
    max_events: int,
    grammar: bool,
) -> Scenario:
    """The config first, then events whose steps carry block/cap lengths when it says so."""
    drawn = draw(config)
    events = draw(
        event_lists(
            adaptive=adaptive, max_events=max_events, block_cap=drawn.block_cap, grammar=grammar
        )
    )
    return Scenario(drawn, events)


def scenario_labels(scenario: Scenario, reached: Iterable[str]) -> set[str]:
    """Coverage labels of one run: what the model reached plus how many requests took part."""
    admitted = {e.rid for e in scenario.events if isinstance(e, Admit)}
    labels = set(reached) | {f"algorithm {scenario.config.algorithm}"}
    if scenario.config.block_cap:
        labels.add("block/cap lengths")
    if admitted:
        labels.add(f"{len(admitted)} requests")
    return labels


def label_run(scenario: Scenario, reached: Iterable[str]) -> set[str]:
    """Emit the labels of one run with Hypothesis `event()` and return them."""
    labels = scenario_labels(scenario, reached)
    for label in sorted(labels):
        hypothesis_event(label)
    return labels
