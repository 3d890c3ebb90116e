"""Stable import path for counterexample files (`kvcheck.counterexample`).

Regression tests that `kvcheck regress` wrote into users' repositories import `loads` and `replay`
from here; the implementation lives in `kvcheck.counterexamples`. Keep these names.
"""

from kvcheck.counterexamples.fileformat import (
    DEFAULT_DIR,
    FORMAT,
    SCHEMA_VERSION,
    SUFFIX,
    Counterexample,
    Replay,
    SavedViolation,
    from_run,
    from_verdict,
    load,
    loads,
    replay,
    replay_command,
    replay_file,
    save,
)

__all__ = [
    "DEFAULT_DIR",
    "FORMAT",
    "SCHEMA_VERSION",
    "SUFFIX",
    "Counterexample",
    "Replay",
    "SavedViolation",
    "from_run",
    "from_verdict",
    "load",
    "loads",
    "replay",
    "replay_command",
    "replay_file",
    "save",
]
