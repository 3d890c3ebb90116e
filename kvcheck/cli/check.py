"""`kvcheck check TARGET`, and the bare `kvcheck` demo on the built-in seed resolvers.

A failure is saved as a counterexample file (and, with --html, an HTML timeline) and printed with
its timeline and the command that replays it.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

import attrs

from kvcheck.cli.options import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_VIOLATION,
    add_coverage_options,
    add_deadline_option,
    add_force_option,
    add_json_option,
    add_judging_options,
    add_save_options,
    allocation_line,
    coverage_below,
    coverage_json,
    coverage_text,
    input_files,
    positive_int,
    requested_options,
    require_coverage,
    seconds,
    seed,
    warn,
)
from kvcheck.cli.progress import Progress, announce
from kvcheck.core.deadline import describe
from kvcheck.counterexamples.fileformat import DEFAULT_DIR, Counterexample, save
from kvcheck.counterexamples.replay import replay_command
from kvcheck.errors import FileWriteError, KvcheckUsageError
from kvcheck.files import check_destination
from kvcheck.reporting.html import write_html
from kvcheck.reporting.render import print_timeline
from kvcheck.reporting.text import failure_to_json, format_failure
from kvcheck.reporting.timeline import build_timeline
from kvcheck.search import DEFAULT_MAX_EXAMPLES
from kvcheck.targets.loading import DEFAULT_TARGETS, load_target
from kvcheck.wording import plural

if TYPE_CHECKING:
    from hypothesis.database import ExampleDatabase

    from kvcheck.search.check import Verdict

# Hypothesis (kvcheck.search.check, kvcheck.search.profiles) is imported when a check runs, not
# when the parser is built: `kvcheck replay` shares this front door and must run without it.
# Those imports are marked where they are.


def add_parser(commands: Any) -> None:
    """Register `check` on the front door's subparsers."""
    parser = commands.add_parser(
        "check",
        help="search for a scenario on which TARGET breaks an invariant",
        description=(
            "TARGET is builtin:NAME, package.module:Qualname, path/to/file.py::Qualname, an "
            "SGLang checkout or sglang==VERSION. Exit 0: no violation found; 1: violation found "
            "(or line coverage below --min-coverage); 2: usage or load error."
        ),
    )
    parser.add_argument("target", help="the resolver to check (forms above)")
    add_judging_options(
        parser,
        global_counters_default="ideal",
        adaptive_help=(
            "switch strides between launch and delivery (default: on exactly when the target "
            "feeds the adaptive controller, as SGLang 0.5.12+ does)"
        ),
    )
    parser.add_argument(
        "--max-examples",
        type=positive_int,
        default=DEFAULT_MAX_EXAMPLES,
        metavar="N",
        help=f"scenarios to try before shrinking (default: {DEFAULT_MAX_EXAMPLES})",
    )
    parser.add_argument(
        "--seed",
        type=seed,
        default=None,
        metavar="N",
        help="Hypothesis seed, for a reproducible search (default: none, a random search)",
    )
    add_deadline_option(parser)
    parser.add_argument(
        "--time-limit",
        type=seconds,
        default=None,
        metavar="SECONDS",
        help=(
            "stop searching after SECONDS (a running call of the target included) and report "
            "what was found by then (default: none; the search ends after --max-examples)"
        ),
    )
    add_json_option(parser)
    add_coverage_options(parser.add_argument_group("the target's own coverage"), gate=True)
    group = parser.add_argument_group("counterexamples and reports")
    add_save_options(group)
    group.add_argument(
        "--html",
        metavar="FILE",
        help="on failure, write an HTML timeline (SVG swimlane) here (default: none)",
    )
    add_force_option(group)
    group.add_argument(
        "--database",
        metavar="DIR",
        default=None,
        help="Hypothesis example database directory (default: .hypothesis/examples); failures "
        "found before are tried first",
    )
    group.add_argument(
        "--no-database",
        action="store_true",
        help="use no example database, so a search depends only on --seed (default: off)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """`kvcheck check TARGET`: search, save a failure's files, report as text or `--json`.

    Returns exit 0 when no violation was found and 1 when one was, or when the target's line
    coverage is below `--min-coverage` (the verdict stays `pass`); a usage or load error is
    raised as `KvcheckUsageError` (exit 2). Ctrl-C stops the search: what it established is
    reported (a violation found is saved) and the exit code is 130.
    """
    header = (
        f"kvcheck: checking {args.target} (up to {plural(args.max_examples, 'scenario')} per "
        "convention"
        f", deadline {describe(args.deadline)}"
        + (f", time limit {args.time_limit:g} s" if args.time_limit else "")
        + "; Ctrl-C stops and reports)"
    )
    announce(header, before_load=True)
    from kvcheck.search.check import check  # Hypothesis: only when a check runs

    database = database_for(args)  # one that cannot be saved to is refused before any work
    # With no deadline, a time limit still bounds each call of the probe run (loading).
    target = load_target(
        args.target,
        allow_unavailable=args.allow_unavailable_imports,
        deadline=args.deadline or args.time_limit,
    )
    target = attrs.evolve(target, deadline=args.deadline)
    require_coverage(args, target)
    if args.html:  # a destination refused now is a usage error, before the search
        check_destination(
            args.html, inputs=input_files(target), force=args.force, what="HTML timeline"
        )
    announce(header, before_load=False)
    with Progress() as progress:
        verdict = check(
            target,
            **requested_options(args),
            max_examples=args.max_examples,
            seed=args.seed,
            database=database,
            measure_coverage=not args.no_coverage,
            time_limit_seconds=args.time_limit,
            progress=progress,
            report_interrupt=True,
        )
    saved = save_failure(verdict, args, inputs=input_files(target))
    if args.json:
        report = verdict_to_json(verdict) | coverage_json(verdict.coverage, args)
        print(json.dumps(report | json_fields(saved), indent=2, default=repr))
    else:
        print("\n".join([format_verdict(verdict), *coverage_text(verdict.coverage, args)]))
        print_failure(verdict, saved)
    below = coverage_below(verdict.coverage, args)
    if verdict.stopped == "interrupted":
        return EXIT_INTERRUPTED
    return EXIT_OK if verdict.passed and not below else EXIT_VIOLATION


def run_default_job() -> int:
    """The main job on the built-in default: what kvcheck finds in the seed resolvers."""
    from kvcheck.search.check import check  # Hypothesis: only when a check runs

    print("kvcheck: checking the built-in seed resolvers (kvcheck check TARGET for your own)\n")
    verdicts: list[Verdict] = []
    save_options = argparse.Namespace(save_dir=str(DEFAULT_DIR), no_save=False, html=None)
    for spec in DEFAULT_TARGETS:
        verdict = check(spec, seed=0)
        verdicts.append(verdict)
        print(format_verdict(verdict))
        saved = save_failure(verdict, save_options)
        if saved is not None and saved.path:
            print(f"replay with: {replay_command(saved.path)}")
        print()
    found = sum(not v.passed for v in verdicts)
    print(
        f"summary: {found} of {len(verdicts)} built-in targets break an invariant; "
        "rerun one with `kvcheck check builtin:NAME`"
    )
    # The demo ran as intended whatever it found; `kvcheck check` carries the verdict exit codes.
    return EXIT_OK


def database_for(args: argparse.Namespace) -> ExampleDatabase | None:
    """The example database `kvcheck check` searches with."""
    if getattr(args, "no_database", False):
        return None
    # Hypothesis: only when a check runs
    from kvcheck.search.profiles import DEFAULT_DATABASE_DIR, directory_database

    given = getattr(args, "database", None)
    if given:
        return directory_database(given)  # asked for: one that cannot be saved to is exit 2
    try:
        return directory_database(DEFAULT_DATABASE_DIR)
    except KvcheckUsageError as exc:
        # Nobody asked for the default (a read-only working directory): search without it.
        warn(f"{exc}; searching without one")
        return None


# --- a failure's files -------------------------------------------------------------------------


@attrs.frozen
class Saved:
    """What `kvcheck check` wrote for a failure ("" for what it did not write), and why what it
    was asked to write was not written (`warnings`, already printed on stderr)."""

    counterexample: Counterexample
    path: str
    html: str
    warnings: tuple[str, ...] = ()


def save_failure(
    verdict: Verdict, args: argparse.Namespace, *, inputs: tuple[str, ...] = ()
) -> Saved | None:
    """Write the failing verdict's counterexample file (and HTML); None when it passed.

    A file that cannot be written is a warning on stderr, never an error: the finding is
    reported whatever happens to its files. The HTML page is never written over one of `inputs`
    or, without `--force`, over an existing file.
    """
    from kvcheck.search.check import from_verdict  # Hypothesis: only when a check ran

    allow = bool(getattr(args, "allow_unavailable_imports", False))
    counterexample = from_verdict(verdict, allow_unavailable_imports=allow)
    if counterexample is None:
        return None
    warnings: list[str] = []
    path = html = ""
    if not getattr(args, "no_save", False):
        try:
            path = str(save(counterexample, args.save_dir))
        except FileWriteError as exc:
            warnings.append(f"{exc}; the finding is reported here only")
    if getattr(args, "html", None):
        failure = verdict.outcome.failure
        assert failure is not None
        try:
            html = str(
                write_html(
                    build_timeline(failure, target=verdict.target),
                    args.html,
                    heading=f"kvcheck check {verdict.target}",
                    summary=f"counterexample file: {path}" if path else "",
                    inputs=inputs,
                    force=bool(getattr(args, "force", False)),
                )
            )
        except FileWriteError as exc:
            warnings.append(str(exc))
    for warning in warnings:
        warn(warning)
    return Saved(counterexample, path, html, tuple(warnings))


# --- reports -----------------------------------------------------------------------------------


def print_failure(verdict: Verdict, saved: Saved | None) -> None:
    """After the text verdict: the timeline, the file and how to replay it."""
    failure = verdict.outcome.failure
    if failure is None or saved is None:
        return
    print()
    sys.stdout.flush()
    print_timeline(build_timeline(failure, target=verdict.target))
    print()
    if saved.path:
        print(f"counterexample saved to {saved.path}")
        print(f"replay with: {replay_command(saved.path)}")
    if saved.html:
        print(f"HTML timeline written to {saved.html}")


def format_verdict(verdict: Verdict) -> str:
    """The text report of a verdict: target, convention, options, API shape, PASS or FAIL."""
    lines = [
        f"target      {verdict.target}  ({verdict.description})",
        f"convention  {verdict.convention}  ({verdict.convention_reason})",
        f"options     global counters {verdict.global_counters}, "
        f"adaptive {'on' if verdict.adaptive else 'off'}"
        + (f" ({verdict.adaptive_reason})" if verdict.adaptive_reason.startswith("auto") else ""),
        *allocation_line(verdict.allocation_path, verdict.allocation_reason),
    ]
    if verdict.api_shape is not None:
        lines.append(f"api shape   {verdict.api_shape.summary()}")
    violation, scenario = verdict.violation, verdict.counterexample
    if violation is None or scenario is None:
        if verdict.stopped == "interrupted":
            lines.append(
                f"INTERRUPTED no violation in the {plural(verdict.examples, 'scenario')} run "
                "before Ctrl-C "
                f"({verdict.seconds:.2f} s)"
            )
        else:
            why = "; stopped by --time-limit" if verdict.stopped else ""
            lines.append(
                f"PASS        no violation in {plural(verdict.examples, 'scenario')} "
                f"({verdict.seconds:.2f} s{why})"
            )
        return "\n".join(lines)
    lines += [
        *format_failure(violation, scenario),
        f"found after {plural(verdict.outcome.examples_to_failure or 0, 'scenario')}; "
        f"{verdict.examples} run in {verdict.seconds:.2f} s including shrinking",
    ]
    if verdict.outcome.stopped:
        lines.append(
            f"shrinking was cut short ({verdict.outcome.stopped}): a smaller scenario may exist"
        )
    return "\n".join(lines)


def verdict_to_json(verdict: Verdict) -> dict[str, Any]:
    """The `--json` report of a verdict (fields listed in CHANGELOG.md)."""
    data: dict[str, Any] = {
        "verdict": verdict.verdict,
        "target": verdict.target,
        "convention": verdict.convention,
        "convention_reason": verdict.convention_reason,
        "global_counters": verdict.global_counters,
        "adaptive": verdict.adaptive,
        "examples": verdict.examples,
        "seconds": round(verdict.seconds, 3),
        "adaptive_reason": verdict.adaptive_reason,
        "allocation_path": verdict.allocation_path,
        "allocation_reason": verdict.allocation_reason,
        "api_shape": verdict.api_shape.to_dict() if verdict.api_shape is not None else None,
        "stopped": verdict.stopped,
    }
    violation, scenario = verdict.violation, verdict.counterexample
    if violation is not None and scenario is not None:
        data |= failure_to_json(violation, scenario)
        data["examples_to_failure"] = verdict.outcome.examples_to_failure
        data["counterexample_file"] = None
    return data


def json_fields(saved: Saved | None) -> dict[str, Any]:
    """The fields a saved failure adds to the `--json` report."""
    if saved is None:
        return {"warnings": []}
    return {
        "counterexample_file": saved.path or None,
        "replay_command": replay_command(saved.path) if saved.path else None,
        "explanation": saved.counterexample.explanation,
        "html_report": saved.html or None,
        "warnings": list(saved.warnings),
    }
