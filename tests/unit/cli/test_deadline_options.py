"""The options around deadlines and stops: `--deadline` on every command that runs a target,
`exhaust --max-memory`, a regression test that carries its deadline, and the plain progress
lines a command writes when stderr is not a terminal."""

from __future__ import annotations

import io
import json
import time

import pytest

from kvcheck.cli.main import main
from kvcheck.cli.progress import Progress
from tests.helpers import COMMITTED_COUNTEREXAMPLES

SAVED = sorted(COMMITTED_COUNTEREXAMPLES.glob("*.kvcheck.json"))[0]


@pytest.mark.parametrize("command", ["check", "exhaust", "replay", "regress", "releases"])
@pytest.mark.parametrize("value", ["-1", "soon", "inf", "nan"])
def test_a_bad_deadline_is_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], command: str, value: str
) -> None:
    first = {"check": "builtin:reference", "exhaust": "builtin:reference"}.get(command, str(SAVED))
    argv = [command] if command == "releases" else [command, first]
    assert main([*argv, "--deadline", value]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert "--deadline" in err


def test_replay_under_no_deadline_and_the_default(capsys: pytest.CaptureFixture[str]) -> None:
    for deadline in ("0", "0.25"):
        code = main(["replay", str(SAVED), "--deadline", deadline, "--json"])
        assert code == json.loads(capsys.readouterr().out)["verdict"].count("fail")


def test_a_regression_test_carries_its_deadline(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["regress", str(SAVED), "--deadline", "0.5"]) == 0
    assert "DEADLINE = 0.5  #" in capsys.readouterr().out
    assert main(["regress", str(SAVED), "--deadline", "0"]) == 0
    assert "DEADLINE = None  #" in capsys.readouterr().out


def test_exhaust_stops_cleanly_at_its_memory_limit(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["exhaust", "builtin:reference", "--max-memory", "1", "--no-save", "--json"])
    out, err = capsys.readouterr()
    assert code == 2
    report = json.loads(out)  # the report still comes, as one JSON object
    assert report["verdict"] == "incomplete"
    assert report["stopped"] == "memory limit"
    assert report["peak_memory_mb"] > 1
    last = err.strip().splitlines()[-1]
    assert last.startswith("kvcheck: error: exhaust stopped at --max-memory")
    assert "Traceback" not in err


def test_plain_progress_lines_when_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVCHECK_PROGRESS_SECONDS", "0.01")
    stream = io.StringIO()
    with Progress(stream) as progress:
        progress("too soon")  # the first line waits one interval
        for n in range(3):
            time.sleep(0.02)
            progress(f"step {n}")
    assert stream.getvalue().splitlines() == [f"kvcheck: step {n}" for n in range(3)]


def test_progress_lines_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVCHECK_PROGRESS_SECONDS", "0")
    stream = io.StringIO()
    with Progress(stream) as progress:
        progress("nothing")
    assert stream.getvalue() == ""


def test_replay_reports_progress_event_by_event() -> None:
    from kvcheck.counterexamples.fileformat import load
    from kvcheck.counterexamples.replay import replay

    counterexample = load(SAVED)
    lines: list[str] = []
    replay(counterexample, progress=lines.append)
    total = len(counterexample.scenario.events)
    assert lines[0] == f"replayed 1 of {total} events"
    assert all(line.endswith(f" of {total} events") for line in lines)
    assert len(lines) <= total  # it stops at the violating event
