"""`kvcheck fuzz TARGET`: a campaign of seeded searches in many processes on one example database.

The campaign itself is `kvcheck.search.campaign`; this module is its command line, its live
display on stderr (a `rich` table on a terminal, a plain line every few seconds otherwise) and its
report: every distinct failure shrunk, replayed here once more, saved as a counterexample file and
printed with its replay command; `--json` prints one summary object on stdout. Exit 0 no
violation, 1 a violation, 2 usage error (or every worker crashed), 130 Ctrl-C (what was found is
kept and reported).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from kvcheck.cli.options import (
    EXIT_OK,
    EXIT_USAGE,
    EXIT_VIOLATION,
    add_coverage_options,
    add_deadline_option,
    add_json_option,
    add_judging_options,
    add_save_options,
    allocation_line,
    positive_int,
    requested_options,
    seconds_or_forever,
    seed,
    warn,
)
from kvcheck.core.family import family
from kvcheck.counterexamples.fileformat import save
from kvcheck.counterexamples.replay import replay, replay_command
from kvcheck.errors import FileWriteError, KvcheckUsageError, NondeterministicTargetError
from kvcheck.reporting.text import failure_to_json, format_failure
from kvcheck.targets.loading import load_target
from kvcheck.wording import plural

if TYPE_CHECKING:
    from kvcheck.core.target import Target
    from kvcheck.search.campaign import CampaignPlan, CampaignState, Found, WorkerStatus

# Hypothesis (kvcheck.search.campaign) is imported when a campaign runs, not when the parser is
# built: `kvcheck replay` shares this front door and must run without it.

EXIT_INTERRUPTED: Final = 130
DEFAULT_DURATION: Final = 60.0
# A plain progress line this often when stderr is not a terminal.
PLAIN_EVERY: Final = 5.0


def usable_cores() -> int:
    """The cores this process may run on (the default `--workers`)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def add_parser(commands: Any) -> None:
    """Register `fuzz` on the front door's subparsers."""
    parser = commands.add_parser(
        "fuzz",
        help="a campaign: many seeded searches in parallel processes on one example database",
        description=(
            "Run --workers independent seeded searches of TARGET (forms as for `check`) for "
            "--duration seconds or --max-examples scenarios in total, sharing failures through "
            "the example database (a directory, or redis://HOST:PORT/N for workers on many "
            "machines). Exit 0: no violation found; 1: violation found; 2: usage or load error; "
            "130: interrupted (what was found is saved and reported)."
        ),
    )
    parser.add_argument("target", help="the resolver to fuzz (forms as for `check`)")
    add_judging_options(
        parser,
        global_counters_default="ideal",
        adaptive_help=(
            "switch strides between launch and delivery (default: on exactly when the target "
            "feeds the adaptive controller); with --convention auto the campaign judges by the "
            "detected convention only"
        ),
    )
    campaign = parser.add_argument_group("the campaign")
    campaign.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        metavar="N",
        help=f"worker processes (default: the usable cores, here {usable_cores()})",
    )
    campaign.add_argument(
        "--duration",
        type=seconds_or_forever,
        default=None,
        metavar="SECONDS",
        help="each worker searches this long, from when it has loaded the target; `inf` runs "
        f"until Ctrl-C (default: {DEFAULT_DURATION:g}, or no limit with --max-examples)",
    )
    campaign.add_argument(
        "--max-examples",
        type=positive_int,
        default=None,
        metavar="N",
        help="stop after N scenarios in total, shared between the workers (default: no limit)",
    )
    campaign.add_argument(
        "--seed",
        type=seed,
        default=None,
        metavar="N",
        help="the campaign's seed: each worker's rounds get distinct seeds derived from it "
        "(default: a random one, reported)",
    )
    add_deadline_option(campaign)
    campaign.add_argument(
        "--database",
        metavar="DIR|URL",
        default=None,
        help="the example database the workers share: a directory, or redis://HOST:PORT/N "
        "(needs the redis extra) for workers on many machines; failures saved there are "
        "replayed first (default: .hypothesis/examples)",
    )
    campaign.add_argument(
        "--no-database",
        action="store_true",
        help="use no example database (default: off)",
    )
    campaign.add_argument(
        "--generator",
        choices=("random", "hypothesis"),
        default="random",
        help="how workers draw scenarios: random (a seeded random generator with the same "
        "scenario distribution, several times faster; failures shrunk by kvcheck and saved in "
        "the database as scenarios) or hypothesis (Hypothesis's engine, as `check` uses it) "
        "(default: random)",
    )
    campaign.add_argument(
        "--keep-going",
        action="store_true",
        help="collect the distinct failures (by invariant and shrunk scenario) until the end "
        "instead of stopping at the first (default: off)",
    )
    add_json_option(parser)
    add_coverage_options(parser.add_argument_group("the target's own coverage"), gate=False)
    add_save_options(parser.add_argument_group("counterexamples"))
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """`kvcheck fuzz TARGET`: run the campaign, save and report what it found (exit 130 on
    Ctrl-C, also before the workers start)."""
    try:
        return _run(args)
    except KeyboardInterrupt:
        print("kvcheck: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _run(args: argparse.Namespace) -> int:
    # Hypothesis: only when a campaign runs
    from kvcheck.search.campaign import CampaignPlan, open_database, run_campaign
    from kvcheck.search.profiles import DEFAULT_DATABASE_DIR

    database = _database(args, open_database, DEFAULT_DATABASE_DIR)
    target = load_target(
        args.target, allow_unavailable=args.allow_unavailable_imports, deadline=args.deadline
    )
    # A campaign judges by the family's first choice only (SGLang's detected convention under
    # --convention auto): its workers search round after round under one set of options.
    judging = family(target.family).judge.judging(requested_options(args), target)
    duration = args.duration
    if duration is None and args.max_examples is None:
        duration = DEFAULT_DURATION
    workers = args.workers or usable_cores()
    plan = CampaignPlan(
        target=target.spec,
        options=judging.options,
        reason=judging.reason,
        workers=workers,
        seed=args.seed if args.seed is not None else random.SystemRandom().getrandbits(32),
        database=database,
        duration=None if duration is None or math.isinf(duration) else duration,
        max_examples=args.max_examples,
        keep_going=args.keep_going,
        measure_coverage=not args.no_coverage,
        allow_unavailable_imports=args.allow_unavailable_imports,
        deadline=args.deadline,
        generator=args.generator,
    )
    display = _Display(plan, live=sys.stderr.isatty())
    reports: list[dict[str, Any]] = []

    def found(failure: Found) -> None:  # saved as it arrives: a campaign killed later keeps it
        reports.append(_report_failure(failure, target, args))
        if reports[-1]["counterexample_file"]:
            display.line(f"saved to {reports[-1]['counterexample_file']}")

    try:
        state = run_campaign(plan, on_update=display.update, on_event=display.event, on_found=found)
    finally:
        display.close()
    if state.error:
        raise KvcheckUsageError(state.error)
    unreproduced = [r for r in reports if r["not_reproduced"]]
    if unreproduced:
        # The worker ran the scenario (twice: its search checks) and this process once more, and
        # they disagree: as `check` does on the same sign, no verdict.
        first = unreproduced[0]
        saved = f"; saved to {first['counterexample_file']}" if first["counterexample_file"] else ""
        raise NondeterministicTargetError(
            f"worker {first['worker']}'s counterexample gives {first['not_reproduced']} when "
            "replayed in this process: the target gave two different results on the same "
            f"scenario; kvcheck judges deterministic resolvers only, so no verdict{saved}"
        )
    every_worker_crashed = ""
    if state.crashed and len(state.crashed) == len(state.workers) and not state.failures:
        every_worker_crashed = (
            f"every worker crashed; the first: {state.crashed[0].error} (kvcheck's fault or the "
            "machine's, not a verdict on the target)"
        )
    # The summary is printed whatever happened to the workers: what they ran is established.
    if args.json:
        summary = campaign_json(state, duration, reports)
        if every_worker_crashed:
            summary |= {"error": every_worker_crashed, "exit_code": EXIT_USAGE}
        print(json.dumps(summary, indent=2, default=repr))
    else:
        print(_format_campaign(state, target, duration, reports))
    for warning in state.warnings:
        warn(warning)
    if every_worker_crashed:
        print(f"kvcheck: error: {every_worker_crashed}", file=sys.stderr)
        return EXIT_USAGE
    if state.interrupted:
        return EXIT_INTERRUPTED
    return EXIT_VIOLATION if state.failures else EXIT_OK


def _database(
    args: argparse.Namespace,
    open_database: Callable[[str | None], object],
    default: str,
) -> str | None:
    """The example database the campaign shares, refused before any work when it was asked for
    and cannot be used (exit 2); the default, when it cannot be written, is left out with a
    warning (nobody asked for it)."""
    if args.no_database:
        return None
    if args.database:
        open_database(args.database)  # unreachable, a file, unwritable: exit 2
        return str(args.database)
    try:
        open_database(default)
    except KvcheckUsageError as exc:
        warn(f"{exc}; the workers search without one")
        return None
    return default


def _report_failure(found: Found, target: Target, args: argparse.Namespace) -> dict[str, Any]:
    """Replay a failure here (its file must reproduce it), save it, and gather its report."""
    counterexample = found.counterexample
    try:
        replayed = replay(counterexample, target)
    except KvcheckUsageError as exc:
        replayed = None
        warn(f"worker {found.worker}'s counterexample does not replay in this process: {exc}")
    not_reproduced = ""
    if replayed is not None and replayed.status != "same":
        not_reproduced = replayed.summary()
        warn(
            f"worker {found.worker}'s counterexample gives {not_reproduced} when replayed "
            "in this process: the target may be nondeterministic"
        )
    path = ""
    if not args.no_save:
        try:
            path = str(save(counterexample, args.save_dir))
        except FileWriteError as exc:
            warn(f"{exc}; the finding is reported here only")
    report: dict[str, Any] = {
        "worker": found.worker,
        "examples_to_failure": found.examples_to_failure,
        "seconds": round(found.seconds, 3),
        "counterexample_file": path or None,
        "replay_command": replay_command(path) if path else None,
        "explanation": counterexample.explanation,
        "not_reproduced": not_reproduced,
    }
    violation = None if replayed is None else replayed.violation
    if violation is not None:
        report |= failure_to_json(violation, counterexample.scenario)
        report["text"] = format_failure(violation, counterexample.scenario)
    return report


def campaign_json(
    state: CampaignState, duration: float | None, reports: list[dict[str, Any]]
) -> dict[str, Any]:
    """The `--json` summary of a campaign (fields listed in CHANGELOG.md)."""
    plan = state.plan
    first = min((f["examples_to_failure"] for f in reports), default=None)
    return {
        "verdict": "fail" if reports else "pass",
        "interrupted": state.interrupted,
        "target": plan.target,
        "convention": plan.convention,
        "convention_reason": plan.convention_reason,
        "global_counters": plan.global_counters,
        "adaptive": plan.adaptive,
        "adaptive_reason": plan.adaptive_reason,
        "allocation_path": plan.allocation_path,
        "allocation_reason": plan.allocation_reason,
        "workers": plan.workers,
        "seed": plan.seed,
        "generator": plan.generator,
        "database": None if plan.database is None else _shown_database(plan.database),
        "duration": None if duration is None or math.isinf(duration) else duration,
        "max_examples": plan.max_examples,
        "keep_going": plan.keep_going,
        "examples": state.examples,
        "seconds": round(state.seconds, 3),
        "examples_per_second": round(state.rate, 1),
        "per_worker": [
            {
                "worker": w.index,
                "state": w.state,
                "examples": w.examples,
                "seconds": round(w.seconds, 3),
                "examples_per_second": round(w.rate, 1),
                "error": w.error or None,
            }
            for w in state.workers
        ],
        "crashed_workers": [w.index for w in state.crashed],
        "labels_reached": sorted(state.reached),
        "coverage": state.coverage.to_dict() if state.coverage is not None else None,
        "examples_to_first_failure": first,
        "duplicate_failures": state.duplicates,
        "warnings": list(state.warnings),
        "failures": [
            {k: v for k, v in r.items() if k not in ("text", "not_reproduced")} for r in reports
        ],
    }


def _shown_database(spec: str) -> str:
    from kvcheck.search.campaign import redact  # Hypothesis: only when a campaign ran

    return redact(spec)


def _format_campaign(
    state: CampaignState, target: Target, duration: float | None, reports: list[dict[str, Any]]
) -> str:
    plan = state.plan
    budget = []
    if duration is not None:
        budget.append("until Ctrl-C" if math.isinf(duration) else f"{duration:g} s")
    if plan.max_examples is not None:
        budget.append(plural(plan.max_examples, "scenario"))
    database = "none" if plan.database is None else _shown_database(plan.database)
    lines = [
        f"target      {target.spec}  ({target.description})",
        f"convention  {plan.convention}  ({plan.convention_reason})",
        f"options     global counters {plan.global_counters}, "
        f"adaptive {'on' if plan.adaptive else 'off'}"
        + (f" ({plan.adaptive_reason})" if plan.adaptive_reason else ""),
        *allocation_line(plan.allocation_path, plan.allocation_reason),
        f"campaign    {plural(plan.workers, 'worker')}, seed {plan.seed}, "
        f"{plan.generator} generator, database {database}, "
        f"{' or '.join(budget)}" + (", keep going" if plan.keep_going else ""),
        f"scenarios   {state.examples} in {state.seconds:.1f} s: {state.rate:.0f}/s searching "
        "(" + ", ".join(f"worker {w.index} {_worker_rate(w)}" for w in state.workers) + ")",
        f"labels      {plural(len(state.reached), 'coverage label')} reached",
    ]
    if state.coverage is not None:
        lines.append(f"coverage    {state.coverage.summary()}")
    for worker in state.crashed:
        lines.append(f"CRASHED     worker {worker.index}: {worker.error}")
    if state.interrupted:
        lines.append("INTERRUPTED by Ctrl-C; what was found so far is below")
    if not reports:
        lines.append(f"PASS        no violation in {plural(state.examples, 'scenario')}")
    for number, report in enumerate(reports, 1):
        lines.append("")
        if len(reports) > 1:
            lines.append(f"failure {number} of {len(reports)}")
        lines += report.get("text", [])
        lines.append(
            f"found by worker {report['worker']} after {report['examples_to_failure']} of its "
            "scenarios"
        )
        if report["counterexample_file"]:
            lines.append(f"counterexample saved to {report['counterexample_file']}")
            lines.append(f"replay with: {report['replay_command']}")
    return "\n".join(lines)


def _worker_rate(worker: WorkerStatus) -> str:
    """A worker's rate for the text report; a crashed worker's says it stopped."""
    rate = f"{worker.rate:.0f}/s"
    return f"{rate} until it crashed" if worker.state == "crashed" else rate


class _Display:
    """Progress on stderr: a live `rich` table on a terminal, else a plain line now and then."""

    def __init__(self, plan: CampaignPlan, *, live: bool) -> None:
        self._plan = plan
        self._last_line = time.monotonic()
        self._live: Any = None
        if live:  # rich's live display: only on a terminal
            from rich.console import Console
            from rich.live import Live

            self._live = Live(console=Console(stderr=True), refresh_per_second=4, transient=True)
            self._live.start()

    def update(self, state: CampaignState) -> None:
        """Redraw (terminal) or print a line if one is due (otherwise)."""
        if self._live is not None:
            self._live.update(self._table(state))
        elif time.monotonic() - self._last_line >= PLAIN_EVERY:
            self._last_line = time.monotonic()
            print(f"kvcheck fuzz: {self._summary(state)}", file=sys.stderr, flush=True)

    def event(self, state: CampaignState, line: str) -> None:
        """A failure, a crash or a stop: one line, at once."""
        self.line(line)

    def line(self, line: str) -> None:
        """One line on stderr, above the live table if there is one."""
        if self._live is not None:
            self._live.console.print(f"kvcheck fuzz: {line}")
        else:
            print(f"kvcheck fuzz: {line}", file=sys.stderr, flush=True)

    def close(self) -> None:
        """Stop the live display."""
        if self._live is not None:
            self._live.stop()

    def _summary(self, state: CampaignState) -> str:
        rates = ", ".join(
            "crashed" if w.state == "crashed" else f"{w.rate:.0f}" for w in state.workers
        )
        text = (
            f"{state.seconds:.0f} s, {plural(state.examples, 'scenario')} ({state.rate:.0f}/s; "
            f"per worker {rates}), {plural(len(state.failures), 'failure')}, "
            f"{plural(len(state.reached), 'label')}"
        )
        if state.coverage is not None:
            text += f", coverage {state.coverage.line_percent:.0f}% of lines"
        if state.crashed:
            text += f", {plural(len(state.crashed), 'worker')} crashed"
        return text

    def _table(self, state: CampaignState) -> Any:
        from rich.table import Table  # only on a terminal, as above

        table = Table(title=f"kvcheck fuzz {self._plan.target}", caption=self._summary(state))
        for column in ("worker", "state", "scenarios", "per second"):
            table.add_column(column, justify="right" if column != "state" else "left")
        for worker in state.workers:
            table.add_row(
                str(worker.index), worker.state, str(worker.examples), f"{worker.rate:.0f}"
            )
        return table
