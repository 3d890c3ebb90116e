"""Exhaustive results of two trees side by side (a script, not a timed test): speed work on
`kvcheck exhaust` must leave every result as it was.

    .venv/bin/python benchmarks/compare_exhaust.py --out after.json
    .venv/bin/python benchmarks/compare_exhaust.py --tree /tmp/before --out before.json
    .venv/bin/python benchmarks/compare_exhaust.py --diff before.json after.json

Each case is a search over `builtin:reference` under a set of bounds and options, or a mutant
of `kvcheck.mutants` searched for its exhaustive minimum (as the kill matrix does); per case it
writes the verdict, states, scenarios, depth, minimal invariants and the counterexample (its
config and events as JSON). `--diff` prints every case whose record differs and exits 1 if any
does. `--tree` runs the same cases against another checkout (e.g. a `git archive` of an older
commit): the cases use only APIs both trees have.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

# Bounds over builtin:reference, as keyword arguments of `Bounds`, with the options of `exhaust`.
REFERENCE_CASES: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"events": 3}, {}),
    ({"events": 5}, {}),
    ({"events": 6}, {}),
    ({"events": 6}, {"reduce": False}),
    ({"events": 4}, {"merge": False}),
    ({"events": 5}, {"convention": "honest"}),
    ({"events": 5, "max_new": (1, 2, 4)}, {"global_counters": "sglang"}),
    ({"events": None, "steps": 2, "strides": (2,)}, {}),
    ({"events": 5, "kinds": ("step", "admit", "retract"), "max_new": (1, 4)}, {}),
    ({"events": 4, "requests": 3}, {}),
    ({"events": 4, "allocations": ("off", "0.5.13", "0.5.16")}, {}),
    ({"events": 5}, {"workers": 2}),
    ({"events": 4, "kinds": ("admit", "step", "abort"), "strides": (2,)}, {"workers": 2}),
    ({"events": 500}, {"max_states": 700}),
]
# Mutants searched for their exhaustive minimum (`kvcheck.mutants.matrix.exhaustive_minimum`).
MUTANTS = 74
# Each also without the reduction, on smaller bounds.
UNREDUCED = 12


def record(result: Any) -> dict[str, Any]:
    from kvcheck.families.sglang.scenario import config_to_dict, event_to_dict

    example = result.counterexample
    return {
        "verdict": result.verdict,
        "states": result.states,
        "scenarios": result.scenarios,
        "depth": result.depth,
        "complete": result.complete,
        "invariants": sorted(result.minimal_invariants),
        "config": config_to_dict(example.config) if example is not None else None,
        "events": [event_to_dict(e) for e in example.events] if example is not None else None,
    }


def run_cases(mutants: int, unreduced: int) -> dict[str, Any]:
    from bench_scale import exhaust_bounds

    from kvcheck.mutants import ENTRIES
    from kvcheck.mutants.matrix import MINIMUM_BOUNDS, bounds_for
    from kvcheck.search.exhaust import exhaust
    from kvcheck.targets.loading import load_target

    Bounds = exhaust_bounds()

    out: dict[str, Any] = {}
    reference = load_target("builtin:reference")
    for bounds, options in REFERENCE_CASES:
        name = f"reference {bounds} {options}"
        started = time.perf_counter()
        out[name] = record(exhaust(reference, Bounds(**bounds), measure_coverage=False, **options))
        print(f"{name}: {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    # SGLang's corpus: the options and bounds below are its own (another family's entries carry
    # other judging options).
    chosen = [e for e in ENTRIES if e.kind == "mutant" and e.family == "sglang"][:mutants]
    for index, entry in enumerate(chosen):
        target = entry.target()
        options = {
            "convention": entry.convention,
            "global_counters": entry.global_counters,
            "adaptive": entry.adaptive,
            "measure_coverage": False,
        }
        started = time.perf_counter()
        out[f"mutant {entry.name}"] = record(
            exhaust(target, bounds_for(target, MINIMUM_BOUNDS), **options)
        )
        if index < unreduced:
            small = bounds_for(target, Bounds(events=4, max_new=(1, 2, 4)))
            out[f"mutant {entry.name} unreduced"] = record(
                exhaust(target, small, reduce=False, **options)
            )
        print(f"{entry.name}: {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    return out


def diff(before: dict[str, Any], after: dict[str, Any]) -> int:
    differing = 0
    for name in sorted(set(before) | set(after)):
        if before.get(name) != after.get(name):
            differing += 1
            print(f"DIFFERS {name}\n  before {before.get(name)}\n  after  {after.get(name)}")
    print(f"{len(set(before) | set(after))} cases, {differing} differ")
    return 1 if differing else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", help="run against this checkout instead of this one")
    parser.add_argument("--out", help="write the records here (JSON)")
    parser.add_argument("--mutants", type=int, default=MUTANTS)
    parser.add_argument("--unreduced", type=int, default=UNREDUCED)
    parser.add_argument("--diff", nargs=2, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    if args.diff:
        before, after = (json.loads(Path(p).read_text()) for p in args.diff)
        return diff(before, after)
    if args.tree:
        from bench_scale import use_tree

        use_tree(Path(args.tree))
    records = run_cases(args.mutants, args.unreduced)
    text = json.dumps(records, indent=1, sort_keys=True)
    if args.out:
        Path(args.out).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
