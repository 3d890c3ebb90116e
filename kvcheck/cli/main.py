"""The `kvcheck` command line: a thin front door over the public API.

Exit codes (DESIGN.md §6): 0 no violation found, 1 violation found, 2 usage or load error. User
errors are one clear line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

from kvcheck.cli import measure
from kvcheck.cli import replay as counterexample_cli
from kvcheck.core.scenario import GLOBAL_COUNTER_MODES
from kvcheck.counterexamples.fileformat import DEFAULT_DIR
from kvcheck.counterexamples.replay import replay_command
from kvcheck.errors import KvcheckUsageError
from kvcheck.reporting.text import format_verdict, verdict_to_json
from kvcheck.search import DEFAULT_MAX_EXAMPLES
from kvcheck.targets.loading import DEFAULT_TARGETS

if TYPE_CHECKING:
    from kvcheck.search.check import Verdict


EXIT_OK, EXIT_VIOLATION, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, not argparse's usage block: the contract is "one clear line".
        self.exit(EXIT_USAGE, f"kvcheck: error: {message} (see `{self.prog} --help`)\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _seed(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer seed, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="kvcheck",
        description=(
            "Property-based checks of a speculative-decoding resolver's KV accounting under "
            "overlap scheduling. Without a command, checks the built-in seed resolvers and "
            "prints what it found."
        ),
    )
    commands = parser.add_subparsers(dest="command", parser_class=_Parser)
    check_parser = commands.add_parser(
        "check",
        help="search for a scenario on which TARGET breaks an invariant",
        description=(
            "TARGET is builtin:NAME, package.module:Qualname or path/to/file.py::Qualname. "
            "Exit 0: no violation found; 1: violation found; 2: usage or load error."
        ),
    )
    check_parser.add_argument("target")
    check_parser.add_argument(
        "--convention",
        choices=("auto", "preclaim", "honest"),
        default="auto",
        help="committed-length convention to judge by (default: auto, detected from the target)",
    )
    check_parser.add_argument(
        "--global-counters",
        choices=GLOBAL_COUNTER_MODES,
        default="ideal",
        help="ideal: stale rows excluded (default); sglang: counted as SGLang does; off",
    )
    check_parser.add_argument(
        "--adaptive",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=(
            "switch strides between launch and delivery (default: on exactly when the target "
            "feeds the adaptive controller, as SGLang 0.5.12+ does)"
        ),
    )
    check_parser.add_argument(
        "--allow-unavailable-imports",
        action="store_true",
        help=(
            "for path.py::Qualname targets: load even if the code names imports kvcheck cannot "
            "provide (e.g. an abort reason on an error path); using one at run time is still an "
            "error"
        ),
    )
    check_parser.add_argument(
        "--max-examples", type=_positive_int, default=DEFAULT_MAX_EXAMPLES, metavar="N"
    )
    check_parser.add_argument("--seed", type=_seed, default=None, metavar="N")
    check_parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    counterexample_cli.add_check_options(check_parser)
    counterexample_cli.add_commands(commands)
    measure.add_commands(commands)
    commands.add_parser(
        "spellings",
        help="print the SGLang attribute spellings kvcheck's fakes model (a Markdown table)",
        description="The attributes, methods and collaborators a resolver may use, by version.",
    )
    return parser


def _run_check(args: argparse.Namespace) -> int:
    from kvcheck.search.check import check
    from kvcheck.targets.loading import load_target

    target = load_target(args.target, allow_unavailable=args.allow_unavailable_imports)
    verdict = check(
        target,
        convention=args.convention,
        global_counters=args.global_counters,
        adaptive=args.adaptive,
        max_examples=args.max_examples,
        seed=args.seed,
        database=counterexample_cli.database_for(args),
    )
    saved = counterexample_cli.save_failure(verdict, args)
    if args.json:
        report = verdict_to_json(verdict) | counterexample_cli.json_fields(saved)
        print(json.dumps(report, indent=2, default=repr))
    else:
        print(format_verdict(verdict))
        counterexample_cli.print_failure(verdict, saved)
    return EXIT_OK if verdict.passed else EXIT_VIOLATION


def _run_default_job() -> int:
    """The main job on the built-in default: what kvcheck finds in the seed resolvers."""
    from kvcheck.search.check import check

    print("kvcheck: checking the built-in seed resolvers (kvcheck check TARGET for your own)\n")
    verdicts: list[Verdict] = []
    save_options = argparse.Namespace(save_dir=str(DEFAULT_DIR), no_save=False, html=None)
    for spec in DEFAULT_TARGETS:
        verdict = check(spec, seed=0)
        verdicts.append(verdict)
        print(format_verdict(verdict))
        saved = counterexample_cli.save_failure(verdict, save_options)
        if saved is not None:
            print(f"replay with: {replay_command(saved.path)}")
        print()
    found = sum(not v.passed for v in verdicts)
    print(
        f"summary: {found} of {len(verdicts)} built-in targets break an invariant; "
        "rerun one with `kvcheck check builtin:NAME`"
    )
    # The demo ran as intended whatever it found; `kvcheck check` carries the verdict exit codes.
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse already printed its one line (or --help)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        if args.command == "check":
            return _run_check(args)
        if args.command == "spellings":
            from kvcheck.core.spellings import spellings_table

            print(spellings_table())
            return EXIT_OK
        if args.command == "replay":
            return counterexample_cli.run_replay(args)
        if args.command == "regress":
            return counterexample_cli.run_regress(args)
        if args.command in measure.COMMANDS:
            return measure.run(args)
        return _run_default_job()
    except KvcheckUsageError as exc:
        print(f"kvcheck: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        # The reader went away (`kvcheck check --json | head`): stop quietly, and keep Python
        # from failing again while flushing stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_VIOLATION
