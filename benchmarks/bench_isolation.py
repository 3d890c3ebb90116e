"""What guarding against calls that never return costs (`kvcheck.core.isolation`).

Two figures:

- the command line as a user runs it, before and after: `kvcheck check builtin:reference
  --max-examples 2000 --seed 1 --json` with `PYTHONPATH` at two source trees (`--before`, and
  this one), wall time and the report's search `seconds`, medians of N runs each, which tree
  goes first alternating so that a noisy machine hurts both alike. Until a call gets stuck the
  only cost is the monitor thread (it wakes ten times a second) and a counter per call;
- per guarded call, in this process: `call_with_deadline(0.25, f)` for a function that does
  nothing, with the monitor thread watching and without, medians over interleaved rounds of
  20,000 calls, in microseconds;
- once isolated (after a call got stuck): one run of a short scenario in this process against
  the same run in a forked child (`isolation.apart`), median milliseconds over rounds.

Figures only, no timed asserts. Run:
`python benchmarks/bench_isolation.py --before /path/to/other/tree [--runs N]`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from kvcheck.core import deadline, isolation
from kvcheck.core.deadline import DEFAULT_DEADLINE, call_with_deadline
from kvcheck.core.run import run_scenario
from kvcheck.core.scenario import Scenario
from kvcheck.families.sglang.scenario import Admit, Config, Step
from kvcheck.targets.loading import load_target

HERE = Path(__file__).resolve().parent.parent
COMMAND = ["check", "builtin:reference", "--max-examples", "2000", "--seed", "1", "--json"]


def _one_cli_run(tree: Path) -> tuple[float, float]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "kvcheck.cli", *COMMAND],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tree)},
        check=False,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{tree}: exit {done.returncode}: {done.stderr[-500:]}")
    return wall, float(json.loads(done.stdout)["seconds"])


def _cli(before: Path, runs: int) -> None:
    walls: dict[Path, list[float]] = {before: [], HERE: []}
    searches: dict[Path, list[float]] = {before: [], HERE: []}
    for index in range(runs):
        order = (before, HERE) if index % 2 == 0 else (HERE, before)
        for tree in order:
            wall, search = _one_cli_run(tree)
            walls[tree].append(wall)
            searches[tree].append(search)
    for name, tree in (("before", before), ("after", HERE)):
        print(
            f"{name:6} {tree}: wall median {statistics.median(walls[tree]):.2f} s "
            f"(range {min(walls[tree]):.2f}-{max(walls[tree]):.2f}), search median "
            f"{statistics.median(searches[tree]):.2f} s "
            f"(range {min(searches[tree]):.2f}-{max(searches[tree]):.2f}), {runs} runs"
        )
    ratio = statistics.median(searches[HERE]) / statistics.median(searches[before])
    print(f"search time after/before: {ratio:.3f}")


def _nothing() -> None:
    return None


def _guarded_us(calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        call_with_deadline(DEFAULT_DEADLINE, _nothing)
    return (time.perf_counter() - started) / calls * 1e6


def _per_call(rounds: int) -> None:
    unwatched: list[float] = []
    watched: list[float] = []
    for _ in range(rounds):
        deadline.watch_stuck(None, isolation.STUCK_GRACE)
        unwatched.append(_guarded_us(20_000))
        deadline.watch_stuck(lambda *stuck: None, isolation.STUCK_GRACE)
        watched.append(_guarded_us(20_000))
    deadline.watch_stuck(None, isolation.STUCK_GRACE)
    print(
        f"one guarded call: {statistics.median(unwatched):.2f} us unwatched, "
        f"{statistics.median(watched):.2f} us with the monitor (medians of {rounds} rounds)"
    )


def _apart(rounds: int) -> None:
    target = load_target("builtin:reference")
    scenario = Scenario(Config(), (Admit("r0", 10, 20), Step(), Step((2,)), Step((3,))))
    here: list[float] = []
    apart: list[float] = []
    for _ in range(rounds):
        started = time.perf_counter()
        run_scenario(scenario, target)
        here.append(time.perf_counter() - started)
        started = time.perf_counter()
        isolation.apart(run_scenario, scenario, target)
        apart.append(time.perf_counter() - started)
    print(
        f"one short run: in process {statistics.median(here) * 1e3:.2f} ms, in a forked child "
        f"{statistics.median(apart) * 1e3:.2f} ms (medians of {rounds})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="the source tree to compare with")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    _per_call(args.rounds)
    _apart(args.rounds)
    if args.before is not None:
        _cli(args.before.resolve(), args.runs)


if __name__ == "__main__":
    main()
