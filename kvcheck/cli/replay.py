"""`kvcheck replay FILE`: a counterexample file replayed once, deterministically, without
Hypothesis, against its saved target or --target, with its timeline."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from kvcheck.cli.options import (
    EXIT_OK,
    EXIT_VIOLATION,
    add_deadline_option,
    add_force_option,
    add_json_option,
    add_replay_options,
    input_files,
    note,
    refuse_other_families_flags,
    warn,
)
from kvcheck.cli.progress import Progress
from kvcheck.counterexamples.fileformat import SavedViolation, load
from kvcheck.counterexamples.replay import Replay, replay, replay_choices, replay_command
from kvcheck.errors import FileWriteError
from kvcheck.files import check_destination
from kvcheck.reporting.explain import explain
from kvcheck.reporting.html import write_html
from kvcheck.reporting.render import print_timeline, printable
from kvcheck.reporting.timeline import build_timeline
from kvcheck.targets.loading import spec_path


def add_parser(commands: Any) -> None:
    """Register `replay` on the front door's subparsers."""
    replay_parser = commands.add_parser(
        "replay",
        help="replay a saved counterexample file once, deterministically",
        description=(
            "Replay the scenario of a counterexample file (written by `kvcheck check`) once, "
            "without Hypothesis, against its saved target or --target, and print its timeline. "
            "Exit 0: no violation (fixed); 1: a violation (the saved one or another); "
            "2: unreadable file, unknown schema version or unloadable target."
        ),
    )
    replay_parser.add_argument("file", help="a *.kvcheck.json counterexample file")
    replay_parser.add_argument(
        "--target",
        default=None,
        help="replay against this target instead of the saved one (default: the saved one)",
    )
    add_replay_options(replay_parser)
    add_json_option(replay_parser)
    add_deadline_option(replay_parser)
    replay_parser.add_argument(
        "--html",
        metavar="FILE",
        help="also write the timeline as an HTML page (SVG swimlane) (default: none); never "
        "over the counterexample file",
    )
    add_force_option(replay_parser)
    replay_parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """`kvcheck replay FILE`: replay once, without Hypothesis, and report as text or `--json`.

    The target is the saved one unless `--target` gives another; `--html` also writes the
    timeline. Returns exit 0 when the scenario passes, 1 when any violation shows.
    """
    counterexample = load(args.file)
    inputs = _inputs(args.file, args.target or counterexample.target)
    if args.html:  # a destination refused now is a usage error, before the replay
        check_destination(args.html, inputs=inputs, force=args.force, what="HTML timeline")
    with Progress() as progress:  # a file of thousands of events takes a while
        replayed = replay(
            counterexample,
            args.target,
            path=args.file,
            deadline=args.deadline,
            progress=progress,
            **replay_requests(args, counterexample.scenario.family),
        )
    if replayed.note:  # names the file's target and rule: escaped as the report is
        note(printable(replayed.note, keep_newlines=False))
    html, warnings = None, []
    if args.html:
        try:
            html = str(
                write_html(
                    build_timeline(replayed.result, target=replayed.target),
                    args.html,
                    heading=f"kvcheck replay {Path(args.file).name}",
                    summary=replayed.summary(),
                    inputs=inputs,
                    force=args.force,
                )
            )
        except FileWriteError as exc:  # the replay's verdict stands; the page is a warning
            warnings.append(str(exc))
            warn(str(exc))
    if args.json:
        extra = {"html_report": html, "warnings": warnings}
        print(json.dumps(replay_to_json(replayed) | extra, indent=2))
    else:
        _print_replay(replayed)
        if html:
            print(f"HTML timeline written to {html}")
    return EXIT_OK if replayed.violation is None else EXIT_VIOLATION


def _inputs(file: str, spec: str | None) -> tuple[str, ...]:
    """What `replay` reads: the counterexample file and the target's source file, if any."""
    path = None if spec is None else spec_path(spec)
    return input_files(None, file, *([path] if path else []))


def _print_replay(replayed: Replay) -> None:
    counterexample = replayed.counterexample
    which = "saved target" if replayed.target == counterexample.target else "given target"
    # Every string here but the verdict words may come from the file: printed escaped.
    print(printable(f"replaying {replayed.path} against {replayed.target} ({which})"))
    for name, used, saved in replayed.chosen():
        if used != saved:
            words, flag = name.replace("_", " "), name.replace("_", "-")
            print(f"judged:   {used} {words} (the file's: {saved}; --{flag} file keeps it)")
    if counterexample.violation is not None:
        against = counterexample.found_against or counterexample.target
        saved = (
            f"saved:    {counterexample.violation.where()} against {against} "
            f"(kvcheck {counterexample.kvcheck_version})"
        )
        print(printable(saved, keep_newlines=False))
    print()
    sys.stdout.flush()
    print_timeline(build_timeline(replayed.result, target=replayed.target))
    print()
    print(printable(replayed.summary(), keep_newlines=False))


def replay_to_json(replayed: Replay) -> dict[str, Any]:
    """The `--json` report of a replay (fields listed in docs/contracts.md)."""
    counterexample, violation = replayed.counterexample, replayed.violation
    data: dict[str, Any] = {
        "verdict": "pass" if violation is None else "fail",
        "target": replayed.target,
        "family": replayed.result.scenario.family,
        "options": replayed.judging.to_dict(),
    }
    for name, used, saved in replayed.chosen():  # SGLang's: convention, file_convention
        data[name] = used
        data[f"file_{name}"] = saved
    data |= {
        "note": replayed.note,
        "examples": 1,
        "replay": replayed.status,
        "saved_violation": None
        if counterexample.violation is None
        else counterexample.violation.to_dict(),
        "counterexample_file": replayed.path,
        "replay_command": replay_command(replayed.path or "", replayed),
        "config": counterexample.to_dict()["config"],
        "events": counterexample.to_dict()["events"],
    }
    if violation is not None:
        data["violation"] = SavedViolation.from_violation(violation).to_dict()
        data["explanation"] = explain(replayed.result)
    return data


def replay_requests(args: argparse.Namespace, family_name: str) -> dict[str, str]:
    """What the command line asks of a replay's judging, per option a replay of `family_name`
    may choose (`--convention` for SGLang's): the options it was not given are left out. A
    flag only other families' replays read is a usage error."""
    refuse_other_families_flags(args, family_name, f"{args.file} holds a {family_name} scenario")
    return {
        name: getattr(args, name)
        for name in replay_choices(family_name)
        if getattr(args, name, None) is not None
    }
