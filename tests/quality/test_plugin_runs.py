"""The pytest plugin's searches, measured: the reference passes every item within the budget, and
under pytest-xdist in a subprocess the items spread over two workers and the failures still show
the timeline and the replay command. (The plugin's unit tests are tests/unit/test_plugin.py.)"""

from __future__ import annotations

import pytest
import torch

import kvcheck.reporting.timeline
import kvcheck.search.check
from tests.helpers import PLUGIN_FAST

pytest_plugins = ["pytester"]

# Loaded here, not first inside a pytester run: pytester drops the modules an inline run imported,
# and importing torch's or Hypothesis's compiled extensions a second time crashes the process.
PRELOADED = (torch, kvcheck.search.check, kvcheck.reporting.timeline)


def test_items_spread_over_xdist_workers(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess(
        "-n",
        "2",
        "--kvcheck-target",
        "builtin:seed-prefix",
        "--kvcheck-convention",
        "preclaim",
        "--kvcheck-adaptive",
        "both",
        *PLUGIN_FAST,
        "-v",
    )
    result.assert_outcomes(failed=2, passed=2)
    out = result.stdout.str()
    assert "[gw0]" in out and "[gw1]" in out
    assert "timeline  builtin:seed-prefix" in out and "replay with: kvcheck replay" in out


def test_reference_passes(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--kvcheck-target", "builtin:reference", *PLUGIN_FAST)
    result.assert_outcomes(passed=1)
    split = pytester.runpytest(
        "--kvcheck-target",
        "builtin:reference",
        "--kvcheck-convention",
        "preclaim",
        "--kvcheck-adaptive",
        "both",
        *PLUGIN_FAST,
    )
    split.assert_outcomes(passed=4)
