"""The `kvcheck` command line: one module per command, shared options in `kvcheck.cli.options`.

`kvcheck.cli:main` is the command line as a function and `kvcheck.cli:console` the console
entry point. This package imports nothing itself: importing the commands takes a fifth of a
second (longer on a busy machine), and a Ctrl-C meanwhile must exit 130 like any other, which
only a caller that is already running can see to.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

# 128 + SIGINT, as `kvcheck.cli.options.EXIT_INTERRUPTED` (not imported here: see above).
_EXIT_INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> int:
    """`kvcheck.cli.main.main`: run the command line, return the exit code."""
    from kvcheck.cli.main import main as run

    return run(argv)


def console() -> None:
    """The `kvcheck` console script: `kvcheck.cli.main.console`, exiting 130 when Ctrl-C comes
    while the commands are still being imported."""
    try:
        from kvcheck.cli.main import console as run
    except KeyboardInterrupt:
        os._exit(_EXIT_INTERRUPTED)
    run()
