"""Stable import path for counterexample files (`kvcheck.counterexample`).

Regression tests that `kvcheck regress` wrote into users' repositories import `loads` and `replay`
from here; the implementation lives in `kvcheck.counterexamples`. Keep these names.
"""

from typing import Any

from kvcheck.core.scenario import SCHEMA_VERSION
from kvcheck.counterexamples.fileformat import (
    DEFAULT_DIR,
    FORMAT,
    SUFFIX,
    Counterexample,
    SavedViolation,
    load,
    loads,
    save,
)
from kvcheck.counterexamples.replay import Replay, from_run, replay, replay_command, replay_file

__all__ = [
    "DEFAULT_DIR",
    "FORMAT",
    "SCHEMA_VERSION",
    "SUFFIX",
    "Counterexample",
    "Replay",
    "SavedViolation",
    "from_run",
    "load",
    "loads",
    "replay",
    "replay_command",
    "replay_file",
    "save",
]


def __getattr__(name: str) -> Any:
    # `from_verdict` lives with the search's `Verdict`; imported on use so that this module,
    # like all of the counterexample path, never loads Hypothesis.
    if name == "from_verdict":
        from kvcheck.search.check import from_verdict

        return from_verdict
    raise AttributeError(f"module 'kvcheck.counterexample' has no attribute {name!r}")
