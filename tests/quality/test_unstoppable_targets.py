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
import threading
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


def test_a_closed_stderr_does_not_leave_a_stuck_call_running_for_good(tmp_path: Path) -> None:
    # The monitor that ends a stuck call says so on stderr first. With stderr's reader gone
    # (`2>&1 | head -1`) that print raised in the monitor's thread, which died with it, and
    # kvcheck spun in the target's loop for good.
    process = subprocess.Popen(
        [*KVCHECK, "check", f"{UNSTOPPABLE}::swallows_everything", "--no-save", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    assert process.stderr is not None
    process.stderr.close()
    try:
        out, _ = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 1
    assert json.loads(out)["violation"]["invariant"] == "target-deadline"


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
    # The search must reach the scenario that gets stuck before the time limit: 5 s, since on a
    # loaded machine 3 s once ended the search after 3 scenarios, before it got there (exit 0).
    code, out, err, took = _kvcheck(
        tmp_path,
        "check",
        f"{UNSTOPPABLE}::swallows_late",
        "--deadline",
        "0",
        "--time-limit",
        "5",
        "--no-save",
        "--json",
    )
    assert code == 2, err
    assert "time limit passed inside a call" in json.loads(out)["error"]
    assert took < 20, took


def test_exhaust_names_target_deadline_in_one_line(tmp_path: Path) -> None:
    code, out, err, took = _kvcheck(
        tmp_path, "exhaust", f"{UNSTOPPABLE}::swallows_everything", "--no-save", "--json"
    )
    assert code == 1, err
    assert "Traceback" not in err
    assert "target-deadline" in json.loads(out)["error"]
    assert took < 15, took


def _start(tmp_path: Path, name: str, *argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*KVCHECK, "check", f"{UNSTOPPABLE}::{name}", "--no-save", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )


def _press_ctrl_c_after(process: subprocess.Popen[str], *lines: str) -> tuple[int, str, float]:
    """Send SIGINT once each of `lines` (parts of a line, in this order) was on stderr; the exit
    code, the whole of stderr and the seconds from the SIGINT to the exit."""
    assert process.stderr is not None
    # A process that never prints the line is ended rather than waited for.
    watchdog = threading.Timer(120, process.kill)
    watchdog.start()
    seen: list[str] = []
    try:
        for awaited in lines:
            while not seen or awaited not in seen[-1]:
                line = process.stderr.readline()
                assert line, f"no line with {awaited!r} on stderr before it ended: {seen}"
                seen.append(line)
    finally:
        watchdog.cancel()
    sent = time.monotonic()
    process.send_signal(signal.SIGINT)
    try:
        code = process.wait(timeout=30)
    finally:
        process.kill()
    return code, "".join(seen) + process.stderr.read(), time.monotonic() - sent


@pytest.mark.parametrize("deadline", ["0.25", "0"], ids=["deadline", "no-deadline"])
def test_ctrl_c_stops_a_target_that_swallows_it(tmp_path: Path, deadline: str) -> None:
    process = _start(tmp_path, "says_so_and_swallows", "--deadline", deadline)
    # With a deadline the probe's call is stuck, and check starts again isolated: Ctrl-C goes
    # to a call running in a child then.
    stuck = ("starting again", "a call started") if deadline != "0" else ("a call started",)
    code, err, took = _press_ctrl_c_after(process, *stuck)
    assert code == 130, err
    assert took < 4, took
    assert "Traceback" not in err


def test_ctrl_c_while_check_starts_again_isolated_exits_130(tmp_path: Path) -> None:
    # Pressed as the process replaces itself (`exec`): before the new image could handle it,
    # Python's default disposition ended the process by SIGINT (-2) without a word.
    process = _start(tmp_path, "says_so_and_swallows", "--deadline", "0.25")
    code, err, took = _press_ctrl_c_after(process, "starting again")
    assert code == 130, err
    assert "kvcheck: interrupted" in err
    assert "Traceback" not in err
    assert took < 10, took


def test_a_ctrl_c_the_stuck_call_swallowed_is_not_lost_by_starting_again(tmp_path: Path) -> None:
    # The call is stuck past its deadline 0.25 s before it is stuck past the Ctrl-C it pressed:
    # check must not start again isolated and forget that Ctrl-C.
    code, _, err, took = _kvcheck(
        tmp_path,
        "check",
        f"{UNSTOPPABLE}::presses_ctrl_c_when_stuck",
        "--deadline",
        "0.25",
        "--no-save",
    )
    assert code == 130, err
    assert "kvcheck: interrupted" in err
    assert "starting again" not in err
    assert took < 30, took


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
