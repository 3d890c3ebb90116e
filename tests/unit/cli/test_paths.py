"""Issue 12 item 10: a counterexample records its target so that it replays from any directory,
and the regression test `kvcheck regress` writes runs from its own folder. A target read from a
path is recorded with the path made absolute."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tests.helpers import run_cli

FAST = ["--max-examples", "50", "--seed", "0", "--no-database"]
RAISES = "class R:\n    def resolve(self, result, batch):\n        raise ValueError('boom')\n"


@pytest.fixture
def found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Path:
    """A counterexample found by `kvcheck check` run in `project/` on a relative target spec."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "resolver.py").write_text(RAISES)
    monkeypatch.chdir(project)
    code, _, _ = run_cli(capsys, "check", "resolver.py::R.resolve", *FAST, "--save-dir", "cx")
    assert code == 1
    [path] = (project / "cx").iterdir()
    return path


def test_the_file_records_an_absolute_target(found: Path) -> None:
    data = json.loads(found.read_text())
    assert data["target"] == f"{found.parent.parent / 'resolver.py'}::R.resolve"


def test_replay_works_from_another_directory(
    found: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, out, _ = run_cli(capsys, "replay", str(found))
    assert code == 1
    assert "REPRODUCED  target-raised" in out


def _run_generated(test_file: Path) -> None:
    spec = importlib.util.spec_from_file_location("generated_regression", test_file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    [test] = [getattr(module, name) for name in dir(module) if name.startswith("test_")]
    test()


def test_a_regression_test_runs_from_its_own_folder(
    found: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tests = tmp_path / "project" / "tests"
    code, _, _ = run_cli(capsys, "regress", str(found), "--out", f"{tests}/")
    assert code == 0
    [test_file] = tests.iterdir()
    monkeypatch.chdir(tests)
    # The bug is still there: the test fails on the violation, not on loading its target.
    with pytest.raises(AssertionError, match="target-raised"):
        _run_generated(test_file)


def test_regress_records_a_relative_target_given_to_it_as_absolute(
    found: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "project" / "fixed.py").write_text(RAISES)
    code, out, _ = run_cli(capsys, "regress", str(found), "--target", "fixed.py::R.resolve")
    assert code == 0
    assert f"TARGET = '{tmp_path / 'project' / 'fixed.py'}::R.resolve'" in out


def test_an_old_relative_target_still_loads_from_the_current_directory(
    found: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Files written before targets were recorded absolute keep their meaning.
    data = json.loads(found.read_text())
    data["target"] = "resolver.py::R.resolve"
    found.write_text(json.dumps(data))
    code, out, _ = run_cli(capsys, "replay", str(found))
    assert code == 1 and "REPRODUCED" in out
    monkeypatch.chdir(found.parent)
    code, _, err = run_cli(capsys, "replay", str(found))
    assert code == 2 and "does not load" in err  # one line, exit 2 (run_cli: no traceback)
