"""What every kvcheck worker process does first: leave Ctrl-C to its parent, never outlive it,
and never write to the parent's report.

The parallel commands (`fuzz`'s campaign, `exhaust --workers`, `mutants --jobs`) start worker
processes that the parent ends on Ctrl-C or when it is done. A worker whose parent was killed
must not run on as an orphan holding a core: it exits within half a second (a watching thread),
and at once on Linux, where the kernel sends it SIGKILL. The kernel's signal is tied to the
*thread* that started the worker, not to the parent process, so it is asked for only where the
workers are started from the parent's main thread (`kernel=True`), never by a pool whose
workers a helper thread may start.

kvcheck's stdout is its report (under `--json`, exactly one object), and a worker inherits the
parent's stdout: a worker's file descriptor 1 is pointed at its stderr, so what a target prints
while a worker imports or calls it (Python's `print` and C code writing to fd 1 alike) joins the
parent's diagnostics on stderr. Workers report to their parent through queues only.

multiprocessing's resource tracker is a child of the parent too, and a broad kill of the workers
(`pkill -f multiprocessing`, every child of the parent) ends it with them. Unregistering the
parent's semaphores afterwards would relaunch it, with a warning and, for each semaphore the new
tracker never saw, a traceback on stderr; `forget_dead_resource_tracker` stops that.

Imports nothing but the standard library: the replay path (no Hypothesis) reaches it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from typing import Final

_PR_SET_PDEATHSIG: Final = 1
_WATCH_EVERY_S: Final = 0.5
ORPHAN_EXIT_CODE: Final = 3


def become_worker(parent: int, *, kernel: bool = True) -> None:
    """Set this process up as a worker of `parent` (its pid): Ctrl-C is ignored here (the parent
    handles it and tells its workers to stop), and the process exits with `ORPHAN_EXIT_CODE`
    once `parent` is gone. Its stdout goes to its stderr (module docstring)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
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
