"""Root conftest: registers kvcheck's Hypothesis profiles and picks one.

`dev` by default, `ci` when the CI environment variable is set (our `ci` replaces Hypothesis's
built-in one, which would drop the example database and ignore --hypothesis-seed), or any profile
named by KVCHECK_PROFILE. `pytest --hypothesis-profile NAME` still overrides all of these.
"""

from __future__ import annotations

import os

from hypothesis import settings

from kvcheck.search.profiles import register_profiles

register_profiles()
settings.load_profile(
    os.environ.get("KVCHECK_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
)
