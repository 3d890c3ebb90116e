"""The `kvcheck` front door: builds the parser from the command modules and runs one.

Each command lives in its own module (`kvcheck.cli.check`, `.replay`, `.regress`, `.exhaust`,
`.mutants`) with an `add_parser(commands)` that registers it and sets `run`; shared options and
the exit codes are `kvcheck.cli.options`. Without a command, `kvcheck` runs the demo on the
built-in seed resolvers.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from kvcheck.cli import check, exhaust, mutants, regress, releases, replay
from kvcheck.cli.options import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, EXIT_VIOLATION, Parser
from kvcheck.core.spellings import spellings_table
from kvcheck.errors import KvcheckUsageError

_COMMANDS: tuple[Any, ...] = (check, replay, regress, releases, mutants, exhaust)


def _run_spellings(args: argparse.Namespace) -> int:
    print(spellings_table())
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: every command module's subparser, plus `spellings`."""
    parser = Parser(
        prog="kvcheck",
        description=(
            "Property-based checks of a speculative-decoding resolver's KV accounting under "
            "overlap scheduling. Without a command, checks the built-in seed resolvers and "
            "prints what it found."
        ),
    )
    commands = parser.add_subparsers(dest="command", parser_class=Parser)
    for command in _COMMANDS:
        command.add_parser(commands)
    spellings = commands.add_parser(
        "spellings",
        help="print the SGLang attribute spellings kvcheck's fakes model (a Markdown table)",
        description="The attributes, methods and collaborators a resolver may use, by version.",
    )
    spellings.set_defaults(run=_run_spellings)
    return parser


def console() -> None:
    """The `kvcheck` console script: `main()`, and on Ctrl-C an exit that skips the interpreter's
    teardown (unloading torch alone takes about half a second), once the report is flushed."""
    code = main()
    if code == EXIT_INTERRUPTED:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 pass, 1 violation, 2 usage/load error)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse already printed its one line (or --help)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        run = getattr(args, "run", None)
        return int(run(args)) if run is not None else check.run_default_job()
    except KvcheckUsageError as exc:
        print(f"kvcheck: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        # Ctrl-C where a command had nothing to report yet (loading, replaying): no traceback.
        print("kvcheck: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`kvcheck check --json | head`): stop quietly, and keep Python
        # from failing again while flushing stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_VIOLATION
