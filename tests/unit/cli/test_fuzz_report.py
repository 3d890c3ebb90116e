"""`kvcheck fuzz`'s report and its database, with the campaign replaced by a stand-in that
returns a given state (real campaigns: tests/quality/test_fuzz*.py): the summary is printed even
when every worker crashed, it names the counter mode and the adaptive setting, a crashed worker's
rate is not added to the campaign's, counts are worded in the right number, and a `--database`
that cannot be saved to is refused before any work (issue 23 items 11 and 12, and its messages).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvcheck.search import campaign
from kvcheck.search.campaign import CampaignPlan, CampaignState, WorkerStatus
from tests.helpers import run_cli


def stand_in(monkeypatch: pytest.MonkeyPatch, *workers: WorkerStatus) -> list[CampaignPlan]:
    """Replace the campaign by one whose workers end as `workers`; returns the plans it got."""
    plans: list[CampaignPlan] = []

    def run_campaign(plan: CampaignPlan, **_: Any) -> CampaignState:
        plans.append(plan)
        state = CampaignState(plan, list(workers))
        state.ended = state.started + 2.0
        return state

    monkeypatch.setattr(campaign, "run_campaign", run_campaign)
    return plans


CRASHED = WorkerStatus(0, state="crashed", examples=40, seconds=1.0, error="OSError: gone")
FAST = ("--workers", "1", "--no-database", "--max-examples", "40")


def test_every_worker_crashed_still_prints_the_summary(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stand_in(monkeypatch, CRASHED)
    code, out, err = run_cli(capsys, "fuzz", "builtin:reference", *FAST)
    assert code == 2
    assert "scenarios   40 in 2.0 s" in out and "CRASHED     worker 0: OSError: gone" in out
    assert err.strip().splitlines()[-1].startswith("kvcheck: error: every worker crashed")


def test_every_worker_crashed_still_gives_the_json_summary(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stand_in(monkeypatch, CRASHED)
    code, out, _ = run_cli(capsys, "fuzz", "builtin:reference", *FAST, "--json")
    assert code == 2
    report = json.loads(out)  # one object: the summary, with the error and the exit code
    assert report["examples"] == 40 and report["crashed_workers"] == [0]
    assert report["exit_code"] == 2 and report["error"].startswith("every worker crashed")


def test_the_text_report_names_the_counter_mode_and_the_adaptive_setting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stand_in(monkeypatch, WorkerStatus(0, state="done", examples=40, seconds=1.0))
    code, out, _ = run_cli(
        capsys, "fuzz", "builtin:reference", *FAST, "--global-counters", "sglang"
    )
    assert code == 0
    options = next(line for line in out.splitlines() if line.startswith("options"))
    assert "global counters sglang" in options
    assert "adaptive off (auto: the target never feeds the adaptive controller)" in options
    code, out, _ = run_cli(capsys, "fuzz", "builtin:reference", *FAST, "--adaptive", "--json")
    assert json.loads(out)["adaptive_reason"] == "given"


def test_a_crashed_workers_last_rate_is_not_in_the_campaigns_rate(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    alive = WorkerStatus(0, state="done", examples=100, seconds=1.0)
    dead = WorkerStatus(1, state="crashed", examples=50, seconds=0.5, error="OSError: gone")
    stand_in(monkeypatch, alive, dead)
    code, out, _ = run_cli(capsys, "fuzz", "builtin:reference", *FAST[2:], "--workers", "2")
    assert code == 0
    line = next(line for line in out.splitlines() if line.startswith("scenarios"))
    assert "150 in 2.0 s: 100/s searching" in line
    assert "worker 1 100/s until it crashed" in line


def test_counts_of_one_are_singular(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stand_in(monkeypatch, WorkerStatus(0, state="done", examples=1, seconds=1.0))
    code, out, _ = run_cli(
        capsys, "fuzz", "builtin:reference", "--workers", "1", "--no-database",
        "--max-examples", "1",
    )  # fmt: skip
    assert code == 0
    assert "campaign    1 worker, " in out and ", 1 scenario" in out
    assert "no violation in 1 scenario\n" in out + "\n"
    assert "labels      0 coverage labels reached" in out


@pytest.mark.parametrize("command", ["fuzz", "check"])
@pytest.mark.parametrize("where", ["a file", "below a file", "under /proc"])
def test_a_database_that_cannot_be_saved_to_is_exit_2_before_any_work(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
    where: str,
) -> None:
    plain = tmp_path / "plain"
    plain.write_text("not a directory\n")
    database = {"a file": plain, "below a file": plain / "db", "under /proc": Path("/proc/db")}
    stand_in(monkeypatch)

    def no_load(*args: object, **kwargs: object) -> None:
        raise AssertionError("the target was loaded")

    monkeypatch.setattr(f"kvcheck.cli.{command}.load_target", no_load)
    code, out, err = run_cli(
        capsys, command, "builtin:reference", "--database", str(database[where]), "--json"
    )
    assert code == 2
    assert f"example database {database[where]}: " in err
    assert json.loads(out)["exit_code"] == 2


@pytest.mark.parametrize("command", ["fuzz", "check"])
def test_an_unusable_default_database_is_a_warning(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".hypothesis").write_text("a file where the default database would go\n")
    plans = stand_in(monkeypatch, WorkerStatus(0, state="done", examples=40, seconds=1.0))
    code, _, err = run_cli(
        capsys, command, "builtin:reference", "--max-examples", "40", "--seed", "1",
        *(["--workers", "1"] if command == "fuzz" else []),
    )  # fmt: skip
    assert code == 0
    assert "kvcheck: warning: example database .hypothesis/examples: cannot save" in err
    if command == "fuzz":
        assert plans[0].database is None
