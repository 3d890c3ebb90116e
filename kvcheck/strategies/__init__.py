"""The scenario distribution: Hypothesis strategies, and a seeded-Random driver of the same
draws.

A scenario is a `Config` plus a list of events (`kvcheck.families.sglang.scenario`). The strategies
here draw
request lifecycles for 1-6 requests: admissions with short or long generations and optional EOS
positions, scheduler steps with per-row accept lengths, retractions (which re-admit the request
through prefill at a later step), aborts, and, when adaptive switching is on, stride switches
that land between a launch and its delivery.

Every branch shrinks towards the simplest scenario: `step` is the first event alternative, small
prompts, short generations, overlap on and stride 2 come first. That is why counterexamples come
out at the length of the minimal sequences in docs/semantics.md §3.

The distribution is written once (the `_draw_*` functions, against `Draws`); `scenarios()` and the
other strategies draw it through Hypothesis, `random_scenario` through a seeded `random.Random`
(`kvcheck fuzz`'s default generator, tens of times cheaper per scenario).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, Final, Protocol, TypeVar

import attrs
from hypothesis import event as hypothesis_event
from hypothesis import strategies as st

from kvcheck.core.scenario import Scenario
from kvcheck.families.sglang.allocation_rules import RULES, allocation_features
from kvcheck.families.sglang.scenario import (
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
    Step,
    SwitchStride,
    adaptive_allocation_problem,
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


# --- one description of the scenario distribution, two drivers -------------------------------
#
# Scenarios are built once, by the `_draw_*` functions below, from a few primitive choices
# (`Draws`): an integer in a range, a boolean, one of a few options, and a list of elements. Two
# drivers make those choices: Hypothesis (`scenarios()` and the other strategies here: its
# database, shrinking and explicit examples, as `kvcheck check` and the pytest plugin use them)
# and a seeded `random.Random` (`random_scenario`, `RandomDraws`: several times cheaper per
# scenario, for campaigns, `kvcheck.search.sampling`). The random driver imitates Hypothesis's
# choices where they shape the scenarios: the lowest value of a range more often than the others
# (Hypothesis's simplest-first bias), small values of a wide range (the packed accept and length
# codes) more often, and lists of Hypothesis's average length.

T = TypeVar("T")


class Draws(Protocol):
    """The primitive choices a scenario is built from; each driver makes them its own way."""

    def integer(self, lo: int, hi: int) -> int:
        """An integer in [lo, hi]; `lo` is the simplest."""

    def boolean(self) -> bool:
        """True or False; False is the simplest."""

    def choice(self, options: tuple[T, ...]) -> T:
        """One of `options`; the first is the simplest."""

    def many(
        self, key: Hashable, element: Callable[[Draws], T], min_size: int, max_size: int
    ) -> list[T]:
        """A list of `min_size` to `max_size` elements drawn by `element` (`key` names `element`
        for a driver that builds something per kind of element once)."""


class _HypothesisDraws:
    """`Draws` through a Hypothesis `draw`, with the strategies built once per range."""

    __slots__ = ("_draw",)

    def __init__(self, draw: st.DrawFn) -> None:
        self._draw = draw

    def integer(self, lo: int, hi: int) -> int:
        strategy = _INTEGERS.get((lo, hi))
        if strategy is None:
            strategy = _INTEGERS[(lo, hi)] = st.integers(lo, hi)
        return self._draw(strategy)

    def boolean(self) -> bool:
        return self._draw(_BOOLEANS)

    def choice(self, options: tuple[T, ...]) -> T:
        strategy = _SAMPLED.get(options)
        if strategy is None:
            strategy = _SAMPLED[options] = st.sampled_from(options)
        return self._draw(strategy)  # type: ignore[no-any-return]

    def many(
        self, key: Hashable, element: Callable[[Draws], T], min_size: int, max_size: int
    ) -> list[T]:
        one = _ELEMENTS.get(key)
        if one is None:
            one = _ELEMENTS[key] = _strategy(element)
        return self._draw(_lists(one, min_size, max_size))


# Strategies are built once: Hypothesis draws through strategies created on every call cost
# several times more, and generation is a large part of a search's time.
_INTEGERS: Final[dict[tuple[int, int], st.SearchStrategy[int]]] = {}
_BOOLEANS: Final = st.booleans()
_SAMPLED: Final[dict[tuple[Any, ...], st.SearchStrategy[Any]]] = {}
_ELEMENTS: Final[dict[Hashable, st.SearchStrategy[Any]]] = {}


@functools.lru_cache(maxsize=1024)
def _lists(
    element: st.SearchStrategy[Any], min_size: int, max_size: int
) -> st.SearchStrategy[list[Any]]:
    return st.lists(element, min_size=min_size, max_size=max_size)


def _strategy(build: Callable[[Draws], T]) -> st.SearchStrategy[T]:
    """The Hypothesis strategy of a scenario-building function."""

    @st.composite
    def drawn(draw: st.DrawFn) -> T:
        return build(_HypothesisDraws(draw))

    return drawn()


# The random driver's imitation of Hypothesis (measured on Hypothesis 6.170 generating these
# scenarios; `tests/unit/strategies` compares the label frequencies of the two drivers):
# the lowest value of any range comes about one draw in ten; a range wider than 256 draws a
# value of 1-8 bits about a third of the time and otherwise 9 bits or more, each bit length
# alike (Hypothesis: a third of `integers(0, 8**6 - 1)` below 256, two thirds below 4096).
_P_LOWEST: Final = 0.05
_NARROW: Final = 256
_P_NARROW_BITS: Final = 0.3 / (1 - _P_LOWEST)
_UNIFORM_SCALE: Final = 1 / (1 - _P_LOWEST)


class RandomDraws:
    """`Draws` from a seeded `random.Random`: the fast driver (no Hypothesis)."""

    __slots__ = ("_random",)

    def __init__(self, rng: random.Random) -> None:
        self._random = rng.random

    def integer(self, lo: int, hi: int) -> int:
        """See `Draws.integer`."""
        rand = self._random
        r = rand()
        if r < _P_LOWEST or hi <= lo:
            return lo
        span = hi - lo + 1
        if span <= _NARROW:  # one random number: above _P_LOWEST it is uniform as well
            return min(hi, lo + int((r - _P_LOWEST) * _UNIFORM_SCALE * span))
        top = (span - 1).bit_length()
        bits = 1 + int(rand() * 8) if rand() < _P_NARROW_BITS else 9 + int(rand() * (top - 8))
        value = (1 << (bits - 1)) + int(rand() * (1 << (bits - 1)))
        return lo + min(value, span - 1)

    def boolean(self) -> bool:
        """See `Draws.boolean`."""
        return self._random() < 0.5

    def choice(self, options: tuple[T, ...]) -> T:
        """See `Draws.choice`."""
        return options[self.integer(0, len(options) - 1)]

    def many(
        self, key: Hashable, element: Callable[[Draws], T], min_size: int, max_size: int
    ) -> list[T]:
        """See `Draws.many`."""
        size = min_size
        if max_size > min_size:
            more = _p_continue(min_size, max_size)
            rand = self._random
            while size < max_size and rand() < more:
                size += 1
        return [element(self) for _ in range(size)]


@functools.lru_cache(maxsize=4096)
def _p_continue(min_size: int, max_size: int) -> float:
    """The chance of one more element that gives a list Hypothesis's average size for these
    bounds (`st.lists`: twice `min_size` or 5 more, at most the middle of the bounds)."""
    average = min(max(min_size * 2, min_size + 5), 0.5 * (min_size + max_size))
    wanted, room = average - min_size, max_size - min_size
    if wanted >= room:
        return 1.0

    def expected(p: float) -> float:  # extra elements when each more comes with chance p
        return p * (1 - p**room) / (1 - p)

    low, high = 0.0, 1.0 - 1e-12
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if expected(middle) < wanted else (low, middle)
    return low


@attrs.frozen
class ScenarioSpace:
    """Which scenarios are drawn: the judging options and what the target's API supports (the
    arguments of `scenarios()`); `allocation` lists the allocation rules drawn (empty: off)."""

    convention: Convention = "preclaim"
    global_counters: GlobalCounterMode = "ideal"
    adaptive: bool = False
    max_events: int = MAX_EVENTS
    algorithms: tuple[Algorithm, ...] = ("eagle",)
    block_cap: bool = False
    grammar: bool = False
    allocation: tuple[AllocationRule, ...] = ()


def random_scenario(space: ScenarioSpace, rng: random.Random) -> Scenario:
    """One scenario of `space` drawn from `rng` without Hypothesis (the fast driver)."""
    return draw_scenario(RandomDraws(rng), space)


def draw_scenario(draws: Draws, space: ScenarioSpace) -> Scenario:
    """A scenario of `space`: the config first, then the events (whose steps carry block/cap
    lengths when the config says so), then the allocation settings when `space.allocation`."""
    config = _draw_config(draws, space)
    events = _draw_event_list(
        draws, space.adaptive, space.max_events, config.block_cap, space.grammar
    )
    if space.allocation:
        drawn = _draw_allocation(draws, space.allocation)
        config = _with_allocation(config, drawn, space.allocation)
    return Scenario(config, events)


def strides() -> st.SearchStrategy[int]:
    """Row widths of `next_token_ids` (speculative_num_draft_tokens), 2..8."""
    return _STRIDE


_STRIDE: Final = st.integers(MIN_GENERATED_STRIDE, MAX_GENERATED_STRIDE)


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
    space = ScenarioSpace(
        convention=convention,
        global_counters=global_counters,
        adaptive=adaptive,
        algorithms=tuple(algorithms),
        block_cap=block_cap,
        allocation=ALLOCATION_RULES if allocation else (),
    )
    return _strategy(functools.partial(_draw_whole_config, space=space))


def _draw_whole_config(draws: Draws, space: ScenarioSpace) -> Config:
    config = _draw_config(draws, space)
    if not space.allocation:
        return config
    return _with_allocation(config, _draw_allocation(draws, space.allocation), space.allocation)


def _draw_config(draws: Draws, space: ScenarioSpace) -> Config:
    overlap = draws.choice(_OVERLAP)
    stride = draws.integer(MIN_GENERATED_STRIDE, MAX_GENERATED_STRIDE)
    algorithm = draws.choice(space.algorithms) if len(space.algorithms) > 1 else "eagle"
    block_cap = draws.boolean() if space.block_cap else False
    return _config(
        space.convention,
        overlap,
        stride,
        space.adaptive,
        space.global_counters,
        algorithm,
        block_cap,
    )


# Configs are frozen and drawn from a few hundred combinations, so each is made (validated) once:
# making one costs more than drawing its values, and a scenario makes one or two.
@functools.lru_cache(maxsize=4096, typed=True)
def _config(
    convention: Convention,
    overlap: bool,
    stride: int,
    adaptive: bool,
    global_counters: GlobalCounterMode,
    algorithm: Algorithm,
    block_cap: bool,
) -> Config:
    return Config(
        convention=convention,
        overlap=overlap,
        stride=stride,
        adaptive=adaptive,
        global_counters=global_counters,
        algorithm=algorithm,
        block_cap=block_cap,
    )


_OVERLAP: Final = (True, False)
# Allocation rules (off first, so shrinking drops allocation) and page sizes. Adaptive switching
# meets only what a scheduler can run safely
# (`kvcheck.families.sglang.scenario.adaptive_allocation_problem`):
# the 0.5.6 rule never met it in SGLang (adaptive spec v2 starts with 0.5.12), so 0.5.13 takes
# its place; the 0.5.12 rule runs without overlap, where its clamp still shows; the others
# reserve for MAX_GENERATED_STRIDE, the largest stride a switch draws. Pages larger than 1 only
# with the 0.5.16 page rounding. The pool is unbounded (first) or holds 128 or 192 tokens, small
# enough that six requests meet memory pressure (retraction, admission waiting for memory).
_PAGE_SIZES: Final = (1, 2, 4)
_POOL_TOKENS: Final = (0, MIN_POOL_TOKENS, MIN_POOL_TOKENS * 3 // 2)


def _draw_allocation(
    draws: Draws, rules: tuple[AllocationRule, ...]
) -> tuple[AllocationRule, int, int]:
    return draws.choice(rules), draws.choice(_PAGE_SIZES), draws.choice(_POOL_TOKENS)


# What stands in for a rule that cannot run with adaptive switching: the first of these among the
# rules drawn (the target's) that can, so a scenario never leaves them. The rules that run it at
# least without overlap: first those reserving for the adaptive maximum, oldest first (0.5.13
# fixed the under-reservation), then the other rules that allocate (0.5.12, without overlap),
# then none ("off").
_ADAPTIVE_STAND_INS: Final[tuple[AllocationRule, ...]] = tuple(
    rule.name
    for rule in sorted(
        RULES, key=lambda rule: (not rule.allocates, rule.reserve_from != "adaptive-max")
    )
    if adaptive_allocation_problem(rule.name, adaptive=True, overlap=False) is None
)


def adaptive_stand_in(rules: Sequence[AllocationRule], *, overlap: bool) -> AllocationRule | None:
    """The rule among `rules` that replaces one that cannot run with adaptive switching (None:
    none can): 0.5.13 first, as the release that fixed the under-reservation; 0.5.12 only
    without `overlap` (`kvcheck.families.sglang.scenario.adaptive_allocation_problem`)."""
    return next(
        (
            rule
            for rule in _ADAPTIVE_STAND_INS
            if rule in rules
            and adaptive_allocation_problem(rule, adaptive=True, overlap=overlap) is None
        ),
        None,
    )


@functools.lru_cache(maxsize=4096)  # as `_config`
def _with_allocation(
    config: Config,
    drawn: tuple[AllocationRule, int, int],
    rules: tuple[AllocationRule, ...] = ALLOCATION_RULES,
) -> Config:
    rule, page, pool_tokens = drawn
    overlap = config.overlap
    unsafe = functools.partial(adaptive_allocation_problem, adaptive=config.adaptive)
    if unsafe(rule, overlap=False):  # not with adaptive switching at all (0.5.6)
        # A space with adaptive switching and no stand-in is refused before drawing
        # (`kvcheck.search.check.scenario_space`); left as it is, `Config` says why.
        rule = adaptive_stand_in(rules, overlap=False) or rule
    if unsafe(rule, overlap=True) and not unsafe(rule, overlap=False):
        overlap = False  # adaptive switching without overlap only (0.5.12, maybe the stand-in)
    features = allocation_features(rule)
    page = page if features.page_round else 1
    return attrs.evolve(
        config,
        overlap=overlap,
        allocation=rule,
        page_size=page,
        max_stride=MAX_GENERATED_STRIDE if config.adaptive and features.allocates else None,
        pool_pages=pool_tokens // page if features.allocates else 0,
    )


# Relative frequencies of event kinds. `step` is first so shrinking turns other events into steps.
_EVENT_KINDS: Final = ("step",) * 6 + ("admit",) * 3 + ("retract",) * 3 + ("abort",)
_ADAPTIVE_EVENT_KINDS: Final = (*_EVENT_KINDS, "switch_stride", "switch_stride")
_MAX_ACCEPT_CODE: Final = MAX_GENERATED_STRIDE**MAX_REQUESTS - 1
# Block-accept and cap lengths, one base-(stride + 1) digit per row (0..8), towards 0.
_LENGTH_BASE: Final = MAX_GENERATED_STRIDE + 1
_MAX_LENGTH_CODE: Final = _LENGTH_BASE**MAX_REQUESTS - 1
# Admissions: prompts of 1-64 tokens, generations of 1-24, an EOS position 1-24 or none (0).
_MAX_PROMPT: Final = 64
_MAX_NEW_TOKENS: Final = 24
# Grammars: none (first, so shrinking drops them), accept-all, terminate at output position
# 2..24, reject at 1..24. Output positions come the earliest most often (about one draw in
# four): a grammar that refuses the prefill token or ends at the first decode token is where
# the finish-order cases are.
_GRAMMAR_AT: Final = (-5, 24)


def _draw_grammar(draws: Draws) -> Grammar | None:
    kind = draws.integer(0, 3)
    if kind == 0:
        return None
    if kind == 1:
        return Grammar("accept")
    if kind == 2:
        return Grammar("terminate", max(2, draws.integer(*_GRAMMAR_AT)))
    return Grammar("reject", max(1, draws.integer(*_GRAMMAR_AT)))


def _draw_admit(draws: Draws, rids: Sequence[str], grammar: bool = False) -> Admit:
    rid = rids[draws.integer(0, len(rids) - 1)]
    prompt_len = draws.integer(1, _MAX_PROMPT)
    max_new_tokens = draws.integer(1, _MAX_NEW_TOKENS)
    eos_at = draws.integer(0, _MAX_NEW_TOKENS) or None
    drawn = _draw_grammar(draws) if grammar else None
    return Admit(rid, prompt_len, max_new_tokens, eos_at, drawn)


_STEPS: Final[dict[int, Step]] = {}
_STEPS_MAX: Final = 1 << 16


def _digits(code: int, base: int) -> tuple[int, ...]:
    digits: list[int] = []
    while code:
        code, digit = divmod(code, base)
        digits.append(digit)
    return tuple(digits)


def _draw_step(draws: Draws, block_cap: bool = False) -> Step:
    # One integer read as base-8 digits (digit + 1 per row): shrinks towards accept length 1.
    code = draws.integer(0, _MAX_ACCEPT_CODE)
    if not block_cap:
        # Steps are frozen: one per code serves every scenario that draws it (about half the
        # draws repeat a code, and making a `Step` costs more than drawing its code).
        step = _STEPS.get(code)
        if step is None:
            if len(_STEPS) >= _STEPS_MAX:
                _STEPS.clear()
            step = _STEPS[code] = Step(tuple(d + 1 for d in _digits(code, 8)))
        return step
    accepts = tuple(d + 1 for d in _digits(code, 8))
    blocks = _digits(draws.integer(0, _MAX_LENGTH_CODE), _LENGTH_BASE)
    caps = _digits(draws.integer(0, _MAX_LENGTH_CODE), _LENGTH_BASE)
    return Step(accepts, blocks, caps)


@st.composite
def admits(draw: st.DrawFn, rids: Sequence[str] = REQUEST_IDS) -> Admit:
    """A request with a short or medium generation and sometimes an EOS position.

    `max_new_tokens == 1` or `eos_at == 1` makes it finish on its prefill result; generations up
    to 24 tokens keep several requests alive at once, so batches of 4+ live rows occur.
    """
    return _draw_admit(_HypothesisDraws(draw), rids)


@st.composite
def steps(draw: st.DrawFn) -> Step:
    """One scheduler iteration with accept lengths for up to six rows, towards 1 when shrunk;
    values above the launch stride clamp to full acceptance."""
    return _draw_step(_HypothesisDraws(draw))


def _draw_event(
    draws: Draws,
    rids: Sequence[str],
    kinds: Sequence[str],
    block_cap: bool = False,
    grammar: bool = False,
) -> Event:
    kind = kinds[draws.integer(0, len(kinds) - 1)]
    if kind == "step":
        return _draw_step(draws, block_cap)
    if kind == "admit":
        return _draw_admit(draws, rids, grammar)
    if kind == "switch_stride":
        return SwitchStride(draws.integer(MIN_GENERATED_STRIDE, MAX_GENERATED_STRIDE))
    rid = rids[draws.integer(0, len(rids) - 1)]
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
    return _draw_event(_HypothesisDraws(draw), rids, kinds, block_cap, grammar)


@functools.cache
def _event_drawer(
    requests: int, adaptive: bool, block_cap: bool, grammar: bool
) -> Callable[[Draws], Event]:
    """The element of an event list: one event about the first `requests` requests."""
    kinds = _ADAPTIVE_EVENT_KINDS if adaptive else _EVENT_KINDS
    rids = REQUEST_IDS[:requests]
    return functools.partial(
        _draw_event, rids=rids, kinds=kinds, block_cap=block_cap, grammar=grammar
    )


def _draw_event_list(
    draws: Draws, adaptive: bool, max_events: int, block_cap: bool, grammar: bool
) -> tuple[Event, ...]:
    requests = draws.integer(1, MAX_REQUESTS)
    rids = REQUEST_IDS[:requests]
    # Usually every request is admitted up front (Hypothesis favours 0 for the skipped count).
    opening = requests - draws.integer(0, requests)
    drawn: list[Event] = [_draw_admit(draws, rids[i : i + 1], grammar) for i in range(opening)]
    budget = max(max_events - opening, 0)
    min_events = draws.integer(0, budget)
    key = (requests, adaptive, block_cap, grammar)
    drawn.extend(draws.many(key, _event_drawer(*key), min_events, budget))
    return tuple(drawn)


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
    return _draw_event_list(_HypothesisDraws(draw), adaptive, max_events, block_cap, grammar)


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
    return scenarios_of(
        space_of(
            convention=convention,
            global_counters=global_counters,
            adaptive=adaptive,
            max_events=max_events,
            algorithms=algorithms,
            block_cap=block_cap,
            grammar=grammar,
            allocation=allocation,
        )
    )


def space_of(
    *,
    convention: Convention = "preclaim",
    global_counters: GlobalCounterMode = "ideal",
    adaptive: bool = False,
    max_events: int = MAX_EVENTS,
    algorithms: Sequence[Algorithm] = ("eagle",),
    block_cap: bool = False,
    grammar: bool = False,
    allocation: bool | Sequence[AllocationRule] = False,
) -> ScenarioSpace:
    """The `ScenarioSpace` of `scenarios()`'s arguments (`allocation=True`: every rule)."""
    rules: tuple[AllocationRule, ...]
    if isinstance(allocation, bool):
        rules = ALLOCATION_RULES if allocation else ()
    else:
        rules = tuple(allocation)
    return ScenarioSpace(
        convention=convention,
        global_counters=global_counters,
        adaptive=adaptive,
        max_events=max_events,
        algorithms=tuple(algorithms),
        block_cap=block_cap,
        grammar=grammar,
        allocation=rules,
    )


@functools.lru_cache(maxsize=256)
def scenarios_of(space: ScenarioSpace) -> st.SearchStrategy[Scenario]:
    """The Hypothesis strategy of `space` (built once per space)."""
    return _strategy(functools.partial(draw_scenario, space=space))


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
