"""A fuzz campaign: many independent seeded searches in separate processes, one example database.

Each worker is a process (multiprocessing's `spawn` context) that loads the target itself and runs
a search round after round (`kvcheck.search.sampling.sample_search` on scenarios drawn from a
seeded `random.Random`, or with `generator="hypothesis"` Hypothesis's own
`kvcheck.search.check.search`), each round with its own seed (derived from the
campaign's seed, the worker's index and the round), until the campaign's duration, its share of
`max_examples`, or the parent's stop. Every round reads and writes the shared example database
(`open_database`: a directory, or a Redis URL for workers on many machines), so a failure one
worker saved is the first thing every other worker replays at its next round; with `keep_going`
only the first round replays it (later ones would only find it again) and the campaign collects
the distinct failures (by invariant and shrunk scenario) until the deadline.

A worker shrinks what it finds (kvcheck's shrinker, as `check` does) and sends the counterexample
to the parent as its file's JSON; the parent keeps the distinct ones (`Found`). A worker that
raises or dies is reported (`WorkerStatus.state == "crashed"`) and the others go on; one that
raises `KvcheckUsageError` (a target kvcheck cannot judge, a nondeterministic target) ends the
campaign as that error. Workers ignore SIGINT (the parent handles Ctrl-C and tells them to stop),
and die with the parent if it dies.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import re
import time
from collections.abc import Callable
from typing import Any, Final, Literal

import attrs
from hypothesis.database import ExampleDatabase

from kvcheck.core.calls import import_tensor_library
from kvcheck.core.deadline import DEFAULT_DEADLINE
from kvcheck.core.family import JudgingOptions, register, registered_paths
from kvcheck.core.interrupts import raise_if_dropped
from kvcheck.core.run import RunResult
from kvcheck.core.scenario import to_json_line
from kvcheck.counterexamples.fileformat import Counterexample, loads
from kvcheck.counterexamples.replay import from_run
from kvcheck.errors import KvcheckUsageError
from kvcheck.search.check import adaptive_reason, allocation_reason, search
from kvcheck.search.profiles import directory_database
from kvcheck.search.sampling import sample_search
from kvcheck.search.target_coverage import TargetCoverage, meter_for
from kvcheck.search.workers import Crashed, Refused, WorkerMessage, WorkerPool
from kvcheck.targets.loading import load_target
from kvcheck.wording import plural

__all__ = [
    "GENERATORS",
    "REDIS_SCHEMES",
    "CampaignPlan",
    "CampaignState",
    "Found",
    "TolerantDatabase",
    "WorkerStatus",
    "open_database",
    "run_campaign",
]

REDIS_SCHEMES: Final = ("redis://", "rediss://", "unix://")

# Scenarios per round at most (and about a second's worth, `_ROUND_SECONDS`): a worker checks the
# deadline and the stop signal between rounds, and replays the database's failures at the start of
# each.
ROUND_EXAMPLES: Final = 500
# How often a worker reports its count, and its target coverage (which costs an analysis).
_PROGRESS_EVERY: Final = 0.5
_ROUND_SECONDS: Final = 1.0
_COVERAGE_EVERY: Final = 2.0
# How long the parent waits for workers told to stop (they stop at their next round) before it
# terminates them.
_STOP_GRACE: Final = 20.0

WorkerState = Literal["starting", "running", "done", "crashed", "stopped"]
# How a worker draws scenarios: from a seeded `random.Random` (kvcheck.search.sampling, several
# times faster) or through Hypothesis's engine (kvcheck.search.check.search).
Generator = Literal["random", "hypothesis"]
GENERATORS: Final[tuple[Generator, ...]] = ("random", "hypothesis")


@attrs.frozen
class CampaignPlan:
    """What every worker is told: the target and how to judge it (`options`, one record of its
    family's, and why: `reason`), the database, the budget.

    `duration` is how long each worker searches, counted from when it has loaded the target
    (None: no limit); `max_examples` is the whole campaign's budget, shared out between the
    workers (None: none). `families` are the parent's family registrations, which a worker
    (a process of its own) repeats before it loads the target.
    """

    target: str
    options: JudgingOptions
    reason: str
    workers: int
    seed: int
    database: str | None
    duration: float | None = None
    max_examples: int | None = None
    keep_going: bool = False
    measure_coverage: bool = True
    allow_unavailable_imports: bool = False
    round_examples: int = ROUND_EXAMPLES
    # Seconds each call of the target may take in the workers (None: no limit).
    deadline: float | None = DEFAULT_DEADLINE
    generator: Generator = "random"
    families: tuple[tuple[str, str], ...] = attrs.field(
        factory=lambda: tuple(registered_paths().items())
    )

    # SGLang's options by their `--json` names (None for a family without them).
    @property
    def convention(self) -> Any:
        """The convention the workers judge by."""
        return self.options.to_dict().get("convention")

    @property
    def convention_reason(self) -> str:
        """Why (`reason`)."""
        return self.reason

    @property
    def global_counters(self) -> Any:
        """How the batch-global counters are judged."""
        return self.options.to_dict().get("global_counters")

    @property
    def adaptive(self) -> Any:
        """Whether strides switch between launch and delivery."""
        return self.options.to_dict().get("adaptive")

    @property
    def adaptive_reason(self) -> str:
        """Why adaptive switching is on or off ("given", or what the target's shape says)."""
        return adaptive_reason(self.options)

    @property
    def allocation_path(self) -> Any:
        """Whose allocation code the workers run (SGLang: `release` or `model`)."""
        return self.options.to_dict().get("allocation_path")

    @property
    def allocation_reason(self) -> str:
        """Why that allocation code runs."""
        return allocation_reason(self.options)

    def share(self, index: int) -> int | None:
        """Worker `index`'s part of `max_examples` (None: no limit)."""
        if self.max_examples is None:
            return None
        base, extra = divmod(self.max_examples, self.workers)
        return base + (1 if index < extra else 0)


def round_seed(seed: int, worker: int, round_index: int) -> int:
    """The seed (of the random generator or of Hypothesis) of one round of one worker: distinct
    for every worker and round, the same for the same campaign seed."""
    return random.Random(f"kvcheck-fuzz:{seed}:{worker}:{round_index}").getrandbits(64)


@attrs.define
class WorkerStatus:
    """One worker as the parent last heard of it. `seconds` is its searching time (after it
    loaded the target), `error` why it crashed."""

    index: int
    state: WorkerState = "starting"
    examples: int = 0
    seconds: float = 0.0
    error: str = ""

    @property
    def rate(self) -> float:
        """Scenarios per second of searching."""
        return self.examples / self.seconds if self.seconds > 0 else 0.0


@attrs.frozen
class Found:
    """A distinct failure: its counterexample, the worker that found it, after how many of that
    worker's scenarios, and after how many seconds of the campaign it arrived."""

    counterexample: Counterexample
    worker: int
    examples_to_failure: int
    seconds: float

    @property
    def identity(self) -> tuple[str, str]:
        """What makes two failures the same: the invariant and the shrunk scenario."""
        violation = self.counterexample.violation
        invariant = violation.invariant if violation is not None else ""
        return invariant, to_json_line(self.counterexample.scenario)


@attrs.define
class CampaignState:
    """The campaign as the parent sees it, updated as workers report."""

    plan: CampaignPlan
    workers: list[WorkerStatus]
    started: float = attrs.field(factory=time.monotonic)
    failures: list[Found] = attrs.field(factory=list)
    duplicates: int = 0
    reached: set[str] = attrs.field(factory=set)
    coverage: TargetCoverage | None = None
    interrupted: bool = False
    # A `KvcheckUsageError` a worker raised: the campaign ends as that error (exit 2).
    error: str = ""
    # What went wrong without changing the verdict (a worker that lost the example database).
    warnings: list[str] = attrs.field(factory=list)
    ended: float | None = None

    @property
    def examples(self) -> int:
        """Scenarios run by all workers."""
        return sum(w.examples for w in self.workers)

    @property
    def seconds(self) -> float:
        """Wall time of the campaign so far, workers' start-up included."""
        return (self.ended or time.monotonic()) - self.started

    @property
    def rate(self) -> float:
        """Scenarios per second of searching, summed over the workers that have not crashed: a
        crashed worker's last rate is no longer being searched at (its scenarios still count in
        `examples`)."""
        return sum(w.rate for w in self.workers if w.state != "crashed")

    @property
    def crashed(self) -> list[WorkerStatus]:
        """The workers that crashed."""
        return [w for w in self.workers if w.state == "crashed"]


# --- the database -------------------------------------------------------------------------------


def redact(url: str) -> str:
    """`url` with its password, if any, replaced by `***` (for messages)."""
    return re.sub(r"(//[^:/@]*:)[^@/]*@", r"\1***@", url)


def open_database(spec: str | None) -> ExampleDatabase | None:
    """The example database `spec` names: a Redis URL (`redis://HOST:PORT/N`, `rediss://`,
    `unix://`), else a directory; None for None.

    A Redis database is reached (PING) here: `KvcheckUsageError` naming the URL and the error when
    it cannot be, or when the `redis` package is missing.
    """
    if spec is None:
        return None
    if not spec.startswith(REDIS_SCHEMES):
        if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", spec):
            raise KvcheckUsageError(
                f"--database {redact(spec)}: not a directory nor a Redis URL "
                f"({', '.join(REDIS_SCHEMES)}...)"
            )
        return directory_database(spec)
    try:
        import redis  # the `redis` extra: only for a Redis database
        from hypothesis.extra.redis import RedisExampleDatabase
    except ImportError:
        raise KvcheckUsageError(
            f"--database {redact(spec)} needs the redis package: pip install 'kvcheck[redis]'"
        ) from None
    try:
        client = redis.Redis.from_url(spec, socket_connect_timeout=5, socket_timeout=60)
        client.ping()
    except (redis.RedisError, ValueError, OSError) as exc:
        raise KvcheckUsageError(
            f"cannot reach the Redis example database {redact(spec)}: {exc}"
        ) from None
    return RedisExampleDatabase(client)


# Pauses between the tries of a database call that failed (a Redis server restarting, a network
# hiccup): about five seconds in all, then the worker goes on without the database.
_DATABASE_RETRY_PAUSES: Final = (0.1, 0.4, 1.5, 3.0)


class TolerantDatabase(ExampleDatabase):
    """An example database that a campaign can lose without losing the campaign.

    Sharing failures is a help to the search, not part of its verdict: when a call of `inner`
    fails (Redis gone, a disk error), it is tried again after each of `pauses` (redis-py
    reconnects on the next call by itself), and when every try failed, `on_lost` is told why
    once and from then on the database is empty and saves nothing.
    """

    def __init__(
        self,
        inner: ExampleDatabase,
        on_lost: Callable[[str], None],
        *,
        pauses: tuple[float, ...] = _DATABASE_RETRY_PAUSES,
    ) -> None:
        super().__init__()
        self._inner = inner
        self._on_lost = on_lost
        self._pauses = pauses
        self._faults = _database_faults()
        self.lost: str = ""

    def _call(self, operation: Callable[[], Any], default: Any) -> Any:
        if self.lost:
            return default
        for pause in (*self._pauses, None):
            try:
                return operation()
            except self._faults as exc:
                if pause is None:
                    self.lost = f"{type(exc).__name__}: {exc}"
                    self._on_lost(self.lost)
                    return default
                time.sleep(pause)
        return default  # pragma: no cover - the loop returns on its last try

    def fetch(self, key: bytes) -> list[bytes]:
        """The values under `key` (none once the database is lost)."""
        # A list, not the inner generator: the call that fails must fail here, inside the retry.
        result: list[bytes] = self._call(lambda: list(self._inner.fetch(key)), [])
        return result

    def save(self, key: bytes, value: bytes) -> None:
        """Save `value` under `key` (nothing once the database is lost)."""
        self._call(lambda: self._inner.save(key, value), None)

    def delete(self, key: bytes, value: bytes) -> None:
        """Delete `value` under `key` (nothing once the database is lost)."""
        self._call(lambda: self._inner.delete(key, value), None)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        """Move `value` from `src` to `dest` (nothing once the database is lost)."""
        self._call(lambda: self._inner.move(src, dest, value), None)


def _database_faults() -> tuple[type[BaseException], ...]:
    """What a database call raises when the database itself fails: the disk's `OSError`, and
    the `redis` package's errors where it is installed."""
    try:
        import redis
    except ImportError:
        return (OSError,)
    return (OSError, redis.RedisError)


# --- a worker -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Started(WorkerMessage):
    """The worker loaded the target: from here on it sees a stop between scenarios."""


@dataclasses.dataclass(frozen=True)
class _Progress(WorkerMessage):
    """Scenarios run and seconds spent so far, the scheduler states reached, and the target
    coverage when it was measured this time (it costs an analysis)."""

    examples: int
    seconds: float
    reached: frozenset[str]
    coverage: TargetCoverage | None


@dataclasses.dataclass(frozen=True)
class _FailureFound(WorkerMessage):
    """A shrunk counterexample, as its file's JSON, found after `examples_to_failure` of the
    worker's scenarios."""

    counterexample_json: str
    examples_to_failure: int


@dataclasses.dataclass(frozen=True)
class _DatabaseLost(WorkerMessage):
    """The example database failed; the worker goes on without it."""

    why: str


@dataclasses.dataclass(frozen=True)
class _Done(WorkerMessage):
    """The worker ended its last round."""


def _work(
    index: int, messages: Any, stop: Any, plan: CampaignPlan
) -> None:  # pragma: no cover - runs in a worker process (tests/quality/test_fuzz*.py)
    for name, path in plan.families:
        register(name, path)
    target = load_target(
        plan.target, allow_unavailable=plan.allow_unavailable_imports, deadline=plan.deadline
    )
    meter = meter_for(target, enabled=plan.measure_coverage)
    judged = meter.instrument(target) if meter is not None else target

    def lost(why: str) -> None:
        messages.put(_DatabaseLost(index, why))

    try:
        opened = open_database(plan.database)
    except KvcheckUsageError as exc:
        # The parent reached it before starting the workers: it has gone away since.
        opened = None
        lost(str(exc))
    database = None if opened is None else TolerantDatabase(opened, lost)
    import_tensor_library()
    messages.put(_Started(index))  # from here on, a stop is seen between scenarios
    budget = plan.share(index)
    started = time.monotonic()
    deadline = None if plan.duration is None else started + plan.duration
    count = {"examples": 0}
    reached: set[str] = set()
    last = {"progress": 0.0, "coverage": 0.0}

    def report(final: bool = False) -> None:
        now = time.monotonic()
        coverage = None
        if meter is not None and (final or now - last["coverage"] >= _COVERAGE_EVERY):
            coverage, last["coverage"] = meter.result(), now
        last["progress"] = now
        messages.put(
            _Progress(index, count["examples"], now - started, frozenset(reached), coverage)
        )

    def on_run(_result: RunResult) -> None:
        count["examples"] += 1
        if time.monotonic() - last["progress"] >= _PROGRESS_EVERY:
            report()

    round_index = 0
    while not stop.is_set():
        if deadline is not None and time.monotonic() >= deadline:
            break
        size = _round_size(plan, count["examples"], time.monotonic() - started, deadline)
        if budget is not None:
            size = min(size, budget - count["examples"])
            if size <= 0:
                break
        before = count["examples"]
        settings: dict[str, Any] = {
            "max_examples": size,
            "seed": round_seed(plan.seed, index, round_index),
            "database": database,
            "reuse": round_index == 0 or not plan.keep_going,
            "on_run": on_run,
        }
        if plan.generator == "random":
            outcome = sample_search(judged, plan.options, **settings)
        else:
            outcome = search(judged, plan.options, seeded_database=True, **settings)
        reached.update(outcome.reached)
        round_index += 1
        if outcome.failure is not None:
            counterexample = from_run(
                outcome.failure,
                target.spec,
                convention_reason=plan.reason,
                allow_unavailable_imports=plan.allow_unavailable_imports,
            )
            to_failure = before + (outcome.examples_to_failure or 0)
            messages.put(_FailureFound(index, counterexample.to_json(), to_failure))
            if not plan.keep_going:
                break
    report(final=True)
    messages.put(_Done(index))


def _round_size(
    plan: CampaignPlan, examples: int, seconds: float, deadline: float | None = None
) -> int:
    """Scenarios in the next round: `plan.round_examples`, fewer when that would run past the
    deadline at the rate so far (a round cannot be cut short), about a second's worth at most."""
    if examples == 0 or seconds <= 0:
        return min(plan.round_examples, 50)  # a small first round measures the rate
    rate = examples / seconds
    size = min(plan.round_examples, max(10, int(rate * _ROUND_SECONDS)))
    if deadline is not None:
        size = min(size, max(1, int(rate * (deadline - time.monotonic())) + 1))
    return size


# --- the parent ---------------------------------------------------------------------------------


def run_campaign(
    plan: CampaignPlan,
    *,
    on_update: Callable[[CampaignState], None] | None = None,
    on_event: Callable[[CampaignState, str], None] | None = None,
    on_found: Callable[[Found], None] | None = None,
    poll: float = 0.2,
) -> CampaignState:
    """Start `plan.workers` workers and gather what they report until all have ended.

    `on_update` is called about every `poll` seconds, `on_event` with a line for each failure,
    crash or stop, `on_found` with each distinct failure as it arrives (to save it at once, so a
    campaign killed later keeps it). Stops every worker at the first failure unless
    `plan.keep_going`, and at the first `KvcheckUsageError` of one (`CampaignState.error`).
    Ctrl-C (KeyboardInterrupt) stops them too and returns the state with `interrupted` set; a
    second Ctrl-C terminates them at once. Workers still running `_STOP_GRACE` seconds after
    being told to stop are terminated.
    """
    pool = WorkerPool("fuzz", plan.workers)
    stop = pool.stop
    state = CampaignState(plan, [WorkerStatus(i) for i in range(plan.workers)])
    coverages: dict[int, TargetCoverage] = {}

    def tell(line: str) -> None:
        if on_event is not None:
            on_event(state, line)

    def handle(message: WorkerMessage) -> None:
        index = message.worker
        worker = state.workers[index]
        if isinstance(message, _Started):
            worker.state = "running"
        elif isinstance(message, _Progress):
            worker.examples, worker.seconds = message.examples, message.seconds
            state.reached |= message.reached
            if message.coverage is not None:
                coverages[index] = message.coverage
                state.coverage = _union(coverages.values())
        elif isinstance(message, _FailureFound):
            found = Found(
                loads(message.counterexample_json, "a worker's counterexample"),
                index,
                message.examples_to_failure,
                state.seconds,
            )
            if any(f.identity == found.identity for f in state.failures):
                state.duplicates += 1
                return
            state.failures.append(found)
            tell(
                f"worker {index} found a failure after "
                f"{plural(found.examples_to_failure, 'scenario')}"
            )
            if on_found is not None:
                on_found(found)
            if not plan.keep_going:
                stop.set()
        elif isinstance(message, _Done):
            worker.state = "done"
        elif isinstance(message, Refused):
            worker.state, worker.error = "crashed", message.error
            if not state.error:
                state.error = message.error
                stop.set()
        elif isinstance(message, _DatabaseLost):
            warning = (
                f"worker {index} lost the example database ({message.why}); it goes on without "
                "it, so it neither replays nor shares failures"
            )
            state.warnings.append(warning)
            tell(warning)
        elif isinstance(message, Crashed):
            worker.state, worker.error = "crashed", message.error
            tell(f"worker {index} crashed: {message.error}; the others go on")

    def drain(wait: float) -> None:
        message = pool.receive(wait)
        while message is not None:
            handle(message)
            message = pool.receive(0)

    def finished(worker: WorkerStatus) -> bool:
        return worker.state in ("done", "crashed", "stopped")

    def settled(worker: WorkerStatus) -> bool:
        """Not to be waited for once stopping: finished, or still starting (loading the target
        or torch, nothing searched yet), which the `finally` below ends."""
        return finished(worker) or worker.state == "starting"

    def reap() -> None:
        for worker in state.workers:
            how = pool.ended_how(worker.index)
            if finished(worker) or how is None:
                continue
            drain(0.05)  # what it sent before it ended
            if not finished(worker):
                worker.state, worker.error = "crashed", f"the worker process {how}"
                tell(f"worker {worker.index} crashed: {worker.error}; the others go on")

    stopping_since: float | None = None
    try:
        pool.start(_work, lambda _: (plan,))
        while not all(finished(w) for w in state.workers):
            raise_if_dropped()  # no target call runs in this process to raise it again
            drain(poll)
            reap()
            if on_update is not None:
                on_update(state)
            if stop.is_set():
                stopping_since = stopping_since or time.monotonic()
                if time.monotonic() - stopping_since > _STOP_GRACE:
                    break
                if all(settled(w) for w in state.workers):
                    break
    except KeyboardInterrupt:
        state.interrupted = True
        stop.set()
        tell("interrupted: stopping the workers (Ctrl-C again to end them at once)")
        with contextlib.suppress(KeyboardInterrupt):
            until = time.monotonic() + _STOP_GRACE
            while not all(settled(w) for w in state.workers) and time.monotonic() < until:
                drain(poll)
                reap()
    finally:
        pool.end_processes()
        with contextlib.suppress(Exception):
            drain(0.0)
        for worker in state.workers:
            if not finished(worker):
                worker.state = "stopped"
        pool.close()
        state.ended = time.monotonic()
    return state


def _union(coverages: Any) -> TargetCoverage | None:
    merged: TargetCoverage | None = None
    for coverage in coverages:
        merged = coverage if merged is None else merged.union(coverage)
    return merged
