"""`exhaust --workers N` and what its workers must not do (issue 23 items 13 and 20): write to the
report on stdout (a target's import-time print under `--json`), take the levels already cleared
with them when one dies, or leave multiprocessing's noise behind when they are killed. Real
`kvcheck` processes, so that every byte a worker or multiprocessing's helpers write is seen.
(Memory: tests/unit/search/test_exhaust_memory.py.)"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kvcheck.cli.main import main
from tests.helpers import ROOT

# An honest resolver; in worker 1 it kills its own process (SIGKILL, as the kernel's OOM killer
# would) once it has been called `kill_after` times.
RESOLVER = textwrap.dedent(
    """\
    import multiprocessing
    import os
    import signal

    print("resolver module: imported")
    CALLS = [0]
    WORKER = "kvcheck-exhaust-1"

    def resolve(self, result, batch):
        CALLS[0] += 1
        if CALLS[0] > {kill_after} and multiprocessing.current_process().name == WORKER:
            os.kill(os.getpid(), signal.SIGKILL)
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
)
BOUNDS = ["--requests", "2", "--events", "6", "--strides", "2", "--convention", "honest"]


def resolver_module(tmp_path: Path, kill_after: int) -> Path:
    (tmp_path / "workers_resolver.py").write_text(RESOLVER.format(kill_after=kill_after))
    return tmp_path


def kvcheck(directory: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """`kvcheck ARGV` in a fresh interpreter that imports targets from `directory` too; the
    whole of its stdout and stderr, its workers' and multiprocessing's helpers' included."""
    path = os.pathsep.join([str(ROOT), str(directory), os.environ.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "kvcheck.cli", *argv],
        capture_output=True,
        text=True,
        check=False,
        cwd=directory,
        env=os.environ | {"PYTHONPATH": path},
    )


def test_a_targets_import_time_print_stays_off_the_json(tmp_path: Path) -> None:
    directory = resolver_module(tmp_path, kill_after=10**9)
    done = kvcheck(
        directory, "exhaust", "workers_resolver:resolve", *BOUNDS, "--events", "3",
        "--workers", "2", "--no-save", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)  # stdout is the one JSON object and nothing else
    assert report["verdict"] == "pass" and report["workers"] == 2
    # The parent's load and each worker's import print it, all on stderr.
    assert done.stderr.count("resolver module: imported") >= 2


def test_a_killed_worker_reports_the_levels_cleared(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = resolver_module(tmp_path, kill_after=400)
    spec = "workers_resolver:resolve"
    done = kvcheck(directory, "exhaust", spec, *BOUNDS, "--workers", "2", "--no-save", "--json")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "resource_tracker" not in done.stderr
    report = json.loads(done.stdout)
    assert "worker 1 ended unexpectedly (killed by signal 9)" in report["error"]
    levels = report["levels_cleared"]
    assert 0 < levels < 6, report
    assert f"no violation up to {levels} events ({levels} levels cleared" in report["error"]
    # What it says is proven is what one process proves with exactly those levels: this one
    # (torch imported already), with the module imported before, so that its import-time print
    # is not on the report (outside the command line, kvcheck leaves this process's stdout be).
    monkeypatch.chdir(directory)
    monkeypatch.syspath_prepend(str(directory))
    importlib.import_module("workers_resolver")
    capfd.readouterr()
    code = main(["exhaust", spec, *BOUNDS, "--events", str(levels), "--no-save", "--json"])
    assert code == 0
    single = json.loads(capfd.readouterr().out)
    assert single["verdict"] == "pass" and single["depth"] == levels
    assert (report["states"], report["scenarios"]) == (single["states"], single["scenarios"])
    text = kvcheck(directory, "exhaust", spec, *BOUNDS, "--workers", "2", "--no-save")
    assert text.returncode == 2 and text.stdout == ""
    (error,) = [line for line in text.stderr.splitlines() if line.startswith("kvcheck: error:")]
    assert f"no violation up to {levels} events" in error


def test_workers_killed_with_the_resource_tracker_leave_no_noise(tmp_path: Path) -> None:
    """`pkill -f multiprocessing` (or killing every child of kvcheck) ends the resource tracker
    with the workers: the error names the lost worker, and nothing else reaches stderr (no
    "resource_tracker: process died unexpectedly" warning, no KeyError tracebacks)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "kvcheck.cli", "exhaust", "builtin:reference", "--requests", "3",
         "--events", "12", "--workers", "2", "--no-save"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # the tracker and both workers started
            children = _children(process.pid)
            if len(children) == 3:
                break
            time.sleep(0.2)
        time.sleep(2)
        for pid in _children(process.pid):
            os.kill(pid, signal.SIGKILL)
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 2, err
    assert out == ""
    lines = err.splitlines()
    assert lines[-1].startswith("kvcheck: error: exhaust worker "), err
    assert "ended unexpectedly (killed by signal 9)" in lines[-1]
    assert all(line.startswith("kvcheck: ") for line in lines), err


def _children(pid: int) -> list[int]:
    listed = subprocess.run(
        ["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True, check=False
    )
    return [int(p) for p in listed.stdout.split()]
