"""`kvcheck check` writes counterexample files; `kvcheck replay` and `kvcheck regress` use them.

The acceptance path in fresh processes (a second interpreter, in which importing Hypothesis is
impossible, replays a file and reproduces the same invariant at the same event index; a generated
regression test run by pytest) is tests/quality/test_cli_end_to_end.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcheck.cli.main import main
from kvcheck.core.run import run_scenario
from kvcheck.counterexamples.fileformat import SUFFIX, save
from kvcheck.counterexamples.replay import from_run
from kvcheck.families.sglang.scenario import Admit, Step
from kvcheck.targets.loading import load_target
from tests.helpers import scenario

FAST = ["--max-examples", "100", "--seed", "0", "--no-database"]
STALE_FINISHED = scenario(Admit("r0", 10, 3), Step(), Step((2,)), Step((3,)), Step(), stride=4)


def saved_file(tmp_path: Path, spec: str = "builtin:seed-prefix") -> Path:
    result = run_scenario(STALE_FINISHED, load_target(spec), record=True)
    return save(from_run(result, spec), tmp_path)


def test_check_text_output_names_the_file_and_the_replay_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    save_dir = tmp_path / "cx"
    html = tmp_path / "report.html"
    code = main(
        ["check", "builtin:seed-prefix", *FAST, "--save-dir", str(save_dir), "--html", str(html)]
    )
    out = capsys.readouterr().out
    assert code == 1
    [path] = save_dir.iterdir()
    assert f"counterexample saved to {path}" in out
    assert f"replay with: kvcheck replay {path}" in out
    assert "timeline  builtin:seed-prefix" in out and "STALE row" in out and "why: " in out
    assert html.is_file() and "<svg" in html.read_text()
    # The same counterexample found again gets the same name.
    assert main(["check", "builtin:seed-prefix", *FAST, "--save-dir", str(save_dir)]) == 1
    assert list(save_dir.iterdir()) == [path]


def test_no_save_and_passing_checks_write_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    save_dir = tmp_path / "cx"
    assert (
        main(["check", "builtin:seed-prefix", *FAST, "--save-dir", str(save_dir), "--no-save"]) == 1
    )
    assert main(["check", "builtin:reference", *FAST, "--save-dir", str(save_dir)]) == 0
    assert not save_dir.exists()
    assert "counterexample saved" not in capsys.readouterr().out


def test_default_database_keeps_failures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    args = ["check", "builtin:seed-prefix", "--max-examples", "50", "--save-dir", "cx"]
    assert main([*args, "--json"]) == 1
    assert (tmp_path / ".hypothesis" / "examples").is_dir()
    assert main([*args, "--database", "db", "--json"]) == 1
    assert (tmp_path / "db").is_dir()


def test_replay_text_reports_reproduced_fixed_and_different(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = saved_file(tmp_path)
    assert main(["replay", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"replaying {path} against builtin:seed-prefix (saved target)" in out
    assert "REPRODUCED  committed-finished-frozen at event 4 (r0)" in out
    assert ">> finished  C exp 12 / obs 15" in out

    assert main(["replay", str(path), "--target", "builtin:reference"]) == 0
    out = capsys.readouterr().out
    assert "(given target)" in out and "NO VIOLATION" in out

    # seed-fixed gives the pre-claimed slot back but still counts the stale row globally.
    assert main(["replay", str(path), "--target", "builtin:seed-fixed"]) == 1
    out = capsys.readouterr().out
    assert "VIOLATION   global-counters at event 4: a different invariant than saved" in out


def test_replay_json_and_html(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = saved_file(tmp_path)
    html = tmp_path / "out" / "t.html"
    assert main(["replay", str(path), "--json", "--html", str(html)]) == 1
    report = json.loads(capsys.readouterr().out)
    for key in ("verdict", "target", "convention", "examples", "violation", "events"):
        assert key in report
    assert report["verdict"] == "fail" and report["replay"] == "same"
    assert report["saved_violation"]["invariant"] == "committed-finished-frozen"
    assert report["html_report"] == str(html) and html.is_file()


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ('{"schema_version": 1, "config": {', "not valid JSON (corrupt or truncated?)"),
        ('{"schema_version": 99, "config": {}, "events": []}', "reads version(s) 1, 2, 3, 4"),
        (
            '{"schema_version": 4, "family": "mamba", "config": {}, "events": []}',
            "unknown engine family 'mamba'; this kvcheck knows: sglang, vllm",
        ),
        (None, "no such counterexample file"),
    ],
)
def test_replay_bad_files_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, needle: str
) -> None:
    path = tmp_path / f"bad{SUFFIX}"
    if content is not None:
        path.write_text(content)
    assert main(["replay", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and lines[0].startswith("kvcheck: error:")


def test_replay_target_that_no_longer_exists_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = saved_file(tmp_path)
    path.write_text(path.read_text().replace("builtin:seed-prefix", "builtin:renamed"))
    assert main(["replay", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "its saved target 'builtin:renamed' does not load" in err[0]
    assert main(["replay", str(path), "--target", "nowhere.module:fn"]) == 2
    assert "cannot import 'nowhere.module'" in capsys.readouterr().err


# --- kvcheck regress ----------------------------------------------------------------------------


def test_regress_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = saved_file(tmp_path)
    assert main(["regress", str(path), "--target", "builtin:nope"]) == 2
    assert "unknown builtin 'nope'" in capsys.readouterr().err
    assert main(["regress", str(tmp_path / "missing.kvcheck.json")]) == 2
