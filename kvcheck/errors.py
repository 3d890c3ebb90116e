"""Errors that the front doors turn into exit code 2 with one clear line.

Anything raised as a `KvcheckUsageError` is the user's input being wrong (a target that cannot be
found, a malformed option, an unreadable counterexample file) or something kvcheck cannot judge
(a target that steps outside kvcheck's model, a fault in kvcheck's own code). It is never a
finding about the target, and the CLI never prints a traceback for it.
"""

from __future__ import annotations


class KvcheckUsageError(Exception):
    """Bad input from the user: exit code 2, message printed as one line."""


class TargetLoadError(KvcheckUsageError):
    """A target spec that cannot be resolved, imported, parsed or prepared."""


class BrokenTreeCode(TargetLoadError):
    """A file of a target's tree that kvcheck was to compile but cannot read or parse (not valid
    Python). Unlike code whose shape kvcheck does not drive yet, or a release whose files it
    cannot fetch, where an automatic choice falls back to kvcheck's own model and says why,
    this ends the run: a verdict judged on kvcheck's code would be no verdict on the user's."""


class ScenarioFormatError(KvcheckUsageError):
    """A scenario or counterexample JSON document that cannot be read."""


class KvcheckInternalError(KvcheckUsageError):
    """An exception raised inside kvcheck's own code while the target ran: kvcheck's fault, so
    no verdict is given (exit 2) and the message says where it was raised."""


class FileWriteError(KvcheckUsageError):
    """A file kvcheck was asked to write that it may not or cannot write (an input of the
    command, an existing file without --force, an unwritable location): exit 2 before a run,
    a warning next to the finding after one (`kvcheck.files`)."""


class NondeterministicTargetError(KvcheckUsageError):
    """The target gave two different results on one scenario: kvcheck replays what a target
    does to judge it, so it gives no verdict (exit 2); the message names the scenario."""


class UnsupportedTargetError(KvcheckUsageError):
    """The target touched something kvcheck does not model: it cannot be judged (exit 2)."""
