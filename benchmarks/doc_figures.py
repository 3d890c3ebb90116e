"""Re-run the commands behind the expensive figures the README and docs quote, and say which
figures drifted (a script, not a timed test; the cheap figures are tests/unit/test_doc_figures.py,
the 8-event proof's state count also tests/quality/test_exhaust.py).

    .venv/bin/python benchmarks/doc_figures.py            # ~5 minutes on the 2-core machine
    .venv/bin/python benchmarks/doc_figures.py --slow     # + the `--events 0 --steps 8` proof
    .venv/bin/python benchmarks/doc_figures.py --only mutants

Each figure is a number in one sentence (found by a pattern, so a reworded sentence is reported
rather than skipped) and the value the quoted command gives now. Only counts are compared:
state and scenario counts, kill-matrix totals. Times are the machine's, not the code's, and are
printed for reference. Exit 0 when every figure matches, 1 when one drifted or could not be
found, 2 when a command failed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.helpers import quoted  # noqa: E402 (after the path it is found on)

SEMANTICS = ROOT / "docs" / "semantics.md"

# (name, the kvcheck command's arguments, whether it is slow)
Run = tuple[str, list[str], bool]
RUNS: list[Run] = [
    ("proof", ["exhaust", "builtin:reference"], False),
    ("proof-no-reduce", ["exhaust", "builtin:reference", "--no-reduce"], False),
    ("steps-5", ["exhaust", "builtin:reference", "--events", "0", "--steps", "5"], False),
    (
        "steps-5-no-reduce",
        ["exhaust", "builtin:reference", "--events", "0", "--steps", "5", "--no-reduce"],
        False,
    ),
    ("steps-8", ["exhaust", "builtin:reference", "--events", "0", "--steps", "8"], True),
    (
        "sglang-0.5.23",
        # The README's command, word for word.
        [
            "exhaust",
            "sglang==0.5.23",
            "--global-counters",
            "sglang",
            "--events",
            "4",
            "--algorithms",
            "auto",
            "--block-cap",
            "1",
            "--grammars",
            "none,terminate@2,reject@2",
        ],
        False,
    ),
    ("mutants", ["mutants"], False),
]

# (run, pattern with one group per figure, document, what the run gives for those groups)
Figure = tuple[str, str, Path, Callable[[dict[str, Any]], tuple[int, ...]]]


def _states(report: dict[str, Any]) -> tuple[int, ...]:
    return (report["states"],)


def _matrix(report: dict[str, Any]) -> tuple[int, ...]:
    """The kill matrix's figures over SGLang's entries (the manual quotes those; vLLM's corpus
    is docs/vllm.md's)."""
    from kvcheck.mutants import corpus_of

    sglang = {entry.name for entry in corpus_of("sglang").entries}
    rows = [row for row in report["rows"] if row["name"] in sglang]
    mutants = [row for row in rows if row["kind"] == "mutant"]
    lengths = [row["exhaustive_length"] for row in mutants if row["exhaustive_length"]]
    return (
        sum(row["status"] == "killed" for row in mutants),
        sum(row["status"] == "FALSE POSITIVE" for row in rows),
        sum(bool(row["invariant_matches"]) for row in mutants),
        min(lengths),
        max(lengths),
        sum(row["shrink_ratio"] == 1.0 for row in mutants),
    )


FIGURES: list[Figure] = [
    ("proof", r"on and off breaks an invariant \(([\d,]+) states", None, _states),
    ("proof", r"the 8-event proof: ([\d,]+) instead of", None, _states),
    ("proof-no-reduce", r"the 8-event proof: [\d,]+ instead of ([\d,]+);", None, _states),
    ("steps-5", r"--steps 5`: ([\d,]+) instead of", None, _states),
    ("steps-5-no-reduce", r"--steps 5`: [\d,]+ instead of ([\d,]+)\)", None, _states),
    (
        "steps-8",
        r"any number of other events in between \(([\d,]+) states",
        None,
        _states,
    ),
    ("sglang-0.5.23", r"`none,terminate@2,reject@2` \(([\d,]+) states", None, _states),
    (
        "mutants",
        r"Today \(`kvcheck mutants`, \d+ examples, seed \d+\), SGLang's entries: (\d+)/\d+ "
        r"killed, (\d+) false "
        r"positives?, the search reports the annotated invariant for (\d+)/\d+, and the shrunk "
        r"counterexample is exactly as short as the exhaustive minimum \((\d+) to (\d+) events\) "
        r"for (\d+)/\d+\.",
        None,
        _matrix,
    ),
    (
        "mutants",
        r"At seed 0,? (?:all )?(\d+) of \d+ mutants shrink",
        SEMANTICS,
        lambda report: (_matrix(report)[-1],),
    ),
]


def run_kvcheck(arguments: list[str]) -> tuple[dict[str, Any], float]:
    """`kvcheck ARGUMENTS --json` in a fresh process: its JSON report and the seconds it took."""
    started = time.monotonic()
    completed = subprocess.run(
        [sys.executable, "-m", "kvcheck.cli", *arguments, "--json"]
        + (["--no-save"] if arguments[0] == "exhaust" else []),
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    seconds = time.monotonic() - started
    said = completed.stderr.strip().splitlines()[-1:] or ["nothing on stderr"]
    if completed.returncode not in (0, 1):
        raise RuntimeError(f"kvcheck {' '.join(arguments)}: exit {completed.returncode}: {said[0]}")
    try:
        report: dict[str, Any] = json.loads(completed.stdout)
    except json.JSONDecodeError as exc:
        raise RuntimeError(
            f"kvcheck {' '.join(arguments)}: exit {completed.returncode}, no JSON report "
            f"({exc}): {said[0]}"
        ) from None
    return report, seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slow", action="store_true", help="also run the slow commands")
    parser.add_argument("--only", nargs="+", metavar="RUN", help="only these runs")
    args = parser.parse_args()
    drifted = 0
    for name, arguments, slow in RUNS:
        if (args.only and name not in args.only) or (slow and not args.slow and not args.only):
            continue
        try:
            report, seconds = run_kvcheck(arguments)
        except RuntimeError as exc:
            print(f"{name}: the command failed: {exc}")
            return 2
        print(f"{name}: kvcheck {' '.join(arguments)} ({seconds:.0f} s)")
        for run, pattern, document, derive in FIGURES:
            if run != name:
                continue
            now = derive(report)
            try:
                written = quoted(pattern, document)
            except AssertionError as exc:
                print(f"  NOT FOUND  {exc}; the command gives {now}")
                drifted += 1
                continue
            status = "ok" if written == now else "DRIFT"
            drifted += status != "ok"
            print(f"  {status:<9}  {document.name}: quotes {written}, the command gives {now}")
    print("every figure matches" if not drifted else f"{drifted} figure(s) drifted")
    return 1 if drifted else 0


if __name__ == "__main__":
    sys.exit(main())
