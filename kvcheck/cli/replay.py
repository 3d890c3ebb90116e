"""The counterexample side of the command line: `check`'s saved files, `replay` and `regress`.

`kvcheck.cli.main` stays the front door; this module adds the options and subcommands that deal with
counterexample files, so that importing it (and running `kvcheck replay`) never loads Hypothesis.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from kvcheck.counterexamples.fileformat import DEFAULT_DIR, Counterexample, load, save
from kvcheck.counterexamples.replay import Replay, replay, replay_command
from kvcheck.errors import KvcheckUsageError

if TYPE_CHECKING:
    from hypothesis.database import ExampleDatabase

    from kvcheck.search.check import Verdict

EXIT_OK, EXIT_VIOLATION, EXIT_USAGE = 0, 1, 2


# --- options of `kvcheck check` -----------------------------------------------------------------


def add_check_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("counterexamples and reports")
    group.add_argument(
        "--save-dir",
        default=str(DEFAULT_DIR),
        metavar="DIR",
        help=f"where a failure's counterexample file is written (default: {DEFAULT_DIR})",
    )
    group.add_argument(
        "--no-save", action="store_true", help="do not write a counterexample file on failure"
    )
    group.add_argument(
        "--html", metavar="FILE", help="on failure, write an HTML timeline (SVG swimlane) here"
    )
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
        help="use no example database (a search then depends only on --seed)",
    )


def database_for(args: argparse.Namespace) -> ExampleDatabase | None:
    """The example database `kvcheck check` searches with."""
    if getattr(args, "no_database", False):
        return None
    from hypothesis.database import DirectoryBasedExampleDatabase

    from kvcheck.search.profiles import DEFAULT_DATABASE_DIR

    return DirectoryBasedExampleDatabase(getattr(args, "database", None) or DEFAULT_DATABASE_DIR)


@attrs.frozen
class Saved:
    """What `kvcheck check` wrote for a failure ("" for what it did not write)."""

    counterexample: Counterexample
    path: str
    html: str


def save_failure(verdict: Verdict, args: argparse.Namespace) -> Saved | None:
    """Write the failing verdict's counterexample file (and HTML); None when it passed."""
    from kvcheck.search.check import from_verdict

    allow = bool(getattr(args, "allow_unavailable_imports", False))
    counterexample = from_verdict(verdict, allow_unavailable_imports=allow)
    if counterexample is None:
        return None
    path = "" if getattr(args, "no_save", False) else str(save(counterexample, args.save_dir))
    html = getattr(args, "html", None) or ""
    if html:
        from kvcheck.reporting.html import write_html
        from kvcheck.reporting.timeline import build_timeline

        failure = verdict.outcome.failure
        assert failure is not None
        write_html(
            build_timeline(failure, target=verdict.target),
            html,
            heading=f"kvcheck check {verdict.target}",
            summary=f"counterexample file: {path}" if path else "",
        )
    return Saved(counterexample, path, html)


def print_failure(verdict: Verdict, saved: Saved | None) -> None:
    """After the text verdict: the timeline, the file and how to replay it."""
    failure = verdict.outcome.failure
    if failure is None or saved is None:
        return
    from kvcheck.reporting.render import print_timeline
    from kvcheck.reporting.timeline import build_timeline

    print()
    sys.stdout.flush()
    print_timeline(build_timeline(failure, target=verdict.target))
    print()
    if saved.path:
        print(f"counterexample saved to {saved.path}")
        print(f"replay with: {replay_command(saved.path)}")
    if saved.html:
        print(f"HTML timeline written to {saved.html}")


def json_fields(saved: Saved | None) -> dict[str, Any]:
    if saved is None:
        return {}
    return {
        "counterexample_file": saved.path or None,
        "replay_command": replay_command(saved.path) if saved.path else None,
        "explanation": saved.counterexample.explanation,
        "html_report": saved.html or None,
    }


# --- `kvcheck replay` and `kvcheck regress` -----------------------------------------------------


def add_commands(commands: Any) -> None:
    """Add `replay` and `regress` to the CLI's subparsers."""
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
        "--target", default=None, help="replay against this target instead of the saved one"
    )
    replay_parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    replay_parser.add_argument(
        "--html", metavar="FILE", help="also write the timeline as an HTML page (SVG swimlane)"
    )

    regress_parser = commands.add_parser(
        "regress",
        help="turn a counterexample file into a standalone pytest regression test",
        description=(
            "Print (or write with --out) a pytest module that replays the counterexample against "
            "its target and asserts that no invariant is violated: it fails while the bug is "
            "there and passes once it is fixed."
        ),
    )
    regress_parser.add_argument("file", help="a *.kvcheck.json counterexample file")
    regress_parser.add_argument("--out", metavar="PATH", help="write the test here (e.g. tests/)")
    regress_parser.add_argument(
        "--target", default=None, help="the target the test replays (default: the saved one)"
    )


def run_replay(args: argparse.Namespace) -> int:
    counterexample = load(args.file)
    replayed = replay(counterexample, args.target, path=args.file)
    if args.html:
        from kvcheck.reporting.html import write_html
        from kvcheck.reporting.timeline import build_timeline

        write_html(
            build_timeline(replayed.result, target=replayed.target),
            args.html,
            heading=f"kvcheck replay {Path(args.file).name}",
            summary=replayed.summary(),
        )
    if args.json:
        print(json.dumps(replay_to_json(replayed) | {"html_report": args.html}, indent=2))
    else:
        _print_replay(replayed)
        if args.html:
            print(f"HTML timeline written to {args.html}")
    return EXIT_OK if replayed.violation is None else EXIT_VIOLATION


def _print_replay(replayed: Replay) -> None:
    from kvcheck.reporting.render import print_timeline
    from kvcheck.reporting.timeline import build_timeline

    counterexample = replayed.counterexample
    which = "saved target" if replayed.target == counterexample.target else "given target"
    print(f"replaying {replayed.path} against {replayed.target} ({which})")
    if counterexample.violation is not None:
        against = counterexample.found_against or counterexample.target
        print(
            f"saved:    {counterexample.violation.where()} against {against} "
            f"(kvcheck {counterexample.kvcheck_version})"
        )
    print()
    sys.stdout.flush()
    print_timeline(build_timeline(replayed.result, target=replayed.target))
    print()
    print(replayed.summary())


def replay_to_json(replayed: Replay) -> dict[str, Any]:
    counterexample, violation = replayed.counterexample, replayed.violation
    scenario = counterexample.scenario
    data: dict[str, Any] = {
        "verdict": "pass" if violation is None else "fail",
        "target": replayed.target,
        "convention": scenario.config.convention,
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
        from kvcheck.core.jsonable import jsonable
        from kvcheck.reporting.explain import explain

        data["violation"] = {
            "invariant": violation.invariant,
            "event_index": violation.event_index,
            "rid": violation.rid,
            "expected": jsonable(violation.expected),
            "observed": jsonable(violation.observed),
            "message": violation.message,
        }
        data["explanation"] = explain(replayed.result)
    return data


def run_regress(args: argparse.Namespace) -> int:
    from kvcheck.counterexamples.regress import function_name, regression_test
    from kvcheck.targets.loading import load_target

    counterexample = load(args.file)
    target = args.target or counterexample.target
    if target is None:
        raise KvcheckUsageError(f"{args.file} names no target; give one with --target")
    load_target(target)  # a target that no longer exists is an error now, not in the test
    text = regression_test(counterexample, source=args.file, target=target)
    if not args.out:
        sys.stdout.write(text)
        return EXIT_OK
    out = Path(args.out)
    if out.is_dir() or args.out.endswith(("/", "\\")):
        out = out / f"test_kvcheck_{function_name(counterexample)}.py"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise KvcheckUsageError(f"cannot write {str(out)!r}: {exc.strerror or exc}") from None
    print(f"wrote {out}")
    return EXIT_OK
