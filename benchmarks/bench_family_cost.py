"""What a vLLM check costs per scenario against an SGLang check (issue 22's rule: at most 3x).

Three pairs, each side `kvcheck check SPEC --max-examples N --no-database --seed 0 --no-save
--json` in a fresh process:

- kvcheck's own correct schedulers: `builtin:vllm-reference` against `builtin:reference`;
- the release trees, the target's coverage measured (the default): `vllm==0.33.0` against
  `sglang==0.5.23 --global-counters sglang` (the mode in which that release passes);
- the same release trees with `--no-coverage`.

The two sides of a pair alternate, run after run, so that a noisy machine hurts both alike. Per
scenario is the search time the report gives (`seconds`: generation, engine, model, invariants,
the target and its coverage; not the interpreter's start nor torch's import) over the scenarios
it ran (`examples`). Every run must PASS: a failure's time would include shrinking. Prints the
median milliseconds per scenario of each side, and the ratio vLLM / SGLang against the limit.

Needs both releases in kvcheck's cache or the package index (`KVCHECK_CACHE`). Figures only, no
timed asserts. Run: `python benchmarks/bench_family_cost.py [--runs N] [--max-examples N]
[--json] [--markdown PATH]`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

# The rule: a vLLM check costs at most this many times an SGLang check per scenario.
LIMIT = 3.0

# (name, vLLM's arguments, SGLang's arguments, extra arguments for both)
PAIRS: tuple[tuple[str, list[str], list[str], list[str]], ...] = (
    ("built-in reference", ["builtin:vllm-reference"], ["builtin:reference"], []),
    (
        "release tree, coverage on",
        ["vllm==0.33.0"],
        ["sglang==0.5.23", "--global-counters", "sglang"],
        [],
    ),
    (
        "release tree, coverage off",
        ["vllm==0.33.0"],
        ["sglang==0.5.23", "--global-counters", "sglang"],
        ["--no-coverage"],
    ),
)


def _per_scenario_ms(command: list[str]) -> float:
    """Milliseconds of search per scenario of one passing run."""
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()[-400:]}")
    report = json.loads(done.stdout)
    return float(report["seconds"]) / int(report["examples"]) * 1000


def measure(runs: int, max_examples: int) -> list[dict[str, Any]]:
    """Each pair's medians (ms per scenario), its runs, and the ratio vLLM / SGLang."""
    kvcheck = str(Path(sys.executable).with_name("kvcheck"))
    common = ["--max-examples", str(max_examples), "--no-database", "--seed", "0"]
    common += ["--no-save", "--json"]
    rows = []
    for name, vllm, sglang, extra in PAIRS:
        sides = {
            "vllm": [kvcheck, "check", *vllm, *common, *extra],
            "sglang": [kvcheck, "check", *sglang, *common, *extra],
        }
        for command in sides.values():
            _per_scenario_ms(command)  # warm the cache, the wheels' trees and the file system
        times: dict[str, list[float]] = {side: [] for side in sides}
        for run in range(runs):
            # Alternate which side goes first.
            order = list(sides) if run % 2 == 0 else list(reversed(sides))
            for side in order:
                times[side].append(_per_scenario_ms(sides[side]))
        medians = {side: statistics.median(values) for side, values in times.items()}
        rows.append(
            {
                "pair": name,
                "vllm": " ".join([*vllm, *extra]),
                "sglang": " ".join([*sglang, *extra]),
                "vllm_ms_per_scenario": round(medians["vllm"], 3),
                "sglang_ms_per_scenario": round(medians["sglang"], 3),
                "ratio": round(medians["vllm"] / medians["sglang"], 2),
                "within_limit": medians["vllm"] <= LIMIT * medians["sglang"],
                "runs": {side: [round(v, 3) for v in values] for side, values in times.items()},
            }
        )
    return rows


def markdown(rows: list[dict[str, Any]], runs: int, max_examples: int) -> str:
    """The figures as a Markdown table."""
    lines = [
        f"Median ms of search per scenario, `kvcheck check SPEC --max-examples {max_examples} "
        f"--seed 0`, {runs} runs each side (benchmarks/bench_family_cost.py). Limit: vLLM <= "
        f"{LIMIT:g}x SGLang.",
        "",
        "| pair | vLLM | ms | SGLang | ms | vLLM / SGLang |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['pair']} | `{row['vllm']}` | {row['vllm_ms_per_scenario']:.2f} | "
            f"`{row['sglang']}` | {row['sglang_ms_per_scenario']:.2f} | {row['ratio']:.2f}x |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--max-examples", type=int, default=300)
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--markdown", type=Path, default=None, help="also write the table here")
    args = parser.parse_args()
    rows = measure(args.runs, args.max_examples)
    table = markdown(rows, args.runs, args.max_examples)
    if args.markdown is not None:
        args.markdown.write_text(table, encoding="utf-8")
    if args.json:
        report = {"limit": LIMIT, "runs": args.runs, "max_examples": args.max_examples}
        print(json.dumps(report | {"pairs": rows}, indent=2))
    else:
        print(table, end="")
    if not all(row["within_limit"] for row in rows):
        sys.exit(f"a vLLM check costs more than {LIMIT:g}x an SGLang check per scenario")


if __name__ == "__main__":
    main()
