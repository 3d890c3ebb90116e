"""This tree against another: the fast search's rate and replay's cost per step on
builtin:reference, measured alternately in child processes with `time.process_time`, as medians
and ratios (a script, not a timed test).

    .venv/bin/python benchmarks/bench_search_ratio.py --baseline d16b9ea --rounds 5

The machines are noisy (two shared cores): each round runs the other tree, then this one, so load
drifts hit both alike, and the ratio of the medians is the figure to read. The search is
`sample_search(builtin:reference, convention="preclaim", adaptive=True, max_examples=1500,
seed=1)` (issue 11's "fast search"); replay runs the first 1,000 scenarios the same generator
draws from seed 1234 (allocation drawn), with the target's own time subtracted for the "outside
the target" figure. The child imports the other tree as bench_scale.py and compare_replay.py do.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Run as a script: benchmarks/ is on the path. One way to import and export another tree.
from bench_scale import export_tree, use_tree

ROOT = Path(__file__).resolve().parent.parent
SEARCH_EXAMPLES = 1500
REPLAY_SCENARIOS = 1000
REPLAY_SEED = 1234


def scenario_space(target: Any, convention: str, counters: str, adaptive: bool) -> Any:
    """The scenario space a search of `target` draws, in either tree: the family's distribution
    (`kvcheck.core.family.Distribution.space`), or `kvcheck.search.check.scenario_space` in
    trees from before it."""
    try:
        from kvcheck.core.family import distribution_of
        from kvcheck.families.sglang.judging import SglangJudging
    except ImportError:
        from kvcheck.search.check import scenario_space as before  # type: ignore[attr-defined]

        return before(target, convention, counters, adaptive)
    options = SglangJudging(convention, counters, adaptive)  # type: ignore[arg-type]
    return distribution_of(target.family).space(target, options)


def measure() -> dict[str, float]:
    """One round in this process (whichever tree `use_tree` chose)."""
    import attrs

    from kvcheck.core.run import run_scenario
    from kvcheck.search.sampling import sample_search
    from kvcheck.strategies import random_scenario
    from kvcheck.targets.loading import load_target

    target = load_target("builtin:reference")
    sample_search(target, convention="preclaim", adaptive=True, max_examples=200, seed=5)
    started = time.process_time()
    outcome = sample_search(
        target, convention="preclaim", adaptive=True, max_examples=SEARCH_EXAMPLES, seed=1
    )
    search = outcome.examples / (time.process_time() - started)
    assert outcome.failure is None, outcome.failure

    space = scenario_space(target, "preclaim", "ideal", True)
    rng = random.Random(REPLAY_SEED)
    corpus = [random_scenario(space, rng) for _ in range(REPLAY_SCENARIOS)]
    # By name: `Step` lives in another module in trees from before the families, and importing
    # the new one there reaches the installed checkout instead.
    steps = sum(type(event).__name__ == "Step" for scenario in corpus for event in scenario.events)
    inner, spent = target.resolver, [0.0]

    def resolver(scheduler: Any, result: Any, batch: Any) -> Any:
        begun = time.process_time()
        try:
            return inner(scheduler, result, batch)
        finally:
            spent[0] += time.process_time() - begun

    timed = attrs.evolve(target, resolver=resolver)
    started = time.process_time()
    for scenario in corpus:
        run_scenario(scenario, timed)
    elapsed = time.process_time() - started
    return {
        "search_per_s": search,
        "replay_us_per_step": elapsed / steps * 1e6,
        "replay_outside_us_per_step": (elapsed - spent[0]) / steps * 1e6,
    }


def child(root: Path) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, __file__, "--tree", str(root)], check=True, stdout=subprocess.PIPE
    )
    result: dict[str, float] = json.loads(done.stdout)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="a commit, or a folder holding the other tree")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tree", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.tree:
        use_tree(Path(args.tree))
        print(json.dumps(measure()))
        return 0
    if not args.baseline:
        parser.error("--baseline COMMIT_OR_FOLDER is required")
    with tempfile.TemporaryDirectory() as tmp:
        other = Path(args.baseline)
        base = other if other.is_dir() else export_tree(args.baseline, Path(tmp) / "tree")
        before: list[dict[str, float]] = []
        after: list[dict[str, float]] = []
        for _ in range(args.rounds):
            before.append(child(base))
            after.append(child(ROOT))
    for key in before[0]:
        old = statistics.median(run[key] for run in before)
        new = statistics.median(run[key] for run in after)
        better = new / old if key == "search_per_s" else old / new
        print(f"{key}: before {old:,.1f}  after {new:,.1f}  ({better:.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
