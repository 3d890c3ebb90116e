"""Calls nothing in-process can stop (`kvcheck.core.isolation`, `deadline.watch_stuck`): the
monitor names a call still running past its deadline and a grace; a numbered call can be made
to fail at once; isolated, a run is done in a forked child, and a run whose call never returns
there is still a `target-deadline` violation at that call, in the probe too."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvcheck.core import deadline, isolation
from kvcheck.core.deadline import TargetDeadlineExceeded, call_with_deadline
from kvcheck.families.sglang.engine import UnsupportedTargetError
from tests.helpers import ROOT, TESTS_DIR

KVCHECK = [sys.executable, "-m", "kvcheck.cli"]
UNSTOPPABLE = TESTS_DIR / "fixtures" / "hostile" / "unstoppable.py"


@pytest.fixture
def numbered() -> Iterator[None]:
    deadline.reset_calls()
    try:
        yield
    finally:
        deadline.reset_calls()
        deadline.watch_stuck(None, 1.0)


def _swallow_for(seconds: float) -> str:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            while time.monotonic() < end:
                pass
        except BaseException:
            pass
    return "late"


def test_the_monitor_names_a_call_still_running_past_its_deadline(numbered: None) -> None:
    seen: list[tuple[str, int, float]] = []
    deadline.watch_stuck(lambda *stuck: seen.append(stuck), 0.1)
    call_with_deadline(0.1, lambda: "fine")  # call 1
    with pytest.raises(TargetDeadlineExceeded):
        call_with_deadline(0.1, _swallow_for, 0.8)  # call 2, stuck after 0.2 s
    assert seen == [("deadline", 2, 0.1)]


def test_a_call_numbered_to_fail_raises_without_running(numbered: None) -> None:
    ran: list[int] = []
    deadline.reset_calls(frozenset({2}))
    call_with_deadline(1.0, ran.append, 1)
    with pytest.raises(TargetDeadlineExceeded):
        call_with_deadline(1.0, ran.append, 2)
    call_with_deadline(1.0, ran.append, 3)
    assert ran == [1, 3]
    assert deadline.calls_started() == 3


def test_apart_returns_and_raises_what_the_child_did() -> None:
    assert isolation.apart(sum, [1, 2, 3]) == 6
    with pytest.raises(UnsupportedTargetError, match="not modelled"):
        isolation.apart(_raise_unsupported)


def _raise_unsupported() -> Any:
    raise UnsupportedTargetError("not modelled")


def _swallowing_run() -> Any:
    # Stands for a run of the target: call 1 returns, call 2 never does.
    call_with_deadline(0.1, lambda: None)
    call_with_deadline(0.1, _swallow_for, 3600.0)
    return "unreachable"


def test_apart_ends_a_call_that_never_returns_at_its_deadline(numbered: None) -> None:
    started = time.monotonic()
    with pytest.raises(TargetDeadlineExceeded):
        isolation.apart(_swallowing_run)
    assert time.monotonic() - started < 5


# A fresh interpreter: isolated, the probe and a run of a target that swallows every
# interruption both end; before isolation both hung for good (the subprocess's timeout).
ISOLATED_RUN = textwrap.dedent(
    f"""
    from kvcheck.core import isolation
    from kvcheck.core.run import run_scenario
    from kvcheck.families.sglang.scenario import Admit, Config, Scenario, Step
    from kvcheck.targets.loading import load_target

    isolation._isolated = True
    target = load_target("{UNSTOPPABLE}::swallows_everything")
    print("probe:", target.shape.probe_error)
    events = (Admit("r0", 10, 20), Step(), Step((2,)), Step((3,)))
    result = run_scenario(Scenario(Config(), events), target)
    print("run:", result.violation.invariant, result.violation.event_index)
    """
)


def test_isolated_the_probe_and_a_run_of_a_target_that_swallows_everything_end() -> None:
    done = subprocess.run(
        [sys.executable, "-c", ISOLATED_RUN],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "probe: TargetDeadlineExceeded" in done.stdout
    assert "run: target-deadline " in done.stdout


def test_an_isolated_probe_sends_back_what_the_target_touched() -> None:
    # The probe's log held its recording proxies, which pickle but do not unpickle.
    from kvcheck.families.sglang.builtins import reference
    from kvcheck.families.sglang.probe import detect_api_shape

    here = detect_api_shape(reference)
    isolation._isolated = True
    try:
        apart = detect_api_shape(reference)
    finally:
        isolation._isolated = False
    assert apart == here


def _resume_with_signal_numbers(tmp_path: Path, numbers: bytes) -> subprocess.CompletedProcess[str]:
    """`check` as the image `_restart` starts, handed a wakeup pipe holding `numbers`: the
    signals the earlier image's C-level handler took after its last look, as it was replaced."""
    record = tmp_path / "stuck.json"
    record.write_text(json.dumps({"scenario": None}), encoding="utf-8")
    read_end, write_end = os.pipe()
    os.write(write_end, numbers)
    os.close(write_end)
    try:
        return subprocess.run(
            [*KVCHECK, "check", "builtin:reference", "--max-examples", "3", "--no-save"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
            check=False,
            pass_fds=(read_end,),
            env={
                **os.environ,
                isolation.RESUME_ENV: str(record),
                isolation.SIGNALS_ENV: str(read_end),
            },
        )
    finally:
        os.close(read_end)


def test_a_ctrl_c_taken_as_the_process_started_again_stops_the_new_image(tmp_path: Path) -> None:
    # Pressed between the monitor's last look and `exec`: the main thread's C-level handler
    # wrote it to the wakeup pipe, but its Python handler never ran. It once ran to a verdict.
    done = _resume_with_signal_numbers(tmp_path, bytes([signal.SIGALRM, signal.SIGINT]))
    assert done.returncode == 130, done.stderr
    assert "interrupted" in done.stderr
    assert "Traceback" not in done.stderr


def test_other_signals_in_the_handed_over_pipe_are_no_ctrl_c(tmp_path: Path) -> None:
    done = _resume_with_signal_numbers(tmp_path, bytes([signal.SIGALRM, signal.SIGALRM]))
    assert done.returncode == 0, done.stderr


def test_a_fault_while_ending_a_stuck_call_still_ends_the_process(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The monitor's thread is the only one left to end the process (the main thread is inside
    # the stuck call); a fault there must end it as kvcheck's own (exit 2), not end the thread.
    def failing_restart(why: str, number: int, seconds: float) -> None:
        raise OSError(28, "No space left on device")

    def exits(code: int) -> None:
        raise SystemExit(code)

    monkeypatch.setattr(isolation, "_end_stuck", failing_restart)
    monkeypatch.setattr(isolation.os, "_exit", exits)
    with pytest.raises(SystemExit) as ended:
        isolation._on_stuck("deadline", 1, 0.25)
    assert ended.value.code == isolation.EXIT_USAGE
    assert "internal error" in capsys.readouterr().err
