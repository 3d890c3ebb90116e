"""`--allocation-path release|model|auto` (issue 21): builtins and single functions keep
kvcheck's model by default, the reports say which path ran, and asking a builtin for a
release's own code is a one-line usage error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import run_cli

SMALL = ["--max-examples", "30", "--seed", "3", "--no-database"]


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def test_a_builtin_runs_kvcheck_model_and_says_so_in_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run_cli(capsys, "check", "builtin:reference", *SMALL, "--json")
    report = json.loads(out)
    assert code == 0
    assert report["allocation_path"] == "model"
    assert report["allocation_reason"].startswith("auto: kvcheck's RuleAllocation")
    # The text leaves the usual case unsaid (no release code, nothing was chosen); asked for,
    # the model is named.
    code, out, _ = run_cli(capsys, "check", "builtin:reference", *SMALL)
    assert "\nallocation" not in out
    code, out, _ = run_cli(
        capsys, "check", "builtin:reference", *SMALL, "--allocation-path", "model"
    )
    assert "\nallocation  model  (given)" in out


@pytest.mark.parametrize("command", ["check", "fuzz", "exhaust"])
def test_release_code_for_a_builtin_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    code, _, err = run_cli(capsys, command, "builtin:reference", "--allocation-path", "release")
    assert code == 2
    assert "brings no release allocation code" in err
    assert len(err.strip().splitlines()) == 1


def test_replay_offers_the_choice(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "replay", "missing.kvcheck.json", "--allocation-path", "x")
    assert code == 2 and "invalid choice" in err


def test_exhaust_says_when_its_bounds_leave_the_allocation_code_idle(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # With allocation off no allocation code runs, whichever path was chosen: the line said
    # "the release's own allocation code" for `exhaust sglang==0.5.23` by default.
    bounds = ["--events", "2", "--no-save", "--no-coverage", "--allocation-path", "model"]
    code, out, _ = run_cli(capsys, "exhaust", "builtin:reference", *bounds)
    assert code == 0
    assert "\nallocation  model  (given; idle here: the bounds draw no allocation rule" in out
    code, out, _ = run_cli(
        capsys, "exhaust", "builtin:reference", *bounds, "--allocation", "0.5.17"
    )
    assert code == 0
    assert "\nallocation  model  (given)\n" in out
