"""Deadlines, time limits, progress and Ctrl-C, end to end (stderr is not a terminal, so progress
comes as plain lines): a hanging or slow resolver is a saved `target-deadline` counterexample that
replays as one; `--time-limit` stops `check` and `exhaust` inside a running call; SIGINT stops
`check`, `exhaust` and `mutants --jobs` (workers included) within a second or two with what was
established, exit 130 and no traceback; workers die with a killed parent.

Signals and killed parents need fresh processes. The deadline and the time limit interrupt a
call inside the process that runs it, the same in this one: those commands run here (`main`),
which has torch imported already (a fresh interpreter costs seconds of CPU)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kvcheck.cli.main import main
from tests.helpers import TESTS_DIR

HANGS = TESTS_DIR / "fixtures" / "hostile" / "hangs.py"
KVCHECK = [sys.executable, "-m", "kvcheck.cli"]


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "KVCHECK_PROGRESS_SECONDS": "0.3", **extra}


def _here(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *argv: str
) -> tuple[int, str, str, float]:
    """`kvcheck ARGV` in this process from `tmp_path`, with progress lines every 0.3 s as the
    fresh processes have them (`_env`): the exit code, stdout, stderr and the seconds it took."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KVCHECK_PROGRESS_SECONDS", "0.3")
    capfd.readouterr()
    started = time.monotonic()
    code = main(list(argv))
    out, err = capfd.readouterr()
    return code, out, err, time.monotonic() - started


def _clean(*texts: str) -> None:
    for text in texts:
        assert "Traceback" not in text
        assert "@seed" not in text


def test_a_resolver_that_loops_forever_is_a_saved_deadline_counterexample(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err, took = _here(
        capfd, monkeypatch, tmp_path, "check", f"{HANGS}::loops_forever", "--save-dir",
        str(tmp_path), "--json",
    )  # fmt: skip
    _clean(out, err)
    assert code == 1
    report = json.loads(out)
    assert report["violation"]["invariant"] == "target-deadline"
    assert took < 120, took  # the default deadline plus shrinking, not a hang
    saved = Path(report["counterexample_file"])
    assert saved.is_file()
    code, out, err, _ = _here(capfd, monkeypatch, tmp_path, "replay", str(saved), "--json")
    _clean(out, err)
    assert code == 1
    assert json.loads(out)["violation"]["invariant"] == "target-deadline"


def test_a_resolver_sleeping_half_a_second_a_call_is_reported(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err, took = _here(
        capfd, monkeypatch, tmp_path, "check", f"{HANGS}::sleeps", "--no-save", "--no-database",
        "--json",
    )  # fmt: skip
    _clean(out, err)
    assert code == 1
    assert json.loads(out)["violation"]["invariant"] == "target-deadline"
    assert took < 120, took


def test_check_time_limit_stops_and_progress_lines_go_to_stderr(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err, _ = _here(
        capfd,
        monkeypatch,
        tmp_path,
        "check",
        f"{HANGS}::sleeps",
        "--deadline",
        "0",
        "--time-limit",
        "3",
        "--no-save",
        "--no-database",
        "--no-coverage",
        "--json",
        # Fixed draws: unseeded, the first scenario alone could outlast the 3 s (every call
        # sleeps 0.5 s), leaving no finished scenario to report progress on (1 run in 3 failed).
        "--seed",
        "2",
    )
    _clean(out, err)
    assert code == 0
    report = json.loads(out)  # stdout is one JSON object, progress or not
    assert report["verdict"] == "pass"
    assert report["stopped"] == "time limit"
    assert 2.5 <= report["seconds"] < 6
    # Progress is reported after a scenario; how many finish in 3 s depends on the scenarios
    # drawn (each call sleeps 0.5 s), so at least one line, on stderr only.
    lines = [line for line in err.splitlines() if line.startswith("kvcheck: preclaim: ")]
    assert len(lines) >= 1, err
    assert "kvcheck: preclaim: " not in out
    assert all(line.endswith(" s") and "/300 scenarios, " in line for line in lines)


def test_exhaust_time_limit_interrupts_a_running_call(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err, _ = _here(
        capfd,
        monkeypatch,
        tmp_path,
        "exhaust",
        f"{HANGS}::hangs_late",
        "--deadline",
        "0",
        "--time-limit",
        "2",
        "--no-save",
        "--json",
    )
    _clean(out, err)
    assert code == 0
    report = json.loads(out)
    assert report["verdict"] == "incomplete"
    assert report["stopped"] == "time limit"
    assert report["seconds"] < 4


# --- Ctrl-C ---------------------------------------------------------------------------------------


def _interrupt(
    tmp_path: Path, argv: list[str], ready: str | None, *, settle: float = 0.0, workers: int = 0
) -> tuple[int, str, str, float, list[int]]:
    """Start kvcheck, wait for `ready` on stderr or stdout (None: do not) and for `workers`
    spawned worker processes, then `settle` seconds, send SIGINT; the exit code, stdout, stderr,
    the seconds from the signal to the exit and the pids of its children at the signal."""
    process = subprocess.Popen(
        [*KVCHECK, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=_env(),
    )
    lines: dict[str, list[str]] = {"out": [], "err": []}
    seen = threading.Event()

    def read(stream: Any, into: list[str]) -> None:
        for line in stream:
            into.append(line)
            if ready is not None and ready in line:
                seen.set()

    readers = [
        threading.Thread(target=read, args=(process.stdout, lines["out"]), daemon=True),
        threading.Thread(target=read, args=(process.stderr, lines["err"]), daemon=True),
    ]
    for reader in readers:
        reader.start()
    if ready is not None:
        assert seen.wait(240), "".join(lines["err"])
    _wait_for_workers(process.pid, workers)
    time.sleep(settle)
    children = _children(process.pid)
    sent = time.monotonic()
    process.send_signal(signal.SIGINT)
    process.wait(timeout=60)
    took = time.monotonic() - sent
    for reader in readers:
        reader.join(5)
    return process.returncode, "".join(lines["out"]), "".join(lines["err"]), took, children


def _wait_for_workers(pid: int, count: int) -> None:
    """Until `pid` has `count` worker processes (multiprocessing's spawned children; its
    resource tracker is not one), however long start-up takes on a busy machine."""
    end = time.monotonic() + 240
    while count:
        spawned = 0
        for child in _children(pid):
            try:
                spawned += b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes()
            except OSError:
                continue
        if spawned >= count:
            return
        assert time.monotonic() < end, f"{spawned} of {count} workers started"
        time.sleep(0.05)


def _children(pid: int) -> list[int]:
    listed = subprocess.run(
        ["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True, check=False
    )
    return [int(p) for p in listed.stdout.split()]


def _alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split()[2]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def test_ctrl_c_stops_check_with_what_it_found(tmp_path: Path) -> None:
    argv = ["check", f"{HANGS}::sleeps", "--deadline", "0", "--no-save", "--no-database"]
    code, out, err, took, _ = _interrupt(tmp_path, argv, "kvcheck: preclaim: ")
    _clean(out, err)
    assert code == 130
    assert took < 2.5, took
    assert "INTERRUPTED no violation in the" in out


def test_ctrl_c_stops_exhaust_with_the_lengths_it_cleared(tmp_path: Path) -> None:
    argv = ["exhaust", "builtin:reference", "--requests", "4", "--events", "12", "--no-save"]
    code, out, err, took, _ = _interrupt(tmp_path, argv, " states, ", settle=1.0)
    _clean(out, err)
    assert code == 130
    assert took < 2.5, took
    assert "INCOMPLETE  no violation up to" in out
    assert "Ctrl-C stopped the search" in out


def _wait_gone(pids: list[int], seconds: float) -> list[int]:
    end = time.monotonic() + seconds
    while _alive(pids) and time.monotonic() < end:
        time.sleep(0.05)
    return _alive(pids)


def test_ctrl_c_stops_mutants_workers_included(tmp_path: Path) -> None:
    argv = ["mutants", "--jobs", "2", "--max-examples", "50"]
    # Once a worker's first row is in, both are searching.
    code, out, err, took, children = _interrupt(tmp_path, argv, "killed ", workers=2)
    _clean(out, err)
    assert code == 130
    assert took < 2.5, took
    assert "interrupted:" in out
    assert children
    assert not _wait_gone(children, 3)


def test_mutants_workers_die_with_a_killed_parent(tmp_path: Path) -> None:
    process: Any = subprocess.Popen(
        [*KVCHECK, "mutants", "--jobs", "2", "--max-examples", "50"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=tmp_path,
        env=_env(),
    )
    # Until the first row: the workers are searching then.
    while "killed " not in process.stdout.readline():
        assert process.poll() is None, "mutants ended before a row"
    _wait_for_workers(process.pid, 2)
    children = _children(process.pid)
    process.kill()
    process.wait()
    assert children
    assert not _wait_gone(children, 3)


# A resolver module that takes a minute to import in a worker process (as torch's import or a
# heavy target's can take seconds on a busy machine), and at once in the parent.
SLOW_TO_START = """\
import multiprocessing
import time

if multiprocessing.current_process().name.startswith("kvcheck-"):
    time.sleep(60)


def resolve(self, result, batch):
    ids = result.next_token_ids.tolist()
    accepts = result.accept_lens.tolist()
    stride = result.speculative_num_draft_tokens
    for req, accepted in zip(batch.reqs, accepts):
        if req.is_retracted or req.finished():
            continue
        req.kv.kv_committed_len += accepted
        req.spec_verify_ct += 1
        req.spec_num_correct_drafts += accepted - 1
        req.update_spec_correct_drafts_histogram(accepted - 1)
    return [ids[i * stride : i * stride + a] for i, a in enumerate(accepts)]
"""


@pytest.mark.parametrize(
    "command",
    [
        ["fuzz", "--workers", "2", "--duration", "120", "--convention", "honest"],
        ["exhaust", "--workers", "2", "--no-save", "--convention", "honest"],
    ],
    ids=["fuzz", "exhaust"],
)
def test_ctrl_c_does_not_wait_for_workers_still_starting(
    tmp_path: Path, command: list[str]
) -> None:
    """Workers that have not started searching have nothing to report: Ctrl-C ends them at
    once instead of waiting out the stop grace (20 s) for a worker deaf inside an import."""
    (tmp_path / "slow_start.py").write_text(SLOW_TO_START)
    argv = [command[0], "slow_start.py::resolve", *command[1:]]
    # Ctrl-C once both workers exist: they are in their minute-long import for a good while.
    code, out, err, took, children = _interrupt(tmp_path, argv, None, settle=0.5, workers=2)
    _clean(out, err)
    assert code == 130, out + err
    assert took < 5.0, took
    assert children
    assert not _wait_gone(children, 3)
