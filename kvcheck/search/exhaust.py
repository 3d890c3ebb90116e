"""Bounded exhaustive checking: every scenario within small bounds, breadth-first by length.

Where `kvcheck check` samples scenarios with Hypothesis, `kvcheck exhaust` enumerates them: from
each starting config it applies every event the bounds allow, level by level (every scenario of
length 1, then 2, ...), and checks the invariants after every event exactly as `run_scenario`
does. The first level with a violation therefore holds the shortest counterexamples within the
bounds, and a search that runs dry proves that no scenario within the bounds breaks an invariant.

It reuses the harness itself, not a copy of it: states are `kvcheck.families.sglang.engine.Engine`
and
`kvcheck.families.sglang.model.ReferenceModel` objects, branched by copying them, and every event
is judged
with `kvcheck.families.sglang.invariants.check_event`. Scenarios that reach the same state (equal
`Engine.state_key()` and `ReferenceModel.state_key()`) are merged, which is what makes the search
scale: distinct states grow far more slowly than event lists.

Bounds (`Bounds`):

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

Sharding (`Shard`, `owner_of`, and `kvcheck.search.exhaust_parallel` for `--workers`): the
search runs level by level; each shard owns the states whose key hashes to it, and the path kept
for a state is the one with the fewest steps, then the first by a stable order (`better`), so
the states, the counts and the counterexample (`first_found`) do not depend on how many shards
there are or in which order children arrive.
"""

from __future__ import annotations

import gc
import hashlib
import itertools
import marshal
import time
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final

import attrs

from kvcheck.core.deadline import TimeLimitReached
from kvcheck.core.deadline import check_time_limit as _check_time
from kvcheck.core.deadline import time_limit as _time_limit
from kvcheck.core.invariant import Violation
from kvcheck.core.jsonable import jsonable
from kvcheck.core.run import RunResult, run_scenario
from kvcheck.core.scenario import MAX_EVENTS, Scenario, to_json_line
from kvcheck.core.target import Target
from kvcheck.errors import KvcheckUsageError, NondeterministicTargetError
from kvcheck.families.sglang.allocation_rules import allocation_features
from kvcheck.families.sglang.engine import Engine
from kvcheck.families.sglang.fakes import FakeKvInfo, is_finished
from kvcheck.families.sglang.invariants import check_event
from kvcheck.families.sglang.model import Expectation, Launch, ReferenceModel
from kvcheck.families.sglang.scenario import (
    ALGORITHMS,
    ALLOCATION_RULES,
    CONVENTIONS,
    EVENT_KINDS,
    GLOBAL_COUNTER_MODES,
    MAX_REQUEST_TOKENS,
    MAX_ROW_VALUE,
    MAX_STRIDE,
    MIN_STRIDE,
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
from kvcheck.families.sglang.target import allocation_path, refuse_other_allocation_rules
from kvcheck.search.exhaust_parallel import (
    Outcome,
    collected_by_hand,
    peak_memory_mb,
    search_sharded,
)
from kvcheck.search.sharding import Candidate, Found
from kvcheck.search.target_coverage import TargetCoverage, meter_for
from kvcheck.wording import plural

_COLLECT_EVERY: Final = 20_000
_COLLECT_GENERATION: Final = 0
# How often (in transitions) the memory guard and the progress callback look.
_LOOK_EVERY: Final = 500
# `kvcheck exhaust --max-memory` when not given: states are kept for merging, and the bounds the
# README suggests stay far below this.
DEFAULT_MAX_MEMORY_MB: Final = 4096


def _tuple(values: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(values)


@attrs.frozen
class Bounds:
    """What `exhaust` enumerates. The defaults are the bounds `builtin:reference` is proven on:
    two requests, scenarios of up to 8 events, accept lengths up to 3, strides 2 and 3, every
    event kind. Invalid bounds raise `KvcheckUsageError` listing every problem (exit 2)."""

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
    # The allocation rules the configs take ("off": no allocation), at page size 1.
    allocations: tuple[AllocationRule, ...] = attrs.field(default=("off",), converter=_tuple)

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
        return described

    def to_dict(self) -> dict[str, Any]:
        """The bounds as plain JSON, the `bounds` object of `kvcheck exhaust --json`."""
        data: dict[str, Any] = jsonable(attrs.asdict(self))
        return data


def _grammar_name(grammar: Grammar | None) -> str:
    if grammar is None:
        return "none"
    return grammar.kind if grammar.at is None else f"{grammar.kind}@{grammar.at}"


@attrs.frozen
class ExhaustResult:
    """What `exhaust` found and how far it looked.

    `failure` is a shortest counterexample within the bounds (None: none found), recorded;
    `minimal_invariants` every invariant some shortest counterexample breaks. `complete` is false
    when a state or time limit stopped the search first.
    """

    target: str
    convention: Convention
    global_counters: GlobalCounterMode
    adaptive: bool
    bounds: Bounds
    # Event lists evaluated (one per transition tried) and distinct states reached.
    scenarios: int
    states: int
    # The longest scenario length searched completely (the counterexample's, on failure).
    depth: int
    seconds: float
    # The shortest counterexample, re-run with `run_scenario` (recorded), or None.
    failure: RunResult | None
    # Every invariant broken by some shortest counterexample (first-reported per scenario).
    minimal_invariants: frozenset[str]
    # False when a state or time limit stopped the search before the bounds were cleared.
    complete: bool
    # The target's own code that the enumerated scenarios ran; None for a target not read from
    # source or when not measured.
    coverage: TargetCoverage | None = None
    # What stopped an incomplete search: `time limit`, `state limit`, `memory limit` or
    # `interrupted` (Ctrl-C); None when it ran to its end.
    stopped: str | None = None
    # The peak resident memory of the process at the end, in MB (with workers: the parent's,
    # plus what each worker grew past its start-up, as `--max-memory` measures it).
    peak_memory_mb: float = 0.0
    # The processes that shared the search (`exhaust(workers=...)`).
    workers: int = 1

    @property
    def verdict(self) -> str:
        """`fail` with a counterexample, `pass` when the bounds were cleared (a proof within them),
        `incomplete` when a limit stopped the search first.
        """
        if self.failure is not None:
            return "fail"
        return "pass" if self.complete else "incomplete"

    @property
    def violation(self) -> Violation | None:
        """The shortest counterexample's violation; None without one."""
        return self.failure.violation if self.failure is not None else None

    @property
    def counterexample(self) -> Scenario | None:
        """The shortest counterexample; None without one."""
        return self.failure.scenario if self.failure is not None else None

    @property
    def skipped(self) -> tuple[tuple[AllocationRule, bool], ...]:
        """The (allocation rule, overlap) pairs of the bounds not enumerated
        (`skipped_allocations`)."""
        return skipped_allocations(self.bounds, self.adaptive)

    @property
    def states_per_second(self) -> float:
        """Distinct states reached per second of search, for the report (0.0 if none was timed)."""
        return self.states / self.seconds if self.seconds > 0 else 0.0


class _Node:
    """A state in the search: engine and model after `events` from the start config numbered
    `origin` (its place in `start_configs`), and the steps they used."""

    __slots__ = ("config", "engine", "events", "model", "origin", "steps")

    def __init__(
        self,
        config: Config,
        engine: Engine,
        model: ReferenceModel,
        events: tuple[Event, ...],
        steps: int,
        origin: int = 0,
    ) -> None:
        self.config = config
        self.engine = engine
        self.model = model
        self.events = events
        self.steps = steps
        self.origin = origin


class _Stop(Exception):
    """A state, time or memory limit was reached; the argument names it."""


def default_adaptive(bounds: Bounds) -> bool:
    """Stride switching is on when switch events are enumerated between two or more strides."""
    return "switch_stride" in bounds.kinds and len(set(bounds.strides)) > 1


@attrs.frozen
class Plan:
    """What a search enumerates and how it judges: everything a worker process needs besides
    the target (`kvcheck.search.exhaust_parallel` sends it to each)."""

    bounds: Bounds
    convention: Convention
    global_counters: GlobalCounterMode
    adaptive: bool
    merge: bool = True
    reduce: bool = True


def start_configs(plan: Plan) -> list[Config]:
    """The configs every scenario starts from, in a fixed order (a node's `origin` indexes it).

    With adaptive switching, rules 0.5.13+ reserve for the largest stride of the bounds (the
    candidates' maximum, which every switch stays within), and an allocation rule that cannot
    run with adaptive switching under an overlap setting is not combined with it
    (`kvcheck.families.sglang.scenario.adaptive_allocation_problem`; `skipped_allocations` names
    them)."""
    bounds = plan.bounds
    block_caps = (False, True) if bounds.block_cap_lengths else (False,)
    maximum = max(bounds.strides) if plan.adaptive else None
    skipped = skipped_allocations(bounds, plan.adaptive)
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
        # A rule reserving for the adaptive maximum reserves for the bounds' largest stride.
        reserves_for_maximum = allocation_features(allocation).reserve_from == "adaptive-max"
        configs.append(
            Config(
                convention=plan.convention,
                overlap=overlap,
                stride=stride,
                adaptive=plan.adaptive,
                global_counters=plan.global_counters,
                algorithm=algorithm,
                block_cap=block_cap,
                allocation=allocation,
                max_stride=maximum if reserves_for_maximum else None,
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


def fresh_state(target: Target, config: Config) -> tuple[Engine, ReferenceModel]:
    """The engine and model before the first event of a scenario under `config`."""
    engine = Engine(
        config,
        target.resolver,
        target.self_methods,
        not_judged=target.shape.not_judged,
        allocation=allocation_path(target, config),
        deadline=target.deadline,
    )
    return engine, ReferenceModel(config)


def better(steps: int, origin: int, events: tuple[Event, ...], than: Candidate) -> bool:
    """Whether a path to a state beats the one kept so far: fewer steps (they bound what may
    follow), then the first by a stable order (start config, then the events' text), so which
    path represents a state never depends on the order shards or workers delivered them."""
    if steps != than[0]:
        return steps < than[0]
    return (origin, repr(events)) < (than[1], repr(than[2]))


def first_found(found: Sequence[Found]) -> Found:
    """The counterexample a level with violations reports: the first by the same stable order
    (start config, then the events' text), whatever the order they were found in."""
    return min(found, key=lambda f: (f[0], repr(f[1])))


def owner_of(key: bytes, shards: int) -> int:
    """The shard (worker) that owns the state with merge key `key`: TLC's hash partition."""
    return int.from_bytes(key[:8], "little") % shards


class Shard:
    """The states one worker owns (`owner_of`), searched level by level.

    `expand` applies every event the bounds allow to the level's frontier: children the shard
    owns are merged into its own candidates at once, the others are collected per owner
    (`outgoing`); `merge` takes the other shards' candidates for this shard and builds the next
    frontier. One shard alone (`shards == 1`) is the whole search.
    """

    def __init__(self, target: Target, plan: Plan, index: int = 0, shards: int = 1) -> None:
        self.target = target
        self.plan = plan
        self.index = index
        self.shards = shards
        self.configs = start_configs(plan)
        self.seen: dict[bytes, int] = {}
        self.frontier: list[_Node] = []
        self.pending: dict[bytes, Candidate] = {}
        self.outgoing: list[dict[bytes, Candidate]] = [{} for _ in range(shards)]
        self.scenarios = 0
        self.found: list[Found] = []
        # Whether the periodic young collections run (`collect`): on until one finds nothing.
        self.collect_young = True
        for origin, config in enumerate(self.configs):
            engine, model = fresh_state(target, config)
            node = _Node(config, engine, model, (), 0, origin)
            key = self.key(node)
            if owner_of(key, shards) == index and key not in self.seen:
                self.seen[key] = 0
                self.frontier.append(node)

    def key(self, node: _Node) -> bytes:
        """The node's merge key (`state_key`), or one of its own with merging off."""
        if not self.plan.merge:
            text = repr((node.origin, node.events)).encode()
            return hashlib.blake2b(text, digest_size=16).digest()
        return state_key(node.engine, node.model, reduce=self.plan.reduce)

    def collect(self) -> None:
        """The collection at the end of a level. The states the search drops are freed as it
        drops them (`release`), so a collection only finds cycles a target made itself; the
        periodic young collections within a level (which walk every state kept since the last
        one) run again only once a collection has found some."""
        self.collect_young = gc.collect() > 0

    @property
    def states(self) -> int:
        """Distinct states kept so far, this level's own candidates included."""
        return len(self.seen) + len(self.pending)

    def expand(self, look: Callable[[], None]) -> None:
        """Expand the frontier (one level). `look` is called every `_LOOK_EVERY` transitions
        (limits, progress). Children other shards own wait in `outgoing` (`offers`, `give`)."""
        bounds = self.plan.bounds
        seen, pending, index, shards = self.seen, self.pending, self.index, self.shards
        frontier, self.frontier = self.frontier, []
        found = self.found
        for node in frontier:
            _check_time()
            for child, violation in _expand(node, bounds):
                self.scenarios += 1
                if self.collect_young and self.scenarios % _COLLECT_EVERY == 0:
                    self.collect_young = gc.collect(_COLLECT_GENERATION) > 0
                if self.scenarios % _LOOK_EVERY == 0:
                    look()
                if violation is not None:
                    found.append((node.origin, child.events, violation))
                    release(child)
                    continue
                if found:
                    release(child)
                    continue  # this level already has a counterexample: only collect
                key = self.key(child)
                steps, origin, events = child.steps, child.origin, child.events
                owner = owner_of(key, shards)
                if owner == index:
                    best = seen.get(key)
                    if best is not None and best <= steps:
                        release(child)
                        continue
                    kept = pending.get(key)
                    if kept is None or better(steps, origin, events, kept):
                        pending[key] = (steps, origin, events, child)
                        release(kept)
                    else:
                        release(child)
                else:
                    out = self.outgoing[owner]
                    kept = out.get(key)
                    if kept is None or better(steps, origin, events, kept):
                        out[key] = (steps, origin, events, child)
                        release(kept)
                    else:
                        release(child)

    def offers(self) -> list[dict[bytes, tuple[int, int, tuple[Event, ...]]]]:
        """What this level's children owned by other shards are, by owner: steps, start config
        and events, without their states (an owner asks only for the states it keeps)."""
        return [{key: kept[:3] for key, kept in out.items()} for out in self.outgoing]

    def select(
        self, offers: Sequence[tuple[int, dict[bytes, tuple[int, int, tuple[Event, ...]]]]]
    ) -> dict[int, list[bytes]]:
        """Merge other shards' offers (sender, offers) into this level's candidates; returns the
        keys whose state each sender is to send (the paths kept here, `better`)."""
        seen, pending = self.seen, self.pending
        for sender, batch in offers:
            for key, (steps, origin, events) in batch.items():
                best = seen.get(key)
                if best is not None and best <= steps:
                    continue
                kept = pending.get(key)
                if kept is None or better(steps, origin, events, kept):
                    pending[key] = (steps, origin, events, sender)
                    release(kept)
        wanted: dict[int, list[bytes]] = {}
        for key, kept in pending.items():
            if type(kept[3]) is int:
                wanted.setdefault(kept[3], []).append(key)
        return wanted

    def give(self, owner: int, keys: Sequence[bytes], encode: Callable[[_Node], Any]) -> Any:
        """The states `owner` asked for (`select`), each as `encode` makes it."""
        out = self.outgoing[owner]
        return {key: encode(out[key][3]) for key in keys}

    def merge(
        self,
        states: Mapping[bytes, Any] | None = None,
        decode: Callable[[Candidate], _Node] | None = None,
    ) -> None:
        """Make this level's candidates the next frontier: those from other shards (`select`)
        with the states they sent (`states`, which `decode` turns back into nodes)."""
        seen, frontier = self.seen, []
        for key, candidate in self.pending.items():
            seen[key] = candidate[0]
            node = candidate[3]
            if not isinstance(node, _Node):
                assert states is not None and decode is not None
                node = decode((*candidate[:3], states[key]))
            frontier.append(node)
        self.pending = {}
        for out in self.outgoing:  # sent (or not wanted): this shard drops them
            for kept in out.values():
                release(kept)
        self.outgoing = [{} for _ in range(self.shards)]
        self.frontier = frontier

    def restore(self, candidate: Candidate, state: tuple[Engine, ReferenceModel] | None) -> _Node:
        """Another shard's candidate as a node: with the engine and model sent, or (None) rebuilt
        by replaying its events from its start config (a state that could not be sent)."""
        steps, origin, events, _ = candidate
        config = self.configs[origin]
        if state is None:
            state = fresh_state(self.target, config)
            for event in events:
                state[1].apply(event)
                state[0].apply(event)
        return _Node(config, state[0], state[1], events, steps, origin)


def exhaust(
    target: Target,
    bounds: Bounds | None = None,
    *,
    convention: Convention = "preclaim",
    global_counters: GlobalCounterMode = "ideal",
    adaptive: bool | None = None,
    merge: bool = True,
    reduce: bool = True,
    workers: int = 1,
    max_states: int | None = None,
    time_limit: float | None = None,
    measure_coverage: bool = True,
    max_memory_mb: float | None = None,
    progress: Callable[[str], None] | None = None,
    report_interrupt: bool = False,
    allow_unavailable_imports: bool = False,
) -> ExhaustResult:
    """Search every scenario within `bounds`, breadth-first; stop after the first level with a
    violation and return its first counterexample (`first_found`, re-run and recorded by
    `run_scenario`).

    `merge=False` turns state merging off (every event list is its own state): exponentially
    slower, for cross-checking the merge on small bounds. `reduce=False` keys finished requests
    in full (module docstring: the reduction it turns off). `workers` > 1 shards the states
    over that many processes (`kvcheck.search.exhaust_parallel`; each loads the target from its
    spec, or from a pickled copy, `allow_unavailable_imports` as for `load_target`); the
    verdict, the states counted and the counterexample are the same for every number of
    workers. `max_states`, `time_limit` (seconds, interrupting a running call of the target
    too), `max_memory_mb` (the peak resident memory; with workers, the parent's plus what each
    worker grew past its start-up) and Ctrl-C stop
    the search early with `complete == False` and `stopped` naming why. `measure_coverage`
    measures the coverage of a target read from source (`ExhaustResult.coverage`; with workers,
    their measurements merged). `progress` is called with a status line every few hundred
    transitions; Ctrl-C is re-raised unless `report_interrupt`. Raises `UnsupportedTargetError`
    like `run_scenario` does for a target kvcheck cannot judge, and `WorkerLost` (a
    `KvcheckInternalError` naming the levels cleared before) when a worker process crashes
    (kvcheck's fault: no verdict).
    """
    bounds = bounds or Bounds()
    if convention not in CONVENTIONS:
        raise KvcheckUsageError(f"unknown convention {convention!r}; choose preclaim or honest")
    if global_counters not in GLOBAL_COUNTER_MODES:
        raise KvcheckUsageError(
            f"unknown global-counter mode {global_counters!r}; choose ideal, sglang or off"
        )
    if workers < 1:
        raise KvcheckUsageError(f"workers must be >= 1, got {workers}")
    adaptive = default_adaptive(bounds) if adaptive is None else adaptive
    refuse_other_allocation_rules(target, bounds.allocations)
    skipped = skipped_allocations(bounds, adaptive)
    if len(skipped) == len(set(bounds.allocations)) * len(set(bounds.overlap)):
        rule, overlap = skipped[0]
        problem = adaptive_allocation_problem(rule, adaptive=adaptive, overlap=overlap)
        raise KvcheckUsageError(f"bounds: nothing to enumerate: {problem}")
    plan = Plan(bounds, convention, global_counters, adaptive, merge, reduce)
    if workers > 1:
        started = time.perf_counter()
        outcome = search_sharded(
            target,
            plan,
            workers,
            Shard,
            max_states=max_states,
            time_limit=time_limit,
            measure_coverage=measure_coverage,
            max_memory_mb=max_memory_mb,
            progress=progress,
            allow_unavailable_imports=allow_unavailable_imports,
        )
        if outcome.stopped == "interrupted" and not report_interrupt:
            raise KeyboardInterrupt
        return _result(target, plan, outcome, time.perf_counter() - started, workers)
    meter = meter_for(target, enabled=measure_coverage)
    if meter is not None:
        target = meter.instrument(target)
    started = time.perf_counter()
    shard = Shard(target, plan)
    depth = 0
    complete = True
    stopped: str | None = None
    states = len(shard.seen)

    def look() -> None:
        _look(max_memory_mb, progress, depth, shard.scenarios, shard.states, started)
        if max_states is not None and shard.states >= max_states:
            raise _Stop("state limit")

    # States are full of reference cycles (a request and its `req.kv`), so the automatic
    # cyclic collector ran constantly, mostly over live states: a quarter of the time.
    # Instead: the states the search drops have their cycles broken (`release`), everything is
    # collected once per level (cycles a target made), and the youngest generation every
    # `_COLLECT_EVERY` transitions while collections find anything (`Shard.collect`).
    try:
        with collected_by_hand(), _time_limit(time_limit):
            while shard.frontier and (bounds.events is None or depth < bounds.events):
                shard.expand(look)
                depth += 1
                if shard.found:
                    break
                shard.merge()
                states = len(shard.seen)
                if max_states is not None and states >= max_states:
                    raise _Stop("state limit")
                shard.collect()
    except _Stop as stop:
        complete, stopped = False, str(stop.args[0])
    except TimeLimitReached:
        complete, stopped = False, "time limit"
    except KeyboardInterrupt:
        if not report_interrupt:
            raise
        complete, stopped = False, "interrupted"
    if not shard.found and not complete:
        states = shard.states
    outcome = Outcome(
        scenarios=shard.scenarios,
        states=states,
        depth=depth,
        found=tuple(shard.found),
        complete=complete,
        stopped=stopped,
        coverage=meter.result() if meter is not None else None,
        peak_memory_mb=peak_memory_mb(),
    )
    return _result(target, plan, outcome, time.perf_counter() - started)


def _result(
    target: Target, plan: Plan, outcome: Outcome, elapsed: float, workers: int = 1
) -> ExhaustResult:
    """The result: the counterexample (if any) replayed and recorded."""
    found = outcome.found
    failure: RunResult | None = None
    if found:
        origin, events, invariant = first_found(found)
        found_scenario = Scenario(start_configs(plan)[origin], events)
        failure = run_scenario(found_scenario, target, record=True)
        for _ in range(2):  # a call past its deadline under a stall (a busy machine): again
            if failure.violation is not None or invariant != "target-deadline":
                break
            failure = run_scenario(found_scenario, target, record=True)
        if failure.violation is None:
            # The enumeration saw a violation that a replay does not show: the target answers
            # one scenario two ways (or, were the target deterministic, kvcheck's state copies
            # were wrong); either way no verdict.
            raise NondeterministicTargetError(
                f"the target gave two different results on the same scenario: first "
                f"{invariant} during the enumeration, then no violation when replayed; kvcheck "
                f"judges deterministic resolvers only, so no verdict. The scenario: "
                f"{to_json_line(found_scenario)}"
            )
    return ExhaustResult(
        target=target.spec,
        convention=plan.convention,
        global_counters=plan.global_counters,
        adaptive=plan.adaptive,
        bounds=plan.bounds,
        scenarios=outcome.scenarios,
        states=outcome.states,
        depth=outcome.depth,
        seconds=elapsed,
        failure=failure,
        minimal_invariants=frozenset(invariant for _, _, invariant in found),
        complete=outcome.complete and not found,
        coverage=outcome.coverage,
        stopped=None if found else outcome.stopped,
        peak_memory_mb=outcome.peak_memory_mb,
        workers=workers,
    )


def _look(
    max_memory_mb: float | None,
    progress: Callable[[str], None] | None,
    depth: int,
    scenarios: int,
    states: int,
    started: float,
) -> None:
    """The memory guard (`_Stop`) and the progress line, every `_LOOK_EVERY` transitions."""
    memory = peak_memory_mb()
    if max_memory_mb and memory > max_memory_mb:
        raise _Stop("memory limit")
    if progress is not None:
        progress(
            f"level {depth + 1}: {plural(scenarios, 'scenario')}, {plural(states, 'state')}, "
            f"{time.perf_counter() - started:.0f} s, {memory:.0f} MB"
        )


def _expand(node: _Node, bounds: Bounds) -> Iterator[tuple[_Node, str | None]]:
    """Every child of `node`, with the invariant its last event broke (None: none broke).

    The last child takes over the node's own engine and model instead of copies: a node is
    expanded once, and nothing reads its state afterwards.
    """
    model = node.model
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
    if "switch_stride" in kinds and node.config.adaptive:
        others.extend(
            SwitchStride(s) for s in dict.fromkeys(bounds.strides) if s != model.worker_stride
        )
    events: list[Event] = []
    if bounds.steps is None or node.steps < bounds.steps:
        # Accept lengths matter only for the rows of the decode batch this step launches, so
        # the all-ones step goes first and shows which rows, at which stride, that launch has.
        first, expected, violation = _child(node, Step(()))
        yield first, violation
        launch = _launched_decode(first.model, expected)
        if launch is not None:
            config = node.config
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
    for index, event in enumerate(events):
        child, _, violation = _child(node, event, reuse=index == len(events) - 1)
        yield child, violation


def _child(
    node: _Node, event: Event, *, reuse: bool = False
) -> tuple[_Node, Expectation, str | None]:
    engine = node.engine if reuse else node.engine.clone()
    model = node.model if reuse else node.model.clone()
    expected = model.apply(event)
    observed = engine.apply(event)
    violations = check_event(len(node.events), expected, observed)
    steps = node.steps + (1 if isinstance(event, Step) else 0)
    child = _Node(node.config, engine, model, (*node.events, event), steps, node.origin)
    return child, expected, violations[0].invariant if violations else None


def release(state: _Node | Candidate | int | None) -> None:
    """Break the reference cycles of a state the search drops (a child whose state is known, a
    path replaced by a better one, a child sent to its owner), so that reference counting frees
    it at once instead of a cyclic collection walking every live state to find it.

    The cycles of an engine are kvcheck's own: each request and its `req.kv` (which reads
    through to the request), and the fake scheduler and the resolver's sibling methods bound
    onto it. Nothing reads a dropped state again: its last users (the child's checks, its key)
    have run, and a node's engine passes to its last child, which is released only if that
    child is dropped in turn. A cycle a target made itself is left to the collections the search
    still runs (`exhaust`)."""
    node = state[3] if type(state) is tuple else state
    if not isinstance(node, _Node):
        return  # nothing, or a state another shard holds or sent
    engine = node.engine
    for req in engine.reqs.values():
        fields = vars(req)
        kv = fields.get("kv")
        if type(kv) is FakeKvInfo and vars(kv).get("_req") is req:
            del vars(kv)["_req"]
    scheduler = vars(engine.scheduler)
    for name, value in list(scheduler.items()):
        if type(value) is types.MethodType and value.__self__ is engine.scheduler:
            del scheduler[name]


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


def state_key(engine: Engine, model: ReferenceModel, *, reduce: bool = True) -> bytes:
    """The merge key of a state: a 128-bit digest of both state keys, with `reduce` the inert
    requests (`inert_requests`) keyed by id alone. The keys are serialised with `marshal`
    (format 2: no back-references, so equal keys give equal bytes whatever objects they share),
    three times faster than their text; a key holding another type falls back to its text. With
    a million states the chance that two different states share a digest is about 10^-27."""
    inert = inert_requests(engine, model) if reduce else frozenset()
    key = (engine.state_key(inert), model.state_key(inert))
    try:
        data = marshal.dumps(key, 2)  # type: ignore[arg-type]
    except ValueError:
        data = repr(key).encode()
    return hashlib.blake2b(data, digest_size=16).digest()


def _launched_decode(after: ReferenceModel, expected: Expectation) -> Launch | None:
    """The decode batch the step just applied launched, if any."""
    launch: Launch | None
    if after.config.overlap:
        launch = after.in_flight[-1] if after.in_flight else None
        if launch is not None and launch.number != after.launches:
            launch = None
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
