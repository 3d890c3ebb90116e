"""Issue 12 item 1: no command writes over one of its inputs, nor over an existing file without
`--force`; a destination refused is exit 2 with one line before any work is done."""

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
RAISES = "class R:\n    def resolve(self, result, batch):\n        raise ValueError('boom')\n"


def counterexample_file(tmp_path: Path, spec: str = "builtin:seed-prefix") -> Path:
    result = run_scenario(STALE_FINISHED, load_target(spec), record=True)
    return save(from_run(result, spec), tmp_path / "cx")


# --- the command's own input ------------------------------------------------------------------


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_regress_never_writes_the_test_over_its_counterexample(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], force: list[str]
) -> None:
    path = counterexample_file(tmp_path)
    before = path.read_bytes()
    code, _, err = run_cli(capsys, "regress", str(path), "--out", str(path), *force)
    assert code == 2
    assert "it is an input of this command" in err and len(err.splitlines()) == 1
    assert path.read_bytes() == before
    json.loads(path.read_text())  # still the counterexample


def test_regress_refuses_its_destination_before_loading_the_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Loading a release takes seconds; what can be refused without it is refused first.
    path = counterexample_file(tmp_path)
    missing = str(tmp_path / "gone.py")
    code, _, err = run_cli(capsys, "regress", str(path), "--target", missing, "--out", str(path))
    assert code == 2
    assert "it is an input of this command" in err and missing not in err


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_replay_never_writes_the_page_over_its_counterexample(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], force: list[str]
) -> None:
    path = counterexample_file(tmp_path)
    before = path.read_bytes()
    code, out, err = run_cli(capsys, "replay", str(path), "--html", str(path), *force)
    assert code == 2
    assert "it is an input of this command" in err
    assert out == ""  # refused before the replay
    assert path.read_bytes() == before


def test_replay_never_writes_the_page_over_the_targets_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    resolver = tmp_path / "resolver.py"
    resolver.write_text(RAISES)
    path = counterexample_file(tmp_path, f"{resolver}::R.resolve")
    code, _, err = run_cli(capsys, "replay", str(path), "--html", str(resolver), "--force")
    assert code == 2 and "it is an input of this command" in err
    assert resolver.read_text() == RAISES


def test_check_never_writes_the_page_over_the_targets_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    resolver = tmp_path / "resolver.py"
    resolver.write_text(RAISES)
    argv = ["check", f"{resolver}::R.resolve", *FAST, "--save-dir", str(tmp_path / "cx")]
    code, out, err = run_cli(capsys, *argv, "--html", str(resolver), "--force")
    assert code == 2 and "it is an input of this command" in err
    assert out == ""  # refused before the search
    assert resolver.read_text() == RAISES


# --- an existing file -------------------------------------------------------------------------


def test_regress_keeps_an_existing_test_unless_forced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = counterexample_file(tmp_path)
    mine = tmp_path / "test_mine.py"
    mine.write_text("def test_hand_written() -> None:\n    pass\n")
    code, _, err = run_cli(capsys, "regress", str(path), "--out", str(mine))
    assert code == 2 and "refusing to overwrite" in err and "--force" in err
    assert "test_hand_written" in mine.read_text()
    code, out, _ = run_cli(capsys, "regress", str(path), "--out", str(mine), "--force")
    assert code == 0 and f"wrote {mine}" in out
    assert "replay(counterexample, TARGET" in mine.read_text()


def test_regress_into_a_directory_keeps_the_test_written_before(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = counterexample_file(tmp_path)
    tests = tmp_path / "tests"
    tests.mkdir()
    assert run_cli(capsys, "regress", str(path), "--out", f"{tests}/")[0] == 0
    [written] = tests.iterdir()
    written.write_text(written.read_text() + "# edited by hand\n")
    code, _, err = run_cli(capsys, "regress", str(path), "--out", f"{tests}/")
    assert code == 2 and "refusing to overwrite" in err
    assert written.read_text().endswith("# edited by hand\n")


@pytest.mark.parametrize("command", ["check", "replay"])
def test_an_existing_html_page_is_kept_unless_forced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    page = tmp_path / "report.html"
    page.write_text("<p>an earlier report</p>")
    if command == "check":
        argv = ["check", "builtin:seed-prefix", *FAST, "--save-dir", str(tmp_path / "cx")]
    else:
        argv = ["replay", str(counterexample_file(tmp_path))]
    code, out, err = run_cli(capsys, *argv, "--html", str(page))
    assert code == 2 and "refusing to overwrite" in err and "--force" in err
    assert out == ""  # refused before any search or replay
    assert page.read_text() == "<p>an earlier report</p>"
    code, _, _ = run_cli(capsys, *argv, "--html", str(page), "--force")
    assert code == 1
    assert "<svg" in page.read_text()


def test_a_counterexample_file_of_the_same_name_is_left_as_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    save_dir = tmp_path / "cx"
    argv = ["check", "builtin:seed-prefix", *FAST, "--save-dir", str(save_dir)]
    assert run_cli(capsys, *argv)[0] == 1
    [path] = save_dir.iterdir()
    annotated = path.read_text().replace(
        '"kvcheck_version"', '"note": "triaged",\n  "kvcheck_version"'
    )
    path.write_text(annotated)
    code, out, _ = run_cli(capsys, *argv)
    assert code == 1 and f"counterexample saved to {path}" in out
    assert list(save_dir.iterdir()) == [path]
    assert path.read_text() == annotated  # the same finding (its name is its digest): kept
