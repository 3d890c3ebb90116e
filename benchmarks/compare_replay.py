"""Do two trees give the same verdicts? Replay one corpus in each and compare every result.

A script, not a test (it takes a minute): the check that a speed change of the engine, the
model, the invariants or the pool changed no verdict. A corpus of scenarios is drawn with
`random_scenario` (the fast search's generator) from the scenario space each target is searched
in (allocation rules and fixed pools drawn too), then each tree replays it in a child process
against `builtin:reference` and a set of mutants and correct rewrites chosen to reach every
part of the engine (stale rows, tensors left in counters, adaptive strides, grammar, block/cap
lengths, each allocation and pool fault). Per scenario it writes the violations, the coverage
labels, the whole recorded trace (every event's expectation and observation) and the report's
explanation of the first violation, as canonical JSON lines; the two files must be identical,
and so must the corpus each tree draws.

    .venv/bin/python benchmarks/compare_replay.py --baseline d16b9ea   # this tree vs a commit
    .venv/bin/python benchmarks/compare_replay.py --baseline /some/tree

The script imports nothing of kvcheck at module level: the same replaying code runs against
the other tree (`use_tree`, as in bench_scale.py).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

# Run as a script: benchmarks/ is on the path. One way to import and export another tree.
from bench_scale import corpus_line, export_tree, use_tree

ROOT = Path(__file__).resolve().parent.parent
SEED = 20261201
# builtin:reference's own corpus, and one per other entry.
REFERENCE_COUNT = 3000
ENTRY_COUNT = 300
# Entries of the mutant corpus replayed besides builtin:reference: between them they reach
# every invariant family and every allocation fault.
ENTRIES = (
    "stale-rows-applied-preclaim",
    "retracted-giveback",
    "tensor-commit",
    "worker-stride",
    "live-runs-only",
    "output-stride-unchecked",
    "histogram-skips-zero",
    "controller-fed-stale-rows",
    "block-cap-on-stale-rows",
    "grammar-stale-rows",
    "grammar-refusal-not-aborted",
    "alloc-inflated-live",
    "alloc-no-clamp",
    "release-forgets-overallocated",
    "retract-keeps-kv",
    "estimate-ignores-allocated",
    "release-abort-at-build",
    "pool-shares-pages",
    "pool-loses-freed-pages",
    "grammar-0.5.20",
    "sglang-counters-0.5.13",
)


_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def canonical(value: Any) -> Any:
    """`value` as JSON-able data that two processes print alike: attrs records by class and
    field, sets sorted, anything else by type and repr (addresses removed)."""
    import attrs

    if value is None or isinstance(value, bool | str):
        return value
    if type(value) is int:
        return value
    if attrs.has(type(value)):
        fields = {a.name: canonical(getattr(value, a.name)) for a in attrs.fields(type(value))}
        return [type(value).__name__, fields]
    if isinstance(value, tuple | list):
        return [type(value).__name__, [canonical(v) for v in value]]
    if isinstance(value, frozenset | set):
        return [type(value).__name__, sorted(json.dumps(canonical(v)) for v in value)]
    if isinstance(value, dict):
        return ["dict", [[canonical(k), canonical(v)] for k, v in value.items()]]
    return [type(value).__name__, _ADDRESS.sub("", repr(value))]


def targets() -> list[tuple[str, Any, str, str, bool, int]]:
    """(name, target, convention, counters, adaptive, count) for every target replayed."""
    from kvcheck.mutants import BY_NAME as by_name
    from kvcheck.targets.loading import load_target

    out: list[tuple[str, Any, str, str, bool, int]] = [
        ("builtin:reference", load_target("builtin:reference"), "preclaim", "ideal", True, 0)
    ]
    for name in ENTRIES:
        entry = by_name[name]
        out.append(
            (
                name,
                entry.target(),
                entry.convention,
                entry.global_counters,
                entry.adaptive,
                ENTRY_COUNT,
            )
        )
    return out


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


def draw(path: Path) -> None:
    """The corpus: per target, scenarios of its search space, as `name<TAB>json line`."""
    import random

    from kvcheck.strategies import random_scenario

    lines = []
    for number, (name, target, convention, counters, adaptive, count) in enumerate(targets()):
        space = scenario_space(target, convention, counters, adaptive)
        rng = random.Random(SEED + number)
        for _ in range(count or REFERENCE_COUNT):
            lines.append(f"{name}\t{corpus_line(random_scenario(space, rng))}")
    path.write_text("\n".join(lines) + "\n")


def replay(corpus: Path, out: Path) -> None:
    """Every scenario of `corpus` replayed against its target, recorded: one canonical JSON
    line each (violations, labels, trace), or the error it raised."""
    from kvcheck.core.run import run_scenario
    from kvcheck.core.scenario import from_json
    from kvcheck.reporting.explain import explain

    by_name = {name: target for name, target, *_ in targets()}
    with out.open("w") as sink:
        for line in corpus.read_text().splitlines():
            name, text = line.split("\t", 1)
            scenario = from_json(text)
            try:
                result = run_scenario(scenario, by_name[name], record=True)
                record: Any = {
                    "violations": canonical(result.violations),
                    "reached": sorted(result.reached),
                    "trace": canonical(result.trace),
                    "explanation": explain(result) if result.violations else None,
                }
            except Exception as exc:  # an UnsupportedTargetError is a result too
                record = {"raised": f"{type(exc).__name__}: {exc}"}
            sink.write(json.dumps([name, record], sort_keys=True) + "\n")


def child(root: Path, *args: str) -> None:
    subprocess.run([sys.executable, __file__, "--tree", str(root), *args], check=True)


def summary(path: Path) -> dict[str, Any]:
    records = [json.loads(line)[1] for line in path.read_text().splitlines()]
    return {
        "scenarios": len(records),
        "violating": sum(bool(r.get("violations", ["", []])[1]) for r in records),
        "raising": sum("raised" in r for r in records),
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest()[:16],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="a commit, or a folder holding the other tree")
    parser.add_argument("--keep", help="a folder to keep the corpus and results in")
    parser.add_argument("--tree", help=argparse.SUPPRESS)
    parser.add_argument("--draw", help=argparse.SUPPRESS)
    parser.add_argument("--replay", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.tree:
        use_tree(Path(args.tree))
        if args.draw:
            draw(Path(args.draw))
        if args.replay:
            replay(Path(args.replay[0]), Path(args.replay[1]))
        return 0
    if not args.baseline:
        parser.error("--baseline COMMIT_OR_FOLDER is required")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep) if args.keep else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        other = Path(args.baseline)
        base = other if other.is_dir() else export_tree(args.baseline, Path(tmp) / "tree")
        corpus = folder / "corpus.tsv"
        child(ROOT, "--draw", str(corpus))
        # Both trees must draw the same scenarios from the same seeds (the fast search's
        # verdicts for a seed depend on it).
        child(base, "--draw", str(folder / "corpus_before.tsv"))
        if (folder / "corpus_before.tsv").read_bytes() != corpus.read_bytes():
            print("the two trees draw different scenarios from the same seeds")
            return 1
        child(base, "--replay", str(corpus), str(folder / "before.jsonl"))
        child(ROOT, "--replay", str(corpus), str(folder / "after.jsonl"))
        before, after = folder / "before.jsonl", folder / "after.jsonl"
        print(json.dumps({"before": summary(before), "after": summary(after)}))
        old, new = before.read_text().splitlines(), after.read_text().splitlines()
        differing = [i for i, (a, b) in enumerate(zip(old, new, strict=True)) if a != b]
        if differing:
            print(f"{len(differing)} of {len(old)} results differ; first at line {differing[0]}")
            return 1
        print(f"identical: {len(old)} scenarios, violations, labels, traces and explanations")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
