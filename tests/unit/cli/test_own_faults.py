"""kvcheck's own faults are exit 2 with one line, never a verdict and never a traceback unless
`--debug` asks for it; a target's `SystemExit` is its violation (exit 1); a target that answers
one scenario two ways gets its own message naming the scenario (issue 12, item 4)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import kvcheck.cli.check
from kvcheck.cli.main import main
from tests.helpers import TESTS_DIR

RESOLVERS = TESTS_DIR / "fixtures" / "verdicts" / "resolvers.py"
FAST = ["--max-examples", "60", "--seed", "0", "--no-database", "--no-save", "--no-coverage"]


def broken_report(*args: Any, **kwargs: Any) -> str:
    raise RuntimeError("a bug in the report")


def test_an_exception_in_kvchecks_code_is_one_line_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(kvcheck.cli.check, "format_verdict", broken_report)
    assert main(["check", "builtin:reference", *FAST]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "kvcheck's own code raised RuntimeError: a bug in the report" in err
    assert "--debug" in err


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_shows_the_traceback(
    where: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(kvcheck.cli.check, "format_verdict", broken_report)
    argv = ["check", "builtin:reference", *FAST]
    argv = ["--debug", *argv] if where == "before" else [*argv, "--debug"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "broken_report" in err
    assert err.rstrip().splitlines()[-1].startswith("kvcheck: error: kvcheck's own code raised")


def test_debug_on_a_usage_error_adds_the_traceback_only_when_asked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["replay", "nope.kvcheck.json"]) == 2
    assert "Traceback" not in capsys.readouterr().err
    assert main(["replay", "nope.kvcheck.json", "--debug"]) == 2
    assert "Traceback" in capsys.readouterr().err


def test_a_target_raising_system_exit_is_its_violation(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", f"{RESOLVERS}::exits", *FAST, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["violation"]["invariant"] == "target-raised"
    assert report["violation"]["observed"] == "SystemExit: 3"


def test_a_nondeterministic_target_names_the_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", f"{RESOLVERS}::twentieth_call", *FAST]) == 2
    captured = capsys.readouterr()
    err = captured.err
    assert err.count("\n") == 1 and "Flaky" not in err and "Traceback" not in err
    assert "gave two different results on the same scenario" in err
    assert "first global-counters at event" in err and "then no violation" in err
    scenario = json.loads(err.split("The scenario: ", 1)[1])
    assert scenario["events"] and scenario["config"]["convention"] in ("preclaim", "honest")


def test_a_caught_unmodelled_access_is_exit_2_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["check", f"{RESOLVERS}::falls_back", "--adaptive", *FAST]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "reads `self.server_args`" in err and "no verdict" in err and err.count("\n") == 1


def test_missing_torch_is_one_line(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from kvcheck.cli.main import main\n"
        "raise SystemExit(main(['check', 'builtin:reference', '--max-examples', '5', "
        "'--no-database', '--no-save']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "kvcheck needs PyTorch" in done.stderr and "pip install torch" in done.stderr


def test_exhaust_names_a_nondeterministic_target_too(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["exhaust", f"{RESOLVERS}::twentieth_call", "--requests", "1", "--events", "5"]
    assert main([*argv, "--no-save", "--no-coverage"]) == 2
    err = capsys.readouterr().err
    assert "two different results on the same scenario" in err and "AssertionError" not in err
    assert "during the enumeration, then no violation when replayed" in err
