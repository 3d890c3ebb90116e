"""How SGLang's scenarios are made smaller and enumerated (`kvcheck.core.family.Moves`): the
shrinker's moves and the exhaustive search's expansion, in one module, so that a new event kind
touches one search file.

Shrinking (`kvcheck.search.shrink` runs the loop and deletes runs of events): each event is
simplified (accept lengths towards 1, prompts and generations towards 1, no EOS, lower strides),
then the config (EAGLE, no block/cap lengths, no allocation, pages of 1, overlap on, a lower
stride), and a scenario under overlap is tried without it (a launch is then delivered in its own
step, so the same bug often shows one step sooner). The recorded result names requests r0, r1,
... in order of appearance (`renamed`).

The exhaustive search (`kvcheck.search.exhaust` runs the levels, applies, checks, merges and
shards) enumerates within `Bounds`:

- `requests`: request ids `r0..r{n-1}`; each is admitted at most once (re-admission after a
  retraction goes through the scheduler, as in every scenario).
- `events`: the longest scenario, every event kind counted. `steps`: at most this many `Step`
  events (None: only `events` bounds them). With `events=None` only steps are bounded; the search
  still ends, because between two steps the other events can change the state finitely often.
- `max_accept`: accept lengths 1..max_accept for each row a step launches (clamped to the launch
  stride, as in every scenario). Only the rows of the decode batch a step actually launches get
  a choice, so a step that launches a prefill, or nothing, is enumerated once.
- `strides`: the initial strides, and the targets of `SwitchStride` events (which are only
  enumerated when stride switching is on: by default when there are two strides or more).
- `kinds`: which event kinds are enumerated (`step` is always on).
- `prompt_lens`, `max_new`, `eos`: the `Admit` parameters. An EOS position at or after
  `max_new_tokens` is skipped: the length limit stops the request first there.
- `overlap`: which overlap settings start a search (without overlap no row is ever stale, but
  every other invariant applies).

Reductions, each sound for the invariants kvcheck checks:

- Request ids are interchangeable, so requests are admitted in id order (`r0` before `r1`):
  every other scenario is a renaming of one that does this.
- Events the model ignores at their point (retracting a request that is not running, aborting a
  finished one, switching to the current stride) leave the state unchanged and are not branched.
- State keys abstract token ids (which encode launch numbers) to output lengths. A target that
  branched on token values or launch counts could tell merged states apart; no resolver does.
- Request ids are already canonical (the next unused id is admitted), so renaming them would merge
  nothing more; the reduction that pays is forgetting what can no longer matter. An *inert*
  request (`inert_requests`: finished in the model and the engine, in no queue, batch, pending
  launch or launch in flight of either, with no retraction or abort pending) is keyed by its id
  alone. Why that is sound for any target: no enumerated event acts on it (retract needs a running
  request, abort of a finished one is a no-op, the next admission takes a new id), no later batch
  holds it, so neither the target nor the engine nor the model writes it again; every later check
  of it compares the same expected and observed values that passed when the state was reached
  (a state with a violation is never expanded), and no check of another request or of a whole
  event reads its values. Only without an allocation rule: the pool's checks (`kv-*`) read a
  finished request's lengths together with pages that later events change. Batch rows stay in
  order (a resolver may treat row positions differently), and nothing else is merged.
  `reduce=False` (`--no-reduce`) turns it off; tests/quality/test_exhaust.py checks on a subset
  of the mutant corpus that verdicts and shortest lengths agree with it on and off.
"""

from __future__ import annotations

import argparse
import itertools
import pickle
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final

import attrs

from kvcheck.arguments import non_negative_int, positive_int
from kvcheck.core.calls import import_tensor_library
from kvcheck.core.jsonable import jsonable
from kvcheck.core.scenario import MAX_EVENTS, Scenario
from kvcheck.core.target import Target
from kvcheck.errors import KvcheckUsageError
from kvcheck.families.sglang.allocation_rules import allocation_features
from kvcheck.families.sglang.engine import Engine
from kvcheck.families.sglang.fakes import FakeKvInfo, is_finished
from kvcheck.families.sglang.judging import SglangJudging, chosen_allocation_path
from kvcheck.families.sglang.model import Expectation, Launch, ReferenceModel
from kvcheck.families.sglang.scenario import (
    ALGORITHMS,
    ALLOCATION_PATHS,
    ALLOCATION_RULES,
    CONVENTIONS,
    EVENT_KINDS,
    GLOBAL_COUNTER_MODES,
    GRAMMAR_KINDS,
    MAX_PAGE_SIZE,
    MAX_POOL_PAGES,
    MAX_REQUEST_TOKENS,
    MAX_ROW_VALUE,
    MAX_STRIDE,
    MIN_POOL_TOKENS,
    MIN_STRIDE,
    Abort,
    Admit,
    Algorithm,
    AllocationRule,
    Config,
    Event,
    GlobalCounterMode,
    Grammar,
    Retract,
    Step,
    SwitchStride,
    adaptive_allocation_problem,
)
from kvcheck.families.sglang.target import (
    allocation_rules,
    refuse_other_allocation_rules,
    release_code,
    release_path_rules,
)
from kvcheck.wording import plural

# --- shrinking ------------------------------------------------------------------------------

# A stride below 2 leaves no room for a draft token; the generators never produce one either.
SMALLEST_STRIDE: Final = 2


def size(scenario: Scenario) -> tuple[int, int]:
    """Order on scenarios: fewer events first, then smaller numbers."""
    config = scenario.config
    total = config.stride + (0 if config.overlap else 1)
    # EAGLE and no block/cap lengths are the simplest: another algorithm or lengths cost one.
    total += (config.algorithm != "eagle") + config.block_cap
    # No allocation, pages of 1 and no adaptive maximum are simpler still.
    total += config.allocation_rule.allocates + (config.page_size != 1) + (config.pool_pages != 0)
    total += config.max_stride is not None
    for event in scenario.events:
        match event:
            case Step(accepts=accepts, blocks=blocks, caps=caps):
                total += sum(accepts) + len(accepts) + sum(blocks) + len(blocks)
                total += sum(caps) + len(caps)
            case Admit(prompt_len=p, max_new_tokens=m, eos_at=e, grammar=g):
                total += p + m + (e or 0)
                if g is not None:  # a grammar costs one, plus its position
                    total += 1 + (g.at or 0)
            case SwitchStride(stride=s):
                total += s
    return len(scenario.events), total


def _smaller_ints(value: int, floor: int) -> Iterator[int]:
    """Candidates below `value`, most aggressive first."""
    seen: set[int] = set()
    for candidate in (floor, floor + 1, value // 2, value - 1):
        if floor <= candidate < value and candidate not in seen:
            seen.add(candidate)
            yield candidate


def event_variants(event: Event) -> Iterator[Event]:
    """Simpler events to put in `event`'s place, most aggressive first."""
    match event:
        case Step(accepts=accepts, blocks=blocks, caps=caps):
            if accepts or blocks or caps:
                yield Step()
            for field, values in (("blocks", blocks), ("caps", caps)):
                for length in range(len(values) - 1, -1, -1):  # missing rows mean 0
                    yield attrs.evolve(event, **{field: values[:length]})
                for row, value in enumerate(values):
                    for smaller in _smaller_ints(value, 0):
                        shrunk = (*values[:row], smaller, *values[row + 1 :])
                        yield attrs.evolve(event, **{field: shrunk})
            for length in range(len(accepts) - 1, 0, -1):
                yield attrs.evolve(event, accepts=accepts[:length])
            for row, value in enumerate(accepts):
                for smaller in _smaller_ints(value, 1):
                    yield attrs.evolve(
                        event, accepts=(*accepts[:row], smaller, *accepts[row + 1 :])
                    )
        case Admit(prompt_len=p, max_new_tokens=m, eos_at=e, grammar=g):
            if g is not None:
                yield attrs.evolve(event, grammar=None)
                if g.kind != "accept":
                    yield attrs.evolve(event, grammar=Grammar("accept"))
                    floor = 2 if g.kind == "terminate" else 1
                    for smaller in _smaller_ints(g.at or floor, floor):
                        yield attrs.evolve(event, grammar=Grammar(g.kind, smaller))
            if e is not None:
                yield attrs.evolve(event, eos_at=None)
                for smaller in _smaller_ints(e, 1):
                    yield attrs.evolve(event, eos_at=smaller)
            for smaller in _smaller_ints(m, 1):
                yield attrs.evolve(event, max_new_tokens=smaller)
            for smaller in _smaller_ints(p, 1):
                yield attrs.evolve(event, prompt_len=smaller)
        case SwitchStride(stride=s):
            for smaller in _smaller_ints(s, SMALLEST_STRIDE):
                yield SwitchStride(smaller)
        case Retract() | Abort():
            yield Step()


def _config_changes(config: Config) -> Iterator[dict[str, Any]]:
    """Simpler configs than `config`, as the fields each one changes."""
    if config.algorithm != "eagle":
        yield {"algorithm": "eagle"}
    if config.block_cap:
        yield {"block_cap": False}
    if config.allocation_rule.allocates:
        yield {"allocation": "off", "page_size": 1, "max_stride": None, "pool_pages": 0}
    if config.pool_pages:
        yield {"pool_pages": 0}
    if config.page_size != 1:
        yield {"page_size": 1, "pool_pages": config.pool_pages * config.page_size}
    if config.max_stride is not None:
        yield {"max_stride": None}
    if not config.overlap:
        yield {"overlap": True}
    for smaller in _smaller_ints(config.stride, SMALLEST_STRIDE):
        yield {"stride": smaller}


def _valid(config: Config, changes: dict[str, Any], events: tuple[Event, ...]) -> Scenario | None:
    """`config` with `changes` over `events`, or None when that is no scenario kvcheck runs
    (e.g. overlap turned on under a rule that needs it off with adaptive switching)."""
    try:
        return Scenario(attrs.evolve(config, **changes), events)
    except ValueError:
        return None


def config_variants(scenario: Scenario) -> Iterator[Scenario]:
    """Simpler scenarios by their config (`_config_changes`), then the overlap flip."""
    config, events = scenario.config, scenario.events
    for changes in _config_changes(config):
        candidate = _valid(config, changes, events)
        if candidate is not None:
            yield candidate
    if config.overlap:
        # Without overlap a launch is delivered in its own step, so the same bug (when it does
        # not need a stale row) often shows one step sooner: flip and drop an event together.
        # A request that finished on its prefill result decodes only once it may emit a second
        # token, so the flip is also tried with such requests allowed two.
        sequential = attrs.evolve(config, overlap=False)
        decoding = tuple(
            attrs.evolve(e, max_new_tokens=2)
            if isinstance(e, Admit) and e.max_new_tokens == 1 and e.eos_at is None
            else e
            for e in events
        )
        for flipped in dict.fromkeys((events, decoding)):
            for index in range(len(events) - 1, -1, -1):
                yield Scenario(sequential, flipped[:index] + flipped[index + 1 :])


def allowed_configs(target: Target) -> Callable[[Config], bool]:
    """A simpler scenario stays under the target's allocation rules: dropping the rule ("off")
    only where the target never touches `kv_allocated_len`."""
    rules = allocation_rules(target)
    return lambda config: config.allocation in rules


def renamed(scenario: Scenario) -> Scenario:
    """Requests named r0, r1, ... in order of first appearance."""
    names: dict[str, str] = {}
    for event in scenario.events:
        if isinstance(event, Admit | Retract | Abort) and event.rid not in names:
            names[event.rid] = f"r{len(names)}"
    events = tuple(
        attrs.evolve(e, rid=names[e.rid]) if isinstance(e, Admit | Retract | Abort) else e
        for e in scenario.events
    )
    return Scenario(scenario.config, events)


# --- the exhaustive search ------------------------------------------------------------------


def _tuple(values: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(values)


@attrs.frozen
class Bounds:
    """What `exhaust` enumerates (module docstring). The defaults are the bounds
    `builtin:reference` is proven on: two requests, scenarios of up to 8 events, accept lengths
    up to 3, strides 2 and 3, every event kind. Invalid bounds raise `KvcheckUsageError` listing
    every problem (exit 2)."""

    requests: int = 2
    events: int | None = 8
    steps: int | None = None
    max_accept: int = 3
    strides: tuple[int, ...] = attrs.field(default=(2, 3), converter=_tuple)
    kinds: tuple[str, ...] = attrs.field(default=EVENT_KINDS, converter=_tuple)
    prompt_lens: tuple[int, ...] = attrs.field(default=(3,), converter=_tuple)
    max_new: tuple[int, ...] = attrs.field(default=(1, 4), converter=_tuple)
    eos: tuple[int | None, ...] = attrs.field(default=(None, 2), converter=_tuple)
    overlap: tuple[bool, ...] = attrs.field(default=(True, False), converter=_tuple)
    # The algorithms the configs take, and the block-accept / cap lengths a decode row may
    # report (empty: results carry none). A target's shape says which it supports.
    algorithms: tuple[Algorithm, ...] = attrs.field(default=("eagle",), converter=_tuple)
    block_cap_lengths: tuple[int, ...] = attrs.field(default=(), converter=_tuple)
    # The grammars an admitted request may carry (None: no grammar), for targets that consult one.
    grammars: tuple[Grammar | None, ...] = attrs.field(default=(None,), converter=_tuple)
    # The allocation rules the configs take ("off": no allocation), the page sizes of the rules
    # that round to a page (the others run at 1), and the pool sizes in tokens of the rules
    # that allocate (0: unbounded; a bounded pool is where memory pressure retracts).
    allocations: tuple[AllocationRule, ...] = attrs.field(default=("off",), converter=_tuple)
    page_sizes: tuple[int, ...] = attrs.field(default=(1,), converter=_tuple)
    pool_tokens: tuple[int, ...] = attrs.field(default=(0,), converter=_tuple)

    def __attrs_post_init__(self) -> None:
        problems = []
        if not 1 <= self.requests <= 9:
            problems.append(f"requests must be in 1..9, got {self.requests}")
        if self.events is None and self.steps is None:
            problems.append("give a bound on events or on steps (or both)")
        if self.events is not None and self.events < 1:
            problems.append(f"events must be >= 1, got {self.events}")
        if self.steps is not None and self.steps < 0:
            problems.append(f"steps must be >= 0, got {self.steps}")
        if self.max_accept < 1:
            problems.append(f"max accept must be >= 1, got {self.max_accept}")
        if not self.strides or any(not MIN_STRIDE <= s <= MAX_STRIDE for s in self.strides):
            problems.append(f"strides must be in {MIN_STRIDE}..{MAX_STRIDE}, got {self.strides}")
        unknown = [k for k in self.kinds if k not in EVENT_KINDS]
        if unknown:
            problems.append(f"unknown event kinds {unknown}; known: {', '.join(EVENT_KINDS)}")
        if not self.prompt_lens or any(p < 1 for p in self.prompt_lens):
            problems.append(f"prompt lengths must be >= 1, got {self.prompt_lens}")
        if not self.max_new or any(m < 1 for m in self.max_new):
            problems.append(f"max_new_tokens values must be >= 1, got {self.max_new}")
        if any(e is not None and e < 1 for e in self.eos):
            problems.append(f"EOS positions must be >= 1, got {self.eos}")
        if not self.overlap:
            problems.append("at least one overlap setting is needed")
        if not self.grammars or any(
            g is not None and not isinstance(g, Grammar) for g in self.grammars
        ):
            problems.append(f"grammars must be Grammar values or None, got {self.grammars}")
        unknown_algorithms = [a for a in self.algorithms if a not in ALGORITHMS]
        if not self.algorithms or unknown_algorithms:
            problems.append(
                f"algorithms must be among {', '.join(ALGORITHMS)}, got {self.algorithms}"
            )
        if any(v < 0 for v in self.block_cap_lengths):
            problems.append(f"block/cap lengths must be >= 0, got {self.block_cap_lengths}")
        if not self.allocations or any(a not in ALLOCATION_RULES for a in self.allocations):
            problems.append(
                f"allocation rules must be among {', '.join(ALLOCATION_RULES)}, "
                f"got {self.allocations}"
            )
        if not self.page_sizes or any(not 1 <= p <= MAX_PAGE_SIZE for p in self.page_sizes):
            problems.append(f"page sizes must be in 1..{MAX_PAGE_SIZE}, got {self.page_sizes}")
        if not self.pool_tokens or any(
            t != 0 and not MIN_POOL_TOKENS <= t <= MAX_POOL_PAGES for t in self.pool_tokens
        ):
            problems.append(
                f"pool sizes must be 0 (unbounded) or {MIN_POOL_TOKENS}..{MAX_POOL_PAGES} "
                f"tokens (one request alone must fit), got {self.pool_tokens}"
            )
        # A page-rounding rule holds `tokens // page` pages: a remainder would shrink the pool
        # unsaid, and a pool under one page (0 pages) would be unbounded.
        uneven = [(t, p) for t in self.pool_tokens for p in self.page_sizes if p > 0 and t % p]
        if uneven:
            problems.append(
                "pool sizes must each be a whole number of pages of every page size, got "
                + ", ".join(f"{t} tokens at page size {p}" for t, p in uneven)
            )
        problems.extend(self._past_file_bounds())
        if problems:
            raise KvcheckUsageError("bounds: " + "; ".join(problems))

    def _past_file_bounds(self) -> list[str]:
        """Bounds that would find scenarios no counterexample file may hold
        (`kvcheck.families.sglang.scenario.MAX_REQUEST_TOKENS` and the rest): a finding must
        replay."""
        problems = []
        if self.events is not None and self.events > MAX_EVENTS:
            problems.append(f"events must be <= {MAX_EVENTS}, got {self.events}")
        if self.steps is not None and self.steps > MAX_EVENTS:
            problems.append(f"steps must be <= {MAX_EVENTS}, got {self.steps}")
        lengths = (*self.prompt_lens, *self.max_new, *(e for e in self.eos if e is not None))
        if any(value > MAX_REQUEST_TOKENS for value in lengths):
            problems.append(
                f"prompt lengths, max_new_tokens values and EOS positions must be <= "
                f"{MAX_REQUEST_TOKENS}"
            )
        if self.max_accept > MAX_ROW_VALUE:
            problems.append(f"max accept must be <= {MAX_ROW_VALUE}, got {self.max_accept}")
        if any(v > MAX_ROW_VALUE for v in self.block_cap_lengths):
            problems.append(f"block/cap lengths must be <= {MAX_ROW_VALUE}")
        return problems

    @property
    def rids(self) -> tuple[str, ...]:
        """The request ids the search may admit, `r0` to `r{requests-1}`, admitted in this order."""
        return tuple(f"r{i}" for i in range(self.requests))

    def describe(self) -> str:
        """The bounds in one line, for reports and the kill matrix's explanations."""

        def ints(values: Sequence[int | None]) -> str:
            return "{" + ",".join("none" if v is None else str(v) for v in values) + "}"

        length = "any length" if self.events is None else f"up to {plural(self.events, 'event')}"
        steps = "" if self.steps is None else f", at most {plural(self.steps, 'step')}"
        overlap = "{" + ",".join("on" if o else "off" for o in self.overlap) + "}"
        described = (
            f"{plural(self.requests, 'request')}, {length}{steps}, accept <= {self.max_accept}, "
            f"strides {ints(self.strides)}, kinds {','.join(self.kinds)}; admit prompt "
            f"{ints(self.prompt_lens)} max_new {ints(self.max_new)} eos {ints(self.eos)}; "
            f"overlap {overlap}"
        )
        # The newer dimensions only when they go beyond the default, so the kill matrix's
        # explanations of EAGLE-only bounds read as before.
        if self.algorithms != ("eagle",):
            described += f"; algorithms {{{','.join(self.algorithms)}}}"
        if self.block_cap_lengths:
            described += f"; block/cap {ints(self.block_cap_lengths)}"
        if self.grammars != (None,):
            described += "; grammars {" + ",".join(_grammar_name(g) for g in self.grammars) + "}"
        if self.allocations != ("off",):  # chosen from the target's shape unless given
            described += "; allocation {" + ",".join(self.allocations) + "}"
        if self.page_sizes != (1,):
            described += f"; page sizes {ints(self.page_sizes)}"
        if self.pool_tokens != (0,):
            described += f"; pool tokens {ints(self.pool_tokens)}"
        return described

    def to_dict(self) -> dict[str, Any]:
        """The bounds as plain JSON, the `bounds` object of `kvcheck exhaust --json`."""
        data: dict[str, Any] = jsonable(attrs.asdict(self))
        return data


def _grammar_name(grammar: Grammar | None) -> str:
    if grammar is None:
        return "none"
    return grammar.kind if grammar.at is None else f"{grammar.kind}@{grammar.at}"


# The conformance suite's bounds (`Moves.conformance_bounds`): one request, up to 6 events, and
# the kill matrix's length cap of 2, within which the correct built-in clears in about a second
# and each invariant's conformance mutant (`Invariant.mutant`) is caught.
CONFORMANCE_BOUNDS: Final = Bounds(requests=1, events=6, max_new=(1, 2, 4))


def bounds(values: Mapping[str, Any]) -> Bounds:
    """`Bounds(**values)`."""
    return Bounds(**values)


def default_adaptive(bounds: Bounds) -> bool:
    """Stride switching is on when switch events are enumerated between two or more strides."""
    return "switch_stride" in bounds.kinds and len(set(bounds.strides)) > 1


_SEARCH_OPTIONS: Final = ("convention", "global_counters", "adaptive", "allocation_path")


def search_options(requested: Mapping[str, Any], bounds: Bounds) -> SglangJudging:
    """The options of `exhaust(convention=..., global_counters=..., adaptive=...,
    allocation_path=...)`: preclaim, ideal, (None) switching when `default_adaptive` and
    kvcheck's model of allocation unless given (`check_bounds` refuses `release` for a target
    without release code)."""
    for name in requested:
        if name not in _SEARCH_OPTIONS:
            raise TypeError(f"exhaust() got an unexpected keyword argument {name!r}")
    convention = requested.get("convention", "preclaim")
    if convention not in CONVENTIONS:
        raise KvcheckUsageError(f"unknown convention {convention!r}; choose preclaim or honest")
    global_counters = requested.get("global_counters", "ideal")
    if global_counters not in GLOBAL_COUNTER_MODES:
        raise KvcheckUsageError(
            f"unknown global-counter mode {global_counters!r}; choose ideal, sglang or off"
        )
    adaptive = requested.get("adaptive")
    adaptive = default_adaptive(bounds) if adaptive is None else adaptive
    allocation_path = requested.get("allocation_path", "model")
    if allocation_path not in ALLOCATION_PATHS:
        raise KvcheckUsageError(
            f"unknown allocation path {allocation_path!r}; choose {', '.join(ALLOCATION_PATHS)}"
        )
    return SglangJudging(
        convention,
        global_counters,
        adaptive,
        allocation_path=allocation_path,
        allocation_reason="given",
    )


def check_bounds(target: Target, bounds: Bounds, options: SglangJudging) -> None:
    """`KvcheckUsageError` for allocation rules the target may not be judged under, and for
    bounds whose every (rule, overlap) pair cannot run with the options' switching, and for
    the release's own allocation code on a target without it."""
    refuse_other_allocation_rules(target, bounds.allocations)
    if options.allocation_path == "release":
        chosen_allocation_path("release", target)
        # "off" leaves the release's code idle, as before; a rule that allocates must be its own.
        own = release_path_rules(target)
        other = [
            rule
            for rule in dict.fromkeys(bounds.allocations)
            if rule not in own and allocation_features(rule).allocates
        ]
        if other:
            raise KvcheckUsageError(
                f"{target.description}'s own allocation code runs under allocation "
                f"{', '.join(own)} only, not {', '.join(other)}; judge other rules with "
                "--allocation-path model"
            )
    skipped = skipped_allocations(bounds, options.adaptive)
    if len(skipped) == len(set(bounds.allocations)) * len(set(bounds.overlap)):
        rule, overlap = skipped[0]
        problem = adaptive_allocation_problem(rule, adaptive=options.adaptive, overlap=overlap)
        raise KvcheckUsageError(f"bounds: nothing to enumerate: {problem}")


def start_configs(bounds: Bounds, options: SglangJudging) -> list[Config]:
    """The configs every scenario starts from, in a fixed order (a node's `origin` indexes it).

    With adaptive switching, rules 0.5.13+ reserve for the largest stride of the bounds (the
    candidates' maximum, which every switch stays within), and an allocation rule that cannot
    run with adaptive switching under an overlap setting is not combined with it
    (`kvcheck.families.sglang.scenario.adaptive_allocation_problem`; `skipped_allocations` names
    them)."""
    block_caps = (False, True) if bounds.block_cap_lengths else (False,)
    maximum = max(bounds.strides) if options.adaptive else None
    skipped = skipped_allocations(bounds, options.adaptive)
    configs = []
    for algorithm, block_cap, overlap, stride, allocation in itertools.product(
        dict.fromkeys(bounds.algorithms),
        block_caps,
        dict.fromkeys(bounds.overlap),
        dict.fromkeys(bounds.strides),
        dict.fromkeys(bounds.allocations),
    ):
        if (allocation, overlap) in skipped:
            continue
        features = allocation_features(allocation)
        # A rule reserving for the adaptive maximum reserves for the bounds' largest stride.
        reserves_for_maximum = features.reserve_from == "adaptive-max"
        pages = dict.fromkeys(bounds.page_sizes) if features.page_round else (1,)
        pools = dict.fromkeys(bounds.pool_tokens) if features.allocates else (0,)
        for page, pool in itertools.product(pages, pools):
            configs.append(
                Config(
                    convention=options.convention,
                    overlap=overlap,
                    stride=stride,
                    adaptive=options.adaptive,
                    global_counters=options.global_counters,
                    algorithm=algorithm,
                    block_cap=block_cap,
                    allocation=allocation,
                    max_stride=maximum if reserves_for_maximum else None,
                    allocation_path=options.allocation_path,
                    page_size=page,
                    pool_pages=pool // page,
                )
            )
    return configs


def skipped_allocations(bounds: Bounds, adaptive: bool) -> tuple[tuple[AllocationRule, bool], ...]:
    """The (allocation rule, overlap) pairs of `bounds` that `start_configs` leaves out: the
    rules that cannot run with `adaptive` switching under that overlap setting."""
    return tuple(
        (allocation, overlap)
        for allocation in dict.fromkeys(bounds.allocations)
        for overlap in dict.fromkeys(bounds.overlap)
        if adaptive_allocation_problem(allocation, adaptive=adaptive, overlap=overlap)
    )


def not_run(bounds: Bounds, options: SglangJudging) -> tuple[tuple[dict[str, Any], str], ...]:
    """The skipped (allocation rule, overlap) pairs (`skipped_allocations`), as the report
    gives them."""
    return tuple(
        (
            {"allocation": rule, "overlap": overlap},
            f"allocation {rule} with overlap {'on' if overlap else 'off'}: under adaptive "
            "switching a scheduler fault, not judged (docs/semantics.md §5)",
        )
        for rule, overlap in skipped_allocations(bounds, options.adaptive)
    )


def expand(
    model: ReferenceModel,
    config: Config,
    bounds: Bounds,
    steps: int,
    child: Callable[[Event], Expectation],
) -> list[Event]:
    """The events to branch on from a state: the all-ones step first, through `child` (its
    launch shows which rows, at which stride, get accept lengths), then the other steps, then
    every admission, retraction, abort and stride switch the state allows."""
    kinds = bounds.kinds
    others: list[Event] = []
    if "admit" in kinds:
        rid = next((r for r in bounds.rids if r not in model.requests), None)
        if rid is not None:
            for prompt_len, max_new, eos, grammar in itertools.product(
                bounds.prompt_lens, bounds.max_new, bounds.eos, bounds.grammars
            ):
                if eos is None or eos < max_new:
                    others.append(Admit(rid, prompt_len, max_new, eos, grammar))
    for rid, req in model.requests.items():
        if "retract" in kinds and req.phase == "running" and not req.retract_pending:
            others.append(Retract(rid))
        if "abort" in kinds and req.phase != "finished":
            others.append(Abort(rid))
    if "switch_stride" in kinds and config.adaptive:
        others.extend(
            SwitchStride(s) for s in dict.fromkeys(bounds.strides) if s != model.worker_stride
        )
    events: list[Event] = []
    if bounds.steps is None or steps < bounds.steps:
        # Accept lengths matter only for the rows of the decode batch this step launches, so
        # the all-ones step goes first and shows which rows, at which stride, that launch has.
        launch = _launched_decode(model, config, child(Step(())))
        if launch is not None:
            k = config.non_draft_tokens
            top = min(bounds.max_accept, config.output_width(launch.stride))
            rows = len(launch.rids)
            lengths: list[tuple[tuple[int, ...], tuple[int, ...]]] = [((), ())]
            if config.block_cap:
                per_row = list(itertools.product(bounds.block_cap_lengths, repeat=rows))
                lengths = [
                    (_trim_zeros(b), _trim_zeros(c)) for b, c in itertools.product(per_row, per_row)
                ]
            for accepts in itertools.product(range(k, max(top, k) + 1), repeat=rows):
                for blocks, caps in lengths:
                    trimmed = _trim_ones(accepts)
                    if trimmed or blocks or caps:
                        events.append(Step(trimmed, blocks, caps))
    events.extend(others)
    return events


def counts_as_step(event: Event) -> bool:
    """Whether `event` is a `Step` (`Bounds.steps`)."""
    return isinstance(event, Step)


def _launched_decode(
    before: ReferenceModel, config: Config, expected: Expectation
) -> Launch | None:
    """The decode batch a step launched, if any, from the model before it and what it
    expected after it."""
    launch: Launch | None
    if config.overlap:
        launch = expected.in_flight[-1] if expected.in_flight else None
        if launch is not None and launch.number != before.launches + 1:
            launch = None  # launched before this step
    else:  # launched and delivered in the same step
        launch = expected.delivery.launch if expected.delivery is not None else None
    return launch if launch is not None and launch.kind == "decode" else None


def _trim_zeros(lengths: tuple[int, ...]) -> tuple[int, ...]:
    """Block/cap lengths without trailing zeros (a missing row means 0)."""
    trimmed = list(lengths)
    while trimmed and trimmed[-1] == 0:
        trimmed.pop()
    return tuple(trimmed)


def _trim_ones(accepts: tuple[int, ...]) -> tuple[int, ...]:
    trimmed = list(accepts)
    while trimmed and trimmed[-1] == 1:
        trimmed.pop()
    return tuple(trimmed)


def inert_requests(engine: Engine, model: ReferenceModel) -> frozenset[str]:
    """The requests that can no longer influence anything (module docstring, "Reductions"):
    finished in both model and engine, in no queue, batch or launch of either, with nothing
    pending; only without an allocation rule (the pool's checks read a request's lengths)."""
    if model.config.allocation_rule.allocates:
        return _NONE_INERT
    # The ledgers' own conditions first: most states have no finished request, and then the
    # queues need not be looked at (this runs for every transition).
    finished = [
        rid
        for rid, ledger in model.requests.items()
        if ledger.phase == "finished"
        and not ledger.decode_in_flight
        and not ledger.abort_pending
        and not ledger.retract_pending
    ]
    if not finished:
        return _NONE_INERT
    busy = set(model.waiting) | set(model.running) | set(model.merge_next)
    for launch in model.in_flight:
        busy.update(launch.rids)
    for queue in (engine.waiting, engine.running, engine.last_prefill):
        busy.update(req.rid for req in queue)
    if engine.pending is not None:
        busy.update(req.rid for req in engine.pending.batch.reqs)
    busy.update(engine.retract_requested)
    inert = []
    for rid in finished:
        if rid not in busy:
            req = engine.reqs.get(rid)
            if req is not None and is_finished(req):
                inert.append(rid)
    return frozenset(inert)


_NONE_INERT: Final[frozenset[str]] = frozenset()


def release(engine: Engine, model: ReferenceModel) -> None:
    """Break the reference cycles of a state the search drops, so that reference counting frees
    it at once: each request and its `req.kv` (which reads through to the request), and the
    fake scheduler and the resolver's sibling methods bound onto it. Nothing reads a dropped
    state again (`kvcheck.search.exhaust.release`)."""
    for req in engine.reqs.values():
        fields = vars(req)
        kv = fields.get("kv")
        if type(kv) is FakeKvInfo and vars(kv).get("_req") is req:
            del vars(kv)["_req"]
    scheduler = vars(engine.scheduler)
    for name, value in list(scheduler.items()):
        if type(value) is types.MethodType and value.__self__ is engine.scheduler:
            del scheduler[name]


def pickle_state(engine: Engine, model: ReferenceModel, target: Target) -> bytes | None:
    """A state as bytes, without the target: the resolver and the methods bound onto the fake
    scheduler are taken off while pickling (the receiver puts its own copy of the target back,
    `unpickle_state`), so a target read from source, or one wrapped for coverage, travels too.
    None when the state holds something else that does not pickle (the receiver then replays
    the events)."""
    resolver, engine.resolver = engine.resolver, None  # type: ignore[assignment]
    bound = vars(engine.scheduler)
    methods = {name: bound.pop(name) for name in target.self_methods if name in bound}
    try:
        return pickle.dumps((engine, model), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return None
    finally:
        engine.resolver = resolver
        bound.update(methods)


def unpickle_state(data: bytes, target: Target) -> tuple[Engine, ReferenceModel]:
    """The engine and model `pickle_state` made, with this process's target put back."""
    engine, model = pickle.loads(data)
    engine.resolver = target.resolver
    if target.self_methods:
        engine.scheduler.bind_methods(dict(target.self_methods))
    return engine, model


# --- the exhaust command's bounds and options -------------------------------------------------


def _int_list(text: str) -> tuple[int, ...]:
    """Comma-separated integers, at least one."""
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not values:
        raise argparse.ArgumentTypeError(f"expected at least one integer, got {text!r}")
    return values


def _eos_list(text: str) -> tuple[int | None, ...]:
    """Comma-separated EOS positions: integers, or `none` for a request that never hits EOS."""
    values: list[int | None] = []
    for part in (p.strip() for p in text.split(",")):
        if part.lower() in ("none", "no", "-"):
            values.append(None)
            continue
        try:
            values.append(int(part))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected EOS positions (integers or 'none'), got {text!r}"
            ) from None
    return tuple(values)


def _event_kinds(text: str) -> tuple[str, ...]:
    """Comma-separated event kinds (`EVENT_KINDS`) or `all`; `step` is always included."""
    if text.strip() == "all":
        return EVENT_KINDS
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in kinds if k not in EVENT_KINDS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown event kind(s) {', '.join(unknown)}; choose from {', '.join(EVENT_KINDS)} "
            "or 'all'"
        )
    return kinds if "step" in kinds else ("step", *kinds)


def _algorithm_list(text: str) -> tuple[Algorithm, ...] | None:
    """Comma-separated speculative algorithms (`ALGORITHMS`), or `auto` (None: every algorithm
    the target supports)."""
    if text.strip() == "auto":
        return None
    names = tuple(a.strip() for a in text.split(",") if a.strip())
    unknown = [a for a in names if a not in ALGORITHMS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown algorithm(s) {', '.join(unknown) or repr(text)}; choose from "
            f"{', '.join(ALGORITHMS)} or 'auto'"
        )
    return tuple(a for a in ALGORITHMS if a in names)


def _grammar_list(text: str) -> tuple[Grammar | None, ...]:
    """Comma-separated grammars an admitted request may carry: `none`, `accept`,
    `terminate@N` (satisfied by output token N >= 2) or `reject@N` (refuses output token N)."""
    grammars: list[Grammar | None] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        kind, _, at = part.partition("@")
        try:
            if kind == "none" and not at:
                grammars.append(None)
            elif kind in GRAMMAR_KINDS:
                grammars.append(Grammar(kind, int(at) if at else None))
            else:
                raise ValueError(f"unknown grammar {kind!r}")
        except ValueError as exc:
            raise argparse.ArgumentTypeError(
                f"{part!r}: {exc}; expected none, accept, terminate@N (N >= 2) or reject@N"
            ) from None
    if not grammars:
        raise argparse.ArgumentTypeError(f"expected at least one grammar, got {text!r}")
    return tuple(dict.fromkeys(grammars))


def _overlap_modes(text: str) -> tuple[bool, ...]:
    """`on`, `off` or `both`."""
    choices = {"on": (True,), "off": (False,), "both": (True, False)}
    value = choices.get(text.strip())
    if value is None:
        raise argparse.ArgumentTypeError(f"expected on, off or both, got {text!r}")
    return value


def _commas(values: tuple[object, ...]) -> str:
    return ",".join("none" if value is None else str(value) for value in values)


def add_bounds_options(parser: argparse._ActionsContainer) -> None:
    """`kvcheck exhaust`'s bounds flags, one per field of `Bounds`."""
    default = Bounds()
    parser.add_argument(
        "--requests",
        type=positive_int,
        default=default.requests,
        metavar="N",
        help=f"requests per scenario (default: {default.requests})",
    )
    parser.add_argument(
        "--events",
        type=non_negative_int,
        default=default.events,
        metavar="N",
        help="longest scenario, every event counted; 0: unbounded, needs --steps "
        f"(default: {default.events})",
    )
    parser.add_argument(
        "--steps",
        type=non_negative_int,
        default=None,
        metavar="N",
        help="at most N step events per scenario (default: only --events bounds them)",
    )
    parser.add_argument(
        "--max-accept",
        type=positive_int,
        default=default.max_accept,
        metavar="N",
        help=f"most draft tokens a row accepts (default: {default.max_accept})",
    )
    parser.add_argument(
        "--strides",
        type=_int_list,
        default=default.strides,
        metavar="S,S",
        help=f"speculative strides (default: {_commas(default.strides)})",
    )
    parser.add_argument(
        "--kinds",
        type=_event_kinds,
        default=default.kinds,
        metavar="K,K",
        help=f"event kinds to enumerate (default all: {','.join(EVENT_KINDS)})",
    )
    parser.add_argument(
        "--prompt-lens",
        type=_int_list,
        default=default.prompt_lens,
        metavar="P,P",
        help=f"prompt lengths of admitted requests (default: {_commas(default.prompt_lens)})",
    )
    parser.add_argument(
        "--max-new",
        type=_int_list,
        default=default.max_new,
        metavar="M,M",
        help=f"max_new_tokens of admitted requests (default: {_commas(default.max_new)})",
    )
    parser.add_argument(
        "--eos",
        type=_eos_list,
        default=default.eos,
        metavar="E,E",
        help=f"output position of a request's EOS token, or none (default: {_commas(default.eos)})",
    )
    parser.add_argument(
        "--overlap", type=_overlap_modes, default=default.overlap, help="on, off or both (default)"
    )
    parser.add_argument(
        "--algorithms",
        type=_algorithm_list,
        default=default.algorithms,
        metavar="A,A",
        help=(
            f"speculative algorithms, among {','.join(ALGORITHMS)}, or 'auto' for every one the "
            "target supports (default eagle)"
        ),
    )
    parser.add_argument(
        "--block-cap",
        type=_int_list,
        default=default.block_cap_lengths,
        metavar="N,N",
        help=(
            "block-accept and cap lengths a decode row may report, for targets that read them "
            "(default: results carry none)"
        ),
    )
    parser.add_argument(
        "--grammars",
        type=_grammar_list,
        default=default.grammars,
        metavar="G,G",
        help=(
            "grammars an admitted request may carry: none, accept, terminate@N, reject@N, for "
            "targets that consult one (default none)"
        ),
    )
    parser.add_argument(
        "--allocation",
        type=lambda text: tuple(text.split(",")),
        default=None,
        metavar="R,R",
        help=f"allocation rules to enumerate: {', '.join(ALLOCATION_RULES)}, among those of "
        "the target's SGLang generations (default: off, or the newest of them for a target "
        "that touches kv_allocated_len)",
    )
    parser.add_argument(
        "--page-sizes",
        type=_int_list,
        default=default.page_sizes,
        metavar="P,P",
        help="page sizes of the allocation rules that round to a page, 0.5.16+ (the others run "
        f"at 1; default: {_commas(default.page_sizes)})",
    )
    parser.add_argument(
        "--pool-tokens",
        type=_int_list,
        default=default.pool_tokens,
        metavar="T,T",
        help=f"pool sizes in tokens for the rules that allocate, 0 unbounded, else at least "
        f"{MIN_POOL_TOKENS}: a bounded pool is where memory pressure retracts (default: "
        f"{_commas(default.pool_tokens)})",
    )


def bounds_from_args(args: argparse.Namespace, target: Target | None) -> Bounds:
    """The bounds the flags ask for; with the target, fitted to its probed shape
    (`_within_shape`). `--events 0` without `--steps` is a `KvcheckUsageError`."""
    if args.events == 0 and args.steps is None:
        raise KvcheckUsageError("--events 0 (unbounded) needs a --steps bound")
    given = Bounds(
        requests=args.requests,
        events=args.events or None,
        steps=args.steps,
        max_accept=args.max_accept,
        strides=args.strides,
        kinds=args.kinds,
        prompt_lens=args.prompt_lens,
        max_new=args.max_new,
        eos=args.eos,
        overlap=args.overlap,
        page_sizes=args.page_sizes,
        pool_tokens=args.pool_tokens,
        # Without --allocation, `_within_shape` chooses from the target's shape.
        **({} if args.allocation is None else {"allocations": args.allocation}),
    )
    return given if target is None else _within_shape(given, args, target)


def _within_shape(bounds: Bounds, args: argparse.Namespace, target: Target) -> Bounds:
    """The bounds with `--algorithms auto` resolved; algorithms, block/cap lengths or grammars the
    target cannot be judged on (its probed shape) are a usage error naming what it supports."""
    shape = target.shape
    algorithms = shape.algorithms if args.algorithms is None else args.algorithms
    problems = []
    unsupported = [a for a in algorithms if a not in shape.algorithms]
    if unsupported:
        problems.append(
            f"it is judged on {', '.join(shape.algorithms)} only, not {', '.join(unsupported)}"
        )
    if args.block_cap and not shape.block_cap:
        problems.append("it reads no block/cap lengths (--block-cap)")
    if any(g is not None for g in args.grammars) and not shape.grammar:
        problems.append("it consults no grammar (--grammars)")
    if problems:
        raise KvcheckUsageError(f"{target.description}: " + "; ".join(problems))
    allowed = allocation_rules(target)
    # Without --allocation: no allocation where the target allows that, else a release's own
    # rule or the newest rule of its generations (a rule it is not judged under is refused by
    # `exhaust`).
    code = release_code(target)
    newest = (code.rule,) if code is not None and code.rule in allowed else allowed[-1:]
    allocations = args.allocation or (("off",) if "off" in allowed else newest)
    return attrs.evolve(
        bounds,
        algorithms=algorithms,
        block_cap_lengths=args.block_cap,
        grammars=args.grammars,
        allocations=allocations,
    )


def search_judging(
    args: argparse.Namespace, target: Target, bounds: Bounds, entry: Any
) -> tuple[SglangJudging, dict[str, str]]:
    """The options `--convention`, `--global-counters` and `--adaptive` ask for, else a corpus
    entry's annotations (`entry`, for `mutant:NAME`), else the target's probed convention, ideal
    counters and `default_adaptive`; with why the convention and the switching were chosen."""
    if args.convention != "auto":
        convention, convention_reason = args.convention, f"convention {args.convention} (given)"
    elif entry is not None:
        convention, convention_reason = entry.convention, "as the corpus entry is annotated"
    else:
        convention, convention_reason = target.shape.convention, target.shape.convention_reason
    global_counters: GlobalCounterMode = args.global_counters or (
        entry.global_counters if entry is not None else "ideal"
    )
    if args.adaptive is not None:
        adaptive, adaptive_reason = args.adaptive, "given"
    elif entry is not None:
        adaptive, adaptive_reason = entry.adaptive, "as the corpus entry is judged"
    else:
        adaptive = default_adaptive(bounds)
        adaptive_reason = (
            "switch_stride events between two or more strides"
            if adaptive
            else "no stride switches within the bounds"
        )
    allocation_path, allocation_reason = chosen_allocation_path(args.allocation_path, target)
    if not any(allocation_features(rule).allocates for rule in bounds.allocations):
        # The path is chosen, but with allocation off no allocation code runs (the default
        # bounds of a resolver that never touches `kv_allocated_len`, 0.5.23's): said so, the
        # line cannot be read as the release's allocation code having been judged.
        allocation_reason = (
            f"{allocation_reason}; idle here: the bounds draw no allocation rule "
            "(--allocation RULE draws one)"
        )
    options = SglangJudging(
        convention,
        global_counters,
        adaptive,
        allocation_path=allocation_path,
        allocation_reason=allocation_reason,
    )
    return options, {
        "convention": convention_reason,
        "adaptive": adaptive_reason,
        "allocation_path": allocation_reason,
    }


def options_to_dict(options: SglangJudging) -> dict[str, Any]:
    """The options as `kvcheck exhaust --json` gives them."""
    return {
        "convention": options.convention,
        "global_counters": options.global_counters,
        "adaptive": options.adaptive,
        "allocation_path": options.allocation_path,
    }


def describe_options(options: SglangJudging, reasons: Mapping[str, str]) -> list[str]:
    """The report's lines on the convention and the other options, with their reasons."""
    conv = f"  ({reasons['convention']})" if reasons.get("convention") else ""
    why = f" ({reasons['adaptive']})" if reasons.get("adaptive") else ""
    return [
        f"convention  {options.convention}{conv}",
        f"options     global counters {options.global_counters}, "
        f"adaptive {'on' if options.adaptive else 'off'}{why}",
        f"allocation  {options.allocation_path}  ({options.allocation_reason or 'given'})",
    ]


class SglangMoves:
    """SGLang's shrinking moves and exhaustive expansion (`kvcheck.core.family.Moves`)."""

    size = staticmethod(size)
    event_variants = staticmethod(event_variants)
    config_variants = staticmethod(config_variants)
    allowed_configs = staticmethod(allowed_configs)
    renamed = staticmethod(renamed)
    bounds = staticmethod(bounds)
    search_options = staticmethod(search_options)
    check_bounds = staticmethod(check_bounds)
    start_configs = staticmethod(start_configs)
    not_run = staticmethod(not_run)
    expand = staticmethod(expand)
    counts_as_step = staticmethod(counts_as_step)
    inert = staticmethod(inert_requests)
    release = staticmethod(release)
    pickle_state = staticmethod(pickle_state)
    unpickle_state = staticmethod(unpickle_state)
    prepare_worker = staticmethod(import_tensor_library)
    add_bounds_options = staticmethod(add_bounds_options)
    bounds_from_args = staticmethod(bounds_from_args)
    search_judging = staticmethod(search_judging)
    options_to_dict = staticmethod(options_to_dict)
    describe_options = staticmethod(describe_options)
    conformance_bounds: Final = CONFORMANCE_BOUNDS
