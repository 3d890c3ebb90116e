"""Hypothesis settings profiles shared by the test suite, the CLI and the pytest plugin.

- `dev`: fast feedback while editing.
- `ci`: deliberately replaces Hypothesis's built-in `ci` profile, which turns the example
  database off and derandomizes. Here failures are kept in the directory database (so the next
  run starts from them) and `--hypothesis-seed` is honoured.
- `thorough`: long searches before a release or overnight.
"""

from __future__ import annotations

from typing import Final

from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

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
