"""Strings read from a counterexample file reach the terminal escaped: a request id holding an
escape sequence, a bell or a bidirectional override is shown as its escape, never acted on
(issue 23, messages)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from kvcheck.cli.main import main
from kvcheck.core.run import run_scenario
from kvcheck.counterexamples.fileformat import load, save
from kvcheck.counterexamples.replay import from_run, replay
from kvcheck.families.sglang.scenario import Admit, Step
from kvcheck.reporting.render import print_timeline, printable
from kvcheck.reporting.timeline import build_timeline
from kvcheck.targets.loading import load_target
from tests.helpers import scenario

HOSTILE = "r\x1b[31mred\x07\u202eevil\r"
SHOWN = "r\\x1b[31mred\\x07\\u202eevil\\r"


def hostile_file(tmp_path: Path) -> Path:
    stale = scenario(Admit(HOSTILE, 10, 3), Step(), Step((2,)), Step((3,)), Step(), stride=4)
    result = run_scenario(stale, load_target("builtin:seed-prefix"), record=True)
    return save(from_run(result, "builtin:seed-prefix"), tmp_path)


def _raw_in(text: str) -> bool:
    return any(c in text for c in ("\x1b[31m", "\x07", "\u202e", "\r"))


def test_printable_escapes_what_would_act_on_a_terminal() -> None:
    assert printable(HOSTILE) == SHOWN
    assert printable("a\tb\nc") == "a\\tb\nc"
    assert printable("a\nb", keep_newlines=False) == "a\\nb"
    assert printable("r0 ünïcode ✓") == "r0 ünïcode ✓"


def test_replay_prints_a_files_strings_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = hostile_file(tmp_path)
    assert json.loads(path.read_text())["violation"]["rid"] == HOSTILE
    assert main(["replay", str(path)]) == 1
    out = capsys.readouterr().out
    assert not _raw_in(out)
    assert f"({SHOWN})" in out and f"admit {SHOWN}" in out


def test_the_rich_timeline_escapes_them_too(tmp_path: Path) -> None:
    counterexample = load(hostile_file(tmp_path))
    replayed = replay(counterexample, load_target("builtin:seed-prefix"))

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    print_timeline(build_timeline(replayed.result, target=replayed.target), terminal)
    assert not _raw_in(terminal.getvalue()) and "red" in terminal.getvalue()


def test_a_failing_replay_item_reports_them_escaped(tmp_path: Path) -> None:
    counterexample = load(hostile_file(tmp_path))
    report = replay(counterexample, load_target("builtin:seed-prefix")).failure_report()
    assert not _raw_in(report) and SHOWN in report
