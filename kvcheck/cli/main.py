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
import traceback
from collections.abc import Sequence
from typing import Any, Final

from kvcheck.cli import check, exhaust, fuzz, mutants, regress, releases, replay
from kvcheck.cli.options import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    EXIT_VIOLATION,
    Parser,
    error_json,
    wants_json,
)
from kvcheck.core import interrupts, isolation
from kvcheck.core.family import family, family_names, register_from_environment
from kvcheck.errors import KvcheckInternalError, KvcheckUsageError
from kvcheck.version import VERSION

_COMMANDS: tuple[Any, ...] = (check, replay, regress, releases, mutants, exhaust, fuzz)
# The commands that start again isolated when a call of the target never returns (the others
# end with one line naming target-deadline): each of their runs is one scenario in one process.
# None: the demo on the built-ins, which never hang.
_RESTARTABLE: Final = frozenset({"check", "replay", None})


def _run_spellings(args: argparse.Namespace) -> int:
    """`kvcheck spellings`: each family's table of the engine API spellings it models."""
    tables: list[str] = []
    for name in family_names():
        distribution = family(name).distribution
        table = None if distribution is None else distribution.front.spellings_table()
        if table is not None:
            tables.append(table)
    print("\n\n".join(tables))
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
    parser.add_argument(
        "--version", action="version", version=f"kvcheck {VERSION}", help="print the version"
    )
    parser.add_argument("--debug", action="store_true", help=_DEBUG_HELP)
    commands = parser.add_subparsers(dest="command", parser_class=Parser)
    for command in _COMMANDS:
        command.add_parser(commands)
    spellings = commands.add_parser(
        "spellings",
        help="print the SGLang attribute spellings kvcheck's fakes model (a Markdown table)",
        description="The attributes, methods and collaborators a resolver may use, by version.",
    )
    spellings.set_defaults(run=_run_spellings)
    for command_parser in commands.choices.values():
        # Also after the command (`kvcheck check T --debug`); SUPPRESS keeps the front door's
        # value when the command's parser does not see the option.
        command_parser.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help=_DEBUG_HELP
        )
    return parser


_DEBUG_HELP = "on an error (exit 2), print the traceback too (default: one line)"


def _fault(exc: Exception) -> KvcheckUsageError:
    """An exception that escaped kvcheck's code as the one-line error it becomes (exit 2)."""
    if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] == "torch":
        return KvcheckUsageError(
            "kvcheck needs PyTorch to build the resolver's tensors, and it is not installed: "
            "pip install torch (a CPU build is enough)"
        )
    return KvcheckInternalError(
        f"kvcheck's own code raised {type(exc).__name__}: {exc}; this is a kvcheck bug, not a "
        "verdict on the target (--debug shows the traceback)"
    )


def console() -> None:
    """The `kvcheck` console script: `main()`, and on Ctrl-C an exit that skips the interpreter's
    teardown (unloading torch alone takes about half a second), once the report is flushed."""
    isolation.guard_stdout()
    isolation.guard_stderr()
    try:
        code = main(supervised=True)
    except KeyboardInterrupt:  # a second Ctrl-C while the first one's report was printed
        code = EXIT_INTERRUPTED
    _flush_report()
    if code == EXIT_INTERRUPTED:
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def _flush_report() -> None:
    """Flush the report now, while a reader that went away (`kvcheck check --json | head -0`)
    can still be handled: the pipe's end goes to /dev/null, so the interpreter's own flush at
    exit cannot fail and turn the exit code into 120."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _discard_report()


def _discard_report() -> None:
    """Point stdout's file descriptor at /dev/null: its reader is gone, and what is still
    buffered must not fail again when it is flushed."""
    isolation.to_devnull(sys.stdout.fileno())


def main(argv: Sequence[str] | None = None, *, supervised: bool = False) -> int:
    """Run the command line; returns the exit code (0 pass, 1 violation, 2 usage/load error).

    An error is one line on stderr; under `--json` it is also the one JSON object on stdout
    (`{"error": ..., "exit_code": 2}`), so a reader of `--json` always gets one object.

    `supervised`: this is the command line's own process (`console`), which may end itself,
    or start again isolated, when a call of the target cannot be stopped in-process
    (`kvcheck.core.isolation`).
    """
    words = sys.argv[1:] if argv is None else list(argv)
    # Every Ctrl-C stops the command, also one that lands where Python drops exceptions.
    interrupts.install()
    try:
        # Before the parser is built: each registered family adds its own flags to it.
        register_from_environment()
        args = build_parser().parse_args(words)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except SystemExit as exc:  # --help or --version, already printed
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    except KvcheckUsageError as exc:  # a malformed command line (Parser.error) or variable
        return _error(str(exc), as_json=wants_json(words))
    try:
        if supervised:
            as_json = bool(getattr(args, "json", False))
            # Raises the Ctrl-C pressed while an earlier image of this process started again.
            isolation.resume_from_environment()
            isolation.supervise(
                restartable=args.command in _RESTARTABLE,
                report=lambda message, code: _error(message, as_json=as_json, code=code),
            )
        run = getattr(args, "run", None)
        return int(run(args)) if run is not None else check.run_default_job()
    except KvcheckUsageError as exc:
        if getattr(args, "debug", False):
            traceback.print_exception(exc, file=sys.stderr)
        return _error(str(exc), as_json=bool(getattr(args, "json", False)))
    except KeyboardInterrupt:
        # Ctrl-C where a command had nothing to report yet (loading, replaying): no traceback.
        print("kvcheck: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`kvcheck check --json | head`): stop quietly, and keep Python
        # from failing again while flushing stdout at exit.
        _discard_report()
        return EXIT_VIOLATION
    except Exception as exc:
        if getattr(args, "debug", False):
            traceback.print_exception(exc, file=sys.stderr)
        return _error(str(_fault(exc)), as_json=bool(getattr(args, "json", False)))


def _error(message: str, *, as_json: bool, code: int = EXIT_USAGE) -> int:
    """Report an error that ends the command: one line on stderr, and the JSON object too."""
    print(f"kvcheck: error: {message}", file=sys.stderr)
    if as_json:
        print(error_json(message, code))
    return code
