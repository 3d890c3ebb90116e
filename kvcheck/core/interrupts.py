"""Ctrl-C that always stops kvcheck, wherever it lands.

Python raises `KeyboardInterrupt` wherever the main thread happens to be when SIGINT arrives. Two
places drop it silently, and the command would go on as if nothing had been pressed:

- a callback Python calls itself and whose exceptions it only reports (`sys.unraisablehook`): a
  garbage-collector callback (Hypothesis times its collections with one, so about one Ctrl-C in
  five during `check` landed there), a `__del__`, a weakref callback;
- the target, when it swallows every exception (`except BaseException`, a bare `except`);
- an import of a C extension (numpy's, imported by torch), which turns it into an `ImportError`
  that torch takes for a missing numpy: torch is imported with Ctrl-C `held`.

`install` (the command line does it once, before any work) counts every SIGINT and records one
that an unraisable context dropped. The engine asks at every call of the target
(`raise_if_dropped` before it, `swallowed_since` after it) and raises `KeyboardInterrupt` again
there, so the command stops as it does for a Ctrl-C that arrived anywhere else. Costs two global
reads per call. Standard library only.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

_received = 0  # SIGINTs received since `install`
_received_at: float | None = None  # time.monotonic() of the latest
_holding = False  # inside `held`
_dropped = False  # a KeyboardInterrupt was raised where Python drops exceptions
_unraisable_before: Callable[[Any], None] = sys.unraisablehook


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    global _received, _received_at, _dropped
    _received += 1
    _received_at = time.monotonic()
    if _holding:
        _dropped = True  # raised when `held` ends
        return
    raise KeyboardInterrupt


@contextmanager
def held() -> Iterator[None]:
    """Within the block, Ctrl-C waits, and is raised when the block ends. For importing a C
    extension: a `KeyboardInterrupt` inside numpy's initialisation (torch imports it) turns into
    an `ImportError`, or into a numpy that torch quietly does without, losing the Ctrl-C, and
    numpy cannot be imported again in that process."""
    global _holding
    outer, _holding = _holding, True
    try:
        yield
    finally:
        _holding = outer
    if not outer:
        raise_if_dropped()


def _on_unraisable(unraisable: Any) -> None:
    """A `KeyboardInterrupt` Python could not raise is recorded (the next call of the target
    raises it again) rather than printed; anything else goes to the hook this replaced."""
    global _dropped
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        _dropped = True
        return
    _unraisable_before(unraisable)


def install() -> None:
    """Count SIGINTs and catch dropped interrupts, from now on. Only over Python's own SIGINT
    handler (an embedding program's handler is left alone) and only from the main thread,
    where handlers can be installed."""
    global _received, _received_at, _dropped, _unraisable_before
    _received = 0
    _received_at = None
    _dropped = False
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) in (signal.default_int_handler, _on_sigint):
        signal.signal(signal.SIGINT, _on_sigint)
    if sys.unraisablehook is not _on_unraisable:
        _unraisable_before, sys.unraisablehook = sys.unraisablehook, _on_unraisable


def received() -> int:
    """How many SIGINTs arrived since `install` (0 without it)."""
    return _received


def last_received_at() -> float | None:
    """`time.monotonic()` when the latest SIGINT arrived (None: none since `install`)."""
    return _received_at


def raise_if_dropped() -> None:
    """Raise `KeyboardInterrupt` once for a Ctrl-C that Python dropped since the last call."""
    global _dropped
    if _dropped:
        _dropped = False
        raise KeyboardInterrupt


def swallowed_since(count: int) -> bool:
    """Whether a SIGINT arrived since `received()` was `count`: a call of the target that then
    ended without `KeyboardInterrupt` swallowed it."""
    return _received != count


def _after_fork_in_child() -> None:
    """A forked child (`kvcheck.core.isolation`) leaves Ctrl-C to its parent: what the parent
    received is not the child's."""
    global _received, _received_at, _dropped
    _received, _received_at, _dropped = 0, None, False


os.register_at_fork(after_in_child=_after_fork_in_child)
