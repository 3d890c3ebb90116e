"""Allocation's cost (a script, not a timed test): replay throughput of `builtin:reference` on the
same drawn scenarios with allocation on (the rule each drew) and off.

    .venv/bin/python benchmarks/bench_allocation.py [--count 300] [--repeats 5]

Scenarios are drawn once with the search's strategy (allocation on, seed 0); each is then replayed
(no Hypothesis) as drawn and with `allocation="off"`. Prints medians over the repeats and the
ratio on / off (issue 10 asks for at most 1.5).
"""

from __future__ import annotations

import argparse
import statistics
import time

import attrs
from hypothesis import HealthCheck, given, seed, settings

from kvcheck.core.run import run_scenario
from kvcheck.core.scenario import Scenario
from kvcheck.strategies import scenarios
from kvcheck.targets.loading import load_target


def _draw(count: int) -> list[Scenario]:
    drawn: list[Scenario] = []

    @seed(0)
    @settings(
        max_examples=count,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=("generate",),
        deadline=None,
    )
    @given(scenarios(convention="preclaim", allocation=True))
    def collect(scenario: Scenario) -> None:
        drawn.append(scenario)

    collect()
    return drawn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    target = load_target("builtin:reference")
    on = [s for s in _draw(args.count) if s.config.allocation != "off"]
    off = [
        attrs.evolve(s, config=attrs.evolve(s.config, allocation="off", pool_pages=0)) for s in on
    ]
    events = sum(len(s.events) for s in on)
    rates: dict[str, list[float]] = {"on": [], "off": []}
    for _ in range(args.repeats):
        for name, batch in (("off", off), ("on", on)):
            started = time.perf_counter()
            for scenario in batch:
                assert run_scenario(scenario, target).violation is None
            rates[name].append(len(batch) / (time.perf_counter() - started))
    median = {name: statistics.median(values) for name, values in rates.items()}
    print(f"{len(on)} scenarios with allocation drawn ({events} events), {args.repeats} repeats")
    print(f"allocation off: {median['off']:.0f} scenarios/s")
    print(f"allocation on:  {median['on']:.0f} scenarios/s")
    print(f"slowdown on/off: {median['off'] / median['on']:.2f}x")


if __name__ == "__main__":
    main()
