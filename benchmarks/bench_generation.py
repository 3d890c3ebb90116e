"""Measure scenario generation and the two searches (a script, not a timed test).

    .venv/bin/python benchmarks/bench_generation.py            # ~1 minute
    .venv/bin/python benchmarks/bench_generation.py --count 300 --repeats 1

Prints, for `builtin:reference`'s scenario space: the cost of drawing one scenario with each driver
of `kvcheck.strategies` (Hypothesis's engine, the seeded-Random driver), the replay cost per
scenario and per step, and the rate of each search (`kvcheck.search.check.search`,
`kvcheck.search.sampling.sample_search`) on one core, measured in the same run (compare the
ratios: the machines are shared). Medians over `--repeats` runs; the load average is printed.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hypothesis_seed

from kvcheck.core.family import distribution_of
from kvcheck.core.run import run_scenario
from kvcheck.core.scenario import Scenario
from kvcheck.families.sglang.judging import SglangJudging
from kvcheck.search.check import search
from kvcheck.search.sampling import sample_search
from kvcheck.strategies import random_scenario, scenarios_of
from kvcheck.targets.loading import load_target


def hypothesis_draws(space: object, count: int, seed: int) -> tuple[list[Scenario], float]:
    drawn: list[Scenario] = []

    @hypothesis_seed(seed)
    @settings(
        max_examples=count, database=None, deadline=None, suppress_health_check=list(HealthCheck)
    )
    @given(scenarios_of(space))
    def collect(scenario: Scenario) -> None:
        drawn.append(scenario)

    started = time.perf_counter()
    collect()
    return drawn, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    target = load_target("builtin:reference")
    space = distribution_of(target.family).space(target, SglangJudging("preclaim", "ideal", False))
    print(f"load average before: {os.getloadavg()[0]:.2f} (cores: {os.cpu_count()})")
    rows: dict[str, list[float]] = {}
    for repeat in range(args.repeats):
        drawn, seconds = hypothesis_draws(space, args.count, repeat)
        rows.setdefault("hypothesis generation us/scenario", []).append(seconds / len(drawn) * 1e6)
        rng = random.Random(repeat)
        started = time.perf_counter()
        fast = [random_scenario(space, rng) for _ in range(args.count)]
        seconds = time.perf_counter() - started
        rows.setdefault("random generation us/scenario", []).append(seconds / len(fast) * 1e6)
        steps = sum(len(s.events) for s in fast)
        started = time.perf_counter()
        for scenario in fast:
            run_scenario(scenario, target)
        seconds = time.perf_counter() - started
        rows.setdefault("replay us/scenario", []).append(seconds / len(fast) * 1e6)
        rows.setdefault("replay us/step", []).append(seconds / steps * 1e6)
        rows.setdefault("events per scenario", []).append(steps / len(fast))
        for name, function in (("hypothesis", search), ("random", sample_search)):
            started = time.perf_counter()
            outcome = function(target, convention="preclaim", max_examples=args.count, seed=repeat)
            seconds = time.perf_counter() - started
            rows.setdefault(f"{name} search scenarios/s", []).append(outcome.examples / seconds)
    for name, values in rows.items():
        print(
            f"{name:38s} {statistics.median(values):9.1f}   (runs: "
            + ", ".join(f"{v:.1f}" for v in values)
            + ")"
        )
    ratio = statistics.median(rows["random search scenarios/s"]) / statistics.median(
        rows["hypothesis search scenarios/s"]
    )
    print(f"{'random / hypothesis search rate':38s} {ratio:9.2f}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
