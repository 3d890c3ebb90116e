"""The kill matrix: every corpus entry through kvcheck's search, and every mutant through the
exhaustive search for its shortest counterexample.

Per mutant: killed or not, scenarios and wall time to the first failure, the shrunk
counterexample's length and the invariant it breaks (and whether that is the annotated one), the
shortest counterexample within its family's minimum bounds (`minimum_bounds`; the default
family's are `MINIMUM_BOUNDS`) and the shrink ratio (shrunk length / exhaustive minimum; 1.0 is
optimal). Per rewrite: pass, or a false positive.

Generic over families: an entry's corpus (`Family.mutants`) gives what is its family's (the
row's columns, the bounds, why a shrink stopped short), its scenarios' codec gives their JSON.
`jobs > 1` runs the entries on the shared worker pool (`kvcheck.search.workers`), one entry a job.
"""

from __future__ import annotations

import dataclasses
import math
import shlex
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import attrs

from kvcheck.core.family import (
    DEFAULT_FAMILY,
    JudgingOptions,
    MutantEntry,
    family,
    registered_paths,
    repeat_registrations,
)
from kvcheck.core.interrupts import raise_if_dropped
from kvcheck.core.jsonable import jsonable
from kvcheck.core.scenario import Scenario
from kvcheck.core.target import Target
from kvcheck.errors import KvcheckInternalError, KvcheckUsageError
from kvcheck.mutants import corpus_of
from kvcheck.mutants import entries as all_entries
from kvcheck.search.exhaust import exhaust
from kvcheck.search.workers import Crashed, Refused, WorkerMessage, WorkerPool, take_jobs

DEFAULT_SEED: Final = 0
# How long the parent waits for a worker's message before it looks for dead workers (seconds).
_POLL: Final = 0.2


def minimum_bounds(family_name: str = DEFAULT_FAMILY) -> Any:
    """Where the family's mutants' shortest counterexamples are looked for (its corpus's
    `minimum_bounds` of the exhaustive search's defaults)."""
    return corpus_of(family_name).minimum_bounds(family(family_name).moves.bounds({}))


def __getattr__(name: str) -> Any:
    """`MINIMUM_BOUNDS`: the default family's `minimum_bounds`, read when asked for."""
    if name == "MINIMUM_BOUNDS":
        return minimum_bounds()
    raise AttributeError(f"module 'kvcheck.mutants.matrix' has no attribute {name!r}")


@attrs.frozen
class Row:
    """One corpus entry's line of the kill matrix.

    The entry, with its family's columns (SGLang's: the generation and the options it is judged
    under); the search's outcome (killed or passed, scenarios and seconds to the first failure,
    the shrunk counterexample); and, for a mutant, the shortest counterexample exhaustive search
    finds within its family's `minimum_bounds`.
    """

    name: str
    kind: str
    # The family's own columns, which `--json` shows after the kind (`Mutants.row_columns`).
    columns: Mapping[str, Any]
    expect: str | None
    origin: str
    summary: str
    # Mutants: was a violation found. Rewrites: None.
    killed: bool | None
    # Rewrites: no violation found. Mutants: None.
    passed: bool | None
    examples: int
    examples_to_failure: int | None
    seconds_to_failure: float | None
    seconds: float
    invariant: str | None
    shrunk_length: int | None
    shrunk_events: tuple[dict[str, Any], ...] = ()
    shrunk_config: dict[str, Any] | None = None
    exhaustive_length: int | None = None
    # The invariants the shortest counterexamples met break. The exhaustive search stops its
    # last level once the annotated invariant and the search's own are among them
    # (`exhaustive_minimum`), so others some shortest counterexample breaks may be missing.
    exhaustive_invariants: tuple[str, ...] = ()
    exhaustive_seconds: float | None = None
    exhaustive_events: tuple[dict[str, Any], ...] = ()
    exhaustive_config: dict[str, Any] | None = None
    shrink_note: str = ""
    # The family whose corpus holds the entry; required, as `Target.family` is.
    family: str = attrs.field(kw_only=True)
    # The options the entry is judged under, as JSON (`JudgingOptions.to_dict`).
    options: Mapping[str, Any] = attrs.field(factory=dict)
    # The bounds the exhaustive minimum was looked for within, in words: the family's
    # `minimum_bounds` widened for this entry (`bounds_for`); "" when none was looked for.
    exhaustive_bounds: str = ""
    # The `kvcheck check` command that runs the same search again, for a row whose search
    # failed (a killed mutant, a false positive); None otherwise (`replay_command`).
    replay_command: str | None = None

    @property
    def invariant_matches(self) -> bool | None:
        """For a killed mutant, whether it broke the annotated invariant; None otherwise."""
        if self.kind != "mutant" or self.invariant is None:
            return None
        return self.invariant == self.expect

    @property
    def shrink_ratio(self) -> float | None:
        """Shrunk length / exhaustive minimum, 1.0 being optimal; None unless both are known."""
        if self.shrunk_length is None or not self.exhaustive_length:
            return None
        return self.shrunk_length / self.exhaustive_length

    @property
    def shrink_reason(self) -> str:
        """Why the shrunk counterexample is longer than the shortest one ("" when it is not)."""
        ratio = self.shrink_ratio
        if ratio is None or ratio == 1.0:
            return ""
        if ratio < 1.0:
            bounds = self.exhaustive_bounds or minimum_bounds(self.family).describe()
            return f"the search found a counterexample outside the exhaustive bounds ({bounds})"
        if self.shrink_note:
            return self.shrink_note
        return shrink_gap_reason(self)

    @property
    def status(self) -> str:
        """`killed` or `SURVIVED` for a mutant, `pass` or `FALSE POSITIVE` for a rewrite."""
        if self.kind == "rewrite":
            return "pass" if self.passed else "FALSE POSITIVE"
        return "killed" if self.killed else "SURVIVED"

    @property
    def ok(self) -> bool:
        """The entry behaved as the matrix requires: a mutant killed, a rewrite passing."""
        return bool(self.passed) if self.kind == "rewrite" else bool(self.killed)

    def to_dict(self) -> dict[str, Any]:
        """The row as a `kvcheck mutants --json` object, the family's columns after the kind,
        with status, ratio and reason added, then the family and its options (after the fields
        that predate families)."""
        fields = attrs.asdict(self)
        columns, family_name = fields.pop("columns"), fields.pop("family")
        options = fields.pop("options")
        # The bounds' words stay out of the JSON (its fields are a contract); `shrink_reason`
        # says the bounds where they matter.
        fields.pop("exhaustive_bounds")
        name, kind = fields.pop("name"), fields.pop("kind")
        data: dict[str, Any] = jsonable({"name": name, "kind": kind, **columns, **fields})
        data["status"] = self.status
        data["invariant_matches"] = self.invariant_matches
        data["shrink_ratio"] = None if self.shrink_ratio is None else round(self.shrink_ratio, 3)
        data["shrink_reason"] = self.shrink_reason
        for key in ("seconds", "seconds_to_failure", "exhaustive_seconds"):
            if data[key] is not None:
                data[key] = round(data[key], 4)
        data["family"] = family_name
        data["options"] = jsonable(options)
        return data


@attrs.frozen
class Summary:
    """The kill matrix's totals.

    Mutants killed, false positives among the rewrites, how often the annotated invariant was the
    one hit and the shrinker reached the exhaustive minimum, and time to kill (median and p90 over
    killed mutants; None without any).
    """

    mutants: int
    killed: int
    rewrites: int
    false_positives: int
    annotated_invariant: int
    shrink_optimal: int
    shrink_compared: int
    median_seconds_to_kill: float | None
    p90_seconds_to_kill: float | None

    @property
    def passed(self) -> bool:
        """The verdict: every mutant killed, no rewrite flagged (`kvcheck mutants` exit 0)."""
        return self.killed == self.mutants and self.false_positives == 0

    def to_dict(self) -> dict[str, Any]:
        """The `summary` object of `kvcheck mutants --json`."""
        data: dict[str, Any] = jsonable(attrs.asdict(self))
        for key in ("median_seconds_to_kill", "p90_seconds_to_kill"):
            if data[key] is not None:
                data[key] = round(data[key], 4)
        return data


@attrs.frozen
class Matrix:
    """A finished kill-matrix run: its rows in corpus order and the options it ran with."""

    rows: tuple[Row, ...]
    max_examples: int
    seed: int | None
    exhaustive: bool
    seconds: float

    @property
    def summary(self) -> Summary:
        """The totals over the rows (`Summary`)."""
        mutants = [r for r in self.rows if r.kind == "mutant"]
        rewrites = [r for r in self.rows if r.kind == "rewrite"]
        compared = [r for r in mutants if r.shrink_ratio is not None]
        kills = [r.seconds_to_failure for r in mutants if r.seconds_to_failure is not None]
        return Summary(
            mutants=len(mutants),
            killed=sum(bool(r.killed) for r in mutants),
            rewrites=len(rewrites),
            false_positives=sum(not r.passed for r in rewrites),
            annotated_invariant=sum(bool(r.invariant_matches) for r in mutants),
            shrink_optimal=sum(r.shrink_ratio == 1.0 for r in compared),
            shrink_compared=len(compared),
            median_seconds_to_kill=statistics.median(kills) if kills else None,
            p90_seconds_to_kill=quantile(kills, 0.9) if kills else None,
        )


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile by the nearest-rank method (p90 of 10 values is the 9th smallest)."""
    ordered = sorted(values)
    rank = min(len(ordered), max(1, math.ceil(q * len(ordered))))
    return ordered[rank - 1]


def shrink_gap_reason(row: Row) -> str:
    """A reason, read off the two scenarios, why shrinking stopped above the minimum."""
    if row.invariant not in row.exhaustive_invariants:
        return (
            f"the search first hit {row.invariant}, and the shrinker keeps the invariant it "
            f"found; the shortest counterexamples break {', '.join(row.exhaustive_invariants)}"
        )
    gap = corpus_of(row.family).shrink_gap(
        row.shrunk_config or {},
        row.shrunk_events,
        row.exhaustive_config or {},
        row.exhaustive_events,
    )
    return (
        gap or "a local minimum of the shrinker: no single deletion or simplification still fails"
    )


def judged_by(options: JudgingOptions) -> dict[str, Any]:
    """An entry's options as the keywords `search` and `exhaust` take (those set: None is
    their default)."""
    return {key: value for key, value in options.to_dict().items() if value is not None}


def search_entry(entry: MutantEntry, *, max_examples: int, seed: int | None) -> Any:
    """`kvcheck check`'s search on one entry under its annotated options (no database)."""
    from kvcheck.search.check import search  # Hypothesis: not when the CLI merely starts

    return search(
        entry.target(),
        **judged_by(entry.options),
        max_examples=max_examples,
        seed=seed,
        database=None,
    )


def replay_command(entry: MutantEntry, *, max_examples: int, seed: int | None) -> str:
    """The `kvcheck check` command that runs `entry`'s search again: its short spec, its
    family's flags for its options, the seed and budget, no example database (the matrix
    uses none), so it finds and shrinks the same counterexample."""
    words = ["kvcheck", "check", entry.short_spec, *corpus_of(entry.family).check_flags(entry)]
    if seed is not None:
        words += ["--seed", str(seed)]
    words += ["--max-examples", str(max_examples), "--no-database"]
    return shlex.join(words)


def _config_json(scenario: Scenario) -> dict[str, Any]:
    return family(scenario.family).scenarios.config_to_dict(scenario.config)


def _events_json(scenario: Scenario) -> tuple[dict[str, Any], ...]:
    to_dict = family(scenario.family).scenarios.event_to_dict
    return tuple(to_dict(e) for e in scenario.events)


def run_entry(
    entry: MutantEntry,
    *,
    max_examples: int,
    seed: int | None = DEFAULT_SEED,
    exhaustive: bool = True,
    bounds: Any = None,
) -> Row:
    """Search one entry under its annotated options; for a killed mutant also find the
    exhaustive minimum (within `bounds`, by default its family's `minimum_bounds`)."""
    outcome = search_entry(entry, max_examples=max_examples, seed=seed)
    failure = outcome.failure
    violation = failure.violation if failure is not None else None
    row = Row(
        name=entry.name,
        kind=entry.kind,
        columns=corpus_of(entry.family).row_columns(entry),
        expect=entry.expect,
        origin=entry.origin,
        summary=entry.summary,
        killed=(violation is not None) if entry.kind == "mutant" else None,
        passed=(violation is None) if entry.kind == "rewrite" else None,
        examples=outcome.examples,
        examples_to_failure=outcome.examples_to_failure,
        seconds_to_failure=outcome.seconds_to_failure,
        seconds=outcome.seconds,
        invariant=violation.invariant if violation is not None else None,
        shrunk_length=len(failure.scenario.events) if failure is not None else None,
        shrunk_events=_events_json(failure.scenario) if failure is not None else (),
        shrunk_config=_config_json(failure.scenario) if failure is not None else None,
        shrink_note=entry.shrink_note,
        family=entry.family,
        options=entry.options.to_dict(),
        replay_command=replay_command(entry, max_examples=max_examples, seed=seed)
        if failure is not None
        else None,
    )
    if entry.kind == "mutant" and exhaustive and not why_no_exhaustive(entry):
        # What the row's questions need: is the annotated invariant broken at the minimum
        # length, and is the search's own (`shrink_gap_reason`).
        searched = violation.invariant if violation is not None else None
        asked = frozenset(name for name in (entry.expect, searched) if name)
        minimum = exhaustive_minimum(entry, bounds, stop_when_found=asked)
        row = attrs.evolve(
            row,
            exhaustive_length=minimum.depth if minimum.failure is not None else None,
            exhaustive_invariants=tuple(sorted(minimum.minimal_invariants)),
            exhaustive_events=_events_json(minimum.counterexample)
            if minimum.counterexample is not None
            else (),
            exhaustive_config=_config_json(minimum.counterexample)
            if minimum.counterexample is not None
            else None,
            exhaustive_seconds=minimum.seconds,
            exhaustive_bounds=minimum.bounds.describe(),
        )
    return row


def why_no_exhaustive(entry: MutantEntry) -> str:
    """Why no exhaustive minimum is looked for on `entry`: its named corpus's reason
    (`NamedCorpus.no_exhaustive`); "" when one is."""
    for named in corpus_of(entry.family).named_corpora.values():
        if named.no_exhaustive and entry in named.entries:
            return named.no_exhaustive
    return ""


def bounds_for(target: Target, bounds: Any = None) -> Any:
    """`bounds` (by default its family's `minimum_bounds`) widened to what the target's
    scenarios may draw (its family's `bounds_for`)."""
    mutants = corpus_of(target.family)
    if bounds is None:
        bounds = minimum_bounds(target.family)
    return mutants.bounds_for(target, bounds)


def exhaustive_minimum(
    entry: MutantEntry, bounds: Any = None, *, stop_when_found: frozenset[str] | None = None
) -> Any:
    """The exhaustive search for `entry` under its annotated options (an `ExhaustResult`),
    within `bounds` (by default its family's `minimum_bounds`) widened to what its target
    supports (`bounds_for`); `stop_when_found` as `exhaust` takes it."""
    target = entry.target()
    if bounds is None:
        bounds = minimum_bounds(entry.family)
    return exhaust(
        target,
        bounds_for(target, bounds),
        stop_when_found=stop_when_found,
        **judged_by(entry.options),
    )


def warm_up(family_name: str = DEFAULT_FAMILY) -> None:
    """Import torch, probe and search once (five scenarios of the family's first correct
    rewrite: nothing to shrink), so that the first entry's time to kill in a process is not
    spent importing and building strategies."""
    corpus = corpus_of(family_name).entries
    first = next((e for e in corpus if e.kind == "rewrite"), corpus[0] if corpus else None)
    if first is not None:
        search_entry(first, max_examples=5, seed=0)


@dataclasses.dataclass(frozen=True)
class _Finished(WorkerMessage):
    """A `--jobs` worker's row of one entry."""

    row: Row


def _work(
    index: int,
    messages: Any,
    stop: Any,
    jobs: Any,
    families: dict[str, str],
    warm: str,
    max_examples: int,
    seed: int | None,
    exhaustive: bool,
) -> None:  # pragma: no cover - runs in a worker process (tests/unit/cli/test_mutants_command.py)
    """A `--jobs` worker: the parent's family registrations, a warm-up, then one row per entry
    it takes (family name, entry name) until the jobs end or the pool stops."""
    repeat_registrations(families)
    warm_up(warm)
    for family_name, name in take_jobs(jobs, stop):
        entry = corpus_of(family_name).get(name)
        if entry is None:
            raise KvcheckInternalError(f"no corpus entry {name!r} in the {family_name} family")
        row = run_entry(entry, max_examples=max_examples, seed=seed, exhaustive=exhaustive)
        messages.put(_Finished(index, row))


def _run_on_workers(
    entries: Sequence[MutantEntry],
    jobs: int,
    progress: Callable[[Row], None] | None,
    *,
    max_examples: int,
    seed: int | None,
    exhaustive: bool,
) -> dict[tuple[str, str], Row]:
    """Every entry's row, run on `jobs` workers of the shared pool (fewer for fewer entries);
    Ctrl-C, or any error, ends them."""
    pool = WorkerPool("mutants", min(jobs, len(entries)))
    queue = pool.job_queue((e.family, e.name) for e in entries)
    setup = (queue, registered_paths(), entries[0].family, max_examples, seed, exhaustive)
    rows: dict[tuple[str, str], Row] = {}

    def handle(message: WorkerMessage) -> None:
        if isinstance(message, _Finished):
            rows[(message.row.family, message.row.name)] = message.row
            if progress is not None:
                progress(message.row)
        elif isinstance(message, Refused):
            raise KvcheckUsageError(message.error)
        elif isinstance(message, Crashed):
            raise KvcheckInternalError(
                f"mutants worker {message.worker} crashed (kvcheck's own fault): {message.error}"
            )

    def watch() -> None:
        """A worker that died before its jobs were done (killed, out of memory) is an error;
        so is every worker gone with rows still missing."""
        for i, process in enumerate(pool.processes):
            if process.exitcode not in (None, 0):
                while (said := pool.receive(0.1)) is not None:  # before it ended (a crash report)
                    handle(said)
                raise KvcheckInternalError(
                    f"mutants worker {i} ended unexpectedly ({pool.ended_how(i)}): kvcheck's own "
                    "fault; try fewer --jobs"
                )
        if all(p.exitcode is not None for p in pool.processes) and len(rows) < len(entries):
            while (said := pool.receive(0.1)) is not None:
                handle(said)
            if len(rows) < len(entries):
                raise KvcheckInternalError("the mutants workers ended with entries left to run")

    try:
        pool.start(_work, lambda _: setup)
        while len(rows) < len(entries):
            raise_if_dropped()
            message = pool.receive(_POLL)
            if message is None:
                watch()
            else:
                handle(message)
    finally:
        pool.close()
    return rows


def run_matrix(
    entries: Sequence[MutantEntry] | None = None,
    *,
    max_examples: int,
    seed: int | None = DEFAULT_SEED,
    exhaustive: bool = True,
    jobs: int = 1,
    progress: Callable[[Row], None] | None = None,
) -> Matrix:
    """Run every entry (by default every family's corpus); `jobs > 1` spreads them over worker
    processes of the shared pool (spawned, not forked: torch and fork do not mix). Rows come
    back in corpus order."""
    chosen = tuple(all_entries() if entries is None else entries)
    parallel = jobs > 1 and bool(chosen)
    if chosen and not parallel:
        warm_up(chosen[0].family)  # each worker warms up for itself
    started = time.perf_counter()
    rows: dict[tuple[str, str], Row] = {}
    if parallel:
        rows = _run_on_workers(
            chosen,
            jobs,
            progress,
            max_examples=max_examples,
            seed=seed,
            exhaustive=exhaustive,
        )
    else:
        for entry in chosen:
            row = run_entry(entry, max_examples=max_examples, seed=seed, exhaustive=exhaustive)
            rows[(entry.family, entry.name)] = row
            if progress is not None:
                progress(row)
    ordered = tuple(rows[(entry.family, entry.name)] for entry in chosen)
    return Matrix(ordered, max_examples, seed, exhaustive, time.perf_counter() - started)
