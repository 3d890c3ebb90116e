"""Counts in what kvcheck prints are worded in the right number: `1 request`, not `1 requests`
(issue 23, messages). One test per kind of report; `kvcheck.wording.plural` itself is
tests/unit/test_wording.py, fuzz's lines tests/unit/cli/test_fuzz_report.py."""

from __future__ import annotations

import pytest

from kvcheck.core.run import run_scenario
from kvcheck.families.sglang.scenario import Admit, Step
from kvcheck.families.sglang.search import Bounds
from kvcheck.reporting.render import render_plain
from kvcheck.reporting.timeline import build_timeline
from kvcheck.targets.loading import load_target
from tests.helpers import run_cli, scenario


def test_bounds_of_one_are_singular() -> None:
    text = Bounds(requests=1, events=1, steps=1).describe()
    assert text.startswith("1 request, up to 1 event, at most 1 step, ")
    assert Bounds(requests=2, events=3).describe().startswith("2 requests, up to 3 events")


def test_a_run_of_one_token_is_singular() -> None:
    s = scenario(Admit("r0", 10, 20), Step(), Step((1,)), Step((2,)), Step(), stride=4)
    text = render_plain(
        build_timeline(run_scenario(s, load_target("builtin:reference"), record=True))
    )
    assert "result: a=1, +1 token" in text and "+1 tokens" not in text
    assert "result: a=2, +2 tokens" in text


def test_check_and_exhaust_word_one_scenario_and_one_event(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run_cli(
        capsys, "check", "builtin:reference", "--max-examples", "1", "--seed", "0",
        "--no-database",
    )  # fmt: skip
    assert code == 0 and "PASS        no violation in 1 scenario (" in out
    code, out, _ = run_cli(
        capsys, "exhaust", "builtin:reference", "--requests", "1", "--events", "1", "--no-save"
    )
    assert code == 0 and "bounds      1 request, up to 1 event, accept" in out
