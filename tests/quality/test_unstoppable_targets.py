"""Targets that no in-process interruption stops (issue 23, item 6), end to end in fresh
processes: a resolver that swallows every interruption and one blocked in a C call that starts
again after each signal. Both hang in the load probe already; before `kvcheck.core.isolation`
kvcheck hung for good there, deaf to `--deadline`, `--time-limit` and Ctrl-C. Now `check` and
`replay` end with a saved, shrunk `target-deadline` counterexample, Ctrl-C exits 130, the time
limit stops them, `exhaust` names `target-deadline` in one line (exit 1), and what a target
writes to file descriptor 1 never reaches the `--json` report."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import TESTS_DIR

UNSTOPPABLE = TESTS_DIR / "fixtures" / "hostile" / "unstoppable.py"
KVCHECK = [sys.executable, "-m", "kvcheck.cli"]


def _kvcheck(tmp_path: Path, *argv: str, timeout: float = 240) -> tuple[int, str, str, float]:
    started = time.monotonic()
    done = subprocess.run(
        [*KVCHECK, *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "KVCHECK_PROGRESS_SECONDS": "0.3"},
        timeout=timeout,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr, time.monotonic() - started


@pytest.mark.parametrize("name", ["swallows_everything", "sleeps_in_c"])
def test_check_and_replay_end_with_a_saved_deadline_counterexample(
    tmp_path: Path, name: str
) -> None:
    code, out, err, took = _kvcheck(
        tmp_path, "check", f"{UNSTOPPABLE}::{name}", "--save-dir", str(tmp_path), "--json"
    )
    assert "Traceback" not in err
    assert code == 1, err
    report = json.loads(out)  # one object: nothing else reached stdout
    assert report["violation"]["invariant"] == "target-deadline"
    assert "starting again with each run of the target in a child process" in err
    assert took < 120, took
    saved = Path(report["counterexample_file"])
    code, out, err, took = _kvcheck(tmp_path, "replay", str(saved), "--json")
    assert "Traceback" not in err
    assert code == 1, err
    assert json.loads(out)["violation"]["invariant"] == "target-deadline"
    assert took < 30, took


def test_the_time_limit_stops_a_target_that_swallows_everything(tmp_path: Path) -> None:
    # Without a deadline the probe's calls get the time limit as theirs; stuck there, check
    # starts again isolated, and its search stops at the time limit: no verdict, exit 0.
    code, out, err, took = _kvcheck(
        tmp_path,
        "check",
        f"{UNSTOPPABLE}::swallows_everything",
        "--deadline",
        "0",
        "--time-limit",
        "2",
        "--no-save",
        "--json",
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["stopped"] == "time limit"
    assert took < 30, took


def test_check_tries_the_scenario_that_got_stuck_first(tmp_path: Path) -> None:
    # The probe passes; the search gets stuck, and the isolated image starts from there.
    code, out, err, took = _kvcheck(
        tmp_path, "check", f"{UNSTOPPABLE}::swallows_late", "--no-save", "--json"
    )
    assert code == 1, err
    report = json.loads(out)
    assert report["violation"]["invariant"] == "target-deadline"
    assert report["examples_to_failure"] == 1
    assert report["coverage"] is None  # the children's coverage data died with them
    assert "starting again" in err
    assert took < 120, took


def test_a_time_limit_stuck_in_the_search_is_no_verdict(tmp_path: Path) -> None:
    code, out, err, took = _kvcheck(
        tmp_path,
        "check",
        f"{UNSTOPPABLE}::swallows_late",
        "--deadline",
        "0",
        "--time-limit",
        "3",
        "--no-save",
        "--json",
    )
    assert code == 2, err
    assert "time limit passed inside a call" in json.loads(out)["error"]
    assert took < 15, took


def test_exhaust_names_target_deadline_in_one_line(tmp_path: Path) -> None:
    code, out, err, took = _kvcheck(
        tmp_path, "exhaust", f"{UNSTOPPABLE}::swallows_everything", "--no-save", "--json"
    )
    assert code == 1, err
    assert "Traceback" not in err
    assert "target-deadline" in json.loads(out)["error"]
    assert took < 15, took


@pytest.mark.parametrize("deadline", ["0.25", "0"], ids=["deadline", "no-deadline"])
def test_ctrl_c_stops_a_target_that_swallows_it(tmp_path: Path, deadline: str) -> None:
    process = subprocess.Popen(
        [*KVCHECK, "check", f"{UNSTOPPABLE}::swallows_everything", "--deadline", deadline],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    time.sleep(4.0)  # in the probe, stuck (and, with a deadline, started again isolated)
    sent = time.monotonic()
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 130, err
    assert time.monotonic() - sent < 4
    assert "Traceback" not in err


def test_output_on_file_descriptor_1_stays_out_of_the_json_report(tmp_path: Path) -> None:
    code, out, err, _ = _kvcheck(
        tmp_path,
        "check",
        f"{UNSTOPPABLE}::writes_to_fd1",
        "--max-examples",
        "20",
        "--no-save",
        "--no-database",
        "--json",
    )
    assert code == 0, err
    assert json.loads(out)["verdict"] == "pass"
    assert "resolver says hello on fd 1" in err
