"""How fast generated scenarios alone (without the seeded semantics §3.4 example) find the
worker-stride bug of `builtin:seed-fixed` under adaptive stride switching (not a timed test).

    .venv/bin/python benchmarks/bench_adaptive_search.py [--budget 100] [--seeds 20]

Prints how many seeds find it within the budget and the median scenarios to the first failure.
"""

from __future__ import annotations

import argparse
import statistics

import kvcheck.search.check as search_module
from kvcheck.families.sglang import distribution
from kvcheck.families.sglang.scenario import Step
from kvcheck.targets.loading import load_target


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--budget", type=int, default=100)
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args()
    # Replace the seeded witness with a harmless one-step scenario: only generation counts here.
    distribution.STRIDE_SWITCH_WITNESS = (Step(),)
    target = load_target("builtin:seed-fixed")
    found: list[int | None] = []
    for seed in range(args.seeds):
        outcome = search_module.search(
            target,
            convention="preclaim",
            global_counters="sglang",
            adaptive=True,
            max_examples=args.budget,
            seed=seed,
        )
        found.append(outcome.examples_to_failure if outcome.failure is not None else None)
    hits = [n for n in found if n is not None]
    median = statistics.median(hits) if hits else None
    print(
        f"builtin:seed-fixed --adaptive, generated scenarios only: found in {len(hits)}/"
        f"{args.seeds} seeds within {args.budget}; median {median} scenarios to the first failure"
    )


if __name__ == "__main__":
    main()
