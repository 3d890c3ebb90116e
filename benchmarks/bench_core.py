"""Core throughput benchmark (not a timed test): how fast kvcheck finds the seed bug, and how
many scenarios a second it judges on a correct resolver.

    .venv/bin/python benchmarks/bench_core.py            # 20 seeds, 5 throughput repeats
    taskset -c 0 .venv/bin/python benchmarks/bench_core.py   # pinned to one core

Prints medians (and p90 where useful); these machines are noisy, so compare ratios, not runs.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

from kvcheck.search.check import search
from kvcheck.targets.loading import load_target


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--examples", type=int, default=1000)
    args = parser.parse_args()

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(
        f"machine: {platform.processor() or platform.machine()}, {cpus} usable core(s), "
        f"Python {platform.python_version()}"
    )

    seed_prefix = load_target("builtin:seed-prefix")
    to_failure_s, to_failure_n, total_s, lengths = [], [], [], []
    for seed in range(args.seeds):
        outcome = search(seed_prefix, convention="preclaim", max_examples=1000, seed=seed)
        assert outcome.failure is not None and outcome.seconds_to_failure is not None
        to_failure_s.append(outcome.seconds_to_failure)
        to_failure_n.append(float(outcome.examples_to_failure or 0))
        total_s.append(outcome.seconds)
        lengths.append(float(len(outcome.failure.scenario.events)))
    print(
        f"builtin:seed-prefix over {args.seeds} seeds: first failure after median "
        f"{statistics.median(to_failure_s):.3f} s (p90 {_quantile(to_failure_s, 0.9):.3f} s), "
        f"median {statistics.median(to_failure_n):.0f} scenarios; with shrinking median "
        f"{statistics.median(total_s):.3f} s; shrunk length median "
        f"{statistics.median(lengths):.0f} events (max {max(lengths):.0f})"
    )

    reference = load_target("builtin:reference")
    rates = []
    for repeat in range(args.repeats):
        started = time.perf_counter()
        outcome = search(
            reference, convention="preclaim", max_examples=args.examples, seed=1000 + repeat
        )
        elapsed = time.perf_counter() - started
        assert outcome.failure is None
        rates.append(outcome.examples / elapsed)
    print(
        f"builtin:reference: median {statistics.median(rates):.0f} scenarios/s over "
        f"{args.repeats} runs of {args.examples} (min {min(rates):.0f}, max {max(rates):.0f})"
    )


if __name__ == "__main__":
    main()
