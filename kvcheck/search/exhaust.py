"""Bounded exhaustive checking: every scenario within small bounds, breadth-first by length.

Where `kvcheck check` samples scenarios with Hypothesis, `kvcheck exhaust` enumerates them: from
each starting config it applies every event the bounds allow, level by level (every scenario of
length 1, then 2, ...), and checks the invariants after every event exactly as `run_scenario`
does. The first level with a violation therefore holds the shortest counterexamples within the
bounds, and a search that runs dry proves that no scenario within the bounds breaks an invariant.

It reuses the harness itself, not a copy of it: states are the family's engine and reference
model (`kvcheck.core.family.Judge`), branched by copying them (or in place from a checkpoint
where no child needs a state of its own: the bounds' last level, `Shard.final_level`, and a level
that already failed), and every event is judged with the family's `check_event`. Scenarios
that reach the same state (equal engine and model `state_key()`s) are merged, which is what
makes the search scale: distinct states grow far more slowly than event lists.

What is enumerated is the family's (`kvcheck.core.family.Moves`): its bounds, the configs a
search starts from, the events to branch on from a state (`Moves.expand`), which events count as
steps, and which parts of a state can no longer matter (`Moves.inert`, keyed by id alone: the
reduction `reduce=False`, `--no-reduce`, turns off). SGLang's, with the reductions each is sound
by, are described in `kvcheck.families.sglang.search`.

Sharding (`Shard`, `owner_of`, and `kvcheck.search.exhaust_parallel` for `--workers`): the
search runs level by level; each shard owns the states whose key hashes to it, and the path kept
for a state is the one with the fewest steps, then the first by a stable order (`better`), so
the states, the counts and the counterexample (`first_found`) do not depend on how many shards
there are or in which order children arrive.
"""

from __future__ import annotations

import gc
import hashlib
import marshal
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final

import attrs

from kvcheck.core.calls import one_tensor_thread
from kvcheck.core.deadline import TimeLimitReached
from kvcheck.core.deadline import check_time_limit as _check_time
from kvcheck.core.deadline import time_limit as _time_limit
from kvcheck.core.family import FamilyEngine, JudgingOptions, Moves, ReferenceModel, family
from kvcheck.core.invariant import Violation
from kvcheck.core.run import RunResult, run_scenario
from kvcheck.core.scenario import Scenario, to_json_line
from kvcheck.core.target import Target
from kvcheck.errors import KvcheckUsageError, NondeterministicTargetError
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


@attrs.frozen
class ExhaustResult:
    """What `exhaust` found and how far it looked.

    `failure` is a shortest counterexample within the bounds (None: none found), recorded;
    `minimal_invariants` every invariant some shortest counterexample breaks. `complete` is false
    when a state or time limit stopped the search first.
    """

    target: str
    # The family searched (the target's), and the options it judged by (its own record).
    family: str
    options: JudgingOptions
    bounds: Any
    # Event lists evaluated (one per transition tried) and distinct states reached.
    scenarios: int
    states: int
    # The longest scenario length searched completely (the counterexample's, on failure).
    depth: int
    seconds: float
    # The shortest counterexample, re-run with `run_scenario` (recorded), or None.
    failure: RunResult | None
    # Every invariant broken by some shortest counterexample (first-reported per scenario); with
    # `stop_when_found`, those met before the search stopped (`invariants_complete` False).
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
    # False when `exhaust(stop_when_found=...)` stopped the level of the counterexample before
    # every shortest counterexample was met, so `minimal_invariants` may lack some.
    invariants_complete: bool = True

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
    def not_run(self) -> tuple[tuple[dict[str, Any], str], ...]:
        """What the bounds name but the search left out, as JSON and in words
        (`Moves.not_run`)."""
        return family(self.family).moves.not_run(self.bounds, self.options)

    @property
    def states_per_second(self) -> float:
        """Distinct states reached per second of search, for the report (0.0 if none was timed)."""
        return self.states / self.seconds if self.seconds > 0 else 0.0


class _Node:
    """A state in the search: engine and model after `events` from the start config numbered
    `origin` (its place in `start_configs`), and the steps they used.

    A `borrowed` node's engine and model are its parent's own objects, changed in place by its
    last event (`_expander`): valid only until the search asks for the next child, which puts
    the parent back; one it keeps becomes its own first (`owned`)."""

    __slots__ = ("borrowed", "config", "engine", "events", "model", "origin", "steps")

    def __init__(
        self,
        config: Any,
        engine: FamilyEngine,
        model: ReferenceModel,
        events: tuple[Any, ...],
        steps: int,
        origin: int = 0,
    ) -> None:
        self.config = config
        self.engine = engine
        self.model = model
        self.events = events
        self.steps = steps
        self.origin = origin
        self.borrowed = False

    def owned(self) -> _Node:
        """The node with a state of its own: a borrowed one's engine and model copied (before
        its parent is put back), any other as it is."""
        if self.borrowed:
            self.engine, self.model = self.engine.clone(), self.model.clone()
            self.borrowed = False
        return self


class _Stop(Exception):
    """A state, time or memory limit was reached; the argument names it."""


@attrs.frozen
class Plan:
    """What a search enumerates and how it judges: everything a worker process needs besides
    the target (`kvcheck.search.exhaust_parallel` sends it to each). `family` names the family
    (the target's), `bounds` and `options` are its own records."""

    family: str
    bounds: Any
    options: JudgingOptions
    merge: bool = True
    reduce: bool = True


def start_configs(plan: Plan) -> list[Any]:
    """The configs every scenario starts from, in a fixed order (a node's `origin` indexes it)."""
    return family(plan.family).moves.start_configs(plan.bounds, plan.options)


def fresh_state(target: Target, config: Any) -> tuple[FamilyEngine, ReferenceModel]:
    """The engine and model before the first event of a scenario under `config`."""
    judge = family(target.family).judge
    return judge.engine(config, target), judge.model(config)


def better(steps: int, origin: int, events: tuple[Any, ...], than: Candidate) -> bool:
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
        # `exhaust(stop_when_found=...)`: the invariants whose breaking ends the level of the
        # counterexample early, and those broken so far in it.
        self.stop_when_found: frozenset[str] | None = None
        self.broken: set[str] = set()
        self.stopped_early = False
        # Levels merged so far: the next `expand` makes scenarios of `level + 1` events.
        self.level = 0
        # Whether the periodic young collections run (`collect`): on until one finds nothing.
        self.collect_young = True
        parts = family(plan.family)
        # The family's methods the search calls for every transition, bound once.
        self.children = _expander(parts.moves, parts.judge.check_event, plan.bounds)
        self.inert = parts.moves.inert if plan.reduce else None
        self.drop = parts.moves.release
        for origin, config in enumerate(self.configs):
            engine, model = fresh_state(target, config)
            node = _Node(config, engine, model, (), 0, origin)
            key = self.key(node)
            if owner_of(key, shards) == index and key not in self.seen:
                self.seen[key] = 0
                self.frontier.append(node)

    def key(self, node: _Node) -> bytes:
        """The node's merge key (`state_key`, with the family's inert parts when reducing), or
        one of its own with merging off."""
        if not self.plan.merge:
            text = repr((node.origin, node.events)).encode()
            return hashlib.blake2b(text, digest_size=16).digest()
        engine, model, inert = node.engine, node.model, self.inert
        return state_key(engine, model, _NONE_INERT if inert is None else inert(engine, model))

    @property
    def final_level(self) -> bool:
        """Whether the level `expand` is to make is the last the bounds allow, in a search in one
        process: its children are only checked, keyed and counted, never expanded, so they are
        tried in place and none is copied (their candidates hold no state). Workers send the
        states they kept, so a sharded search copies as on other levels."""
        events = self.plan.bounds.events
        return self.shards == 1 and events is not None and self.level == events - 1

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
        children, drop = self.children, self.drop
        seen, pending, index, shards = self.seen, self.pending, self.index, self.shards
        frontier, self.frontier = self.frontier, []
        found = self.found
        final = self.final_level
        for node in frontier:
            _check_time()
            # A level that already failed keeps none of its children: they are tried in place
            # (`_expander`). Before, most children are new states, which a copy serves best.
            for child, violation in children(node, final or bool(found)):
                self.scenarios += 1
                if self.collect_young and self.scenarios % _COLLECT_EVERY == 0:
                    self.collect_young = gc.collect(_COLLECT_GENERATION) > 0
                if self.scenarios % _LOOK_EVERY == 0:
                    look()
                if violation is not None:
                    found.append((node.origin, child.events, violation))
                    release(child, drop)
                    if self.stop_when_found is not None:
                        self.broken.add(violation)
                        if self.stop_when_found <= self.broken:
                            self.stopped_early = True  # what was asked is decided: skip the rest
                            return
                    continue
                if found:
                    release(child, drop)
                    continue  # this level already has a counterexample: only collect
                key = self.key(child)
                steps, origin, events = child.steps, child.origin, child.events
                owner = owner_of(key, shards)
                if owner == index:
                    best = seen.get(key)
                    if best is not None and best <= steps:
                        release(child, drop)
                        continue
                    kept = pending.get(key)
                    if kept is None or better(steps, origin, events, kept):
                        if final:  # its path is all a last level keeps (`final_level`)
                            release(child, drop)
                            pending[key] = (steps, origin, events, None)
                        else:
                            pending[key] = (steps, origin, events, child.owned())
                        release(kept, drop)
                    else:
                        release(child, drop)
                else:
                    out = self.outgoing[owner]
                    kept = out.get(key)
                    if kept is None or better(steps, origin, events, kept):
                        out[key] = (steps, origin, events, child.owned())
                        release(kept, drop)
                    else:
                        release(child, drop)

    def offers(self) -> list[dict[bytes, tuple[int, int, tuple[Any, ...]]]]:
        """What this level's children owned by other shards are, by owner: steps, start config
        and events, without their states (an owner asks only for the states it keeps)."""
        return [{key: kept[:3] for key, kept in out.items()} for out in self.outgoing]

    def select(
        self, offers: Sequence[tuple[int, dict[bytes, tuple[int, int, tuple[Any, ...]]]]]
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
                    release(kept, self.drop)
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
            if node is None:
                continue  # a state of the last level (`final_level`): nothing to expand
            if not isinstance(node, _Node):
                assert states is not None and decode is not None
                node = decode((*candidate[:3], states[key]))
            frontier.append(node)
        self.pending = {}
        for out in self.outgoing:  # sent (or not wanted): this shard drops them
            for kept in out.values():
                release(kept, self.drop)
        self.outgoing = [{} for _ in range(self.shards)]
        self.frontier = frontier
        self.level += 1

    def restore(
        self, candidate: Candidate, state: tuple[FamilyEngine, ReferenceModel] | None
    ) -> _Node:
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
    bounds: Any = None,
    *,
    options: JudgingOptions | None = None,
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
    stop_when_found: frozenset[str] | None = None,
    **requested: Any,
) -> ExhaustResult:
    """Search every scenario within `bounds` (the target's family's; None: its defaults),
    breadth-first; stop after the first level with a violation and return its first
    counterexample (`first_found`, re-run and recorded by `run_scenario`).

    It judges by `options` (the family's record), or by the family's options named as keywords
    (`requested`; SGLang's: `convention="preclaim"`, `global_counters="ideal"` and `adaptive`,
    by default on when the bounds switch strides), defaults filled in by `Moves.search_options`.

    `merge=False` turns state merging off (every event list is its own state): exponentially
    slower, for cross-checking the merge on small bounds. `reduce=False` keys the family's inert
    parts of a state in full (`Moves.inert`: the reduction it turns off). `workers` > 1 shards
    the states over that many processes (`kvcheck.search.exhaust_parallel`; each loads the
    target from its spec, or from a pickled copy, `allow_unavailable_imports` as for
    `load_target`); the verdict, the states counted and the counterexample are the same for
    every number of workers. `max_states`, `time_limit` (seconds, interrupting a running call of
    the target too), `max_memory_mb` (the peak resident memory; with workers, the parent's plus
    what each worker grew past its start-up) and Ctrl-C stop the search early with
    `complete == False` and `stopped` naming why. `measure_coverage` measures the coverage of a
    target read from source (`ExhaustResult.coverage`; with workers, their measurements merged).
    `progress` is called with a status line every few hundred transitions; Ctrl-C is re-raised
    unless `report_interrupt`. Raises `UnsupportedTargetError` like `run_scenario` does for a
    target kvcheck cannot judge, and `WorkerLost` (a `KvcheckInternalError` naming the levels
    cleared before) when a worker process crashes (kvcheck's fault: no verdict).

    `stop_when_found` (one process only) ends the level of the counterexample as soon as its
    counterexamples have broken every invariant named, instead of trying all of that level's
    scenarios (about two thirds of a search's work): the depth is still the minimum and every
    invariant named that some shortest counterexample breaks is in `minimal_invariants`, but
    others may be missing (`invariants_complete`), and the counterexample is the first of those
    met rather than of the whole level. What the mutant kill matrix asks: is the annotated
    invariant broken at the minimum length.
    """
    moves = family(target.family).moves
    bounds = moves.bounds({}) if bounds is None else bounds
    if options is None:
        options = moves.search_options(requested, bounds)
    elif requested:
        raise TypeError(f"exhaust() takes options or {', '.join(requested)}, not both")
    if workers < 1:
        raise KvcheckUsageError(f"workers must be >= 1, got {workers}")
    if workers > 1 and stop_when_found is not None:
        raise ValueError("stop_when_found is for a search in one process (workers=1)")
    moves.check_bounds(target, bounds, options)
    plan = Plan(target.family, bounds, options, merge, reduce)
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
    shard.stop_when_found = stop_when_found
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
        with collected_by_hand(), _time_limit(time_limit), one_tensor_thread():
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
    result = _result(target, plan, outcome, time.perf_counter() - started)
    return attrs.evolve(result, invariants_complete=not shard.stopped_early)


def _result(
    target: Target, plan: Plan, outcome: Outcome, elapsed: float, workers: int = 1
) -> ExhaustResult:
    """The result: the counterexample (if any) replayed and recorded."""
    found = outcome.found
    failure: RunResult | None = None
    if found:
        origin, events, invariant = first_found(found)
        found_scenario = Scenario(start_configs(plan)[origin], events, plan.family)
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
        family=plan.family,
        options=plan.options,
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


def _expander(
    moves: Moves, check_event: Callable[[int, Any, Any], list[Violation]], bounds: Any
) -> Callable[[_Node, bool], Iterator[tuple[_Node, str | None]]]:
    """The expansion of a node under `bounds`, with the family's methods bound once: every
    child, with the invariant its last event broke (None: none broke).

    The family lists the events (`Moves.expand`); a child it asks for at once (`child`, to see
    the model's expectation before listing the rest) comes first, on copies. The others are
    applied to copies too, or with `in_place` to the node's own engine and model (borrowed
    children, `_Node.owned`), which a checkpoint taken before the first of them (`checkpoint`)
    puts back before the next: then only the children the caller keeps are copied, which pays
    where it keeps few (a level that already failed keeps none). The last child keeps the
    node's state as its own: a node is expanded once, and nothing reads its state afterwards.
    Where the family cannot checkpoint the state (None), every child is applied to copies.
    """
    expand, counts_as_step, drop = moves.expand, moves.counts_as_step, moves.release

    def child_of(node: _Node, event: Any, reuse: bool) -> tuple[_Node, Any, str | None]:
        engine = node.engine if reuse else node.engine.clone()
        model = node.model if reuse else node.model.clone()
        expected = model.apply(event)
        observed = engine.apply(event)
        violations = check_event(len(node.events), expected, observed)
        steps = node.steps + 1 if counts_as_step(event) else node.steps
        child = _Node(node.config, engine, model, (*node.events, event), steps, node.origin)
        return child, expected, violations[0].invariant if violations else None

    def children(node: _Node, in_place: bool) -> Iterator[tuple[_Node, str | None]]:
        early: list[tuple[_Node, str | None]] = []

        def child(event: Any) -> Any:
            made, expected, violation = child_of(node, event, False)
            early.append((made, violation))
            return expected

        events = expand(node.model, node.config, bounds, node.steps, child)
        yield from early
        last = len(events) - 1
        states = None
        if in_place and last > 0:
            engine_state, model_state = _checkpoint(node.engine), _checkpoint(node.model)
            if engine_state is not None and model_state is not None:
                states = (engine_state, model_state)
        for index, event in enumerate(events):
            if states is None or index == last:
                made, _, violation = child_of(node, event, index == last)
                yield made, violation
                continue
            made, _, violation = child_of(node, event, True)
            made.borrowed = True
            yield made, violation
            # The caller has read the child, and copied it if it keeps it: the node again. The
            # cycles of what the event made are broken first (`release`: the restore drops
            # them); what that undoes of the node's own objects, the restore puts back.
            drop(node.engine, node.model)  # not `made`'s: a kept child has its own copies
            states[0].restore()
            states[1].restore()

    return children


def _checkpoint(state: FamilyEngine | ReferenceModel) -> Any:
    """The family's checkpoint of `state`, or None where it has none: `checkpoint` is optional
    (a family without it is cloned for every child)."""
    take = getattr(state, "checkpoint", None)
    return None if take is None else take()


def release(state: _Node | Candidate | int | None, drop: Callable[[Any, Any], None]) -> None:
    """Break the reference cycles of a state the search drops (a child whose state is known, a
    path replaced by a better one, a child sent to its owner), so that reference counting frees
    it at once instead of a cyclic collection walking every live state to find it.

    The cycles are the family's own (`drop`, its `Moves.release`; SGLang's: each request and its
    `req.kv`, and the fake scheduler and the resolver's sibling methods bound onto it). Nothing
    reads a dropped state again: its last users (the child's checks, its key) have run, and a
    node's engine passes to its last child, which is released only if that child is dropped in
    turn. A cycle a target made itself is left to the collections the search still runs
    (`exhaust`)."""
    node = state[3] if type(state) is tuple else state
    # Not nothing, nor a state another shard holds or sent, nor a borrowed child (its state is
    # its parent's, put back after it).
    if isinstance(node, _Node) and not node.borrowed:
        drop(node.engine, node.model)


_NONE_INERT: Final[frozenset[str]] = frozenset()


def state_key(
    engine: FamilyEngine, model: ReferenceModel, inert: frozenset[str] = _NONE_INERT
) -> bytes:
    """The merge key of a state: a 128-bit digest of both state keys, the `inert` parts
    (`Moves.inert`, when reducing) keyed by id alone. The keys are serialised with `marshal`
    (format 2: no back-references, so equal keys give equal bytes whatever objects they share),
    three times faster than their text; a key holding another type falls back to its text. With
    a million states the chance that two different states share a digest is about 10^-27."""
    key = (engine.state_key(inert), model.state_key(inert))
    try:
        data = marshal.dumps(key, 2)  # type: ignore[arg-type]
    except ValueError:
        data = repr(key).encode()
    return hashlib.blake2b(data, digest_size=16).digest()
