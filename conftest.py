"""Root conftest: registers kvcheck's Hypothesis profiles and picks one.

`dev` by default, `ci` when the CI environment variable is set (our `ci` replaces Hypothesis's
built-in one, which would drop the example database and ignore --hypothesis-seed), or any profile
named by KVCHECK_PROFILE. `pytest --hypothesis-profile NAME` still overrides all of these.
"""

from __future__ import annotations

import os
import signal

from hypothesis import settings

from kvcheck.search.profiles import register_profiles

register_profiles()
settings.load_profile(
    os.environ.get("KVCHECK_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
)

# Many tests press Ctrl-C on kvcheck processes they start. A shell without job control starts a
# background job with SIGINT ignored, and an ignored signal stays ignored across exec, so those
# children would never see the press and every such test would time out. A handler, unlike
# SIG_IGN, is reset to the default on exec, so installing Python's own undoes it for them.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
