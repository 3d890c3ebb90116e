"""The kill matrix: every corpus entry through kvcheck's search, and every mutant through the
exhaustive search for its shortest counterexample.

Per mutant: killed or not, scenarios and wall time to the first failure, the shrunk
counterexample's length and the invariant it breaks (and whether that is the annotated one), the
shortest counterexample within `MINIMUM_BOUNDS` (`kvcheck.search.exhaust`) and the shrink ratio
(shrunk length / exhaustive minimum; 1.0 is optimal). Per rewrite: pass, or a false positive.
"""

from __future__ import annotations

import concurrent.futures
import math
import multiprocessing
import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

import attrs

from kvcheck.core.jsonable import jsonable
from kvcheck.core.target import Target
from kvcheck.families.sglang.allocation_rules import allocation_features
from kvcheck.families.sglang.scenario import Grammar, config_to_dict, event_to_dict
from kvcheck.families.sglang.search import Bounds
from kvcheck.families.sglang.target import allocation_rules
from kvcheck.mutants import BY_NAME, ENTRIES, Entry
from kvcheck.search.exhaust import exhaust
from kvcheck.search.workers import become_worker
from kvcheck.targets.loading import load_target

# Where each mutant's shortest counterexample is looked for: the default exhaustive bounds plus a
# length cap of 2 so over-shoot by length is reachable in one decode row.
MINIMUM_BOUNDS: Final = Bounds(events=8, max_new=(1, 2, 4))
DEFAULT_SEED: Final = 0


@attrs.frozen
class Row:
    """One corpus entry's line of the kill matrix.

    The entry and the options it is judged under; the search's outcome (killed or passed,
    scenarios and seconds to the first failure, the shrunk counterexample); and, for a mutant, the
    shortest counterexample exhaustive search finds within `MINIMUM_BOUNDS`.
    """

    name: str
    kind: str
    generation: str
    convention: str
    global_counters: str
    adaptive: bool
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
    exhaustive_invariants: tuple[str, ...] = ()
    exhaustive_seconds: float | None = None
    exhaustive_events: tuple[dict[str, Any], ...] = ()
    exhaustive_config: dict[str, Any] | None = None
    shrink_note: str = ""

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
            return (
                "the search found a counterexample outside the exhaustive bounds "
                f"({MINIMUM_BOUNDS.describe()})"
            )
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
        """The row as a `kvcheck mutants --json` object, with status, ratio and reason added."""
        data: dict[str, Any] = jsonable(attrs.asdict(self))
        data["status"] = self.status
        data["invariant_matches"] = self.invariant_matches
        data["shrink_ratio"] = None if self.shrink_ratio is None else round(self.shrink_ratio, 3)
        data["shrink_reason"] = self.shrink_reason
        for key in ("seconds", "seconds_to_failure", "exhaustive_seconds"):
            if data[key] is not None:
                data[key] = round(data[key], 4)
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
    shrunk, shortest = row.shrunk_config or {}, row.exhaustive_config or {}
    if row.invariant not in row.exhaustive_invariants:
        return (
            f"the search first hit {row.invariant}, and the shrinker keeps the invariant it "
            f"found; the shortest counterexamples break {', '.join(row.exhaustive_invariants)}"
        )
    if shrunk.get("overlap") != shortest.get("overlap"):
        on = "on" if shortest.get("overlap") else "off"
        return (
            f"a local minimum of the shrinker: the shortest form runs with overlap {on} and "
            "needs other admission parameters, a change no single shrink step makes"
        )

    def requests(events: Sequence[dict[str, Any]]) -> int:
        return len({e["rid"] for e in events if e["kind"] == "admit"})

    if requests(row.shrunk_events) != requests(row.exhaustive_events):
        return (
            f"a local minimum of the shrinker: the shortest form uses "
            f"{requests(row.exhaustive_events)} request(s), the shrunk one "
            f"{requests(row.shrunk_events)}"
        )
    return "a local minimum of the shrinker: no single deletion or simplification still fails"


def search_entry(entry: Entry, *, max_examples: int, seed: int | None) -> Any:
    """`kvcheck check`'s search on one entry under its annotated options (no database)."""
    from kvcheck.search.check import search  # Hypothesis: not when the CLI merely starts

    return search(
        entry.target(),
        convention=entry.convention,
        global_counters=entry.global_counters,
        adaptive=entry.adaptive,
        max_examples=max_examples,
        seed=seed,
        database=None,
    )


def run_entry(
    entry: Entry,
    *,
    max_examples: int,
    seed: int | None = DEFAULT_SEED,
    exhaustive: bool = True,
    bounds: Bounds = MINIMUM_BOUNDS,
) -> Row:
    """Search one entry under its annotated options; for a killed mutant also find the
    exhaustive minimum."""
    outcome = search_entry(entry, max_examples=max_examples, seed=seed)
    failure = outcome.failure
    violation = failure.violation if failure is not None else None
    row = Row(
        name=entry.name,
        kind=entry.kind,
        generation=entry.generation.name,
        convention=entry.convention,
        global_counters=entry.global_counters,
        adaptive=entry.adaptive,
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
        shrunk_events=tuple(event_to_dict(e) for e in failure.scenario.events)
        if failure is not None
        else (),
        shrunk_config=config_to_dict(failure.scenario.config) if failure is not None else None,
        shrink_note=entry.shrink_note,
    )
    if entry.kind == "mutant" and exhaustive:
        minimum = exhaustive_minimum(entry, bounds)
        row = attrs.evolve(
            row,
            exhaustive_length=minimum.depth if minimum.failure is not None else None,
            exhaustive_invariants=tuple(sorted(minimum.minimal_invariants)),
            exhaustive_events=tuple(event_to_dict(e) for e in minimum.counterexample.events)
            if minimum.counterexample is not None
            else (),
            exhaustive_config=config_to_dict(minimum.counterexample.config)
            if minimum.counterexample is not None
            else None,
            exhaustive_seconds=minimum.seconds,
        )
    return row


def bounds_for(target: Target, bounds: Bounds = MINIMUM_BOUNDS) -> Bounds:
    """`bounds` widened to what the target's scenarios may draw: its algorithms whose results
    the model treats differently (EAGLE's family and n-gram are one; DFLASH and UNO are not),
    and block/cap lengths of 1 on every row when it reads them (a stale row then carries some),
    and, when it consults the grammar, grammars that terminate or refuse at output position 2
    (the first decode token); allocation on when it touches `kv_allocated_len`."""
    distinct = tuple(a for a in target.shape.algorithms if a in ("eagle", "dflash", "uno"))
    lengths = (1,) if target.shape.block_cap else ()
    grammars = (
        (None, Grammar("terminate", 2), Grammar("reject", 2)) if target.shape.grammar else (None,)
    )
    # A target that touches kv_allocated_len is enumerated with the scheduler's allocation on,
    # under the rules of its generations (`allocation_rules`): of those, the ones reserving for
    # the adaptive maximum (0.5.13, keeping Al after release, and 0.5.16, rounding to a page and
    # zeroing Al at release), else the older ones it has.
    touches_al = any("kv_allocated_len" in s for s in target.shape.spellings)
    allocations = bounds.allocations
    if touches_al:
        allowed = [r for r in allocation_rules(target) if allocation_features(r).allocates]
        allocations = tuple(
            r for r in allowed if allocation_features(r).reserve_from == "adaptive-max"
        ) or tuple(allowed)
    if target.allocation is not None:  # a broken allocation path: the rules it shows under
        allocations = allocation_rules(target)
    return attrs.evolve(
        bounds,
        algorithms=distinct,
        block_cap_lengths=lengths,
        grammars=grammars,
        allocations=allocations,
    )


def exhaustive_minimum(entry: Entry, bounds: Bounds = MINIMUM_BOUNDS) -> Any:
    """The exhaustive search for `entry` under its annotated options (an `ExhaustResult`),
    within `bounds` widened to what its target supports (`bounds_for`)."""
    target = entry.target()
    return exhaust(
        target,
        bounds_for(target, bounds),
        convention=entry.convention,
        global_counters=entry.global_counters,
        adaptive=entry.adaptive,
    )


def warm_up() -> None:
    """Import torch, probe and search once, so that the first entry's time to kill in a
    process is not spent importing and building strategies."""
    from kvcheck.search.check import search  # Hypothesis: not when the CLI merely starts

    search(load_target("builtin:reference"), convention="preclaim", max_examples=5, seed=0)


def _worker_init() -> None:
    """A `--jobs` worker: Ctrl-C is the parent's to handle (it ends the workers), and a worker
    whose parent died (killed, say) exits instead of running on. The pool may start workers from
    its own thread, so no kernel death signal (`kvcheck.search.workers`)."""
    become_worker(os.getppid(), kernel=False)
    warm_up()


def _stop_workers(pool: concurrent.futures.ProcessPoolExecutor) -> None:
    """End a pool's workers now, running entries included (Ctrl-C in the parent)."""
    # The executor has no public way to end running work; its process table is the only handle.
    processes = list(getattr(pool, "_processes", {}).values())
    for process in processes:
        process.terminate()
    for process in processes:
        process.join(timeout=1)
    # With its workers gone the executor notices a broken pool at once and releases its queues.
    pool.shutdown(wait=True, cancel_futures=True)


def _run_named(name: str, max_examples: int, seed: int | None, exhaustive: bool) -> Row:
    return run_entry(BY_NAME[name], max_examples=max_examples, seed=seed, exhaustive=exhaustive)


def run_matrix(
    entries: Sequence[Entry] = ENTRIES,
    *,
    max_examples: int,
    seed: int | None = DEFAULT_SEED,
    exhaustive: bool = True,
    jobs: int = 1,
    progress: Callable[[Row], None] | None = None,
) -> Matrix:
    """Run every entry; `jobs > 1` spreads them over worker processes (spawned, not forked:
    torch and fork do not mix). Rows come back in corpus order."""
    warm_up()
    started = time.perf_counter()
    rows: dict[str, Row] = {}
    if jobs <= 1:
        for entry in entries:
            row = run_entry(entry, max_examples=max_examples, seed=seed, exhaustive=exhaustive)
            rows[entry.name] = row
            if progress is not None:
                progress(row)
    else:
        context = multiprocessing.get_context("spawn")
        pool = concurrent.futures.ProcessPoolExecutor(
            jobs, mp_context=context, initializer=_worker_init
        )
        try:
            futures = [
                pool.submit(_run_named, entry.name, max_examples, seed, exhaustive)
                for entry in entries
            ]
            for future in concurrent.futures.as_completed(futures):
                row = future.result()
                rows[row.name] = row
                if progress is not None:
                    progress(row)
        except BaseException:
            _stop_workers(pool)
            raise
        pool.shutdown()
    ordered = tuple(rows[entry.name] for entry in entries)
    return Matrix(ordered, max_examples, seed, exhaustive, time.perf_counter() - started)
