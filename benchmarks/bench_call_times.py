"""How long one call of a resolver takes during a `check`, to judge the default deadline by.

Loads TARGET, times every call of its resolver during a 300-scenario check (seed 0, global
counters `sglang`, no coverage) and prints the number of calls and their median, 99th percentile
and maximum in milliseconds. Real releases need kvcheck's cache or the package index
(`KVCHECK_CACHE`). Figures only. Run: `python benchmarks/bench_call_times.py [TARGET ...]`
(default: sglang==0.5.23).
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

import attrs

from kvcheck.core.deadline import DEFAULT_DEADLINE
from kvcheck.search.check import check
from kvcheck.targets.loading import load_target


def call_times(spec: str) -> list[float]:
    """Seconds of every resolver call of a 300-scenario check of `spec`."""
    target = load_target(spec)
    inner = target.resolver
    times: list[float] = []

    def timed(*args: Any) -> Any:
        started = time.perf_counter()
        try:
            return inner(*args)
        finally:
            times.append(time.perf_counter() - started)

    timed_target = attrs.evolve(target, resolver=timed)
    check(timed_target, global_counters="sglang", max_examples=300, seed=0, measure_coverage=False)
    return sorted(times)


def main() -> None:
    for spec in sys.argv[1:] or ["sglang==0.5.23"]:
        times = call_times(spec)
        p99 = times[int(len(times) * 0.99)]
        print(
            f"{spec}: {len(times)} calls; median {statistics.median(times) * 1e3:.3f} ms, "
            f"p99 {p99 * 1e3:.3f} ms, max {times[-1] * 1e3:.3f} ms "
            f"(default deadline {DEFAULT_DEADLINE * 1e3:g} ms)"
        )


if __name__ == "__main__":
    main()
