"""Deadlines on the target's calls, and the time limit of a whole run.

Every call of the target (the resolver, and a sibling the engine calls itself) runs under a
deadline: a call still running after `seconds` is interrupted with `TargetDeadlineExceeded`, which
the engine records as a `target-deadline` violation. A run may also carry a time limit
(`time_limit`): when it passes, inside a call or between calls, `TimeLimitReached` stops the run;
that is no verdict on the target, the caller reports what it established so far.

How a call is interrupted (the choice, and why):

- In the main thread, `signal.setitimer(ITIMER_REAL)` arms SIGALRM and its handler raises in the
  target's frame. That interrupts a pure-Python loop and a `time.sleep` alike (the handler runs
  between bytecodes, and a sleep returns early to run it). kvcheck's CLI, Hypothesis (which runs
  a test in its caller's thread) and pytest-xdist workers all run the target in the main thread.
- In any other thread, or when someone else has an ITIMER_REAL armed (pytest-timeout's signal
  method, say, which this must not disturb), a watchdog thread raises the exception in the
  target's thread with `PyThreadState_SetAsyncExc`. That interrupts Python code at its next
  bytecode, but not a blocking C call (a `time.sleep` ends first): documented, not hidden.

Both raise exception classes derived from `BaseException`, so a target's `except Exception` does
not swallow them; one that swallows everything (`except BaseException`, a bare `except`) is
interrupted again every `REFIRE_SECONDS`, and a call that returns after its deadline counts as
exceeding it whatever it did with the exception. The verdict thus depends only on whether the call
ran past its deadline, which is what makes a deadline counterexample replay as one. What cannot be
stopped in-process: a target that swallows every interruption forever (it loops around a bare
`except`), and, outside the main thread, a blocking C call.

When in-process interruption fails, a monitor thread (`watch_stuck`, which the command line
starts) sees the call still running `grace` seconds past its deadline, or past a Ctrl-C, and
hands it to `kvcheck.core.isolation`, which ends the process and reports the call from a child
process instead (a call that never returns is still `target-deadline`). Calls are numbered
(`calls_started`), so that such a call can be named and, in the child that reports it, made to
end at its deadline without running (`fail_calls`).

kvcheck's own code inside a call (coverage.py started and stopped around the target) runs
`shielded`: no signal arrives meanwhile (a handler run under coverage.py's tracer while it holds
its locks could deadlock), and its time is given back to the call.

Cost: a call with a deadline pays two `setitimer` system calls (main thread; the handler stays
installed between calls, and arming the timer tells whether someone else's was running), or a
lock and a dictionary entry (elsewhere): about 2 us, against 15-50 us for a resolver call and far
more for the engine step around it (`benchmarks/bench_deadline.py`).
"""

from __future__ import annotations

import ctypes
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, Final

from kvcheck.core import interrupts

# A resolver call takes well under a millisecond (a few with coverage measured); SGLang calls it
# once per decode step, whose own budget is tens of milliseconds. A call still running after a
# quarter of a second is a hang or a performance bug, and a deadline this short keeps shrinking a
# hanging scenario (every candidate that still hangs costs one deadline) to seconds.
DEFAULT_DEADLINE: Final = 0.25
# How often a deadline exception is raised again in a call that swallowed it.
REFIRE_SECONDS: Final = 0.05


class TargetDeadlineExceeded(BaseException):
    """A call of the target ran past its deadline (the `target-deadline` violation).

    A `BaseException`, so that a target's `except Exception` cannot swallow it.
    """

    def __init__(self, seconds: float = 0.0) -> None:
        super().__init__(seconds)
        self.seconds = seconds

    def __str__(self) -> str:
        return f"the call ran past its {self.seconds:g} s deadline"


class TimeLimitReached(BaseException):
    """The run's time limit passed: stop and report what was established (no verdict)."""


# --- the run's time limit -------------------------------------------------------------------------

_stop_at: float | None = None  # time.monotonic() when the current time limit passes

# Guarded calls started in this process (`reset_calls` sets it back), and the numbers of those
# that end at their deadline without running (`fail_calls`: a call known to never return).
_calls = 0
_fail_calls: frozenset[int] = frozenset()


def calls_started() -> int:
    """How many guarded calls started since `reset_calls` (the number of the latest)."""
    return _calls


def reset_calls(failing: frozenset[int] = frozenset()) -> None:
    """Number calls from 1 again; the calls numbered in `failing` raise
    `TargetDeadlineExceeded` instead of running (they were seen to never return)."""
    global _calls, _fail_calls
    _calls = 0
    _fail_calls = failing


@contextmanager
def time_limit(seconds: float | None, *, replace: bool = False) -> Iterator[None]:
    """Within the block, a call of the target is interrupted when `seconds` have passed, and
    `check_time_limit` raises `TimeLimitReached`. None: no limit. Nested limits keep the
    earlier end, unless `replace` (`time_limit(None, replace=True)`: none at all within)."""
    global _stop_at
    outer = _stop_at
    if replace:
        _stop_at = None
    if seconds is not None:
        end = time.monotonic() + seconds
        _stop_at = end if _stop_at is None else min(_stop_at, end)
    try:
        yield
    finally:
        _stop_at = outer


def check_time_limit() -> None:
    """Raise `TimeLimitReached` when the current time limit has passed (between calls)."""
    if _stop_at is not None and time.monotonic() >= _stop_at:
        raise TimeLimitReached


def time_left() -> float | None:
    """Seconds until the current time limit passes (None: no limit), never below zero."""
    return None if _stop_at is None else max(0.0, _stop_at - time.monotonic())


# --- one guarded call ---------------------------------------------------------------------------


class _Scope:
    """One guarded call: its deadline, whether it is still running, and whether it was
    interrupted (and by what)."""

    __slots__ = (
        "active",
        "deadline",
        "due",
        "fired",
        "last_fire",
        "number",
        "pending",
        "shield",
        "started",
        "stop_at",
        "thread",
    )

    def __init__(self, deadline: float | None, stop_at: float | None, due: float) -> None:
        self.started = time.monotonic()
        self.number = _calls
        self.deadline = deadline
        self.stop_at = stop_at
        self.due = due
        self.active = True
        self.fired: type[BaseException] | None = None
        self.last_fire = 0.0
        self.thread = threading.get_ident()
        # Inside kvcheck's own code called from the call (`shielded`): an interruption then waits.
        self.shield = 0
        self.pending = False

    def reason(self) -> type[BaseException]:
        """What passed: the run's time limit (when it has) or the call's deadline."""
        if self.stop_at is not None and time.monotonic() >= self.stop_at - 1e-3:
            return TimeLimitReached
        return TargetDeadlineExceeded

    def exception(self) -> BaseException:
        """The exception the call ends with once interrupted."""
        if self.fired is TimeLimitReached:
            return TimeLimitReached()
        return TargetDeadlineExceeded(self.deadline or 0.0)


_OURS: Final = (TargetDeadlineExceeded, TimeLimitReached)
_alarm_scope: _Scope | None = None  # the main thread's guarded call, if one is running
# Our SIGALRM handler stays installed between calls (installing and restoring a Python handler
# around each call cost 8 us of its 15): what it replaced, run for a SIGALRM that is not ours,
# and when our own timer was last disarmed (a signal handled just after is ours, late).
_replaced: Any = None
_disarmed_at = 0.0
# The C module's own `getsignal` (CPython's `signal` imports it as `_signal`).
_getsignal: Callable[[int], Any] = getattr(signal, "_signal", signal).getsignal


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    scope = _alarm_scope
    if scope is None or not scope.active:
        if scope is None and time.monotonic() - _disarmed_at > 0.5 and callable(_replaced):
            _replaced(signum, frame)  # someone else's alarm, for the handler we replaced
        return
    # A one-shot timer, armed again here: a storm of signals can never outrun the handler.
    signal.setitimer(signal.ITIMER_REAL, REFIRE_SECONDS)
    if scope.shield:
        scope.pending = True
        return
    scope.fired = scope.fired or scope.reason()
    raise scope.exception()


class _Watchdog:
    """A daemon thread that interrupts guarded calls of other threads past their deadline."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.scopes: dict[int, _Scope] = {}
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._raise = ctypes.pythonapi.PyThreadState_SetAsyncExc

    def watch(self, scope: _Scope) -> None:
        with self.lock:
            self.scopes[scope.thread] = scope
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="kvcheck-deadline", daemon=True
                )
                self._thread.start()
        self._wake.set()

    def release(self, scope: _Scope) -> None:
        """Forget `scope`, and let an exception set for it but not yet raised land here. Once
        this has run, nothing more is raised in its thread."""
        while True:
            try:
                with self.lock:
                    scope.active = False
                    if self.scopes.get(scope.thread) is scope:
                        del self.scopes[scope.thread]
                if scope.fired is not None:
                    # Not cleared with SetAsyncExc(id, NULL): CPython 3.11 would leave the
                    # interpreter's "async exception pending" flag set for good. Delivered on
                    # a few bytecodes of our own instead, and dropped.
                    for _ in range(1000):
                        pass
                return
            except _OURS:  # raised while leaving: `scope.fired` already records it
                continue

    def _loop(self) -> None:
        while True:
            with self.lock:
                now = time.monotonic()
                for scope in self.scopes.values():
                    if not scope.active or now < scope.due:
                        continue
                    if scope.shield:
                        scope.pending = True
                        continue
                    if scope.fired is not None and now - scope.last_fire < REFIRE_SECONDS:
                        continue
                    scope.fired = scope.fired or scope.reason()
                    scope.last_fire = now
                    self._raise(ctypes.c_ulong(scope.thread), ctypes.py_object(scope.fired))
                waiting = [s.due for s in self.scopes.values() if s.active]
            if not waiting:
                self._wake.wait()
                self._wake.clear()
                continue
            pause = max(min(waiting) - time.monotonic(), 0.0)
            self._wake.wait(min(max(pause, REFIRE_SECONDS / 5), REFIRE_SECONDS))
            self._wake.clear()


_watchdog = _Watchdog()


def _quiet_unraisable(unraisable: Any) -> None:
    """Drop an interruption of ours that landed where Python cannot raise it (a garbage
    collector callback, a `__del__`): the call's scope has recorded it, and the call ends with
    it once it returns or when the timer fires again. Anything else goes to the hook we
    replaced."""
    if isinstance(unraisable.exc_value, _OURS):
        return
    _unraisable_before(unraisable)


_unraisable_before: Callable[[Any], None] = sys.unraisablehook


class _InCall(threading.local):
    """The guarded call running in this thread, if any (a class default: no lookup fails)."""

    scope: _Scope | None = None


_in_call = _InCall()
# With our handler installed and at least this long to the call's end, the timer is armed first
# and asked after (`setitimer` returns what it replaced): someone else's timer found then is put
# back before ours could fire. Otherwise it is asked first (`getitimer`), one system call more.
_ARM_FIRST_ABOVE: Final = 1e-3


def _use_alarm() -> bool:
    return (
        _alarm_scope is None
        and hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
    )


def call_with_deadline(deadline: float | None, function: Callable[..., Any], *args: Any) -> Any:
    """`function(*args)` interrupted after `deadline` seconds (None or 0: no deadline) or when
    the run's time limit passes, whichever comes first: `TargetDeadlineExceeded` or
    `TimeLimitReached`. A call inside another guarded call of the same thread runs under the
    outer one."""
    deadline = deadline or None
    stop_at = _stop_at
    if _in_call.scope is not None:
        return function(*args)
    if deadline is None and stop_at is None:
        if _monitor.handler is None:
            return function(*args)
        return _monitor.unguarded(function, args)
    now = time.monotonic()
    due = min(
        now + deadline if deadline is not None else math.inf,
        stop_at if stop_at is not None else math.inf,
    )
    if stop_at is not None and now >= stop_at:
        raise TimeLimitReached
    global _calls
    _calls += 1
    if _fail_calls and _calls in _fail_calls:
        raise TargetDeadlineExceeded(deadline or 0.0)
    scope = _Scope(deadline, stop_at, due)
    if sys.unraisablehook is not _quiet_unraisable:
        global _unraisable_before
        _unraisable_before, sys.unraisablehook = sys.unraisablehook, _quiet_unraisable
    _in_call.scope = scope
    try:
        if _use_alarm():
            result = _call_with_alarm(scope, function, args)
        else:
            result = _call_with_watchdog(scope, function, args)
    except _OURS:
        raise scope.exception() from None  # with its seconds, wherever it landed
    finally:
        _in_call.scope = None
    if scope.fired is not None:  # it swallowed the exception and returned after its deadline
        raise scope.exception()
    return result


def _call_with_alarm(scope: _Scope, function: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """The call under our SIGALRM timer; under the watchdog when someone else's interval timer
    (pytest-timeout's signal method, say) is running: that one is left alone."""
    global _alarm_scope, _replaced, _disarmed_at
    # `signal.getsignal` turns the answer into an enum by way of a ValueError: microseconds.
    ours = _getsignal(signal.SIGALRM) is _on_alarm
    if not ours or scope.due - time.monotonic() < _ARM_FIRST_ABOVE:
        if signal.getitimer(signal.ITIMER_REAL) != (0.0, 0.0):
            return _call_with_watchdog(scope, function, args)
        if not ours:
            _replaced = signal.signal(signal.SIGALRM, _on_alarm)
    _alarm_scope = scope
    theirs = None
    try:
        replaced = signal.setitimer(signal.ITIMER_REAL, max(scope.due - time.monotonic(), 1e-6))
        if replaced == (0.0, 0.0):
            return _finish(scope, function, args)
        theirs = replaced
    finally:
        if theirs is None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            _disarmed_at = time.monotonic()
        else:
            signal.setitimer(signal.ITIMER_REAL, *theirs)  # theirs again, ours never fired
        _alarm_scope = None
    return _call_with_watchdog(scope, function, args)


def _call_with_watchdog(scope: _Scope, function: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    _watchdog.watch(scope)
    try:
        return _finish(scope, function, args)
    finally:
        _watchdog.release(scope)


def _finish(scope: _Scope, function: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """Run the call; once it has been interrupted, whatever it raises becomes the interruption."""
    try:
        return function(*args)
    except BaseException as exc:
        scope.active = False
        if scope.fired is not None and not isinstance(exc, KeyboardInterrupt):
            raise scope.exception() from None
        raise
    finally:
        scope.active = False


@contextmanager
def shielded() -> Iterator[None]:
    """kvcheck's own code that runs inside a guarded call (measuring the target's coverage around
    it): never interrupted midway, and its time does not count against the call's deadline. An
    interruption due meanwhile is raised when the block ends, if the call is then still past its
    (extended) deadline or the run's time limit."""
    scope: _Scope | None = _in_call.scope
    if scope is None or not scope.active:
        yield
        return
    started = time.monotonic()
    scope.shield += 1
    alarm = _alarm_scope is scope and scope.shield == 1
    if alarm:
        # No signal at all meanwhile: its handler, run inside coverage.py's tracer while that
        # holds its own locks, could deadlock there.
        signal.setitimer(signal.ITIMER_REAL, 0)
    try:
        yield
    finally:
        scope.shield -= 1
        if not scope.shield and scope.active:
            _leave_shield(scope, time.monotonic() - started, alarm)


def _leave_shield(scope: _Scope, spent: float, alarm: bool) -> None:
    # The time spent is given back: the deadline moves, the time limit does not.
    due = scope.due + spent
    scope.due = due if scope.stop_at is None else min(due, scope.stop_at)
    now = time.monotonic()
    if now >= scope.due and not scope.fired:
        scope.pending = True
    elif now < scope.due:
        scope.pending = False
    if alarm:
        signal.setitimer(signal.ITIMER_REAL, max(scope.due - now, 1e-6))
    if scope.pending:
        scope.pending = False
        scope.fired = scope.fired or scope.reason()
        raise scope.exception()


# --- calls nothing in-process can stop ---------------------------------------------------------

# What `watch_stuck` calls: (why, the call's number, the call's deadline in seconds), why being
# "deadline", "time limit" or "interrupt" (a Ctrl-C the call swallowed).
StuckHandler = Callable[[str, int, float], None]


class _Monitor:
    """A daemon thread that looks at the running guarded calls every `period` seconds and hands
    one still running `grace` seconds past its deadline, the time limit or a Ctrl-C to its
    handler, once."""

    def __init__(self) -> None:
        self.handler: StuckHandler | None = None
        self.grace = 1.0
        self.pid = 0  # the process whose thread is running (none survives a fork)
        # When the call running without a deadline (`--deadline 0`) started: a Ctrl-C it
        # swallows is still seen.
        self.unguarded_since: float | None = None

    def unguarded(self, function: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        """`function(*args)`, a call without deadline or time limit, watched for Ctrl-C only."""
        self.unguarded_since = time.monotonic()
        try:
            return function(*args)
        finally:
            self.unguarded_since = None

    def start(self, handler: StuckHandler | None, grace: float) -> None:
        self.handler, self.grace = handler, grace
        if handler is not None and self.pid != os.getpid():
            self.pid = os.getpid()
            threading.Thread(target=self._loop, name="kvcheck-stuck", daemon=True).start()

    def _running(self) -> list[_Scope]:
        scopes = [_alarm_scope] if _alarm_scope is not None else []
        with _watchdog.lock:
            scopes.extend(_watchdog.scopes.values())
        return [scope for scope in scopes if scope.active and not scope.shield]

    def _loop(self) -> None:
        pid = self.pid
        while self.pid == pid:
            time.sleep(min(self.grace / 2, 0.1))
            handler = self.handler
            if handler is None:
                continue
            now = time.monotonic()
            pressed = interrupts.last_received_at()
            since = self.unguarded_since
            if since is not None and pressed is not None and since < pressed < now - self.grace:
                self.handler = None
                handler("interrupt", 0, 0.0)
                return
            for scope in self._running():
                why = None
                if pressed is not None and scope.started < pressed < now - self.grace:
                    why = "interrupt"
                elif now > scope.due + self.grace:
                    why = "time limit" if scope.reason() is TimeLimitReached else "deadline"
                if why is not None:
                    self.handler = None  # once: the handler ends this process
                    handler(why, scope.number, scope.deadline or 0.0)
                    return


_monitor = _Monitor()


def watch_stuck(handler: StuckHandler | None, grace: float) -> None:
    """From now on, a guarded call still running `grace` seconds past its deadline (or the run's
    time limit, or a Ctrl-C that arrived during it) goes to `handler`, called in a monitor
    thread; None stops watching. For a process that can end itself there (the command line)."""
    _monitor.start(handler, grace)


def _after_fork_in_child() -> None:
    """A forked child has only the thread that forked: the watchdog and the monitor start anew
    there when needed, and no lock stays held by a thread that is gone."""
    global _watchdog
    _watchdog = _Watchdog()
    _monitor.pid = 0
    _monitor.handler = None


os.register_at_fork(after_in_child=_after_fork_in_child)


def describe(deadline: float | None) -> str:
    """The deadline for reports: `0.25 s per call` or `none`."""
    return "none" if not deadline else f"{deadline:g} s per call"
