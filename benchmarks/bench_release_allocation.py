"""The release's own allocation code against kvcheck's model, per scenario (a script, not a
timed test): replay time of `sglang==0.5.23` on the same drawn scenarios with
`allocation_path="release"` and `"model"`.

    KVCHECK_CACHE=... .venv/bin/python benchmarks/bench_release_allocation.py \\
        [--version 0.5.23] [--count 300] [--repeats 5]

Scenarios are drawn once from the space `kvcheck check sglang==V` searches on the release path
(the fast generator, seed 0; those the release's code does not run are left out: without an
allocation rule, or switching strides under an algorithm no release switches). Each is
replayed (no Hypothesis) on both paths, alternating, and timed with `time.process_time`;
prints the median milliseconds per scenario of each path and their ratio.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import attrs

from kvcheck.core.run import run_scenario
from kvcheck.families.sglang.distribution import random_scenario, scenario_space
from kvcheck.families.sglang.judging import judging
from kvcheck.families.sglang.real.path import runs_adaptively
from kvcheck.targets.loading import load_target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default="0.5.23")
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    target = load_target(f"sglang=={args.version}")
    options = judging({"global_counters": "sglang"}, target).options
    assert options.allocation_path == "release", options.allocation_reason
    space = scenario_space(target, options)
    rng = random.Random(0)
    drawn = [random_scenario(space, rng) for _ in range(args.count)]
    # Only what the release's code runs: an allocation rule, and no stride switching under an
    # algorithm no release switches (those keep kvcheck's model on both paths).
    release = [s for s in drawn if s.config.allocation_rule.allocates and runs_adaptively(s.config)]
    model = [
        attrs.evolve(s, config=attrs.evolve(s.config, allocation_path="model")) for s in release
    ]
    for scenario in release[:3]:  # warm: compile the tree, import torch
        run_scenario(scenario, target)
    per_scenario: dict[str, list[float]] = {"model": [], "release": []}
    for _ in range(args.repeats):
        for name, batch in (("model", model), ("release", release)):
            started = time.process_time()
            for scenario in batch:
                run_scenario(scenario, target)
            per_scenario[name].append((time.process_time() - started) / len(batch) * 1000)
    medians = {name: statistics.median(times) for name, times in per_scenario.items()}
    print(
        f"sglang=={args.version}: the release's code runs {len(release)} of {len(drawn)} scenarios"
    )
    for name, value in medians.items():
        print(f"{name:8} {value:.2f} ms per scenario (median of {args.repeats})")
    print(f"ratio    release / model = {medians['release'] / medians['model']:.2f}x")


if __name__ == "__main__":
    main()
