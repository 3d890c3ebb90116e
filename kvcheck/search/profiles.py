"""Hypothesis settings profiles shared by the test suite, the CLI and the pytest plugin.

- `dev`: fast feedback while editing.
- `ci`: deliberately replaces Hypothesis's built-in `ci` profile, which turns the example
  database off and derandomizes. Here failures are kept in the directory database (so the next
  run starts from them) and `--hypothesis-seed` is honoured.
- `thorough`: long searches before a release or overnight.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Final

from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

from kvcheck.errors import KvcheckUsageError

PROFILE_EXAMPLES: Final = {"dev": 100, "ci": 300, "thorough": 5000}
DEFAULT_DATABASE_DIR: Final = ".hypothesis/examples"

# Scenarios are cheap but lists of events are large draws; none of these checks help here.
_SUPPRESSED: Final = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]


def register_profiles() -> None:
    """Register kvcheck's `dev`, `ci` and `thorough` profiles (its `ci` replaces Hypothesis's own).

    Choosing one is left to the caller: the suite's conftest loads one, the pytest plugin reads
    the one `--kvcheck-profile` names.
    """
    for name, examples in PROFILE_EXAMPLES.items():
        settings.register_profile(
            name,
            max_examples=examples,
            deadline=None,
            derandomize=False,
            database=DirectoryBasedExampleDatabase(DEFAULT_DATABASE_DIR),
            suppress_health_check=_SUPPRESSED,
            print_blob=True,
        )


def directory_database(spec: str) -> DirectoryBasedExampleDatabase:
    """The example database in directory `spec`, once kvcheck has made sure it can save there.

    Hypothesis saves into its directory quietly and drops what it cannot write, so a `--database`
    that is a file, lies below one, or cannot be written would lose every failure without a word:
    `KvcheckUsageError` (exit 2) instead, before any work. The directory is created here (as
    Hypothesis would at its first save) and a file is written and removed in it, which is the only
    test that holds for root and for read-only file systems alike.
    """
    path = Path(spec).expanduser()
    if path.exists() and not path.is_dir():
        raise KvcheckUsageError(f"example database {spec}: not a directory (it is a file)")
    try:
        path.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(prefix=".kvcheck-probe-", dir=path)
        os.close(handle)
        os.unlink(probe)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise KvcheckUsageError(
            f"example database {spec}: cannot save failures there ({reason}); give a "
            "writable directory to --database, or --no-database"
        ) from None
    return DirectoryBasedExampleDatabase(str(path))
