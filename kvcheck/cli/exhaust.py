"""`kvcheck exhaust TARGET`: every scenario within bounds, breadth-first, states merged; a PASS is
a proof within the bounds and a FAIL comes with a shortest counterexample."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import attrs

from kvcheck.cli.options import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    EXIT_VIOLATION,
    add_coverage_options,
    add_deadline_option,
    add_json_option,
    add_judging_options,
    add_save_options,
    algorithm_list,
    coverage_below,
    coverage_json,
    coverage_text,
    eos_list,
    error_json,
    event_kinds,
    grammar_list,
    int_list,
    non_negative_int,
    overlap_modes,
    positive_int,
    require_coverage,
    seconds,
    warn,
)
from kvcheck.cli.progress import Progress, announce
from kvcheck.core.deadline import describe
from kvcheck.core.target import Target
from kvcheck.counterexamples.fileformat import save
from kvcheck.counterexamples.replay import from_run, replay_command
from kvcheck.errors import FileWriteError, KvcheckUsageError
from kvcheck.families.sglang.scenario import ALGORITHMS, EVENT_KINDS, Convention, GlobalCounterMode
from kvcheck.families.sglang.target import allocation_rules
from kvcheck.mutants import get as get_entry
from kvcheck.mutants import is_entry_spec
from kvcheck.reporting.render import print_timeline
from kvcheck.reporting.text import failure_to_json, format_failure
from kvcheck.reporting.timeline import build_timeline
from kvcheck.search.exhaust import (
    DEFAULT_MAX_MEMORY_MB,
    Bounds,
    ExhaustResult,
    default_adaptive,
    exhaust,
)
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
    bounds = exhaust.add_argument_group("bounds")
    default = Bounds()
    bounds.add_argument(
        "--requests",
        type=positive_int,
        default=default.requests,
        metavar="N",
        help=f"requests per scenario (default: {default.requests})",
    )
    bounds.add_argument(
        "--events",
        type=non_negative_int,
        default=default.events,
        metavar="N",
        help="longest scenario, every event counted; 0: unbounded, needs --steps "
        f"(default: {default.events})",
    )
    bounds.add_argument(
        "--steps",
        type=non_negative_int,
        default=None,
        metavar="N",
        help="at most N step events per scenario (default: only --events bounds them)",
    )
    bounds.add_argument(
        "--max-accept",
        type=positive_int,
        default=default.max_accept,
        metavar="N",
        help=f"most draft tokens a row accepts (default: {default.max_accept})",
    )
    bounds.add_argument(
        "--strides",
        type=int_list,
        default=default.strides,
        metavar="S,S",
        help=f"speculative strides (default: {_commas(default.strides)})",
    )
    bounds.add_argument(
        "--kinds",
        type=event_kinds,
        default=default.kinds,
        metavar="K,K",
        help=f"event kinds to enumerate (default all: {','.join(EVENT_KINDS)})",
    )
    bounds.add_argument(
        "--prompt-lens",
        type=int_list,
        default=default.prompt_lens,
        metavar="P,P",
        help=f"prompt lengths of admitted requests (default: {_commas(default.prompt_lens)})",
    )
    bounds.add_argument(
        "--max-new",
        type=int_list,
        default=default.max_new,
        metavar="M,M",
        help=f"max_new_tokens of admitted requests (default: {_commas(default.max_new)})",
    )
    bounds.add_argument(
        "--eos",
        type=eos_list,
        default=default.eos,
        metavar="E,E",
        help=f"output position of a request's EOS token, or none (default: {_commas(default.eos)})",
    )
    bounds.add_argument(
        "--overlap", type=overlap_modes, default=default.overlap, help="on, off or both (default)"
    )
    bounds.add_argument(
        "--algorithms",
        type=algorithm_list,
        default=default.algorithms,
        metavar="A,A",
        help=(
            f"speculative algorithms, among {','.join(ALGORITHMS)}, or 'auto' for every one the "
            "target supports (default eagle)"
        ),
    )
    bounds.add_argument(
        "--block-cap",
        type=int_list,
        default=default.block_cap_lengths,
        metavar="N,N",
        help=(
            "block-accept and cap lengths a decode row may report, for targets that read them "
            "(default: results carry none)"
        ),
    )
    bounds.add_argument(
        "--grammars",
        type=grammar_list,
        default=default.grammars,
        metavar="G,G",
        help=(
            "grammars an admitted request may carry: none, accept, terminate@N, reject@N, for "
            "targets that consult one (default none)"
        ),
    )
    bounds.add_argument(
        "--allocation",
        type=lambda text: tuple(text.split(",")),
        default=None,
        metavar="R,R",
        help="allocation rules to enumerate, at page size 1: off, 0.5.6, 0.5.12, 0.5.13, "
        "0.5.16, among those of the target's SGLang generations (default: off, or the newest "
        "of them for a target that touches kv_allocated_len)",
    )
    judge = exhaust.add_argument_group("judging")
    add_judging_options(
        judge,
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


def _commas(values: tuple[object, ...]) -> str:
    return ",".join("none" if value is None else str(value) for value in values)


def run(args: argparse.Namespace) -> int:
    """`kvcheck exhaust TARGET`: enumerate within the bounds given and report.

    Judging options default to a `mutant:NAME` entry's annotations, else to the target's probed
    shape. Returns exit 1 with a shortest counterexample (saved unless `--no-save`) or when the
    target's line coverage is below `--min-coverage`, else 0, also for an incomplete search;
    `--events 0` without `--steps` is a `KvcheckUsageError`.
    """
    if args.events == 0 and args.steps is None:
        raise KvcheckUsageError("--events 0 (unbounded) needs a --steps bound")
    bounds = Bounds(
        requests=args.requests,
        events=args.events or None,
        steps=args.steps,
        max_accept=args.max_accept,
        strides=args.strides,
        kinds=args.kinds,
        prompt_lens=args.prompt_lens,
        max_new=args.max_new,
        eos=args.eos,
        overlap=args.overlap,
        # Without --allocation, `_within_shape` chooses from the target's shape.
        **({} if args.allocation is None else {"allocations": args.allocation}),
    )
    header = (
        f"kvcheck: exhausting {args.target} ({bounds.describe()}; deadline "
        f"{describe(args.deadline)}; Ctrl-C stops and reports)"
    )
    announce(header, before_load=True)
    # With no deadline, a time limit still bounds each call of the probe run (loading).
    target, defaults = _load_exhaust_target(
        args.target, args.allow_unavailable_imports, args.deadline or args.time_limit
    )
    target = attrs.evolve(target, deadline=args.deadline)
    bounds = _within_shape(bounds, args, target)
    require_coverage(args, target)
    announce(header, before_load=False)
    convention, convention_reason = _exhaust_convention(args.convention, target, defaults)
    global_counters = args.global_counters or defaults.get("global_counters", "ideal")
    if args.adaptive is not None:
        adaptive, adaptive_reason = args.adaptive, "given"
    elif "adaptive" in defaults:
        adaptive, adaptive_reason = defaults["adaptive"], "as the corpus entry is judged"
    else:
        adaptive = default_adaptive(bounds)
        adaptive_reason = (
            "switch_stride events between two or more strides"
            if adaptive
            else "no stride switches within the bounds"
        )
    try:
        result = _search(args, target, bounds, convention, global_counters, adaptive)
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
    saved_path, replay, warnings = _save(result, args, convention_reason)
    if args.json:
        report = exhaust_to_json(result) | {
            "convention_reason": convention_reason,
            "adaptive_reason": adaptive_reason,
            "warnings": warnings,
        }
        report |= coverage_json(result.coverage, args)
        if result.failure is not None:
            report["counterexample_file"] = saved_path
            report["replay_command"] = replay
        print(json.dumps(report, indent=2, default=repr))
    else:
        print(format_exhaust(result, convention_reason, adaptive_reason, target.description))
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
    bounds: Bounds,
    convention: Convention,
    global_counters: GlobalCounterMode,
    adaptive: bool,
) -> ExhaustResult:
    """The search the command line asks for, with its progress line."""
    with Progress() as progress:
        return exhaust(
            target,
            bounds,
            convention=convention,
            global_counters=global_counters,
            adaptive=adaptive,
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


def _within_shape(bounds: Bounds, args: argparse.Namespace, target: Target) -> Bounds:
    """The bounds with `--algorithms auto` resolved; algorithms, block/cap lengths or grammars the
    target cannot be judged on (its probed shape) are a usage error naming what it supports."""
    shape = target.shape
    algorithms = shape.algorithms if args.algorithms is None else args.algorithms
    problems = []
    unsupported = [a for a in algorithms if a not in shape.algorithms]
    if unsupported:
        problems.append(
            f"it is judged on {', '.join(shape.algorithms)} only, not {', '.join(unsupported)}"
        )
    if args.block_cap and not shape.block_cap:
        problems.append("it reads no block/cap lengths (--block-cap)")
    if any(g is not None for g in args.grammars) and not shape.grammar:
        problems.append("it consults no grammar (--grammars)")
    if problems:
        raise KvcheckUsageError(f"{target.description}: " + "; ".join(problems))
    allowed = allocation_rules(target)
    # Without --allocation: no allocation where the target allows that, else the newest rule of
    # its generations (a rule it is not judged under is refused by `exhaust`).
    allocations = args.allocation or (("off",) if "off" in allowed else allowed[-1:])
    return attrs.evolve(
        bounds,
        algorithms=algorithms,
        block_cap_lengths=args.block_cap,
        grammars=args.grammars,
        allocations=allocations,
    )


def _load_exhaust_target(
    spec: str, allow_unavailable: bool, deadline: float | None
) -> tuple[Target, dict[str, Any]]:
    """The target, and the judging options a corpus entry is annotated with (mutant:NAME)."""
    if is_entry_spec(spec):
        entry = get_entry(spec.strip())
        defaults = entry.options.to_dict()
        return attrs.evolve(entry.target(), deadline=deadline), defaults
    return load_target(spec, allow_unavailable=allow_unavailable, deadline=deadline), {}


def _exhaust_convention(choice: str, target: Target, defaults: dict[str, Any]) -> tuple[Any, str]:
    if choice != "auto":
        return choice, f"convention {choice} (given)"
    if "convention" in defaults:
        return defaults["convention"], "as the corpus entry is annotated"
    return target.shape.convention, target.shape.convention_reason


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
    convention_reason: str = "",
    adaptive_reason: str = "",
    description: str = "",
) -> str:
    """The text report: target, convention and options with their reasons, bounds, what was
    explored, then PASS, INCOMPLETE, or the shortest counterexample and what else breaks at that
    length.
    """
    about = f"  ({description})" if description else ""
    conv = f"  ({convention_reason})" if convention_reason else ""
    why = f" ({adaptive_reason})" if adaptive_reason else ""
    lines = [
        f"target      {result.target}{about}",
        f"convention  {result.convention}{conv}",
        f"options     global counters {result.global_counters}, "
        f"adaptive {'on' if result.adaptive else 'off'}{why}",
        f"bounds      {result.bounds.describe()}",
        *(
            f"not run     allocation {rule} with overlap {'on' if overlap else 'off'}: "
            "under adaptive switching a scheduler fault, not judged (docs/semantics.md §5)"
            for rule, overlap in result.skipped
        ),
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
    """The `kvcheck exhaust --json` report (fields listed in CHANGELOG.md)."""
    data: dict[str, Any] = {
        "verdict": result.verdict,
        "target": result.target,
        "convention": result.convention,
        "global_counters": result.global_counters,
        "adaptive": result.adaptive,
        "bounds": result.bounds.to_dict(),
        "not_run": [{"allocation": rule, "overlap": overlap} for rule, overlap in result.skipped],
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
