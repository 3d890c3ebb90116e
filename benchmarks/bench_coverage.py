"""What measuring the target's own coverage costs `kvcheck check`.

Runs `kvcheck check sglang==0.5.23 --global-counters sglang --max-examples 300 --no-database
--seed 0 --no-save --json` five times with coverage (the default) and five times with
`--no-coverage`, interleaved so that a noisy machine hurts both alike, each in a fresh process,
and prints the medians of the whole command's wall time and CPU time (user + system, which a
machine shared with other work disturbs less) and of the `seconds` it reports (the search
alone), with and without, and their ratios.

Needs the release in kvcheck's cache or the package index (`KVCHECK_CACHE`). Figures only, no
timed asserts. Run: `python benchmarks/bench_coverage.py [--runs N] [--target SPEC]`.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _once(command: list[str]) -> tuple[float, float, float]:
    """Wall time, CPU time and the reported search time of one run."""
    started, cpu = time.perf_counter(), _cpu()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wall, cpu = time.perf_counter() - started, _cpu() - cpu
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()}")
    return wall, cpu, float(json.loads(done.stdout)["seconds"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--target", default="sglang==0.5.23")
    parser.add_argument("--max-examples", default="300")
    args = parser.parse_args()
    kvcheck = str(Path(sys.executable).with_name("kvcheck"))
    command = [kvcheck, "check", args.target, "--global-counters", "sglang"]
    command += ["--max-examples", args.max_examples, "--no-database", "--seed", "0"]
    command += ["--no-save", "--json"]
    _once(command)  # warm the cache and the file system
    times: dict[str, list[tuple[float, float, float]]] = {"coverage": [], "no coverage": []}
    for _ in range(args.runs):
        times["coverage"].append(_once(command))
        times["no coverage"].append(_once([*command, "--no-coverage"]))
    print(" ".join(command[1:]), f"[--no-coverage]; median of {args.runs} runs each")
    medians = {}
    for mode, runs in times.items():
        wall, cpu, search = (statistics.median(r[i] for r in runs) for i in range(3))
        medians[mode] = (wall, cpu, search)
        walls = ", ".join(f"{r[0]:.2f}" for r in runs)
        print(
            f"{mode:<12} wall {wall:.2f} s (runs: {walls}); cpu {cpu:.2f} s; search {search:.2f} s"
        )
    on, off = medians["coverage"], medians["no coverage"]
    print(
        f"ratio        wall {on[0] / off[0]:.2f}x, cpu {on[1] / off[1]:.2f}x, "
        f"search {on[2] / off[2]:.2f}x"
    )


if __name__ == "__main__":
    main()
