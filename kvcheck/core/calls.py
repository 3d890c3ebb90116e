"""Calling the code under test: the one way every family's engine calls a target.

A family's engine calls its target through a `TargetCalls` of its own, which says which of the
family's exceptions mean "outside what kvcheck models" (no verdict), which ones its fakes raise on
purpose (the target's doing), and which of its files are targets it ships rather than kvcheck's
code. Everything else is family-neutral: what the target prints goes to stderr, its exception is
its violation, an exception raised inside kvcheck's own code is kvcheck's fault and no verdict, and
every call is a point where a Ctrl-C the target swallowed is raised again
(`kvcheck.core.interrupts`).

The tensor library a target computes with (torch) is imported here too, once, and only when a
family asks for it: it takes seconds to import. Runs keep it on one thread (`one_tensor_thread`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import attrs

from kvcheck.core.deadline import TargetDeadlineExceeded, TimeLimitReached
from kvcheck.core.interrupts import held, raise_if_dropped, swallowed_since
from kvcheck.core.interrupts import received as interrupts_received
from kvcheck.errors import KvcheckInternalError, KvcheckUsageError, UnsupportedTargetError

# kvcheck's own code that may run inside a target's call: the judging core and the families'
# packages (their fakes and what those reach). A family names the targets it ships (its built-in
# resolvers, its mutant corpus), which are targets like any other.
_KVCHECK: Final = Path(__file__).resolve().parent.parent
_KVCHECK_OWN: Final = (str(_KVCHECK / "core") + os.sep, str(_KVCHECK / "families") + os.sep)


@attrs.frozen
class TargetCalls:
    """How one family's engine calls its target (`run`).

    `outside_model`: exceptions of the family's fakes meaning the target reached what kvcheck does
    not model (`UnsupportedTargetError`, no verdict). `not_faults`: exceptions the fakes raise on
    purpose, as the real objects do, which are the target's doing even when raised in kvcheck's
    code. `shipped_targets`: files (or directories, ending in a separator) of kvcheck's own tree
    that are targets, not kvcheck's code. `own_code`: more of kvcheck's code a family outside
    kvcheck's tree brings (files or directories ending in a separator).
    """

    outside_model: tuple[type[BaseException], ...] = ()
    not_faults: tuple[type[BaseException], ...] = ()
    shipped_targets: tuple[str, ...] = ()
    own_code: tuple[str, ...] = ()
    _own: tuple[str, ...] = attrs.field(init=False)

    @_own.default
    def _own_default(self) -> tuple[str, ...]:
        return _KVCHECK_OWN + self.own_code

    def run(self, function: Callable[..., Any], *args: Any) -> tuple[Any, str | None]:
        """Call the target's code: (what it returned, None), or (None, its exception as text)
        when it raised. Raises `UnsupportedTargetError` when it reached what kvcheck does not
        model or cannot provide, and `KvcheckInternalError` when kvcheck's own code raised:
        neither is a verdict on the target. What the target prints goes to stderr: kvcheck's
        stdout is its report (one JSON object under `--json`).

        Every call is a point where a Ctrl-C that did not stop kvcheck is raised again
        (`kvcheck.core.interrupts`): one Python dropped since the last call, or one the target
        swallowed during this one."""
        raise_if_dropped()
        sigints = interrupts_received()
        try:
            outcome = self._call(function, *args)
        except BaseException as exc:
            if not isinstance(exc, KeyboardInterrupt) and swallowed_since(sigints):
                raise KeyboardInterrupt from None
            raise
        if swallowed_since(sigints):
            raise KeyboardInterrupt
        return outcome

    def _call(self, function: Callable[..., Any], *args: Any) -> tuple[Any, str | None]:
        try:
            stdout, sys.stdout = sys.stdout, sys.stderr  # `contextlib.redirect_stdout`, inline
            try:
                return function(*args), None
            finally:
                sys.stdout = stdout
        except self.outside_model as exc:
            raise UnsupportedTargetError(str(exc)) from None
        except KvcheckUsageError as exc:
            # Includes a name the source loader could not provide, reached at run time.
            raise UnsupportedTargetError(str(exc)) from None
        except ImportError as exc:
            raise UnsupportedTargetError(
                f"target imports at run time what kvcheck cannot provide: {exc}"
            ) from None
        except Exception as exc:
            fault = self.kvcheck_fault(exc)
            if fault is not None:
                raise KvcheckInternalError(
                    f"kvcheck's own code raised {type(exc).__name__}: {exc} ({fault}) while the "
                    "target ran; this is a kvcheck bug, not a verdict on the target"
                ) from exc
            return None, f"{type(exc).__name__}: {exc}"
        except (KeyboardInterrupt, TargetDeadlineExceeded, TimeLimitReached):
            # Ctrl-C and a run's time limit stop kvcheck; a call past its deadline is
            # `target-deadline`: none of them is the target raising.
            raise
        except BaseException as exc:
            # A resolver that raises SystemExit (or another BaseException) inside the scheduler
            # would take the server down: the target's violation, never kvcheck exiting with
            # its code.
            return None, f"{type(exc).__name__}: {exc}"

    def kvcheck_fault(self, exc: BaseException) -> str | None:
        """`file:line` of the kvcheck frame `exc` was raised in, when it was raised in kvcheck's
        own code (a fake's method, the engine); None when the target (or a library it called, or
        a target kvcheck ships) raised, or a fake raised it on purpose (`not_faults`)."""
        if isinstance(exc, self.not_faults):
            return None
        tb = exc.__traceback__
        if tb is None:
            return None
        while tb.tb_next is not None:
            tb = tb.tb_next
        filename = tb.tb_frame.f_code.co_filename
        if not filename.startswith(self._own) or filename.startswith(self.shipped_targets):
            return None
        return f"{Path(filename).name}:{tb.tb_lineno}"


def import_tensor_library() -> None:
    """Import torch now rather than at the first call that needs it. A worker process calls this
    before it says it is ready: the import takes seconds, and a worker inside it cannot see that
    its parent told it to stop, so Ctrl-C would wait for the import to end."""
    tensor_library()


_torch: Any = None


def tensor_library() -> Any:
    """torch, imported once, with Ctrl-C held until the import ends (`interrupts.held`)."""
    global _torch
    if _torch is None:
        with held():
            import torch
        _torch = torch
    return _torch


@contextmanager
def one_tensor_thread() -> Iterator[None]:
    """torch (once imported, by anyone) computes on one thread inside; its setting is restored
    after, so a process that runs kvcheck inside its own (the pytest plugin, the API) keeps its
    own. kvcheck's tensors are a few kilobytes, too small to gain from threads, but a fill or copy
    of 32K elements (a `req_to_token` table) runs on all of torch's OpenMP threads, which then spin
    for milliseconds waiting for more: about half the CPU of a search of a release's allocation
    code, and on a busy machine the cores other processes wait for."""
    torch: Any = sys.modules.get("torch")
    threads = 1 if torch is None else torch.get_num_threads()
    if threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
