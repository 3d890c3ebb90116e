"""`exhaust --workers N`: the breadth-first search sharded over N processes, TLC's way.

Each worker owns the states whose merge key hashes to its index (`owner_of`: the key's first 8
bytes mod N), keeps their `seen` set and expands them. One level is two barriers:

1. `expand`: every worker expands its frontier; a child it owns joins its own candidates, a
   child another worker owns waits for the end of the level. The parent gathers the violations.
2. `merge` (only when no worker found a violation), three rounds between each pair of workers:
   each offers the other the children it owns (steps, start config, events: no state); the
   owner merges them with its own candidates (fewest steps, then the first by a stable order,
   `better`) and asks for the states of the paths it kept, new states only (most children
   reach states already seen: sending every state cost about five times as many pickles);
   those come as pickled bytes (without the target: the family takes it off, and the receiver
   puts its own copy of it back, `Moves.pickle_state`, so this works for targets read from
   source too; a state that does not pickle is sent as None and rebuilt by replaying its
   events), and the owner makes them, with its own, its next frontier.

The level barrier keeps the search breadth-first, so the first level with a violation holds the
shortest counterexamples; the parent reports the first of them by a stable order
(`first_found`), and the states counted are those of the levels before it, so the verdict, the
counts and the counterexample do not depend on the number of workers or on their timing.

Workers are spawned (torch and fork do not mix), repeat the parent's family registrations
(`kvcheck.core.family.register`: a family registered at run time, a test's, is known there too),
load the target themselves (a pickled copy when it pickles, else from its spec) and what the
family's runs import (`Moves.prepare_worker`: SGLang's torch), ignore SIGINT (the parent handles
Ctrl-C and tells them to stop) and die with the parent. Limits (time, states, memory) are watched by
the parent, which sets a shared stop flag that workers look at every few hundred transitions. The
memory measured is the parent's peak plus what each worker grew past its own start-up
(`peak_memory_mb` after it loaded the target and the family's imports): one start-up counted, as in
the single-process search, not one per worker, so `--max-memory` means the same for any number of
workers. A worker that dies or raises is kvcheck's own fault: `WorkerLost` (a
`KvcheckInternalError`), no verdict, with the levels every worker had cleared before it (a
`KvcheckUsageError` it raises, such as a target kvcheck cannot judge, is re-raised as such). Across
machines the same scheme holds with the processes of every machine numbered 0..N-1 and the per-level
exchange going through a shared store (docs/architecture.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import pickle
import queue as queue_module
import resource
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, Final, Literal, TypeVar

import attrs

from kvcheck.core.calls import one_tensor_thread
from kvcheck.core.deadline import TimeLimitReached
from kvcheck.core.deadline import time_limit as _time_limit
from kvcheck.core.family import Moves, family, registered_paths, repeat_registrations
from kvcheck.core.interrupts import raise_if_dropped
from kvcheck.core.target import Target
from kvcheck.errors import KvcheckInternalError, KvcheckUsageError
from kvcheck.search.sharding import Candidate, Found, NodeLike, PlanLike, ShardFactory
from kvcheck.search.target_coverage import TargetCoverage, meter_for
from kvcheck.search.workers import Crashed, Refused, WorkerMessage, WorkerPool
from kvcheck.targets.loading import load_target
from kvcheck.wording import plural

__all__ = ["Outcome", "WorkerLost", "collected_by_hand", "peak_memory_mb", "search_sharded"]

# How often the parent looks at its messages, the workers and the limits (seconds).
_POLL: Final = 0.2
# How often a worker reports its counts (seconds, at most once per `_LOOK_EVERY` transitions).
_PROGRESS_EVERY: Final = 0.5
# How long the parent waits for workers to start (loading the target, importing torch) and to
# end after being told to.
_START_TIMEOUT: Final = 300.0
_END_GRACE: Final = 20.0


class _Stopped(Exception):
    """The parent said stop (a limit, Ctrl-C): the worker leaves the level."""


class WorkerLost(KvcheckInternalError):
    """A worker process died or raised: kvcheck's own fault, so no verdict; but the levels every
    worker had cleared before stay proven (no violation in any scenario of up to `levels`
    events), and the message says so."""

    def __init__(self, cause: str, *, levels: int, states: int, scenarios: int) -> None:
        if levels:
            proven = (
                f"what was established before: no violation up to {plural(levels, 'event')} "
                f"({plural(levels, 'level')} cleared, {plural(states, 'distinct state')}, "
                f"{plural(scenarios, 'scenario')})"
            )
        else:
            proven = "no level was cleared before it"
        super().__init__(f"{cause}; {proven}")
        self.levels = levels
        self.states = states
        self.scenarios = scenarios


def peak_memory_mb() -> float:
    """The process's peak resident memory so far, in MB (`ru_maxrss`: KiB on Linux, bytes on
    macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


@contextlib.contextmanager
def collected_by_hand() -> Iterator[None]:
    """The automatic cyclic collector off while a search runs (the search collects at its own
    times), and what was alive before it started frozen out of every collection: torch and the
    loaded modules are some 170,000 objects, which each full collection (one per level) walked
    again for nothing. Both undone at the end; left alone when someone else froze objects."""
    enabled = gc.isenabled()
    freeze = gc.get_freeze_count() == 0
    gc.disable()
    if freeze:
        gc.freeze()
    try:
        yield
    finally:
        if freeze:
            gc.unfreeze()
        if enabled:
            gc.enable()


@attrs.frozen
class Outcome:
    """What a search established before its counterexample is replayed: transitions tried,
    distinct states kept (at a level with violations: those of the levels before it), levels
    searched, the violations of the last level, and how it ended."""

    scenarios: int
    states: int
    depth: int
    found: tuple[Found, ...]
    complete: bool
    stopped: str | None
    coverage: TargetCoverage | None
    peak_memory_mb: float


@attrs.frozen
class _Setup:
    """What every worker is sent at its start (its index comes from the pool)."""

    workers: int
    plan: PlanLike
    # The parent's family registrations (`registered_paths`), repeated before anything loads.
    families: dict[str, str]
    # `kvcheck.search.exhaust.Shard` (sent by reference).
    shard_class: ShardFactory
    # The target pickled, or None: load it from `spec`.
    target_bytes: bytes | None
    spec: str
    deadline: float | None
    allow_unavailable_imports: bool
    measure_coverage: bool
    # time.time() when the run's time limit passes (None: no limit).
    stop_at: float | None


@dataclasses.dataclass(frozen=True)
class _Ready(WorkerMessage):
    """The worker loaded the target and holds its part of the start: `frontier` states to
    expand, `seen` states kept."""

    frontier: int
    seen: int


@dataclasses.dataclass(frozen=True)
class _Progress(WorkerMessage):
    """Transitions tried and states kept so far, and what the worker grew past its start-up."""

    scenarios: int
    states: int
    grown_mb: float


@dataclasses.dataclass(frozen=True)
class _Expanded(WorkerMessage):
    """The worker expanded its frontier (`stopped`: why it left the level early, else "") and
    found these violations."""

    stopped: str
    found: tuple[Found, ...]


@dataclasses.dataclass(frozen=True)
class _Merged(WorkerMessage):
    """The worker merged the level's children (`stopped` as in `_Expanded`): its next frontier,
    the states it keeps, and the transitions it tried."""

    stopped: str
    frontier: int
    seen: int
    scenarios: int


@dataclasses.dataclass(frozen=True)
class _Done(WorkerMessage):
    """The worker's last word: its target coverage and what it grew past its start-up."""

    coverage: TargetCoverage | None
    grown_mb: float


# The three rounds of a level's merge.
_Phase = Literal["offer", "want", "state"]


@dataclasses.dataclass(frozen=True)
class _Batch(WorkerMessage):
    """What one worker sends another in a round of the merge (module docstring): in `offer` the
    children the receiver owns, in `want` the keys whose states it keeps, in `state` those
    states."""

    level: int
    phase: _Phase
    payload: Any


# What the parent tells each worker, once per barrier and at the end.
_Command = Literal["expand", "merge", "finish"]

# The replies the parent waits for from every worker, once per barrier.
_R = TypeVar("_R", _Ready, _Expanded, _Merged)


def search_sharded(
    target: Target,
    plan: PlanLike,
    workers: int,
    shard_class: ShardFactory,
    *,
    max_states: int | None = None,
    time_limit: float | None = None,
    measure_coverage: bool = True,
    max_memory_mb: float | None = None,
    progress: Callable[[str], None] | None = None,
    allow_unavailable_imports: bool = False,
) -> Outcome:
    """Run the search on `workers` processes and return what they established together
    (module docstring). Ctrl-C ends it with `stopped == "interrupted"`."""
    try:
        target_bytes: bytes | None = pickle.dumps(target)
    except Exception:
        target_bytes = None  # read from source: each worker loads it from its spec
    started = time.monotonic()
    stop_at = None if time_limit is None else time.time() + time_limit
    pool = WorkerPool("exhaust", workers)
    stop = pool.stop
    controls = [pool.queue() for _ in range(workers)]
    inboxes = [pool.queue() for _ in range(workers)]
    setup = _Setup(
        workers,
        plan,
        registered_paths(),
        shard_class,
        target_bytes,
        target.spec,
        target.deadline,
        allow_unavailable_imports,
        measure_coverage,
        stop_at,
    )
    counts = [(0, 0)] * workers  # (scenarios, states) each worker last reported
    memory = [0.0] * workers
    done: dict[int, tuple[TargetCoverage | None, float]] = {}
    depth = 0
    found: list[Found] = []
    stopped: str | None = None
    last_progress = [0.0]
    why_stopped = [""]

    said_ready: set[int] = set()  # a worker not yet ready has nothing to report: not waited for

    def on_message(message: WorkerMessage | None) -> WorkerMessage | None:
        if message is None:
            return None
        index = message.worker
        if isinstance(message, _Progress):
            counts[index] = (message.scenarios, message.states)
            memory[index] = message.grown_mb
            return None
        if isinstance(message, Crashed):
            raise KvcheckInternalError(
                f"exhaust worker {index} crashed (kvcheck's own fault, no verdict): {message.error}"
            )
        if isinstance(message, Refused):
            raise KvcheckUsageError(message.error)
        if isinstance(message, _Done):
            done[index] = (message.coverage, message.grown_mb)
        if isinstance(message, _Ready):
            said_ready.add(index)
        return message

    def watch() -> None:
        """Dead workers, limits and progress, every `_POLL` seconds while waiting; a Ctrl-C
        that Python dropped is raised again here (no target call runs in this process)."""
        raise_if_dropped()
        for i in range(workers):
            if pool.ended_how(i) is not None and i not in done:
                while (said := pool.receive(0.1)) is not None:  # before it ended (a crash report)
                    on_message(said)
                how = pool.ended_how(i)
                if i not in done:
                    raise KvcheckInternalError(
                        f"exhaust worker {i} ended unexpectedly ({how}): kvcheck's own fault, "
                        "no verdict; try fewer --workers or a lower --max-memory"
                    )
        if stop.is_set():
            return
        states = sum(c[1] for c in counts)
        if stop_at is not None and time.time() >= stop_at:
            why_stopped[0] = "time limit"
        elif max_states is not None and states >= max_states:
            why_stopped[0] = "state limit"
        elif max_memory_mb and sum(memory) + peak_memory_mb() > max_memory_mb:
            # `memory` holds what each worker grew past its start-up (module docstring).
            why_stopped[0] = "memory limit"
        if why_stopped[0]:
            stop.set()
        now = time.monotonic()
        if progress is not None and now - last_progress[0] >= _PROGRESS_EVERY:
            last_progress[0] = now
            progress(
                f"level {depth + 1}: {plural(sum(c[0] for c in counts), 'scenario')}, "
                f"{plural(states, 'state')}, "
                f"{now - started:.0f} s, {sum(memory) + peak_memory_mb():.0f} MB, "
                f"{workers} workers"
            )

    def gather(kind: type[_R]) -> list[_R]:
        """One `kind` reply from every worker (handling everything else meanwhile)."""
        replies: dict[int, _R] = {}
        limit = time.monotonic() + _START_TIMEOUT if kind is _Ready else None
        while len(replies) < workers:
            message = on_message(pool.receive(_POLL))
            if isinstance(message, kind):
                replies[message.worker] = message
            watch()
            if limit is not None and time.monotonic() > limit:
                raise KvcheckInternalError(
                    f"exhaust workers did not start within {_START_TIMEOUT:.0f} s"
                )
        return [replies[i] for i in sorted(replies)]

    frontier = 0
    states = 0
    complete = True
    lost: KvcheckInternalError | None = None
    # (levels, states, scenarios) when every worker had last merged a level: what stays proven
    # when a worker is lost later (the progress counts run ahead, into the next level).
    cleared = (0, 0, 0)
    try:
        pool.start(_work, lambda i: (setup, controls[i], inboxes))
        ready = gather(_Ready)
        frontier = sum(r.frontier for r in ready)
        states = sum(r.seen for r in ready)
        while frontier and (plan.bounds.events is None or depth < plan.bounds.events):
            for control in controls:
                control.put("expand")
            expanded = gather(_Expanded)
            if any(r.stopped for r in expanded):  # stopped within the level
                complete = False
                stopped = why_stopped[0] or next(r.stopped for r in expanded if r.stopped)
                states = sum(counts[i][1] for i in range(workers))
                break
            depth += 1
            found = [f for r in expanded for f in r.found]
            if found:
                break
            for control in controls:
                control.put("merge")
            merged = gather(_Merged)
            if any(r.stopped for r in merged):
                complete = False
                stopped = why_stopped[0] or next(r.stopped for r in merged if r.stopped)
                states = sum(counts[i][1] for i in range(workers))
                break
            frontier = sum(r.frontier for r in merged)
            states = sum(r.seen for r in merged)
            counts = [(r.scenarios, r.seen) for r in merged]
            cleared = (depth, states, sum(r.scenarios for r in merged))
            if max_states is not None and states >= max_states:
                complete, stopped = False, "state limit"
                break
    except KeyboardInterrupt:
        complete, stopped = False, "interrupted"
        states = sum(c[1] for c in counts)
        stop.set()
    except KvcheckInternalError as exc:  # a worker died or raised: no verdict
        lost = exc
    finally:
        stop.set()
        for control in controls:
            with contextlib.suppress(Exception):
                control.put("finish")
        with contextlib.suppress(Exception, KeyboardInterrupt):
            _finish(pool, on_message, done, said_ready)
        pool.close()
    if lost is not None:
        levels, kept, tried = cleared
        raise WorkerLost(str(lost), levels=levels, states=kept, scenarios=tried) from lost
    coverage: TargetCoverage | None = None
    for cover, _ in done.values():
        if cover is not None:
            coverage = cover if coverage is None else coverage.union(cover)
    scenarios = sum(c[0] for c in counts)
    return Outcome(
        scenarios=scenarios,
        states=states,
        depth=depth,
        found=tuple(found),
        complete=complete,
        stopped=stopped,
        coverage=coverage,
        peak_memory_mb=peak_memory_mb() + sum(m for _, m in done.values()),
    )


def _finish(
    pool: WorkerPool,
    on_message: Callable[[WorkerMessage | None], Any],
    done: dict[int, Any],
    said_ready: set[int],
) -> None:
    """Wait (up to `_END_GRACE` s) for every live worker's `done` (coverage, peak memory); one
    still starting (loading the target or torch) is not waited for: the caller ends it."""
    until = time.monotonic() + _END_GRACE
    while time.monotonic() < until:
        if all(
            i in done or i not in said_ready or p.pid is None or p.exitcode is not None
            for i, p in enumerate(pool.processes)
        ):
            # a worker that ended said `done` first; drain what is left
            while (message := pool.receive(0.05)) is not None:
                on_message(message)
            return
        on_message(pool.receive(_POLL))


# --- a worker -----------------------------------------------------------------------------------


def _encode(node: NodeLike, target: Target, moves: Moves) -> bytes | None:
    """A node's engine and model as bytes, without the target (the receiver puts its own copy
    back, `_decode`), so a target read from source, or one wrapped for coverage, travels too.
    None when the state holds something else that does not pickle (the receiver then replays
    the events)."""
    return moves.pickle_state(node.engine, node.model, target)


def _decode(data: bytes, target: Target, moves: Moves) -> tuple[Any, Any]:
    """The engine and model `_encode` made, with this worker's target put back."""
    return moves.unpickle_state(data, target)


def _work(
    index: int, messages: Any, stop: Any, setup: _Setup, control: Any, inboxes: list[Any]
) -> None:  # pragma: no cover - runs in a worker process (tests/unit/search/test_exhaust_parallel)
    workers = setup.workers
    repeat_registrations(setup.families)
    moves = family(setup.plan.family).moves
    if setup.target_bytes is not None:
        target: Target = pickle.loads(setup.target_bytes)
    else:
        target = load_target(
            setup.spec,
            allow_unavailable=setup.allow_unavailable_imports,
            deadline=setup.deadline,
        )
        target = attrs.evolve(target, deadline=setup.deadline)
    meter = meter_for(target, enabled=setup.measure_coverage)
    if meter is not None:
        target = meter.instrument(target)
    moves.prepare_worker()
    # What this worker holds once started (the target, torch): the parent counts its own
    # start-up only, so each worker reports what the search grew past this.
    started_mb = peak_memory_mb()
    shard = setup.shard_class(target, setup.plan, index, workers)
    messages.put(_Ready(index, len(shard.frontier), len(shard.seen)))
    last = {"progress": 0.0}

    def grown_mb() -> float:
        return max(0.0, peak_memory_mb() - started_mb)

    def report() -> None:
        last["progress"] = time.monotonic()
        messages.put(_Progress(index, shard.scenarios, shard.states, grown_mb()))

    def look() -> None:
        if stop.is_set():
            raise _Stopped
        if time.monotonic() - last["progress"] >= _PROGRESS_EVERY:
            report()

    def encode(node: NodeLike) -> bytes | None:
        return _encode(node, target, moves)

    def decode(candidate: Candidate) -> Any:
        data = candidate[3]
        if data is not None:
            with contextlib.suppress(Exception):
                return shard.restore(candidate, _decode(data, target, moves))
        return shard.restore(candidate, None)

    stash: dict[tuple[int, _Phase], list[tuple[int, Any]]] = {}

    def receive(level: int, phase: _Phase) -> list[tuple[int, Any]]:
        """The other workers' messages of one round of a level: (sender, payload) each."""
        while len(stash.get((level, phase), ())) < workers - 1:
            if stop.is_set():
                raise _Stopped
            with contextlib.suppress(queue_module.Empty):
                batch: _Batch = inboxes[index].get(timeout=_POLL)
                stash.setdefault((batch.level, batch.phase), []).append(
                    (batch.worker, batch.payload)
                )
        return stash.pop((level, phase))

    def send(level: int, phase: _Phase, payloads: Any, empty: Any) -> None:
        for other in range(workers):
            if other != index:
                inboxes[other].put(_Batch(index, level, phase, payloads.get(other, empty)))

    remaining = None if setup.stop_at is None else max(0.0, setup.stop_at - time.time())
    level = 0
    # As in the single-process search: collected per level and every so often.
    with collected_by_hand(), _time_limit(remaining), one_tensor_thread():
        while True:
            command: _Command = control.get()
            if command == "finish":
                break
            why = ""
            try:
                if command == "expand":
                    shard.expand(look)
                    report()
                    messages.put(_Expanded(index, "", tuple(shard.found)))
                    continue
                # Three rounds: offers (no states), the keys each owner keeps, their states.
                send(level, "offer", dict(enumerate(shard.offers())), {})
                send(level, "want", shard.select(receive(level, "offer")), [])
                for sender, keys in receive(level, "want"):
                    states_wanted = shard.give(sender, keys, encode)
                    inboxes[sender].put(_Batch(index, level, "state", states_wanted))
                states: dict[bytes, Any] = {}
                for _, batch in receive(level, "state"):
                    states.update(batch)
                shard.merge(states, decode)
                del states
                level += 1
                shard.collect()
            except _Stopped:
                why = "stopped"
            except TimeLimitReached:
                why = "time limit"
            report()
            if command == "expand":
                messages.put(_Expanded(index, why, ()))
            else:
                messages.put(
                    _Merged(index, why, len(shard.frontier), len(shard.seen), shard.scenarios)
                )
    report()
    messages.put(_Done(index, meter.result() if meter is not None else None, grown_mb()))
