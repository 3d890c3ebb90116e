"""Errors that the front doors turn into exit code 2 with one clear line.

Anything raised as a `KvcheckUsageError` is the user's input being wrong (a target that cannot be
found, a malformed option, an unreadable counterexample file). It is never a finding about the
target, and the CLI never prints a traceback for it.
"""

from __future__ import annotations


class KvcheckUsageError(Exception):
    """Bad input from the user: exit code 2, message printed as one line."""


class TargetLoadError(KvcheckUsageError):
    """A target spec that cannot be resolved, imported, parsed or prepared."""


class ScenarioFormatError(KvcheckUsageError):
    """A scenario or counterexample JSON document that cannot be read."""
