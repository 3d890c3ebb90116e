"""`kvcheck exhaust TARGET`: every scenario within bounds, breadth-first, states merged; a PASS is
a proof within the bounds and a FAIL comes with a shortest counterexample."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

import attrs

from kvcheck.cli.options import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    EXIT_VIOLATION,
    add_coverage_options,
    add_deadline_option,
    add_family_flags,
    add_json_option,
    add_judging_options,
    add_save_options,
    coverage_below,
    coverage_json,
    coverage_text,
    error_json,
    positive_int,
    refuse_flags_for_others,
    require_coverage,
    seconds,
    warn,
)
from kvcheck.cli.progress import Progress, announce
from kvcheck.core.deadline import describe
from kvcheck.core.family import JudgingOptions, family, family_for_spec
from kvcheck.core.target import Target
from kvcheck.counterexamples.fileformat import save
from kvcheck.counterexamples.replay import from_run, replay_command
from kvcheck.errors import FileWriteError
from kvcheck.mutants import get as get_entry
from kvcheck.mutants import is_entry_spec
from kvcheck.reporting.render import print_timeline
from kvcheck.reporting.text import failure_to_json, format_failure
from kvcheck.reporting.timeline import build_timeline
from kvcheck.search.exhaust import DEFAULT_MAX_MEMORY_MB, ExhaustResult, exhaust
from kvcheck.search.exhaust_parallel import WorkerLost
from kvcheck.targets.loading import load_target
from kvcheck.wording import plural


def add_parser(commands: Any) -> None:
    """Register `exhaust` on the front door's subparsers."""
    exhaust = commands.add_parser(
        "exhaust",
        help="check every scenario within bounds, breadth-first; shortest counterexample",
        description=(
            "Enumerates every scenario within the bounds, shortest first, merging scenarios "
            "that reach the same state, and checks every invariant after every event. TARGET "
            "is builtin:NAME, mutant:NAME, package.module:Qualname or path/to/file.py::Qualname. "
            "Exit 0: no violation within the bounds (or a time/state limit stopped the search "
            "first: verdict 'incomplete'); 1: a violation, with a shortest counterexample, or "
            "line coverage below --min-coverage; 2: usage or load error, or --max-memory "
            "reached (verdict 'incomplete'); 130: Ctrl-C (what was cleared is reported)."
        ),
    )
    exhaust.add_argument("target", help="the resolver to check (forms above)")
    # The bounds are each family's own flags (a target's family is not known before parsing).
    add_family_flags(exhaust, "bounds", lambda owner, group: owner.moves.add_bounds_options(group))
    add_judging_options(
        exhaust,
        global_counters_default=None,
        adaptive_help="stride switching (default: on when switch_stride events have two strides)",
    )
    limits = exhaust.add_argument_group("limits and output")
    limits.add_argument(
        "--max-memory",
        type=positive_int,
        default=DEFAULT_MAX_MEMORY_MB,
        metavar="MB",
        help=(
            "stop cleanly (exit 2, verdict incomplete) once the process's peak memory passes MB; "
            "with --workers, the parent's plus what each worker grew past its start-up "
            f"(default: {DEFAULT_MAX_MEMORY_MB})"
        ),
    )
    add_deadline_option(limits)
    limits.add_argument(
        "--time-limit",
        type=seconds,
        default=None,
        metavar="SECONDS",
        help=(
            "stop, incomplete, after SECONDS, a running call of the target included "
            "(default: no limit)"
        ),
    )
    limits.add_argument(
        "--max-states",
        type=positive_int,
        default=None,
        metavar="N",
        help="stop, incomplete, after this many distinct states (default: no limit)",
    )
    limits.add_argument(
        "--no-merge",
        action="store_true",
        help="do not merge equal states (slow; cross-check) (default: off, merged)",
    )
    limits.add_argument(
        "--no-reduce",
        action="store_true",
        help="key finished, delivered requests in full instead of by id alone (a cross-check of "
        "the reduction; more states) (default: off, reduced)",
    )
    limits.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        metavar="N",
        help="processes sharing the search, each owning the states whose key hashes to it; the "
        "verdict, counts and counterexample do not depend on N (default: 1)",
    )
    add_save_options(limits)
    add_json_option(limits)
    add_coverage_options(exhaust.add_argument_group("the target's own coverage"), gate=True)
    exhaust.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """`kvcheck exhaust TARGET`: enumerate within the bounds given and report.

    Judging options default to a `mutant:NAME` entry's annotations, else to the target's probed
    shape. Returns exit 1 with a shortest counterexample (saved unless `--no-save`) or when the
    target's line coverage is below `--min-coverage`, else 0, also for an incomplete search;
    `--events 0` without `--steps` is a `KvcheckUsageError`.
    """

    def header(bounds: Any) -> str:
        return (
            f"kvcheck: exhausting {args.target} ({bounds.describe()}; deadline "
            f"{describe(args.deadline)}; Ctrl-C stops and reports)"
        )

    announce(
        header(family_for_spec(args.target.strip()).moves.bounds_from_args(args, None)),
        before_load=True,
    )
    # With no deadline, a time limit still bounds each call of the probe run (loading).
    target, entry = _load_exhaust_target(
        args.target, args.allow_unavailable_imports, args.deadline or args.time_limit
    )
    target = attrs.evolve(target, deadline=args.deadline)
    refuse_flags_for_others(args, target)
    moves = family(target.family).moves
    # The bounds may depend on the target (the depths a vLLM release runs at).
    bounds = moves.bounds_from_args(args, target)
    require_coverage(args, target)
    announce(header(bounds), before_load=False)
    options, reasons = moves.search_judging(args, target, bounds, entry)
    try:
        result = _search(args, target, bounds, options)
    except WorkerLost as exc:
        if not args.json:
            raise  # one line on stderr, which says what was established
        print(f"kvcheck: error: {exc}", file=sys.stderr)
        lost = error_json(str(exc), EXIT_USAGE)
        print(
            json.dumps(
                json.loads(lost)
                | {"levels_cleared": exc.levels, "states": exc.states, "scenarios": exc.scenarios},
                indent=2,
            )
        )
        return EXIT_USAGE
    # The first reason is why the options were chosen, which a counterexample file keeps.
    saved_path, replay, warnings = _save(result, args, next(iter(reasons.values()), ""))
    if args.json:
        report = exhaust_to_json(result) | {f"{name}_reason": why for name, why in reasons.items()}
        report["warnings"] = warnings
        report |= coverage_json(result.coverage, args)
        if result.failure is not None:
            report["counterexample_file"] = saved_path
            report["replay_command"] = replay
        print(json.dumps(report, indent=2, default=repr))
    else:
        print(format_exhaust(result, reasons, target.description))
        for line in coverage_text(result.coverage, args):
            print(line)
        if result.failure is not None:
            print()
            sys.stdout.flush()
            print_timeline(build_timeline(result.failure, target=result.target))
            if saved_path:
                print()
                print(f"counterexample saved to {saved_path}")
                print(f"replay with: {replay}")
    if result.stopped == "interrupted":
        return EXIT_INTERRUPTED
    if result.stopped == "memory limit":
        print(
            f"kvcheck: error: exhaust stopped at --max-memory {args.max_memory} MB (peak "
            f"{result.peak_memory_mb:.0f} MB); tighten the bounds or raise --max-memory",
            file=sys.stderr,
        )
        return EXIT_USAGE
    below = coverage_below(result.coverage, args)
    return EXIT_VIOLATION if result.failure is not None or below else EXIT_OK


def _search(
    args: argparse.Namespace,
    target: Target,
    bounds: Any,
    options: JudgingOptions,
) -> ExhaustResult:
    """The search the command line asks for, with its progress line."""
    with Progress() as progress:
        return exhaust(
            target,
            bounds,
            options=options,
            merge=not args.no_merge,
            reduce=not args.no_reduce,
            workers=args.workers,
            max_states=args.max_states,
            time_limit=args.time_limit,
            measure_coverage=not args.no_coverage,
            max_memory_mb=args.max_memory,
            progress=progress,
            report_interrupt=True,
            allow_unavailable_imports=args.allow_unavailable_imports,
        )


def _load_exhaust_target(
    spec: str, allow_unavailable: bool, deadline: float | None
) -> tuple[Target, Any]:
    """The target, and the corpus entry it is (mutant:NAME), whose annotated judging options
    the family takes as defaults; None for any other spec."""
    if is_entry_spec(spec):
        entry = get_entry(spec.strip())
        return attrs.evolve(entry.target(), deadline=deadline), entry
    return load_target(spec, allow_unavailable=allow_unavailable, deadline=deadline), None


def _save(
    result: ExhaustResult, args: argparse.Namespace, convention_reason: str
) -> tuple[str | None, str | None, list[str]]:
    """The counterexample file's path and replay command, and the warning (printed) when it
    could not be written: the finding is reported either way."""
    if result.failure is None or args.no_save:
        return None, None, []
    counterexample = from_run(
        result.failure,
        result.target,
        convention_reason=convention_reason,
        allow_unavailable_imports=args.allow_unavailable_imports,
    )
    try:
        path = str(save(counterexample, args.save_dir))
    except FileWriteError as exc:
        warning = f"{exc}; the finding is reported here only"
        warn(warning)
        return None, None, [warning]
    return path, replay_command(path), []


def format_exhaust(
    result: ExhaustResult,
    reasons: Mapping[str, str] | None = None,
    description: str = "",
) -> str:
    """The text report: target, the options with their `reasons` (by option name, as the
    family's `Moves.search_judging` gives them), bounds, what was explored, then PASS,
    INCOMPLETE, or the shortest counterexample and what else breaks at that length.
    """
    about = f"  ({description})" if description else ""
    moves = family(result.family).moves
    lines = [
        f"target      {result.target}{about}",
        *moves.describe_options(result.options, reasons or {}),
        f"bounds      {result.bounds.describe()}",
        *(f"not run     {why}" for _, why in result.not_run),
        f"explored    {plural(result.scenarios, 'scenario')}, "
        f"{plural(result.states, 'distinct state')}, "
        f"lengths up to {result.depth}, in {result.seconds:.2f} s "
        f"({result.states_per_second:.0f} states/s"
        + (f", {result.workers} workers" if result.workers > 1 else "")
        + ")",
    ]
    failure, violation = result.failure, result.violation
    if failure is None or violation is None:
        if result.complete:
            lines.append("PASS        no violation within bounds")
        else:
            stopped = {
                "interrupted": "Ctrl-C",
                "memory limit": "--max-memory",
                "time limit": "--time-limit",
                "state limit": "--max-states",
            }.get(result.stopped or "", "a limit")
            lines.append(
                f"INCOMPLETE  no violation up to {plural(result.depth, 'event')} (every "
                f"scenario that long checked); {stopped} stopped the search before the bounds "
                "were cleared"
            )
        return "\n".join(lines)
    scenario = failure.scenario
    headline = f"shortest counterexample ({plural(len(scenario.events), 'event')}): "
    lines += format_failure(violation, scenario, headline)
    others = sorted(result.minimal_invariants - {violation.invariant})
    if others:
        lines.append(f"other counterexamples of this length break: {', '.join(others)}")
    return "\n".join(lines)


def exhaust_to_json(result: ExhaustResult) -> dict[str, Any]:
    """The `kvcheck exhaust --json` report (fields listed in docs/contracts.md): the family's
    own option fields (`Moves.options_to_dict`; SGLang's convention and the rest) after the
    target's family, then its options."""
    data: dict[str, Any] = {
        "verdict": result.verdict,
        "target": result.target,
        "family": result.family,
        **family(result.family).moves.options_to_dict(result.options),
        "options": result.options.to_dict(),
        "bounds": result.bounds.to_dict(),
        "not_run": [entry for entry, _ in result.not_run],
        "scenarios": result.scenarios,
        "states": result.states,
        "depth": result.depth,
        "complete": result.complete,
        "stopped": result.stopped,
        "seconds": round(result.seconds, 3),
        "workers": result.workers,
        "peak_memory_mb": round(result.peak_memory_mb),
    }
    violation, scenario = result.violation, result.counterexample
    if violation is not None and scenario is not None:
        data |= failure_to_json(violation, scenario)
        data["minimal_invariants"] = sorted(result.minimal_invariants)
    return data
