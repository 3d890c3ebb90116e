"""One pool of worker processes, for `fuzz`'s campaign, `exhaust --workers` and `mutants --jobs`,
and what every kvcheck worker process does first. Workers either run one long task each,
streaming messages (the campaign, the exhaustive search), or take jobs one at a time from a
queue the pool fills (`job_queue`, `take_jobs`: the kill matrix, one corpus entry a job).

`WorkerPool` spawns the workers (multiprocessing's `spawn` context: torch and fork do not mix),
owns the queues and the stop flag they share, tells how a dead worker ended, and at the end
terminates, kills and reaps what is left. Workers talk to the parent in `WorkerMessage` records,
one frozen dataclass per kind of message, each naming its sender (`worker`); a worker's
`main` that raises is reported as `Refused` (a `KvcheckUsageError`: the user's input, or a
target kvcheck cannot judge) or `Crashed` (anything else: kvcheck's own fault), never silently.

A worker leaves Ctrl-C to its parent, never outlives it, and never writes to the parent's
report. The parent ends its workers on Ctrl-C or when it is done. A worker whose parent was
killed must not run on as an orphan holding a core: it exits within half a second (a watching
thread), and at once on Linux, where the kernel sends it SIGKILL. The kernel's signal is tied to
the *thread* that started the worker, not to the parent process, so it is asked for only where
the workers are started from the parent's main thread (`kernel=True`), never by a pool whose
workers a helper thread may start.

kvcheck's stdout is its report (under `--json`, exactly one object), and a worker inherits the
parent's stdout: a worker's file descriptor 1 is pointed at its stderr, so what a target prints
while a worker imports or calls it (Python's `print` and C code writing to fd 1 alike) joins the
parent's diagnostics on stderr. Workers report to their parent through queues only.

multiprocessing's resource tracker is a child of the parent too, and a broad kill of the workers
(`pkill -f multiprocessing`, every child of the parent) ends it with them. Unregistering the
parent's semaphores afterwards would relaunch it, with a warning and, for each semaphore the new
tracker never saw, a traceback on stderr; `forget_dead_resource_tracker` stops that.

Imports nothing but the standard library and `kvcheck.errors`: the replay path (no Hypothesis)
reaches it.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import multiprocessing
import os
import queue as queue_module
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Final

from kvcheck.core import isolation
from kvcheck.errors import KvcheckUsageError

__all__ = [
    "ORPHAN_EXIT_CODE",
    "Crashed",
    "Refused",
    "WorkerMessage",
    "WorkerPool",
    "become_worker",
    "forget_dead_resource_tracker",
    "take_jobs",
]

_PR_SET_PDEATHSIG: Final = 1
_WATCH_EVERY_S: Final = 0.5
ORPHAN_EXIT_CODE: Final = 3


def become_worker(parent: int, *, kernel: bool = True) -> None:
    """Set this process up as a worker of `parent` (its pid): Ctrl-C is ignored here (the parent
    handles it and tells its workers to stop), and the process exits with `ORPHAN_EXIT_CODE`
    once `parent` is gone. Its stdout goes to its stderr (module docstring)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    isolation.guard_stderr()  # a target's print must not fail there once stderr's reader is gone
    with contextlib.suppress(OSError, ValueError, AttributeError):  # no stdout, or a closed one
        sys.stdout.flush()
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    if kernel and sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_WATCH_EVERY_S)
        os._exit(ORPHAN_EXIT_CODE)

    if os.getppid() != parent:  # the parent died before the kernel was asked
        os._exit(ORPHAN_EXIT_CODE)
    threading.Thread(target=watch, name="kvcheck-parent-watch", daemon=True).start()


def forget_dead_resource_tracker() -> bool:
    """When multiprocessing's resource tracker has died (killed with the workers), stop this
    process from relaunching it; True when it had died.

    The tracker only unlinks, at the end, semaphores whose owners did not; every semaphore of
    kvcheck's queues and events is unlinked by its own finalizer before it is unregistered, so
    with the tracker gone there is nothing left for one to do. A new tracker would warn that the
    old one "died unexpectedly" and print a `KeyError` traceback for every semaphore it is told
    to forget without having been told of it. So `register` and `unregister` become no-ops for
    the rest of this process (a semaphore made later and never released leaks, as it would have
    without a tracker). Reads private state of `multiprocessing.resource_tracker`; on a Python
    where that differs, nothing is changed.
    """
    from multiprocessing import resource_tracker

    pid = getattr(getattr(resource_tracker, "_resource_tracker", None), "_pid", None)
    if not isinstance(pid, int):
        return False  # never started, or not the layout this was written for
    try:
        ended, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        ended = pid  # already reaped: gone
    except OSError:
        return False
    if ended == 0:
        return False  # alive
    resource_tracker.register = _not_tracked  # type: ignore[assignment]
    resource_tracker.unregister = _not_tracked  # type: ignore[assignment]
    return True


def _not_tracked(name: str, rtype: str) -> None:
    """`register` / `unregister` once the resource tracker is gone: nothing to tell it."""


# --- messages -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class WorkerMessage:
    """What a worker tells its parent: subclassed once per kind of message (the subclass is the
    kind), each naming its sender. Subclasses are module-level classes, so they pickle by name."""

    worker: int


@dataclasses.dataclass(frozen=True)
class Crashed(WorkerMessage):
    """The worker's `main` raised something other than a `KvcheckUsageError`: kvcheck's own
    fault. `error` is the exception's type and message."""

    error: str


@dataclasses.dataclass(frozen=True)
class Refused(WorkerMessage):
    """The worker's `main` raised a `KvcheckUsageError` (a target kvcheck cannot judge, a
    nondeterministic target): the parent ends the run with that error."""

    error: str


# --- the pool -----------------------------------------------------------------------------------


def take_jobs(jobs: Any, stop: Any) -> Iterator[Any]:
    """In a worker: the jobs of a `WorkerPool.job_queue`, one at a time, until its end marker or
    the pool's stop flag."""
    while not stop.is_set():
        job = jobs.get()
        if job is None:
            return
        yield job


# A worker's body: `main(index, messages, stop, *args)`, a module-level function (spawned workers
# find it by name).
WorkerMain = Callable[..., None]


def _run_worker(
    main: WorkerMain, index: int, messages: Any, stop: Any, parent: int, args: tuple[Any, ...]
) -> None:  # pragma: no cover - runs in a worker process (tests/unit/search/test_workers.py)
    become_worker(parent)
    try:
        main(index, messages, stop, *args)
    except KvcheckUsageError as exc:
        messages.put(Refused(index, str(exc)))
    except Exception as exc:
        messages.put(Crashed(index, f"{type(exc).__name__}: {exc}"))


class WorkerPool:
    """`count` spawned worker processes named `kvcheck-NAME-i`, each running
    `main(i, messages, stop, *args_for(i))`, with the queue they report on (`messages`) and the
    flag that tells them to stop (`stop`). `queue()` makes more queues (per-worker controls,
    inboxes) that the pool closes with its own. Used from the parent's main thread only."""

    def __init__(self, name: str, count: int) -> None:
        self._context = multiprocessing.get_context("spawn")
        self.name = name
        self.count = count
        self.messages: Any = self._context.Queue()
        self.stop: Any = self._context.Event()
        self._queues: list[Any] = [self.messages]
        self.processes: list[Any] = []

    def queue(self) -> Any:
        """A new queue shared with the workers (made before `start`, to be passed in `args_for`)."""
        channel = self._context.Queue()
        self._queues.append(channel)
        return channel

    def job_queue(self, jobs: Iterable[Any]) -> Any:
        """A new queue holding `jobs` (picklable, none of them None), then one end marker per
        worker, for workers taking them one at a time (`take_jobs`); made before `start`, to
        be passed in `args_for`."""
        channel = self.queue()
        for job in jobs:
            channel.put(job)
        for _ in range(self.count):
            channel.put(None)
        return channel

    def start(self, main: WorkerMain, args_for: Callable[[int], Sequence[Any]]) -> None:
        """Start every worker; each dies with this process (`become_worker`)."""
        parent = os.getpid()
        self.processes = [
            self._context.Process(
                target=_run_worker,
                args=(main, i, self.messages, self.stop, parent, tuple(args_for(i))),
                name=f"kvcheck-{self.name}-{i}",
                daemon=True,
            )
            for i in range(self.count)
        ]
        for process in self.processes:
            process.start()

    def receive(self, timeout: float) -> WorkerMessage | None:
        """The next message, waiting up to `timeout` seconds (0: none waited for); None when
        there is none."""
        try:
            if timeout <= 0:
                message: WorkerMessage = self.messages.get_nowait()
            else:
                message = self.messages.get(timeout=timeout)
        except queue_module.Empty:
            return None
        return message

    def ended_how(self, index: int) -> str | None:
        """How worker `index` ended ("killed by signal 9", "exited with code 1"), or None while
        it runs or before it started."""
        if index >= len(self.processes):
            return None
        code = self.processes[index].exitcode
        if code is None:
            return None
        return f"killed by signal {-code}" if code < 0 else f"exited with code {code}"

    def end_processes(self) -> None:
        """Set the stop flag, then terminate the workers still running, kill those that ignore it
        for 5 s, and reap them all. What they sent before stays readable until `close`."""
        self.stop.set()
        started = [p for p in self.processes if p.pid is not None]
        for process in started:
            if process.is_alive():
                process.terminate()
        for process in started:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join(timeout=5)

    def close(self) -> None:
        """End the workers (`end_processes`) and release the queues, without waiting for what
        nobody will read; tolerate a resource tracker killed with the workers."""
        self.end_processes()
        for channel in self._queues:
            channel.close()
            channel.cancel_join_thread()
        forget_dead_resource_tracker()
