"""Calls of the target that nothing in-process can stop: ended from outside, and still judged.

The deadline (`kvcheck.core.deadline`) interrupts a call inside kvcheck's process. Two kinds of
call defeat it: a target that swallows every interruption (a loop around a bare `except` or an
`except BaseException`), and a blocking C call that starts again when a signal cuts it short.
Left alone, either hangs kvcheck for good: its load probe, its search, its replay, Ctrl-C too.
The command line (`supervise`) handles them in three steps:

1. A monitor thread sees a call still running `STUCK_GRACE` seconds past its deadline (or past a
   Ctrl-C, or the run's time limit). A stuck Ctrl-C exits 130; a stuck time limit is no verdict
   (exit 2).
2. For a deadline, `check` and `replay` start again, in the same process (`exec`: the same pid,
   stdout and stderr), now *isolated*, with the scenario that was running recorded
   (`RESUME_ENV` names the file) so that `check` tries it first. Other commands cannot start
   again (their workers and levels are not one scenario): they end with one line that names
   `target-deadline`, exit 1.
3. Isolated, every run of the target (a scenario, the probe) is done in a forked child
   (`apart`), whose monitor reports the number of a call still running `CHILD_GRACE` seconds
   past its deadline and ends the child. The run is then done again in a new child in which
   that call ends at its deadline without running (`deadline.reset_calls`): exactly the run the
   in-process deadline gives a call that returns late, a `target-deadline` violation, which is
   shrunk, saved and replayed like any other (each shrinking candidate in its own child).

Cost: until a call gets stuck, a monitor thread that wakes ten times a second and a counter per
call (`benchmarks/bench_isolation.py`, docs/isolation.md); once isolated, two forks per run
that hangs and one per run that does not. Where `os.fork` is missing (Windows) no command starts
again: all end as step 2 says of the others.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, TextIO

from kvcheck.core import deadline, interrupts
from kvcheck.core.calls import import_tensor_library
from kvcheck.core.deadline import TargetDeadlineExceeded, TimeLimitReached
from kvcheck.errors import KvcheckInternalError, KvcheckUsageError

# Seconds past its deadline before a call counts as stuck: the in-process deadline interrupts
# it again every `deadline.REFIRE_SECONDS` meanwhile; a call that ran past its deadline is
# `target-deadline` however it ends, so waiting longer could not change the verdict.
STUCK_GRACE: Final = 1.0
CHILD_GRACE: Final = 0.2
# How long the monitor, about to start again, lets the main thread run the handler of a Ctrl-C
# that has just arrived (`_restart`).
_HANDLER_TURN: Final = 0.05
RESUME_ENV: Final = "KVCHECK_ISOLATED"
# The read end of the pipe Python's C-level signal handler writes each signal's number to
# (`signal.set_wakeup_fd`), handed to the new image (`_restart`).
SIGNALS_ENV: Final = "KVCHECK_SIGNALS_FD"
EXIT_INTERRUPTED: Final = 130
EXIT_VIOLATION: Final = 1
EXIT_USAGE: Final = 2
# A run is done again with each call seen stuck made to fail; a target that gets stuck at a
# different call each time is not deterministic.
_ATTEMPTS: Final = 4

# How the command line reports an error that ends the process: (message, exit code).
Report = Callable[[str, int], object]

_isolated = False  # every run of the target in a forked child
_resumed: str | None = None  # the scenario (JSON line) that was running when a call got stuck
_running: Any = None  # the scenario of the run in progress in this process (None: the probe)
_restart_argv: list[str] | None = None  # this command can start again isolated, with this argv
_report: Report | None = None
_report_stream: TextIO | None = None  # kvcheck's stdout, once fd 1 went to stderr
_report_fd: int | None = None
_child_pipe: int | None = None  # in a forked child: where its outcome goes
_signals_read: int | None = None  # the read end of the wakeup pipe (`_watch_signal_numbers`)


# --- the command line's process ------------------------------------------------------------------


def guard_stdout() -> None:
    """Send file descriptor 1 to stderr and keep kvcheck's report on a copy of the original: a
    target (or a C library) writing to fd 1 directly, past `sys.stdout`, cannot mix its text
    into the report (one JSON object under `--json`). For the process of the command line only;
    worker processes inherit fd 1 as stderr, which is where their prints belong too."""
    global _report_stream, _report_fd
    if _report_fd is not None:
        return
    try:
        report = os.dup(1)
        os.dup2(2, 1)
    except OSError:  # no fd 1 or 2 to begin with: nothing to protect, or nowhere to send it
        return
    original = sys.stdout
    _report_fd = report
    _report_stream = sys.stdout = open(  # noqa: SIM115 (the process's stdout, never closed)
        report,
        "w",
        encoding=getattr(original, "encoding", None) or "utf-8",
        errors=getattr(original, "errors", None) or "strict",
        buffering=1 if getattr(original, "line_buffering", False) else -1,
        closefd=False,
    )


class _StderrThatOutlivesItsReader:
    """`sys.stderr` for kvcheck's processes. Once its reader has gone (`kvcheck check 2>&1 |
    head -1`) what is written there is dropped: the file descriptors that led to it (fd 1 too,
    after `guard_stdout`) are sent to /dev/null, and the run goes on to its verdict, report and
    exit code. Otherwise the first progress line after that raises `BrokenPipeError` wherever it
    is printed, and a passing run ends as if its stdout had been closed."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._reader_gone()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._reader_gone()

    def _reader_gone(self) -> None:
        broken = os.fstat(self._stream.fileno())
        same: list[int] = []
        for fd in (1, 2, self._stream.fileno()):
            with contextlib.suppress(OSError):
                found = os.fstat(fd)
                if (found.st_dev, found.st_ino) == (broken.st_dev, broken.st_ino):
                    same.append(fd)
        to_devnull(*same)
        with contextlib.suppress(OSError, ValueError):  # what was buffered goes there too
            self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def to_devnull(*fds: int) -> None:
    """Point each of `fds` at /dev/null: their reader has gone, and what is still written or
    buffered there must not fail again (a closed stdout: `kvcheck.cli.main`; stderr: above)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in fds:
            os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def guard_stderr() -> None:
    """Keep a closed stderr from changing a command's outcome (`_StderrThatOutlivesItsReader`):
    for the command line's process and its workers, before anything is printed."""
    if sys.stderr is not None and not isinstance(sys.stderr, _StderrThatOutlivesItsReader):
        sys.stderr = _StderrThatOutlivesItsReader(sys.stderr)


def supervise(*, restartable: bool, report: Report) -> None:
    """Watch every call of the target of this command-line process (module docstring, step 1).
    `restartable`: the command can start again isolated (step 2); `report` prints an error that
    ends the process (one line, and the JSON object under `--json`)."""
    global _restart_argv, _report
    _report = report
    _restart_argv = list(sys.orig_argv) if restartable and hasattr(os, "fork") else None
    if _restart_argv is not None:
        _watch_signal_numbers()
    deadline.watch_stuck(_on_stuck, STUCK_GRACE)


def _watch_signal_numbers() -> None:
    """Have Python's C-level handler write each signal's number to a pipe, as it arrives, in
    whichever thread it lands. A Ctrl-C the main thread takes while the monitor is about to
    start again (`_restart`) is otherwise seen only by the Python-level handler, which runs
    when the main thread next runs bytecode: after `exec` replaced it, so never."""
    global _signals_read
    if _signals_read is not None:
        return
    read_end, write_end = os.pipe()
    for end in (read_end, write_end):
        os.set_blocking(end, False)
    try:
        signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    except ValueError:  # not the main thread: no handoff, the handler turn alone
        os.close(read_end)
        os.close(write_end)
        return
    _signals_read = read_end


def _drain_signal_numbers() -> bytes:
    """What the C-level handler wrote since the last drain (nothing without the pipe)."""
    if _signals_read is None:
        return b""
    numbers = bytearray()
    while True:
        try:
            chunk = os.read(_signals_read, 4096)
        except (BlockingIOError, OSError):
            return bytes(numbers)
        if not chunk:
            return bytes(numbers)
        numbers += chunk


def resume_from_environment() -> None:
    """Start isolated when an earlier image of this process got stuck (`RESUME_ENV`)."""
    global _isolated, _resumed
    path = os.environ.pop(RESUME_ENV, None)
    if path is None:
        return
    _isolated = hasattr(os, "fork")
    # The earlier image's SIGALRM, blocked and perhaps pending (`_restart`): ignoring a signal
    # discards it.
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    inherited = os.environ.pop(SIGNALS_ENV, None)
    if inherited is not None and inherited.isdigit():
        _take_over_signal_numbers(int(inherited))
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
        Path(path).unlink()
    except (OSError, ValueError):
        record = None
    scenario = record.get("scenario") if isinstance(record, dict) else None
    _resumed = scenario if isinstance(scenario, str) else None
    # Ctrl-C, blocked since `_restart` (the command line's handler is in place by now): one
    # pressed meanwhile raises `KeyboardInterrupt` here, which the command reports as any other.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _take_over_signal_numbers(read_end: int) -> None:
    """Read the earlier image's wakeup pipe once: a Ctrl-C it took after its last look, as it
    was replaced, is made pending here (raised when Ctrl-C is unblocked)."""
    global _signals_read
    earlier, _signals_read = _signals_read, read_end
    try:
        if bytes([signal.SIGINT]) in _drain_signal_numbers():
            signal.raise_signal(signal.SIGINT)  # blocked: pending until the unblock below
    finally:
        _signals_read = earlier
        with contextlib.suppress(OSError):
            os.close(read_end)


def isolated() -> bool:
    """Whether this process runs the target only in forked children."""
    return _isolated


def resumed_scenario() -> str | None:
    """The scenario (a JSON line) that was running when this command got stuck, to try first."""
    return _resumed


def running(scenario: Any) -> None:
    """Note the scenario a run of the target is about to play (None: the probe)."""
    global _running
    _running = scenario


def _on_stuck(why: str, number: int, seconds: float) -> None:
    """The monitor's handler (in its thread): end this process, one way or another. Nothing
    else can: the main thread is inside the stuck call, which swallows whatever is raised in
    it. So an error here (a full disk for the resume record, a failed `exec`) still ends the
    process, as kvcheck's own fault (exit 2), rather than ending this thread and leaving the
    process spinning for good."""
    try:
        _end_stuck(why, number, seconds)
    except BaseException as exc:  # the last word of this process
        _say(f"kvcheck: internal error: ending a stuck call failed: {type(exc).__name__}: {exc}")
        _flush_report()
        os._exit(EXIT_USAGE)


def _say(line: str) -> None:
    """`line` on stderr, if it can still be written: a closed or broken stderr (`2>&1 | head`)
    must not stop the monitor from ending the process."""
    with contextlib.suppress(OSError, ValueError):
        print(line, file=sys.stderr, flush=True)


def _end_stuck(why: str, number: int, seconds: float) -> None:
    if _child_pipe is not None:  # a forked child: its parent reports the call
        _write_all(_child_pipe, pickle.dumps(("stuck", why, number)))
        os._exit(0)
    if why == "interrupt":
        _exit_interrupted()
    if why == "time limit":
        _end(
            "the run's time limit passed inside a call of the target that swallows every "
            f"interruption (still running {STUCK_GRACE:g} s later), so no verdict; with a "
            "--deadline such a call is target-deadline",
            EXIT_USAGE,
        )
    if _restart_argv is not None and not _isolated:
        _restart()
    _end(
        f"a call of the target ran past its {seconds:g} s deadline and swallowed every "
        "interruption (target-deadline); this command cannot end it and go on: `kvcheck check` "
        "runs such a target isolated and reports the scenario",
        EXIT_VIOLATION,
    )


def _exit_interrupted() -> None:
    _say("kvcheck: interrupted (the target's call swallowed Ctrl-C)")
    _flush_report()
    os._exit(EXIT_INTERRUPTED)


def _end(message: str, code: int) -> None:
    if _report_stream is not None:
        # The stuck call runs with `sys.stdout` sent to stderr (`kvcheck.core.calls`);
        # the JSON object of `--json` belongs on the report.
        sys.stdout = _report_stream
    if _report is not None:
        with contextlib.suppress(OSError, ValueError):  # a closed or broken stdout or stderr
            _report(message, code)
    else:
        _say(f"kvcheck: error: {message}")
    _flush_report()
    os._exit(code)


def _flush_report() -> None:
    if _report_stream is not None:
        with contextlib.suppress(OSError, ValueError):
            _report_stream.flush()


def _restart() -> None:
    """Start this command again in this process, isolated, trying the stuck scenario first."""
    assert _restart_argv is not None
    # Ctrl-C from here on waits, blocked, until the new image can report it (it unblocks it in
    # `resume_from_environment`): meanwhile Python's default disposition, and then its
    # start-up, would end the process by SIGINT (-2) without a word. A thread's signal mask
    # outlives `exec`, and this thread is the one that calls it. An interval timer and a
    # pending signal outlive it too: the deadline's SIGALRM would end the new image before it
    # has a handler, so it is blocked here (only the main thread may change a handler) and
    # discarded there.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM, signal.SIGINT})
    signal.setitimer(signal.ITIMER_REAL, 0)
    # What the wakeup pipe holds from before is history (the handler counted it); from here on
    # a Ctrl-C lands in it for the new image to see (`_take_over_signal_numbers`).
    _drain_signal_numbers()
    # A Ctrl-C the main thread took (the stuck call swallowed it) less than the grace before
    # the call was stuck past its deadline: the user asked to stop, not to start again. Its
    # handler runs when the main thread next holds the GIL; this sleep hands it over.
    time.sleep(_HANDLER_TURN)
    if interrupts.received():
        _exit_interrupted()
    scenario = None
    if _running is not None:
        from kvcheck.core.scenario import to_json_line

        scenario = to_json_line(_running)
    handle, path = tempfile.mkstemp(prefix="kvcheck-stuck-", suffix=".json")
    with os.fdopen(handle, "w", encoding="utf-8") as record:
        json.dump({"scenario": scenario}, record)
    _say(
        "kvcheck: a call of the target ran past its deadline and swallowed every "
        "interruption; starting again with each run of the target in a child process"
    )
    _flush_report()
    if _report_fd is not None:
        os.dup2(_report_fd, 1)  # the new image guards fd 1 itself
    environment = {**os.environ, RESUME_ENV: path}
    if _signals_read is not None:
        os.set_inheritable(_signals_read, True)
        environment[SIGNALS_ENV] = str(_signals_read)
    os.execve(sys.executable, _restart_argv, environment)


# --- runs in a forked child ----------------------------------------------------------------------


def maybe_apart(function: Callable[..., Any], *args: Any) -> Any:
    """`function(*args)`, in a forked child when this process is isolated (`apart`)."""
    if not _isolated:
        return function(*args)
    return apart(function, *args)


def apart(function: Callable[..., Any], *args: Any) -> Any:
    """`function(*args)` (a run of the target) in a forked child: what it returns or raises,
    which must pickle. A call of the target that never returns there ends the child; the run
    is done again in a new child where that call raises `TargetDeadlineExceeded` at once."""
    failing: frozenset[int] = frozenset()
    for _ in range(_ATTEMPTS):
        outcome = _in_child(function, args, failing)
        if outcome[0] == "stuck":
            _, why, number = outcome
            if why == "time limit":
                raise TimeLimitReached
            failing |= {number}
            continue
        kind, value = outcome
        if kind == "raised":
            raise value
        return value
    raise KvcheckUsageError(
        "the target's calls never returned at a different call each time it played one "
        "scenario; kvcheck judges deterministic resolvers only, so no verdict"
    )


def _in_child(
    function: Callable[..., Any], args: tuple[Any, ...], failing: frozenset[int]
) -> tuple[Any, ...]:
    # Imported once here rather than by every child: torch takes a second to import.
    import_tensor_library()
    read_end, write_end = os.pipe()
    for stream in (sys.stdout, sys.stderr):  # else what is buffered is printed twice
        stream.flush()
    pid = os.fork()
    if pid == 0:
        _be_child(read_end, write_end, function, args, failing)
    os.close(write_end)
    try:
        data = _read_all(read_end)
    except BaseException:  # Ctrl-C, mostly: the child goes with it
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    finally:
        os.close(read_end)
    _, status = os.waitpid(pid, 0)
    if not data:
        raise KvcheckInternalError(
            f"the child process running the target ended without an answer (wait status "
            f"{status}); this is a kvcheck bug, not a verdict on the target"
        )
    try:
        outcome: tuple[Any, ...] = pickle.loads(data)
    except Exception as exc:
        raise KvcheckInternalError(
            f"the answer of the child process running the target did not unpickle: {exc}"
        ) from None
    return outcome


def _be_child(
    read_end: int,
    write_end: int,
    function: Callable[..., Any],
    args: tuple[Any, ...],
    failing: frozenset[int],
) -> None:
    """The forked child: run, send the outcome, and end without the parent's exit handlers."""
    global _child_pipe, _isolated
    try:
        os.close(read_end)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C, and ends this
        _child_pipe, _isolated = write_end, False
        deadline.reset_calls(failing)
        deadline.watch_stuck(_on_stuck, CHILD_GRACE)
        try:
            outcome: tuple[Any, ...] = ("returned", function(*args))
        except BaseException as exc:
            outcome = ("raised", exc)
        try:
            data = pickle.dumps(outcome)
        except Exception as exc:
            data = pickle.dumps(("raised", _unpicklable(outcome, exc)))
        _write_all(write_end, data)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    finally:
        os._exit(0)


def _unpicklable(outcome: tuple[Any, ...], exc: Exception) -> BaseException:
    kind, value = outcome
    if kind == "raised" and isinstance(value, TargetDeadlineExceeded | TimeLimitReached):
        return value
    what = f"{type(value).__name__}: {value}" if kind == "raised" else type(value).__name__
    return KvcheckInternalError(
        f"a run in a child process ended with {what}, which does not pickle ({exc}); this is "
        "a kvcheck bug, not a verdict on the target"
    )


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.close(fd)


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)
