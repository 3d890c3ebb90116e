"""SGLang's scenario distribution (`kvcheck.core.family.Distribution`): which scenarios a search
of a target draws, how they are drawn, what a search tries first, and the coverage labels.

A scenario is a `Config` plus a list of events (`kvcheck.families.sglang.scenario`). The draws
here make request lifecycles for 1-6 requests: admissions with short or long generations and
optional EOS positions, scheduler steps with per-row accept lengths, retractions (which re-admit
the request through prefill at a later step), aborts, and, when adaptive switching is on, stride
switches that land between a launch and its delivery.

Every branch shrinks towards the simplest scenario: `step` is the first event alternative, small
prompts, short generations, overlap on and stride 2 come first. That is why counterexamples come
out at the length of the minimal sequences in docs/semantics.md §3.

The distribution is written once, against `kvcheck.core.draws.Draws`; Hypothesis draws it
through `kvcheck.strategies` (`scenarios()` and the rest), the fast search through a seeded
`random.Random` (`random_scenario`, `kvcheck fuzz`'s default generator, tens of times cheaper
per scenario). No Hypothesis here: the replay and exhaust paths load this family too.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

import attrs

from kvcheck.core.draws import Draws, RandomDraws
from kvcheck.core.scenario import Scenario
from kvcheck.core.target import Target
from kvcheck.errors import KvcheckUsageError
from kvcheck.families.sglang.allocation_rules import RULES, allocation_features
from kvcheck.families.sglang.cli import SglangFrontDoor
from kvcheck.families.sglang.judging import SglangJudging
from kvcheck.families.sglang.release import OUT_OF_SCOPE_BRANCHES
from kvcheck.families.sglang.scenario import (
    ALGORITHMS,
    ALLOCATION_RULES,
    MIN_POOL_TOKENS,
    Abort,
    Admit,
    Algorithm,
    AllocationPathKind,
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
from kvcheck.families.sglang.target import allocation_rules, release_path_rules

MAX_REQUESTS: Final = 6
MIN_GENERATED_STRIDE: Final = 2
MAX_GENERATED_STRIDE: Final = 8
MAX_EVENTS: Final = 32
REQUEST_IDS: Final = tuple(f"r{i}" for i in range(MAX_REQUESTS))

# Situations the distribution must reach within the CI profile's budget (tests enforce it). The
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

# docs/semantics.md §3.4: two live rows and a stride switch between a launch and its delivery.
# Random generation reaches it only now and then (the switch must land while a launch of two or
# more rows is in flight), so every adaptive search tries this witness first.
STRIDE_SWITCH_WITNESS: Final = (
    Admit("r0", prompt_len=8, max_new_tokens=16),
    Admit("r1", prompt_len=8, max_new_tokens=16),
    Step(),
    Step((2, 3)),
    SwitchStride(2),
    Step((2, 2)),
    Step(),
)

# Memory pressure: three requests whose prompts (92 tokens) and full-acceptance decodes outgrow a
# pool of 128 tokens within eight steps at stride 3, so the decode memory check retracts one of
# them under every rule that allocates (0.5.17+ sort the batch and take r0, the longest prompt;
# older rules take r2, the back of the batch). Draws reach it rarely: `check sglang==0.5.23` at
# seeds 1 and 2 met 638 decode memory checks and no retraction in 600 scenarios, since most
# batches hold one or two short prompts. So a search whose draws found nothing tries it last.
# r0's 42 (not 40) makes one check meet a pool exactly as full as the launch needs, where a
# check off by one slot retracts what fits (0.5.23's `check_decode_capacity` with `>`).
MEMORY_PRESSURE_WITNESS: Final = (
    Admit("r0", prompt_len=42, max_new_tokens=24),
    Admit("r1", prompt_len=20, max_new_tokens=24),
    Admit("r2", prompt_len=30, max_new_tokens=24),
    Step(),
    *(Step((3, 3, 3)),) * 8,
)
_PRESSURE_STRIDE: Final = 3


@attrs.frozen
class ScenarioSpace:
    """Which scenarios are drawn: the judging options and what the target's API supports (the
    arguments of `kvcheck.strategies.scenarios()`); `allocation` lists the allocation rules
    drawn (empty: off); `overlap` pins the overlap axis of every scenario drawn (None: both)."""

    convention: Convention = "preclaim"
    global_counters: GlobalCounterMode = "ideal"
    adaptive: bool = False
    max_events: int = MAX_EVENTS
    algorithms: tuple[Algorithm, ...] = ("eagle",)
    block_cap: bool = False
    grammar: bool = False
    allocation: tuple[AllocationRule, ...] = ()
    overlap: bool | None = None
    # Whose allocation code runs under those rules (every config drawn carries it).
    allocation_path: AllocationPathKind = "model"


def scenario_space(target: Target, options: SglangJudging) -> ScenarioSpace:
    """The scenarios a search of `target` under `options` draws (with either generator): what
    its API shape supports, under the allocation rules of the SGLang generations it fits, or of
    its own allocation path if it brings one (`kvcheck.families.sglang.target.allocation_rules`):
    a scenario of another generation's rule would show it states its release never has. Raises
    `KvcheckUsageError` when adaptive switching (under `options.overlap`) meets none of them
    that can run it."""
    shape = target.shape
    rules = allocation_rules(target)
    if options.allocation_path == "release":
        own = release_path_rules(target)
        switching_under_overlap = options.adaptive and options.overlap is not False
        rules = _with_release_stand_in(own, rules) if switching_under_overlap else own
    # Without a pinned overlap, rule 0.5.12 runs adaptive switching with overlap off.
    pinned_on = options.overlap is True
    problems = [
        adaptive_allocation_problem(rule, adaptive=options.adaptive, overlap=pinned_on)
        for rule in rules
    ]
    if rules and all(problems):
        raise KvcheckUsageError(
            f"{target.description} is judged under allocation {', '.join(rules)} only "
            f"({shape.allocation_reason}), and {problems[0]}"
        )
    return space_of(
        convention=options.convention,
        global_counters=options.global_counters,
        adaptive=options.adaptive,
        algorithms=shape.algorithms,
        block_cap=shape.block_cap,
        grammar=shape.grammar,
        allocation=rules,
        overlap=options.overlap,
        allocation_path=options.allocation_path,
    )


def _with_release_stand_in(
    own: tuple[AllocationRule, ...], generations: tuple[AllocationRule, ...]
) -> tuple[AllocationRule, ...]:
    """The release path's rules `own`, with the adaptive stand-in of the resolver's
    `generations` added where no rule of `own` can run adaptive switching under overlap
    (0.5.12's): those scenarios run kvcheck's model (`ReleaseAllocationCode.__call__`), so its
    resolver is still judged on stale rows under overlap."""
    if any(adaptive_allocation_problem(rule, adaptive=True, overlap=True) is None for rule in own):
        return own
    stand_in = adaptive_stand_in(generations, overlap=True)
    if stand_in is None or not allocation_features(stand_in).allocates:
        return own
    return (*own, stand_in)


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
    overlap: bool | None = None,
    allocation_path: AllocationPathKind = "model",
) -> ScenarioSpace:
    """The `ScenarioSpace` of `kvcheck.strategies.scenarios()`'s arguments: `algorithms`,
    `block_cap` and `grammar` say what the target's API generation supports
    (`ApiShape.algorithms`, `.block_cap`, `.grammar`: admissions then sometimes carry a
    grammar); `allocation` draws the scheduler's allocation rule, page size and pool too, after
    the events (so the rest of a scenario is drawn as it is without allocation); a sequence of
    rules draws among those only (a target bringing its own allocation path implements those),
    `True` every rule."""
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
        overlap=overlap,
        allocation_path=allocation_path,
    )


def random_scenario(space: ScenarioSpace, rng: random.Random) -> Scenario:
    """One scenario of `space` drawn from `rng` without Hypothesis (the fast driver)."""
    return draw_scenario(RandomDraws(rng), space)


def draw_scenario(draws: Draws, space: ScenarioSpace) -> Scenario:
    """A scenario of `space`: the config first, then the events (whose steps carry block/cap
    lengths when the config says so), then the allocation settings when `space.allocation`,
    and last the overlap axis pinned when `space.overlap` pins it (`with_overlap`)."""
    config = _draw_config(draws, space)
    events = _draw_event_list(
        draws, space.adaptive, space.max_events, config.block_cap, space.grammar
    )
    if space.allocation:
        drawn = _draw_allocation(draws, space.allocation)
        config = _with_allocation(config, drawn, space.allocation)
    scenario = Scenario(config, events)
    if space.overlap is None:
        return scenario
    return with_overlap(scenario, space.overlap, space.allocation)


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
        space.allocation_path,
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
    allocation_path: AllocationPathKind,
) -> Config:
    return Config(
        convention=convention,
        overlap=overlap,
        stride=stride,
        adaptive=adaptive,
        global_counters=global_counters,
        algorithm=algorithm,
        block_cap=block_cap,
        allocation_path=allocation_path,
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
        # (`scenario_space`); left as it is, `Config` says why.
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


# --- the parts of a scenario, for `kvcheck.strategies`' Hypothesis strategies of them ---------


def _configs(
    *,
    convention: Convention = "preclaim",
    global_counters: GlobalCounterMode = "ideal",
    adaptive: bool = False,
    algorithms: Sequence[Algorithm] = ("eagle",),
    block_cap: bool = False,
    allocation: bool = False,
) -> Callable[[Draws], Config]:
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
    return functools.partial(_draw_whole_config, space=space)


def _admits(rids: Sequence[str] = REQUEST_IDS) -> Callable[[Draws], Admit]:
    """A request with a short or medium generation and sometimes an EOS position.

    `max_new_tokens == 1` or `eos_at == 1` makes it finish on its prefill result; generations up
    to 24 tokens keep several requests alive at once, so batches of 4+ live rows occur.
    """
    return functools.partial(_draw_admit, rids=rids)


def _steps() -> Callable[[Draws], Step]:
    """One scheduler iteration with accept lengths for up to six rows, towards 1 when shrunk;
    values above the launch stride clamp to full acceptance."""
    return _draw_step


def _strides() -> Callable[[Draws], int]:
    """Row widths of `next_token_ids` (speculative_num_draft_tokens), 2..8."""
    return _draw_stride


def _draw_stride(draws: Draws) -> int:
    return draws.integer(MIN_GENERATED_STRIDE, MAX_GENERATED_STRIDE)


def _events(
    rids: Sequence[str] = REQUEST_IDS,
    *,
    adaptive: bool = False,
    block_cap: bool = False,
    grammar: bool = False,
) -> Callable[[Draws], Event]:
    """One event about the requests `rids`; steps are the most frequent kind (with block/cap
    lengths when `block_cap`; admissions sometimes with a grammar when `grammar`)."""
    kinds = _ADAPTIVE_EVENT_KINDS if adaptive else _EVENT_KINDS
    return functools.partial(
        _draw_event, rids=rids, kinds=kinds, block_cap=block_cap, grammar=grammar
    )


def _event_lists(
    *,
    adaptive: bool = False,
    max_events: int = MAX_EVENTS,
    block_cap: bool = False,
    grammar: bool = False,
) -> Callable[[Draws], tuple[Event, ...]]:
    """Lifecycles of 1-6 requests, up to `max_events` events.

    The number of requests, an opening burst of admissions and a minimum length are drawn first:
    Hypothesis's plain lists average a handful of elements, too few to reach re-admissions or
    batches of four live rows.
    """
    return functools.partial(
        _draw_event_list,
        adaptive=adaptive,
        max_events=max_events,
        block_cap=block_cap,
        grammar=grammar,
    )


# --- what a search tries besides its draws ---------------------------------------------------


def stride_switch_witness(
    convention: Convention, global_counters: GlobalCounterMode, rules: tuple[AllocationRule, ...]
) -> Scenario:
    """`STRIDE_SWITCH_WITNESS` under overlap, without allocation when `rules` (the target's)
    allow that, else under the first of them that runs adaptive switching with overlap (the
    witness switches below the initial stride, which those rules reserve for)."""
    rule: AllocationRule = "off"
    if "off" not in rules:
        rule = adaptive_stand_in(rules, overlap=True) or "off"
    config = Config(
        convention,
        True,
        4,
        True,
        global_counters=global_counters,
        allocation=rule,
        max_stride=4 if allocation_features(rule).allocates else None,
    )
    return Scenario(config, STRIDE_SWITCH_WITNESS)


def witnesses(space: ScenarioSpace) -> tuple[Scenario, ...]:
    """What a search of `space` tries before it draws: the stride-switch witness when strides
    switch and overlap may be on."""
    if not space.adaptive or space.overlap is False:
        return ()
    witness = stride_switch_witness(space.convention, space.global_counters, space.allocation)
    if space.allocation_path == "model":
        return (witness,)
    config = attrs.evolve(witness.config, allocation_path=space.allocation_path)
    return (attrs.evolve(witness, config=config),)


def late_witnesses(space: ScenarioSpace) -> tuple[Scenario, ...]:
    """What a search of `space` tries after its draws found nothing: the memory-pressure witness
    under the newest of the space's rules that allocate (where the target's allocation code
    runs at all). Tried last, it never takes the place of a drawn failure, which shrinks to a
    smaller counterexample than the witness does."""
    allocating = [rule for rule in space.allocation if allocation_features(rule).allocates]
    if not allocating:
        return ()
    base = _config(
        space.convention,
        True,
        _PRESSURE_STRIDE,
        space.adaptive,
        space.global_counters,
        "eagle",
        False,
        space.allocation_path,
    )
    config = _with_allocation(base, (allocating[-1], 1, MIN_POOL_TOKENS), space.allocation)
    if config.max_stride is not None:
        # Reserving for the adaptive maximum (8) would reach pressure at another step under
        # each rule; at the launched stride every rule reaches it.
        config = attrs.evolve(config, max_stride=_PRESSURE_STRIDE)
    scenario = Scenario(config, MEMORY_PRESSURE_WITNESS)
    if space.overlap is None:
        return (scenario,)
    return (with_overlap(scenario, space.overlap, space.allocation),)


def with_overlap(
    scenario: Scenario,
    overlap: bool | None,
    rules: tuple[AllocationRule, ...] = ALLOCATION_RULES,
) -> Scenario:
    """`scenario` (drawn by either generator) with the overlap axis pinned to `overlap`
    (None: as it is). The 0.5.12 allocation rule under adaptive switching runs without overlap
    only (`kvcheck.families.sglang.scenario.adaptive_allocation_problem`), so pinned on, it
    becomes the first of `rules` (the target's) that can (`adaptive_stand_in`: 0.5.13,
    reserving for the largest stride the scenario switches to, then 0.5.16, then off)."""
    config = scenario.config
    if overlap is None or config.overlap == overlap:
        return scenario
    if not (
        overlap
        and adaptive_allocation_problem(config.allocation, adaptive=config.adaptive, overlap=True)
    ):
        return attrs.evolve(scenario, config=attrs.evolve(config, overlap=overlap))
    rule = adaptive_stand_in(rules, overlap=True)
    if rule is None or not allocation_features(rule).allocates:
        # `scenario_space` refuses a space where no rule can run; "off" models no allocation.
        plain = attrs.evolve(
            config, overlap=True, allocation="off", page_size=1, max_stride=None, pool_pages=0
        )
        return attrs.evolve(scenario, config=plain)
    strides = [e.stride for e in scenario.events if isinstance(e, SwitchStride)]
    maximum = max([config.max_stride or config.stride, *strides])
    pages = config.pool_pages
    page = config.page_size if allocation_features(rule).page_round else 1
    evolved = attrs.evolve(
        config, overlap=True, allocation=rule, max_stride=maximum, page_size=page, pool_pages=pages
    )
    return attrs.evolve(scenario, config=evolved)


def fits(space: ScenarioSpace, scenario: Scenario) -> bool:
    """Whether a scenario saved by an earlier search (or left by a call that never returned)
    belongs to `space`: its convention, and an allocation rule the target is judged under (one
    saved before the target's rules were kept may not be)."""
    config = scenario.config
    return config.convention == space.convention and config.allocation in space.allocation


def pinned(space: ScenarioSpace, scenario: Scenario) -> Scenario:
    """`scenario` with the overlap axis `space` pins (`with_overlap`)."""
    return with_overlap(scenario, space.overlap, space.allocation)


def scenario_labels(scenario: Scenario, reached: Iterable[str]) -> set[str]:
    """Coverage labels of one run: what the model reached plus how many requests took part."""
    admitted = {e.rid for e in scenario.events if isinstance(e, Admit)}
    labels = set(reached) | {f"algorithm {scenario.config.algorithm}"}
    if scenario.config.block_cap:
        labels.add("block/cap lengths")
    if admitted:
        labels.add(f"{len(admitted)} requests")
    return labels


def label(options: SglangJudging) -> str:
    """The options in a word: the convention (progress lines and the reasons of a verdict)."""
    return options.convention


class SglangDistribution:
    """SGLang's scenario distribution (`kvcheck.core.family.Distribution`)."""

    space = staticmethod(scenario_space)
    space_of = staticmethod(space_of)
    draw_scenario = staticmethod(draw_scenario)
    witnesses = staticmethod(witnesses)
    late_witnesses = staticmethod(late_witnesses)
    fits = staticmethod(fits)
    pinned = staticmethod(pinned)
    labels = staticmethod(scenario_labels)
    label = staticmethod(label)
    out_of_scope: Final = OUT_OF_SCOPE_BRANCHES
    uncounted_out_of_scope: Final = False  # one resolver: every line of it counts
    front: Final = SglangFrontDoor()
    # The parts of a scenario `kvcheck.strategies` offers as Hypothesis strategies, by name.
    parts: Final[dict[str, Callable[..., Callable[[Draws], Any]]]] = {
        "configs": _configs,
        "admits": _admits,
        "steps": _steps,
        "strides": _strides,
        "events": _events,
        "event_lists": _event_lists,
    }
