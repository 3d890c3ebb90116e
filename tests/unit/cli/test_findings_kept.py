"""Issue 12 item 2: a finding is never lost. When its counterexample file or HTML page cannot be
written, the verdict, the timeline and the JSON are printed all the same, the exit code is still
1, and the write failure is a warning on stderr. The bare `kvcheck` demo exits 0 whatever
happens to its files.

kvcheck's tests may run as root, for whom permission bits do not stop a write, so the unwritable
places here are ones no user can write: a path below a plain file (and, in real processes,
`/proc`: tests/quality/test_cli_robustness.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcheck.core.run import run_scenario
from kvcheck.counterexamples.fileformat import save
from kvcheck.counterexamples.replay import from_run
from kvcheck.families.sglang.scenario import Admit, Step
from kvcheck.targets.loading import load_target
from tests.helpers import run_cli, scenario

FAST = ["--max-examples", "100", "--seed", "0", "--no-database"]
STALE_FINISHED = scenario(Admit("r0", 10, 3), Step(), Step((2,)), Step((3,)), Step(), stride=4)
EXHAUST_SMALL = ["--requests", "1", "--events", "5", "--strides", "2"]


def blocked(tmp_path: Path) -> Path:
    """A directory path nothing can be written under: its parent is a plain file."""
    plain = tmp_path / "plain"
    plain.write_text("not a directory\n")
    return plain / "sub"


def unwritable_places(tmp_path: Path) -> dict[str, Path]:
    plain = tmp_path / "plain"
    plain.write_text("not a directory\n")
    return {"save-dir is a file": plain, "save-dir below a file": plain / "sub"}


@pytest.mark.parametrize("where", ["save-dir is a file", "save-dir below a file"])
def test_check_reports_the_failure_when_its_file_cannot_be_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    save_dir = unwritable_places(tmp_path)[where]
    code, out, err = run_cli(
        capsys, "check", "builtin:seed-prefix", *FAST, "--save-dir", str(save_dir)
    )
    assert code == 1
    assert "FAIL" in out and "<- violation" in out  # the verdict and the timeline
    assert "counterexample saved" not in out
    assert err.startswith("kvcheck: warning: cannot write the counterexample")
    assert "the finding is reported here only" in err


def test_check_json_reports_the_failure_and_the_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["check", "builtin:seed-prefix", *FAST, "--save-dir", str(blocked(tmp_path))]
    code, out, err = run_cli(capsys, *argv, "--json", "--html", str(blocked(tmp_path) / "p.html"))
    assert code == 1
    report = json.loads(out)  # one object, the whole of stdout
    assert report["verdict"] == "fail" and report["violation"]["invariant"].startswith("committed")
    assert report["counterexample_file"] is None and report["html_report"] is None
    assert len(report["warnings"]) == 2
    assert "counterexample" in report["warnings"][0] and "HTML" in report["warnings"][1]
    assert err.count("kvcheck: warning: ") == 2


def test_an_unwritable_html_page_keeps_the_saved_counterexample(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    save_dir = tmp_path / "cx"
    argv = ["check", "builtin:seed-prefix", *FAST, "--save-dir", str(save_dir)]
    code, out, err = run_cli(capsys, *argv, "--html", str(blocked(tmp_path) / "report.html"))
    assert code == 1
    [path] = save_dir.iterdir()
    assert f"counterexample saved to {path}" in out and "HTML timeline written" not in out
    assert "kvcheck: warning: cannot write the HTML timeline" in err


def test_passing_checks_never_touch_an_unwritable_save_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["check", "builtin:reference", *FAST, "--save-dir", str(blocked(tmp_path))]
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0 and err == ""
    assert json.loads(out)["warnings"] == []


def test_exhaust_reports_the_failure_when_its_file_cannot_be_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["exhaust", "builtin:seed-prefix", *EXHAUST_SMALL, "--save-dir", str(blocked(tmp_path))]
    code, out, err = run_cli(capsys, *argv)
    assert code == 1
    assert "shortest counterexample" in out and "counterexample saved" not in out
    assert "kvcheck: warning: cannot write the counterexample" in err
    code, out, _ = run_cli(capsys, *argv, "--json")
    report = json.loads(out)
    assert code == 1 and report["verdict"] == "fail"
    assert report["counterexample_file"] is None and len(report["warnings"]) == 1


def test_replay_keeps_its_verdict_when_the_page_cannot_be_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_scenario(STALE_FINISHED, load_target("builtin:seed-prefix"), record=True)
    path = save(from_run(result, "builtin:seed-prefix"), tmp_path / "cx")
    page = blocked(tmp_path) / "report.html"
    code, out, err = run_cli(capsys, "replay", str(path), "--html", str(page))
    assert code == 1 and "REPRODUCED" in out
    assert "kvcheck: warning: cannot write the HTML timeline" in err
    code, out, _ = run_cli(capsys, "replay", str(path), "--html", str(page), "--json")
    report = json.loads(out)
    assert code == 1 and report["replay"] == "same"
    assert report["html_report"] is None and len(report["warnings"]) == 1


def test_the_demo_exits_0_when_its_files_cannot_be_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".kvcheck").write_text("a file where the demo saves its counterexamples\n")
    code, out, err = run_cli(capsys)
    assert code == 0
    assert "summary: 2 of 2 built-in targets break an invariant" in out
    assert "replay with" not in out  # nothing was saved, so nothing to replay
    assert err.count("kvcheck: warning: cannot write the counterexample") == 2
