"""Issue 11's figures (a script, not a timed test): search rate, replay cost per step, exhaustive
states per second and proof times, each next to the figure before the issue's speed work.

    .venv/bin/python benchmarks/bench_scale.py                  # both trees (~20 min)
    .venv/bin/python benchmarks/bench_scale.py --quick          # a smoke run (~5 minutes)
    .venv/bin/python benchmarks/bench_scale.py --no-baseline    # this tree only

"Before" comes two ways. The issue quoted figures (`ISSUE_FIGURES`, measured with
`bench_harness.py` when the issue was filed); and the baseline commit (`BASELINE`, the tree
when the throughput and exhaustive work started) measured *in the same run*: its source is
exported with `git archive` into a temporary folder and the same measuring code runs there in a
child process, on the same replay corpus, alternating with this tree. These machines are noisy
(two shared cores), so the ratio of two figures from one run is the number to read; an absolute
figure is only as good as the machine's load (printed with every run).

The script imports nothing from the other benchmark scripts (their corpus drawing and replay
timing look alike): the same measuring code must run against the older tree too.

The baseline's exhaustive proofs with unbounded events take minutes; `--baseline-slow` runs them
too, otherwise the issue's quoted figures stand for "before" there.

Writes `benchmarks/scale.json` and `benchmarks/scale.md` (pasted into the README's Performance
section).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# The tree before issue 11's items 3-5 (throughput, parallel exhaust, these benchmarks).
BASELINE = "36dbbf9"
# As the issue quotes them (README Performance, bench_harness.py on this machine type).
ISSUE_FIGURES: dict[str, float] = {
    "search_per_s": 286.0,
    "replay_us_per_step": 83.0,
    "exhaust_states_per_s": 2721.0,
    "exhaust_proof_s_w1": 21.7,
    "proof_steps8_s": 218.0,
    "cleared_events_2_requests": 10.0,
    "cleared_events_3_requests": 6.0,
}
CORPUS_SEED = 1234
LIMIT_S = 60.0


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def use_tree(root: Path) -> None:
    """Import kvcheck, `kvcheck.strategies` included, from `root` rather than the installed
    checkout.

    Trees from before the strategies moved into `kvcheck/strategies/` kept them in a root
    `strategies/` folder that only the installed package mapping named `kvcheck.strategies`;
    for those the module is loaded from that folder under its installed name."""
    sys.path.insert(0, str(root))
    import kvcheck

    assert Path(kvcheck.__file__).resolve().is_relative_to(root.resolve()), kvcheck.__file__
    old_layout = root / "strategies"
    if (old_layout / "__init__.py").exists():
        spec = importlib.util.spec_from_file_location(
            "kvcheck.strategies",
            old_layout / "__init__.py",
            submodule_search_locations=[str(old_layout)],
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["kvcheck.strategies"] = module
        spec.loader.exec_module(module)
    strategies_file = importlib.import_module("kvcheck.strategies").__file__
    assert strategies_file is not None
    assert Path(strategies_file).resolve().is_relative_to(root.resolve()), strategies_file


# --- measuring (runs in whichever tree `use_tree` selected) ---------------------------------------


def corpus_line(scenario: Any) -> str:
    """A scenario as one JSON line that every tree reads: a tree from before schema version 4
    refuses a version 4 line (its `family`), so the line is the scenario's pre-4 form, which
    is also what such a tree writes itself (so corpora of two trees compare byte for byte)."""
    try:
        from kvcheck.core.scenario import legacy_scenario_dict
    except ImportError:  # a tree from before version 4: its own lines are that form
        from kvcheck.core.scenario import to_json_line

        return str(to_json_line(scenario))
    return json.dumps(legacy_scenario_dict(scenario), separators=(",", ":"))


def draw_corpus(count: int, path: Path) -> None:
    """`count` scenarios as a search of builtin:reference draws them (preclaim, ideal counters,
    adaptive, allocation rules and pools drawn too), as JSON lines: the replay corpus both trees
    run."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed

    from kvcheck.strategies import scenarios

    lines: list[str] = []

    @settings(
        max_examples=count,
        database=None,
        deadline=None,
        phases=(Phase.generate,),
        suppress_health_check=list(HealthCheck),
    )
    @given(scenarios(convention="preclaim", adaptive=True, allocation=True))
    def collect(scenario: Any) -> None:
        lines.append(corpus_line(scenario))

    hypothesis_seed(CORPUS_SEED)(collect)()
    path.write_text("\n".join(lines) + "\n")


def timed_reference() -> tuple[Any, dict[str, float]]:
    """builtin:reference with its resolver timed: the target's own share of a run."""
    import attrs

    from kvcheck.targets.loading import load_target

    target = load_target("builtin:reference")
    inner = target.resolver
    spent = {"seconds": 0.0}
    clock = time.perf_counter

    def resolver(scheduler: Any, result: Any, batch: Any) -> Any:
        started = clock()
        try:
            return inner(scheduler, result, batch)
        finally:
            spent["seconds"] += clock() - started

    return attrs.evolve(target, resolver=resolver), spent


def measure_replay(corpus: Path, repeats: int) -> dict[str, Any]:
    from kvcheck.core.run import run_scenario
    from kvcheck.core.scenario import from_json
    from kvcheck.families.sglang.scenario import Step

    scenarios = [from_json(line) for line in corpus.read_text().splitlines() if line]
    steps = sum(isinstance(e, Step) for s in scenarios for e in s.events)
    target, spent = timed_reference()
    run_scenario(scenarios[0], target)  # warm up
    totals, outside = [], []
    for _ in range(repeats):
        spent["seconds"] = 0.0
        started = time.perf_counter()
        for scenario in scenarios:
            run_scenario(scenario, target)
        elapsed = time.perf_counter() - started
        totals.append(elapsed / steps * 1e6)
        outside.append((elapsed - spent["seconds"]) / steps * 1e6)
    return {
        "scenarios": len(scenarios),
        "steps": steps,
        "replay_us_per_step": statistics.median(totals),
        "replay_outside_us_per_step": statistics.median(outside),
        "replay_per_s": len(scenarios) / (statistics.median(totals) * steps / 1e6),
    }


def fast_search() -> Any:
    """The seeded-generator search of this tree, or None where the tree has none."""
    try:
        from kvcheck.search.sampling import sample_search  # type: ignore[import-not-found]
    except ImportError:
        return None
    return sample_search


def measure_search(count: int, seeds: int) -> dict[str, Any]:
    from kvcheck.search.check import search
    from kvcheck.targets.loading import load_target

    target = load_target("builtin:reference")
    search(target, convention="preclaim", adaptive=True, max_examples=50, seed=99)  # warm up
    rates = []
    for seed in range(seeds):
        started = time.perf_counter()
        outcome = search(
            target, convention="preclaim", adaptive=True, max_examples=count, seed=seed
        )
        rates.append(outcome.examples / (time.perf_counter() - started))
        assert outcome.failure is None, outcome.failure
    out: dict[str, Any] = {"search_per_s": statistics.median(rates)}
    sampled = fast_search()
    if sampled is not None:
        fast = []
        for seed in range(seeds):
            started = time.perf_counter()
            outcome = sampled(
                target, convention="preclaim", adaptive=True, max_examples=count * 5, seed=seed
            )
            fast.append(outcome.examples / (time.perf_counter() - started))
            assert outcome.failure is None, outcome.failure
        out["fast_search_per_s"] = statistics.median(fast)
    return out


def exhaust_bounds() -> Any:
    """The exhaustive search's `Bounds`: SGLang's family's (`kvcheck.families.sglang.search`)
    since the family seam, `kvcheck.search.exhaust`'s in older trees."""
    try:
        from kvcheck.families.sglang.search import Bounds
    except ImportError:
        from kvcheck.search.exhaust import Bounds  # type: ignore[attr-defined,no-redef]
    return Bounds


def run_exhaust(bounds: Any, workers: int, time_limit: float | None = None) -> Any:
    from kvcheck.search.exhaust import exhaust
    from kvcheck.targets.loading import load_target

    options: dict[str, Any] = {"convention": "preclaim", "time_limit": time_limit}
    if workers != 1:
        options["workers"] = workers
    return exhaust(load_target("builtin:reference"), bounds, **options)


def parallel_exhaust() -> bool:
    from kvcheck.search.exhaust import exhaust

    return "workers" in inspect.signature(exhaust).parameters


def measure_exhaust(repeats: int, workers: list[int]) -> dict[str, Any]:
    """States per second on the default proof bounds (2 requests, 8 events)."""
    Bounds = exhaust_bounds()

    out: dict[str, Any] = {}
    for count in workers:
        if count != 1 and not parallel_exhaust():
            continue
        runs = [run_exhaust(Bounds(), count) for _ in range(repeats)]
        assert all(r.verdict == "pass" for r in runs)
        out[f"exhaust_states_per_s_w{count}"] = statistics.median(r.states_per_second for r in runs)
        out[f"exhaust_proof_s_w{count}"] = statistics.median(r.seconds for r in runs)
        out["exhaust_states"] = runs[0].states
    return out


def measure_proofs(workers: int, quick: bool) -> dict[str, Any]:
    """The issue's proof (`--events 0 --steps 8`) and the largest event bounds cleared in 60 s
    for 2 and 3 requests."""
    Bounds = exhaust_bounds()

    out: dict[str, Any] = {}
    steps = 4 if quick else 8
    result = run_exhaust(Bounds(events=None, steps=steps), workers, time_limit=600.0)
    out["proof_steps"] = steps
    out["proof_steps8_s"] = result.seconds if result.verdict == "pass" else None
    out["proof_steps8_states"] = result.states
    for requests, start, stop in ((2, 8, 6 if quick else 16), (3, 5, 4 if quick else 12)):
        cleared = None
        for events in range(start if not quick else 4, stop + 1):
            run = run_exhaust(Bounds(requests=requests, events=events), workers, LIMIT_S)
            print(
                f"    {requests} requests, {events} events: {run.verdict}, "
                f"{run.states:,} states, {run.seconds:.0f} s",
                file=sys.stderr,
                flush=True,
            )
            if run.verdict != "pass":
                break
            cleared = events
        out[f"cleared_events_{requests}_requests"] = cleared
    return out


def measure(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"load_before": load_average()}
    if not args.only_proofs:
        out.update(measure_replay(Path(args.corpus), 1))
        out.update(measure_search(args.count, 1))
        out.update(measure_exhaust(1, [1, 2]))
    if args.proofs:
        out.update(measure_proofs(2 if parallel_exhaust() else 1, args.quick))
    out["load_after"] = load_average()
    return out


# --- orchestration ----------------------------------------------------------------------------


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per figure, the median over rounds (loads: the first and the last seen)."""
    out: dict[str, Any] = {}
    for key in runs[0]:
        values = [run[key] for run in runs if run.get(key) is not None]
        if key.startswith("load"):
            out[key] = values[0] if key == "load_before" else values[-1]
        elif values and all(isinstance(v, (int, float)) for v in values):
            out[key] = statistics.median(values)
        else:
            out[key] = values[0] if values else None
    return out


def run_tree(
    root: Path,
    args: argparse.Namespace,
    corpus: Path,
    proofs: bool,
    only_proofs: bool = False,
) -> dict[str, Any]:
    command = [
        sys.executable,
        __file__,
        "--measure",
        str(root),
        "--corpus",
        str(corpus),
        "--repeats",
        str(args.repeats),
        "--count",
        str(args.count),
    ]
    command += ["--quick"] if args.quick else []
    command += ["--proofs"] if proofs else []
    command += ["--only-proofs"] if only_proofs else []
    done = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def export_tree(commit: str, root: Path) -> Path:
    """`commit`'s source, exported with `git archive` into the new folder `root` (also used by
    bench_search_ratio.py and compare_replay.py)."""
    root.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit], check=True, stdout=subprocess.PIPE
    )
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive.stdout, check=True)
    return root


def export_baseline(folder: Path) -> Path:
    return export_tree(BASELINE, folder / "baseline")


ROWS: tuple[tuple[str, str, str], ...] = (
    ("search_per_s", "search (Hypothesis), builtin:reference", "scenarios/s"),
    ("fast_search_per_s", "search (seeded generator), builtin:reference", "scenarios/s"),
    ("replay_us_per_step", "replay, all of it", "µs per step"),
    ("replay_outside_us_per_step", "replay, outside the target", "µs per step"),
    ("exhaust_proof_s_w1", "exhaustive proof, 2 requests, 8 events, 1 process", "seconds"),
    ("exhaust_proof_s_w2", "the same proof, 2 processes (`--workers 2`)", "seconds"),
    ("exhaust_states_per_s_w1", "exhaustive, 1 process (same bounds)", "states/s"),
    ("exhaust_states_per_s_w2", "exhaustive, 2 processes (same bounds)", "states/s"),
    ("proof_steps8_s", "proof `--events 0 --steps {proof_steps}`", "seconds"),
    ("cleared_events_2_requests", "longest scenarios cleared in 60 s, 2 requests", "events"),
    ("cleared_events_3_requests", "longest scenarios cleared in 60 s, 3 requests", "events"),
)
# Where "before" in the issue is the figure to compare with when the baseline has none.
ISSUE_KEY = {
    "fast_search_per_s": "search_per_s",
    "replay_outside_us_per_step": "replay_us_per_step",
    "exhaust_states_per_s_w1": "exhaust_states_per_s",
    "exhaust_states_per_s_w2": "exhaust_states_per_s",
    "exhaust_proof_s_w2": "exhaust_proof_s_w1",
}
# Where the baseline has no figure of its own (no seeded generator, no workers): the one it
# would run instead.
BASELINE_KEY = {
    "fast_search_per_s": "search_per_s",
    "exhaust_states_per_s_w2": "exhaust_states_per_s_w1",
    "exhaust_proof_s_w2": "exhaust_proof_s_w1",
}
LOWER_IS_BETTER = {
    "replay_us_per_step",
    "replay_outside_us_per_step",
    "proof_steps8_s",
    "exhaust_proof_s_w1",
    "exhaust_proof_s_w2",
}


def fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float) and value < 100:
        return f"{value:.1f}"
    return f"{value:,.0f}"


def markdown(now: dict[str, Any], base: dict[str, Any] | None) -> str:
    lines = [
        "| what | unit | quoted before | tree before, same run | now | now vs before |",
        "|---|---|---|---|---|---|",
    ]
    for key, what, unit in ROWS:
        if key not in now:
            continue
        quoted = ISSUE_FIGURES.get(ISSUE_KEY.get(key, key))
        before = (base or {}).get(key)
        if before is None and base is not None and key in BASELINE_KEY:
            before = base.get(BASELINE_KEY[key])
        ratio = "—"
        if before and now[key]:
            factor = before / now[key] if key in LOWER_IS_BETTER else now[key] / before
            ratio = f"{factor:.1f}x"
        what = what.format(proof_steps=now.get("proof_steps", 8))
        lines.append(
            f"| {what} | {unit} | {fmt(quoted)} | {fmt(before)} | {fmt(now[key])} | {ratio} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--baseline-slow", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument(
        "--table-only", action="store_true", help="rewrite scale.md from scale.json, no measuring"
    )
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--proofs", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--only-proofs", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.count = 2, 100
    if args.table_only:
        saved = json.loads((ROOT / "benchmarks" / "scale.json").read_text())
        table = markdown(saved["now"], saved["baseline"])
        (ROOT / "benchmarks" / "scale.md").write_text(table + "\n")
        print(table)
        return 0
    if args.measure:
        use_tree(Path(args.measure))
        print(json.dumps(measure(args)))
        return 0

    with tempfile.TemporaryDirectory() as folder:
        corpus = Path(folder) / "corpus.jsonl"
        use_tree(ROOT)
        draw_corpus(args.count, corpus)
        print(f"load average {load_average()}; corpus {args.count} scenarios", file=sys.stderr)
        root = None if args.no_baseline else export_baseline(Path(folder))
        # Rounds alternate the two trees, so a burst of load on the machine hits both.
        rounds: dict[str, list[dict[str, Any]]] = {"base": [], "now": []}
        for round_ in range(args.repeats):
            print(f"round {round_ + 1}/{args.repeats} ...", file=sys.stderr, flush=True)
            if root is not None:
                rounds["base"].append(run_tree(root, args, corpus, proofs=False))
            rounds["now"].append(run_tree(ROOT, args, corpus, proofs=False))
        base = medians(rounds["base"]) if root is not None else None
        now = medians(rounds["now"])
        print("proofs, this tree ...", file=sys.stderr, flush=True)
        now.update(run_tree(ROOT, args, corpus, proofs=True, only_proofs=True))
        if root is not None and args.baseline_slow and base is not None:
            print(f"proofs, the baseline {BASELINE} ...", file=sys.stderr, flush=True)
            base.update(run_tree(root, args, corpus, proofs=True, only_proofs=True))
    results = {"baseline_commit": BASELINE, "issue": ISSUE_FIGURES, "baseline": base, "now": now}
    table = markdown(now, base)
    (ROOT / "benchmarks" / "scale.json").write_text(json.dumps(results, indent=2) + "\n")
    (ROOT / "benchmarks" / "scale.md").write_text(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
