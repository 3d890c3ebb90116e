"""What the per-call deadline costs (`kvcheck.core.deadline`).

Two figures, both in this process, interleaved so that a noisy machine hurts both sides alike:

- the absolute cost of guarding one call: `call_with_deadline(0.25, f)` against `f()` for a
  function that does nothing (median over rounds of 20,000 calls each), in microseconds;
- the ratio on real work: `exhaust(builtin:reference)` within small bounds (6,267 resolver
  calls among 22,646 judged transitions) with the default deadline against no deadline, median
  wall time of N runs each, which one goes first alternating.

Figures only, no timed asserts. Run: `python benchmarks/bench_deadline.py [--runs N]`.
"""

from __future__ import annotations

import argparse
import statistics
import time

import attrs

from kvcheck.core.deadline import DEFAULT_DEADLINE, call_with_deadline
from kvcheck.families.sglang.search import Bounds
from kvcheck.search.exhaust import exhaust
from kvcheck.targets.loading import load_target


def _nothing() -> None:
    return None


def _per_call(calls: int) -> tuple[float, float]:
    started = time.perf_counter()
    for _ in range(calls):
        _nothing()
    bare = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(calls):
        call_with_deadline(DEFAULT_DEADLINE, _nothing)
    guarded = time.perf_counter() - started
    return bare / calls * 1e6, guarded / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    overheads = []
    for _ in range(args.runs):
        bare, guarded = _per_call(20_000)
        overheads.append(guarded - bare)
    print(f"guarding one call costs {statistics.median(overheads):.2f} us (median of {args.runs})")

    target = load_target("builtin:reference")
    bounds = Bounds(events=6)
    timings: dict[str, list[float]] = {"none": [], "default": []}
    calls = 0
    pair = [("none", None), ("default", DEFAULT_DEADLINE)]
    for round_ in range(args.runs):
        # Which goes first alternates: the second of a pair runs on the first's leftovers.
        for name, deadline in pair if round_ % 2 == 0 else pair[::-1]:
            run_target = attrs.evolve(target, deadline=deadline)
            started = time.perf_counter()
            result = exhaust(run_target, bounds, measure_coverage=False)
            timings[name].append(time.perf_counter() - started)
            calls = result.scenarios
    none, default = (statistics.median(timings[k]) for k in ("none", "default"))
    print(
        f"exhaust builtin:reference, {bounds.describe()}: {calls} scenarios; median of "
        f"{args.runs}: no deadline {none:.2f} s, deadline {DEFAULT_DEADLINE:g} s {default:.2f} s, "
        f"ratio {default / none:.3f}"
    )


if __name__ == "__main__":
    main()
