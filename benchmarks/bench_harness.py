"""Measure the harness (a script, not a timed test): scenario throughput, the harness's overhead
around the target, time to kill the mutant corpus, and the exhaustive search's speed and reach.

    .venv/bin/python benchmarks/bench_harness.py                 # everything (~10 minutes)
    .venv/bin/python benchmarks/bench_harness.py --quick         # a smoke run (~1 minute)
    .venv/bin/python benchmarks/bench_harness.py --replay        # replay us/step only (~20 s)

Writes `benchmarks/results.json`, the Markdown table `benchmarks/results.md` (pasted into the
README's Performance section) and the chart `docs/time_to_kill.png` (needs matplotlib, in the
`dev` extra). Every figure is a median over several runs; the machine is printed first. These
machines are noisy (shared cores), so compare ratios rather than single runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed

from kvcheck.core.run import run_scenario
from kvcheck.core.scenario import Scenario
from kvcheck.core.target import Target
from kvcheck.families.sglang.scenario import Step
from kvcheck.families.sglang.search import Bounds
from kvcheck.mutants import MUTANTS
from kvcheck.mutants.matrix import exhaustive_minimum, quantile, search_entry
from kvcheck.search.check import search
from kvcheck.search.exhaust import exhaust
from kvcheck.strategies import scenarios
from kvcheck.targets.loading import load_target

ROOT = Path(__file__).resolve().parent.parent


def machine() -> dict[str, Any]:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    import hypothesis
    import torch

    return {
        "cpu": model,
        "nproc": os.cpu_count(),
        "usable_cores": usable,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "hypothesis": hypothesis.__version__,
        "platform": platform.platform(),
    }


class TimedTarget:
    """A target whose resolver accumulates the wall time spent inside it."""

    def __init__(self, target: Target) -> None:
        self.inner = target.resolver
        self.seconds = 0.0
        self.calls = 0

        def resolver(scheduler: Any, result: Any, batch: Any) -> Any:
            started = time.perf_counter()
            try:
                return self.inner(scheduler, result, batch)
            finally:
                self.seconds += time.perf_counter() - started
                self.calls += 1

        self.target = attrs.evolve(target, resolver=resolver)

    def reset(self) -> None:
        self.seconds, self.calls = 0.0, 0


def draw_scenarios(count: int, seed: int) -> list[Scenario]:
    """`count` scenarios as a search of builtin:reference draws them (preclaim, ideal counters,
    adaptive, allocation rules and pools drawn too)."""
    drawn: list[Scenario] = []

    @settings(
        max_examples=count,
        database=None,
        deadline=None,
        phases=(Phase.generate,),
        suppress_health_check=list(HealthCheck),
    )
    @given(scenarios(convention="preclaim", adaptive=True, allocation=True))
    def collect(scenario: Scenario) -> None:
        drawn.append(scenario)

    hypothesis_seed(seed)(collect)()
    return drawn


def bench_throughput(repeats: int, count: int) -> dict[str, Any]:
    """Replay (no Hypothesis) and search throughput on builtin:reference, and the share of
    time spent outside the target function."""
    timed = TimedTarget(load_target("builtin:reference"))
    corpus = draw_scenarios(count, seed=1234)
    events = sum(len(s.events) for s in corpus)
    steps = sum(isinstance(e, Step) for s in corpus for e in s.events)
    run_scenario(corpus[0], timed.target)  # warm up: torch import, API-shape probe
    replay_rates, replay_steps, replay_overhead = [], [], []
    for _ in range(repeats):
        timed.reset()
        started = time.perf_counter()
        for scenario in corpus:
            run_scenario(scenario, timed.target)
        elapsed = time.perf_counter() - started
        replay_rates.append(len(corpus) / elapsed)
        replay_steps.append(steps / elapsed)
        replay_overhead.append(1 - timed.seconds / elapsed)
    search_rates, search_overhead = [], []
    for repeat in range(repeats):
        timed.reset()
        started = time.perf_counter()
        outcome = search(
            timed.target, convention="preclaim", adaptive=True, max_examples=count, seed=repeat
        )
        elapsed = time.perf_counter() - started
        assert outcome.failure is None
        search_rates.append(outcome.examples / elapsed)
        search_overhead.append(1 - timed.seconds / elapsed)
    return {
        "breakdown": bench_breakdown(count),
        "scenarios": len(corpus),
        "events_per_scenario": events / len(corpus),
        "steps_per_scenario": steps / len(corpus),
        "target_calls_per_scenario": timed.calls / max(1, count),
        "replay_scenarios_per_s": statistics.median(replay_rates),
        "replay_steps_per_s": statistics.median(replay_steps),
        "replay_overhead_share": statistics.median(replay_overhead),
        "search_scenarios_per_s": statistics.median(search_rates),
        "search_overhead_share": statistics.median(search_overhead),
        "repeats": repeats,
    }


def time_parts(corpus: Sequence[Scenario], timed: TimedTarget) -> dict[str, float]:
    """Seconds spent replaying `corpus` in the reference model, the engine around the target,
    the invariant checks and the target itself, plus the total: `run_scenario`'s loop, timed
    piecewise."""
    from kvcheck.families.sglang.engine import Engine
    from kvcheck.families.sglang.invariants import check_event
    from kvcheck.families.sglang.model import ReferenceModel
    from kvcheck.families.sglang.target import allocation_path

    target = timed.target
    timed.reset()
    spent = {"model": 0.0, "engine": 0.0, "invariants": 0.0}
    clock = time.perf_counter
    started = clock()
    for scenario in corpus:
        model = ReferenceModel(scenario.config)
        engine = Engine(
            scenario.config,
            target.resolver,
            target.self_methods,
            not_judged=target.shape.not_judged,
            allocation=allocation_path(target, scenario.config),
            deadline=target.deadline,
        )
        for index, event in enumerate(scenario.events):
            t0 = clock()
            expected = model.apply(event)
            t1 = clock()
            observed = engine.apply(event)
            t2 = clock()
            violations = check_event(index, expected, observed)
            t3 = clock()
            spent["model"] += t1 - t0
            spent["engine"] += t2 - t1
            spent["invariants"] += t3 - t2
            if violations:
                break
    spent["total"] = clock() - started
    spent["engine"] -= timed.seconds  # the engine's part leaves out the target it calls
    spent["target"] = timed.seconds
    return spent


def bench_breakdown(count: int) -> dict[str, float]:
    """Where replay time goes: the reference model, the engine around the target, the
    invariant checks and the target itself, as shares of the whole."""
    timed = TimedTarget(load_target("builtin:reference"))
    corpus = draw_scenarios(count, seed=4321)
    run_scenario(corpus[0], timed.target)
    spent = time_parts(corpus, timed)
    total = spent.pop("total")
    shares = {name: value / total for name, value in spent.items()}
    shares["other"] = 1 - sum(shares.values())
    return shares


def bench_replay_steps(count: int = 300, repeats: int = 7, seed: int = 1234) -> dict[str, Any]:
    """Replay cost per scenario step on builtin:reference (issue 11's "replay us/step"): `count`
    scenarios drawn once as the search draws them, replayed `repeats` times with
    `run_scenario`. Per step (events of every kind included, divided by the steps): the wall
    time, the wall time outside the target (the resolver's own calls timed and taken off), the
    process's CPU time (steadier on a shared machine) and the target's share; then where the
    time outside the target goes, timed piecewise. Medians over the repeats.

        .venv/bin/python benchmarks/bench_harness.py --replay
    """

    timed = TimedTarget(load_target("builtin:reference"))
    target = timed.target
    corpus = draw_scenarios(count, seed=seed)
    steps = sum(isinstance(e, Step) for s in corpus for e in s.events)
    for scenario in corpus[:20]:  # warm up: torch, the fakes' caches
        run_scenario(scenario, target)
    wall, cpu, inside = [], [], []
    for _ in range(repeats):
        timed.reset()
        started, started_cpu = time.perf_counter(), time.process_time()
        for scenario in corpus:
            run_scenario(scenario, target)
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
        inside.append(timed.seconds)
    parts: dict[str, list[float]] = {"model": [], "engine": [], "invariants": []}
    for _ in range(repeats):
        spent = time_parts(corpus, timed)
        for name, values in parts.items():
            values.append(spent[name])

    def per_step(values: Sequence[float]) -> float:
        return statistics.median(values) / steps * 1e6

    return {
        "scenarios": len(corpus),
        "steps": steps,
        "events": sum(len(s.events) for s in corpus),
        "repeats": repeats,
        "scenarios_per_s": len(corpus) / statistics.median(wall),
        "us_per_step": per_step(wall),
        "us_per_step_outside_target": per_step([w - t for w, t in zip(wall, inside, strict=True)]),
        "cpu_us_per_step": per_step(cpu),
        "target_us_per_step": per_step(inside),
        **{f"{name}_us_per_step": per_step(values) for name, values in parts.items()},
    }


def bench_time_to_kill(seeds: int, max_examples: int) -> dict[str, Any]:
    """Per mutant, the median over `seeds` searches of the wall time and scenarios to the first
    failure, and of the whole search including shrinking."""
    rows = []
    for entry in MUTANTS:
        minimum = exhaustive_minimum(entry).depth
        to_fail, examples, total, lengths = [], [], [], []
        for seed in range(seeds):
            outcome = search_entry(entry, max_examples=max_examples, seed=seed)
            if outcome.failure is None or outcome.seconds_to_failure is None:
                to_fail.append(float("inf"))
                continue
            to_fail.append(outcome.seconds_to_failure)
            examples.append(float(outcome.examples_to_failure or 0))
            total.append(outcome.seconds)
            lengths.append(float(len(outcome.failure.scenario.events)))
        rows.append(
            {
                "name": entry.name,
                "killed_in": sum(t != float("inf") for t in to_fail),
                "median_seconds_to_kill": statistics.median(to_fail),
                "min_seconds_to_kill": min(to_fail),
                "max_seconds_to_kill": max(to_fail),
                "median_examples_to_kill": statistics.median(examples) if examples else None,
                "median_seconds_with_shrink": statistics.median(total) if total else None,
                "median_shrunk_length": statistics.median(lengths) if lengths else None,
                "exhaustive_minimum": minimum,
                "shrunk_to_minimum": sum(length == minimum for length in lengths),
            }
        )
    medians = [r["median_seconds_to_kill"] for r in rows]
    examples_all = [r["median_examples_to_kill"] or 0.0 for r in rows]
    with_shrink = [r["median_seconds_with_shrink"] or 0.0 for r in rows]
    return {
        "seeds": seeds,
        "max_examples": max_examples,
        "mutants": len(rows),
        "killed_every_seed": sum(r["killed_in"] == seeds for r in rows),
        "median_seconds_to_kill": statistics.median(medians),
        "p90_seconds_to_kill": quantile(medians, 0.9),
        "max_seconds_to_kill": max(medians),
        "median_examples_to_kill": statistics.median(examples_all),
        "p90_examples_to_kill": quantile(examples_all, 0.9),
        "median_seconds_with_shrink": statistics.median(with_shrink),
        "p90_seconds_with_shrink": quantile(with_shrink, 0.9),
        # Shrink optimality over every (mutant, seed) search, and per mutant by its median.
        "shrunk_to_minimum_runs": sum(r["shrunk_to_minimum"] for r in rows),
        "runs": seeds * len(rows),
        "median_shrunk_at_minimum": sum(
            r["median_shrunk_length"] == r["exhaustive_minimum"] for r in rows
        ),
        "rows": rows,
    }


def _largest_cleared(
    make: Callable[[int], Bounds], start: int, limit: float, stop: int
) -> dict[str, Any]:
    """Grow one bound from `start` until the search no longer clears it within `limit` s."""
    reference = load_target("builtin:reference")
    cleared: dict[str, Any] | None = None
    for value in range(start, stop + 1):
        result = exhaust(reference, make(value), convention="preclaim", time_limit=limit)
        record = {
            "value": value,
            "verdict": result.verdict,
            "states": result.states,
            "scenarios": result.scenarios,
            "seconds": result.seconds,
            "states_per_s": result.states_per_second,
            "bounds": result.bounds.describe(),
        }
        print(f"    {record}", flush=True)
        if result.verdict != "pass":
            return {"cleared": cleared, "first_not_cleared": record}
        cleared = record
    return {"cleared": cleared, "first_not_cleared": None}


def bench_exhaust(repeats: int, limit: float, quick: bool) -> dict[str, Any]:
    """States per second on the proof bounds, and the largest bounds cleared in `limit` s."""
    reference = load_target("builtin:reference")
    proof = Bounds() if not quick else Bounds(events=6)
    runs = []
    for _ in range(repeats):
        result = exhaust(reference, proof, convention="preclaim")
        assert result.verdict == "pass"
        runs.append(result)
    out: dict[str, Any] = {
        "proof_bounds": proof.describe(),
        "proof_states": runs[0].states,
        "proof_scenarios": runs[0].scenarios,
        "proof_seconds": statistics.median(r.seconds for r in runs),
        "states_per_s": statistics.median(r.states_per_second for r in runs),
        "scenarios_per_s": statistics.median(r.scenarios / r.seconds for r in runs),
        "repeats": repeats,
        "time_limit": limit,
    }
    print("  largest scenario length cleared, 2 requests:", flush=True)
    out["events_2_requests"] = _largest_cleared(
        lambda n: Bounds(events=n), 6, limit, 8 if quick else 14
    )
    print("  largest scenario length cleared, 3 requests:", flush=True)
    out["events_3_requests"] = _largest_cleared(
        lambda n: Bounds(requests=3, events=n), 5, limit, 6 if quick else 12
    )
    print("  most step events cleared (other events unbounded), 2 requests:", flush=True)
    out["steps_2_requests"] = _largest_cleared(
        lambda n: Bounds(events=None, steps=n), 1, limit, 2 if quick else 8
    )
    return out


# --- reporting ----------------------------------------------------------------------------------


def markdown(results: dict[str, Any]) -> str:
    m, t, k, x = (results[key] for key in ("machine", "throughput", "kill", "exhaust"))

    def cleared(block: dict[str, Any], what: str) -> str:
        done = block["cleared"]
        if done is None:
            return "none within the limit"
        return f"{done['value']} {what} ({done['states']:,} states, {done['seconds']:.0f} s)"

    limit = f"{x['time_limit']:.0f} s"
    replay = "replay: engine + model + invariants + target"
    search_ = "search: Hypothesis generation + replay"
    kill = f"time to kill ({k['mutants']} mutants x {k['seeds']} seeds)"
    exhaustive = "exhaustive search, builtin:reference"
    rows = [
        (replay, "scenarios per second", f"{t['replay_scenarios_per_s']:,.0f}"),
        (replay, "scenario steps per second", f"{t['replay_steps_per_s']:,.0f}"),
        (replay, "time outside the target", f"{100 * t['replay_overhead_share']:.0f}%"),
        (
            replay,
            "time in model / engine / invariants / target",
            " / ".join(
                f"{100 * t['breakdown'][part]:.0f}%"
                for part in ("model", "engine", "invariants", "target")
            ),
        ),
        (search_, "scenarios per second", f"{t['search_scenarios_per_s']:,.0f}"),
        (search_, "time outside the target", f"{100 * t['search_overhead_share']:.0f}%"),
        (
            kill,
            "to the first failure: median / p90 / max",
            f"{k['median_seconds_to_kill'] * 1000:.0f} ms / "
            f"{k['p90_seconds_to_kill'] * 1000:.0f} ms / {k['max_seconds_to_kill'] * 1000:.0f} ms",
        ),
        (
            kill,
            "scenarios to the first failure: median / p90",
            f"{k['median_examples_to_kill']:.0f} / {k['p90_examples_to_kill']:.0f}",
        ),
        (
            kill,
            "including shrinking: median / p90",
            f"{k['median_seconds_with_shrink'] * 1000:.0f} ms / "
            f"{k['p90_seconds_with_shrink'] * 1000:.0f} ms",
        ),
        (kill, "mutants killed by every seed", f"{k['killed_every_seed']}/{k['mutants']}"),
        (
            kill,
            "shrunk length = exhaustive minimum",
            f"{k['shrunk_to_minimum_runs']}/{k['runs']} searches "
            f"({100 * k['shrunk_to_minimum_runs'] / k['runs']:.0f}%)",
        ),
        (
            exhaustive,
            "proof: " + x["proof_bounds"].split(";")[0],
            f"{x['proof_states']:,} states, {x['proof_seconds']:.1f} s",
        ),
        (exhaustive, "states per second", f"{x['states_per_s']:,.0f}"),
        (
            exhaustive,
            f"longest scenarios cleared in {limit}, 2 requests",
            cleared(x["events_2_requests"], "events"),
        ),
        (
            exhaustive,
            f"longest scenarios cleared in {limit}, 3 requests",
            cleared(x["events_3_requests"], "events"),
        ),
        (
            exhaustive,
            f"most steps cleared in {limit}, other events unbounded",
            cleared(x["steps_2_requests"], "steps"),
        ),
    ]
    cores = m["usable_cores"] or m["nproc"]
    lines = [
        f"Machine: {m['cpu']}, nproc {m['nproc']} ({cores} usable), Python {m['python']}, "
        f"torch {m['torch']}, Hypothesis {m['hypothesis']}; one process. Medians of "
        f"{t['repeats']} runs (throughput, exhaustive) and {k['seeds']} seeds (time to kill).",
        "",
        "| what | measure | value |",
        "|---|---|---|",
        *(
            f"| {what if i == 0 or rows[i - 1][0] != what else ''} | {name} | {value} |"
            for i, (what, name, value) in enumerate(rows)
        ),
    ]
    return "\n".join(lines)


def chart(results: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[dev]'): no chart", file=sys.stderr)
        return False
    kill = results["kill"]
    rows = sorted(kill["rows"], key=lambda r: r["median_seconds_to_kill"])
    names = [r["name"] for r in rows]
    medians = [r["median_seconds_to_kill"] * 1000 for r in rows]
    low = [m - r["min_seconds_to_kill"] * 1000 for m, r in zip(medians, rows, strict=True)]
    high = [r["max_seconds_to_kill"] * 1000 - m for m, r in zip(medians, rows, strict=True)]
    figure, axes = plt.subplots(figsize=(9, 0.24 * len(rows) + 1.4))
    axes.barh(names, medians, xerr=[low, high], color="#4c72b0", ecolor="#999999", capsize=2)
    axes.axvline(kill["median_seconds_to_kill"] * 1000, color="#dd8452", linestyle="--")
    axes.axvline(kill["p90_seconds_to_kill"] * 1000, color="#c44e52", linestyle=":")
    axes.set_xscale("log")
    axes.set_xlabel(
        f"wall time to the first failing scenario, ms, log scale\n(bar: median of "
        f"{kill['seeds']} seeds; whiskers: min-max; dashed: median over mutants; dotted: p90)"
    )
    axes.set_title(f"kvcheck: time to kill each of {len(rows)} mutants")
    axes.tick_params(axis="y", labelsize=7)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    return True


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs per median (default 5)")
    parser.add_argument("--seeds", type=int, default=5, help="seeds per mutant (default 5)")
    parser.add_argument("--examples", type=int, default=300, help="scenarios per search")
    parser.add_argument("--exhaust-limit", type=float, default=60.0, metavar="SECONDS")
    parser.add_argument("--quick", action="store_true", help="small smoke run")
    parser.add_argument(
        "--replay", action="store_true", help="only the replay cost per step (bench_replay_steps)"
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="measure nothing: redraw the table and chart from an existing --out file",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results.json")
    parser.add_argument("--chart", type=Path, default=ROOT / "docs" / "time_to_kill.png")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.seeds, args.examples, args.exhaust_limit = 2, 2, 100, 5.0
    if args.replay:
        print(f"machine: {machine()}")
        for name, value in bench_replay_steps(repeats=args.repeats).items():
            print(f"  {name}: {value:,.1f}" if isinstance(value, float) else f"  {name}: {value}")
        return
    if args.report_only:
        report(json.loads(args.out.read_text()), args.out, args.chart)
        return

    results: dict[str, Any] = {"machine": machine()}
    print(f"machine: {results['machine']}", flush=True)
    print("throughput ...", flush=True)
    results["throughput"] = bench_throughput(args.repeats, args.examples)
    print(f"  {results['throughput']}", flush=True)
    print("time to kill ...", flush=True)
    results["kill"] = bench_time_to_kill(args.seeds, args.examples)
    print(
        f"  median {results['kill']['median_seconds_to_kill']:.4f} s, "
        f"p90 {results['kill']['p90_seconds_to_kill']:.4f} s",
        flush=True,
    )
    print("exhaustive ...", flush=True)
    results["exhaust"] = bench_exhaust(min(args.repeats, 3), args.exhaust_limit, args.quick)
    results["command"] = "python benchmarks/bench_harness.py" + (" --quick" if args.quick else "")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    report(results, args.out, args.chart)


def report(results: dict[str, Any], out: Path, chart_path: Path) -> None:
    table = markdown(results)
    out.with_suffix(".md").write_text(table + "\n")
    drawn = chart(results, chart_path)
    print()
    print(table)
    print()
    print(f"results: {out}, {out.with_suffix('.md')}" + (f", {chart_path}" if drawn else ""))


if __name__ == "__main__":
    main()
