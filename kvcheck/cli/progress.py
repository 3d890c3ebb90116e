"""A long command's progress, on stderr: a live line on a terminal, plain lines otherwise.

On a terminal the line is a `rich` status, redrawn in place and gone when the command ends; when
stderr is not a terminal (CI logs, a pipe) a plain `kvcheck: ...` line is written every
`KVCHECK_PROGRESS_SECONDS` seconds (default 5; 0 turns them off). Never on stdout, so `--json`
stays one object there.
"""

from __future__ import annotations

import os
import sys
import time
from types import TracebackType
from typing import Any, Final, TextIO

# How often a plain progress line is written when stderr is not a terminal.
DEFAULT_PLAIN_SECONDS: Final = 5.0
_LIVE_SECONDS: Final = 0.1


def plain_interval() -> float:
    """Seconds between plain lines: `KVCHECK_PROGRESS_SECONDS`, else 5 (0: none)."""
    text = os.environ.get("KVCHECK_PROGRESS_SECONDS", "")
    try:
        return max(0.0, float(text)) if text else DEFAULT_PLAIN_SECONDS
    except ValueError:
        return DEFAULT_PLAIN_SECONDS


def announce(text: str, *, before_load: bool) -> None:
    """The line a long command starts with, on stderr. Called before the target loads and after:
    it shows before on a terminal (at once, however long loading takes) and after elsewhere, so
    that a bad input still gets exactly one line of error there. Not at all where plain
    progress lines are off (`KVCHECK_PROGRESS_SECONDS=0`)."""
    terminal = sys.stderr.isatty()
    if not terminal and not plain_interval():
        return
    if terminal == before_load:
        print(text, file=sys.stderr, flush=True)


class Progress:
    """Call it with a status line as often as you like; it shows what is due. A context manager:
    the live line is removed on exit (Ctrl-C included)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream or sys.stderr
        self._live = self._stream.isatty()
        self._every = _LIVE_SECONDS if self._live else plain_interval()
        self._last = time.monotonic()
        self._status: Any = None

    def __enter__(self) -> Progress:
        if self._live:
            from rich.console import Console  # only on a terminal

            console = Console(file=self._stream)
            self._status = console.status("starting", spinner="dots")
            self._status.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def __call__(self, text: str) -> None:
        """Show `text` if a line is due (live: 10 a second; plain: every few seconds)."""
        if not self._every:
            return
        now = time.monotonic()
        if now - self._last < self._every:
            return
        self._last = now
        if self._status is not None:
            self._status.update(text)
        else:
            print(f"kvcheck: {text}", file=self._stream, flush=True)

    def say(self, text: str) -> None:
        """A line shown at once whatever the mode (the header a command starts with)."""
        if self._status is not None:
            self._status.console.print(text)
        else:
            print(text, file=self._stream, flush=True)
