"""The command line end to end: acceptance runs with the full budget, and fresh processes (a
check whose file replays in another interpreter without Hypothesis, a generated regression test
run by pytest, a closed pipe)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvcheck.cli.main import main
from kvcheck.core.run import run_scenario
from kvcheck.counterexamples.fileformat import SUFFIX, load, save
from kvcheck.counterexamples.replay import from_run
from kvcheck.families.sglang.scenario import Admit, Step
from kvcheck.targets.loading import load_target
from tests.helpers import scenario

# --- kvcheck check ------------------------------------------------------------------------------

SMALL = ["--max-examples", "300", "--seed", "3"]
QUIET = ["--no-save", "--no-database", *SMALL]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def check_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, object]]:
    code, out, _ = run_cli(capsys, "check", *argv, "--json")
    return code, json.loads(out)


def test_seed_fixed_passes_under_sglang_counters(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = check_json(capsys, "builtin:seed-fixed", "--global-counters", "sglang", *SMALL)
    assert (code, report["verdict"]) == (0, "pass")


def test_reference_survives_a_thousand_adaptive_scenarios(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, report = check_json(capsys, "builtin:reference", "--adaptive", "--max-examples", "1000")
    assert (code, report["verdict"]) == (0, "pass")
    assert report["examples"] == 1000


def _check_json_with_closed(stream: str, spec: str) -> tuple[int, str, str]:
    """`kvcheck check SPEC --json` with the reader of `stream` ("stdout" or "stderr") gone
    before kvcheck writes, header and progress lines on: its exit code, what the other stream
    got (stderr then stdout)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "kvcheck.cli", "check", spec, "--json", *QUIET],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "KVCHECK_PROGRESS_SECONDS": "0.3"},
    )
    closed = process.stdout if stream == "stdout" else process.stderr
    assert closed is not None
    closed.close()
    out, err = process.communicate(timeout=120)
    return process.returncode, err or "", out or ""


def test_a_closed_pipe_is_not_a_traceback() -> None:
    # `kvcheck check --json | head -0`: the reader is gone before kvcheck writes.
    code, stderr, _ = _check_json_with_closed("stdout", "builtin:seed-prefix")
    assert "Traceback" not in stderr
    assert code == 1


def test_a_closed_stderr_changes_neither_the_verdict_nor_the_report() -> None:
    # `kvcheck check --json 2>&1 >report.json | head -1`: stderr's reader is gone before kvcheck
    # prints its first progress line. That line's BrokenPipeError used to end the run as if
    # stdout had been closed: exit 1 (a violation) for a target that passes, and no report.
    code, _, out = _check_json_with_closed("stderr", "builtin:reference")
    assert code == 0
    assert json.loads(out)["verdict"] == "pass"


# --- fresh processes: check, replay, regress ----------------------------------------------------

FAST = ["--max-examples", "100", "--seed", "0", "--no-database"]
STALE_FINISHED = scenario(Admit("r0", 10, 3), Step(), Step((2,)), Step((3,)), Step(), stride=4)


def python(*args: str, cwd: Path, hashseed: str = "0") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "PYTHONHASHSEED": hashseed}
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=120
    )


# Replays in an interpreter where `import hypothesis` fails, so Hypothesis cannot be involved.
NO_HYPOTHESIS = """
import sys
sys.modules["hypothesis"] = None
from kvcheck.cli.main import main
code = main(sys.argv[1:])
assert not any(name.startswith("hypothesis.") for name in sys.modules), "hypothesis imported"
sys.exit(code)
"""


def saved_file(tmp_path: Path, spec: str = "builtin:seed-prefix") -> Path:
    result = run_scenario(STALE_FINISHED, load_target(spec), record=True)
    return save(from_run(result, spec), tmp_path)


def test_check_writes_a_file_that_replays_in_a_fresh_process(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Written here (this process has torch imported already, and its own string hashes),
    # replayed in a fresh one.
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(
        capsys, "check", "builtin:seed-prefix", *FAST, "--save-dir", "cx", "--json"
    )
    assert code == 1, err
    report = json.loads(out)
    path = tmp_path / report["counterexample_file"]
    assert path.is_file() and path.name.endswith(SUFFIX)
    assert report["replay_command"] == f"kvcheck replay {report['counterexample_file']}"
    saved = load(path)
    assert saved.violation is not None
    assert saved.violation.invariant == report["violation"]["invariant"]

    # Another interpreter with other string hashes: nothing may depend on set or dict order.
    replayed = python(
        "-c", NO_HYPOTHESIS, "replay", str(path), "--json", cwd=tmp_path, hashseed="4242"
    )
    assert replayed.returncode == 1, replayed.stderr
    again = json.loads(replayed.stdout)
    assert again["replay"] == "same"
    assert again["violation"]["invariant"] == report["violation"]["invariant"]
    assert again["violation"]["event_index"] == report["violation"]["event_index"]
    assert again["counterexample_file"] == str(path)


def run_pytest(*test_files: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """pytest on `test_files` in one fresh interpreter (each costs seconds of CPU), with every
    test's outcome in the short summary (`-rA`: `PASSED file::test`, `FAILED file::test`)."""
    return python(
        "-m",
        "pytest",
        "-q",
        "-rA",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:kvcheck",
        *map(str, test_files),
        cwd=cwd,
    )


def outcomes(summary: str, test_file: Path) -> list[str]:
    """The outcomes (`PASSED`, `FAILED`, ...) that `-rA`'s short summary gives the tests of
    `test_file`."""
    found = []
    for line in summary.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0].isupper() and f"{test_file.name}::" in words[1]:
            found.append(words[0])
    return found


def test_regress_passes_against_the_fix_and_fails_against_the_bug(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = saved_file(tmp_path)
    assert main(["regress", str(path)]) == 0
    text = capsys.readouterr().out
    assert (
        "TARGET = 'builtin:seed-prefix'" in text
        and "def test_no_committed_finished_frozen_" in text
    )

    buggy = tmp_path / "test_buggy.py"
    buggy.write_text(text)
    fixed_dir = tmp_path / "fixed"
    assert (
        main(["regress", str(path), "--target", "builtin:reference", "--out", f"{fixed_dir}/"]) == 0
    )
    [fixed] = fixed_dir.iterdir()
    assert fixed.name.startswith("test_kvcheck_no_committed_finished_frozen_")
    assert f"wrote {fixed}" in capsys.readouterr().out

    # Both in one run (from the buggy one's folder, the fixed one's parent): the fixed one
    # passes, the buggy one fails with the violation.
    both = run_pytest(fixed, buggy, cwd=tmp_path)
    report = both.stdout + both.stderr
    assert both.returncode == 1, report
    assert outcomes(both.stdout, fixed) == ["PASSED"], report
    assert outcomes(both.stdout, buggy) == ["FAILED"], report
    assert "1 failed, 1 passed" in both.stdout, report
    assert "REPRODUCED  committed-finished-frozen at event 4 (r0)" in both.stdout
    assert f"counterexample file: {path}" in both.stdout
    assert "replay with: kvcheck replay" in both.stdout
