"""`kvcheck fuzz` campaigns in real processes: a failure found, shrunk, saved and replayable; a
clean campaign's count; --keep-going; a crashing worker; Ctrl-C and a killed parent end every
worker. (The campaign across machines on one Redis: test_fuzz_redis.py.)

The workers are always spawned processes. The parent is a fresh interpreter only where the parent
process is the point (Ctrl-C, a killed parent, a killed campaign); elsewhere the command runs in
this process (`run_cli`), which has torch imported already, and `capfd` reads the workers' output
on file descriptors 1 and 2 as well as the parent's, so a worker's traceback is still seen."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvcheck.cli import fuzz as fuzz_command
from tests.helpers import run_cli


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`tmp_path` as the working directory (the example database and saved files go there) and
    on the import path of this process and of the spawned workers (module targets)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def kvcheck(capfd: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """`kvcheck ARGV` in this process: exit code, stdout and stderr (the workers' included)."""
    return run_cli(capfd, *argv)


def test_a_failure_is_shrunk_saved_replayable_and_ends_the_campaign_early(
    here: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # Each worker counts the duration from when it has loaded the target, so a campaign that
    # did not end at its first failure would take longer than the duration whatever the load;
    # one that does ends in seconds (workers starting on a loaded machine took 20 s here).
    started = time.monotonic()
    code, out, err = kvcheck(
        capfd, "fuzz", "builtin:seed-prefix", "--workers", "2", "--duration", "60"
    )
    elapsed = time.monotonic() - started
    assert code == 1, out + err
    assert elapsed < 60, f"the campaign ran {elapsed:.0f} s after its first failure"
    lines = out.splitlines()
    assert any(line.startswith("FAIL ") for line in lines)
    saved = next(line for line in lines if line.startswith("counterexample saved to "))
    path = here / saved.removeprefix("counterexample saved to ")
    assert path.is_file()
    command = next(line for line in lines if line.startswith("replay with: "))
    assert command == f"replay with: kvcheck replay {path.relative_to(here)}"
    code, out, _ = kvcheck(capfd, "replay", str(path))
    assert code == 1 and "REPRODUCED" in out
    # Shrunk: the smallest failing scenarios of seed-prefix are a handful of events.
    events = json.loads(path.read_text())["events"]
    assert len(events) <= 6


def test_a_clean_campaign_reports_its_count_as_one_json_object(
    here: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # One second: each worker counts it from when it has loaded the target and searches one
    # round at least, so both count examples however slowly they start. A plain progress line
    # is due every `PLAIN_EVERY` seconds, so one that short is due within the campaign.
    monkeypatch.setattr(fuzz_command, "PLAIN_EVERY", 0.1)
    code, out, err = kvcheck(
        capfd, "fuzz", "builtin:reference", "--workers", "2", "--duration", "1", "--json"
    )
    assert code == 0, err
    report = json.loads(out)  # exactly one object: anything else fails to parse
    assert report["verdict"] == "pass" and report["failures"] == []
    assert report["workers"] == 2 and report["examples"] > 0
    assert [w["state"] for w in report["per_worker"]] == ["done", "done"]
    assert report["examples"] == sum(w["examples"] for w in report["per_worker"])
    assert all(w["examples"] > 0 for w in report["per_worker"])
    assert report["labels_reached"]
    assert "kvcheck fuzz: " in err  # plain progress lines when stderr is not a terminal


def test_keep_going_collects_distinct_failures_until_the_deadline(
    here: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    code, out, err = kvcheck(
        capfd, "fuzz", "builtin:seed-prefix", "--workers", "2", "--duration", "2", "--keep-going",
        "--json",
    )  # fmt: skip
    assert code == 1, err
    assert time.monotonic() - started >= 2
    report = json.loads(out)
    failures = report["failures"]
    assert failures
    identities = [(f["violation"]["invariant"], json.dumps(f["events"])) for f in failures]
    assert len(set(identities)) == len(identities)
    for failure in failures:
        assert Path(here, failure["counterexample_file"]).is_file()


def fuzz_module(
    here: Path, capfd: pytest.CaptureFixture[str], module: str, source: str, *argv: str
) -> tuple[int, str, str]:
    """`kvcheck fuzz MODULE:resolve --workers 2 ARGV` on `source` written as an importable module
    (this process and every worker import it; each test its own name, as this process keeps
    the modules it imported)."""
    (here / f"{module}.py").write_text(source)
    return kvcheck(
        capfd, "fuzz", f"{module}:resolve", "--workers", "2", "--convention", "preclaim", *argv
    )


CRASHING = """
import multiprocessing
import os

from kvcheck.families.sglang.builtins import reference


def resolve(self, result, batch):
    if multiprocessing.current_process().name == "kvcheck-fuzz-1":
        os._exit(3)
    return reference(self, result, batch)
"""


def test_a_crashing_worker_is_reported_and_the_others_go_on(
    here: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    code, out, err = fuzz_module(
        here, capfd, "crashing_target", CRASHING, "--duration", "1", "--json"
    )
    assert code == 0, out + err
    report = json.loads(out)
    assert report["crashed_workers"] == [1]
    crashed, survivor = report["per_worker"][1], report["per_worker"][0]
    assert "exited with code 3" in crashed["error"]
    assert survivor["state"] == "done" and survivor["examples"] > 0
    assert "worker 1 crashed: the worker process exited with code 3; the others go on" in err


NONDETERMINISTIC = """
import multiprocessing
import random

from kvcheck.families.sglang.builtins import reference, seed_prefix


def resolve(self, result, batch):
    if multiprocessing.current_process().name.startswith("kvcheck-fuzz") and random.random() < 0.5:
        return seed_prefix(self, result, batch)
    return reference(self, result, batch)
"""


def test_a_worker_that_cannot_judge_the_target_ends_the_campaign_with_exit_2(
    here: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # Deterministic at load time (the probe), a coin toss in the workers: kvcheck gives no verdict.
    code, out, err = fuzz_module(
        here, capfd, "coin_toss_target", NONDETERMINISTIC, "--duration", "20"
    )
    assert code == 2, out + err
    assert "two different results on the same scenario" in err
    assert out == ""


WORKERS_ONLY = """
import multiprocessing

from kvcheck.families.sglang.builtins import reference, seed_prefix


def resolve(self, result, batch):
    if multiprocessing.current_process().name.startswith("kvcheck-fuzz"):
        return seed_prefix(self, result, batch)
    return reference(self, result, batch)
"""


def test_a_failure_the_parent_cannot_reproduce_is_no_verdict(
    here: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # Deterministic within each process, different between them: the workers' own checks agree,
    # the parent's replay does not. Not a verdict (exit 2), but the file is kept.
    code, out, err = fuzz_module(
        here, capfd, "workers_only_target", WORKERS_ONLY, "--duration", "20"
    )
    assert code == 2, out + err
    assert "two different results on the same scenario" in err
    assert "no verdict; saved to .kvcheck/counterexamples/" in err
    assert out == ""
    assert list((here / ".kvcheck" / "counterexamples").glob("*.kvcheck.json"))


def _children(pid: int) -> set[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return set()
    return {int(p) for p in text.split()}


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


_IN_BACKGROUND: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def _no_campaign_outlives_its_test() -> Iterator[None]:
    """A test that fails before it stops its `--duration inf` campaign (a wait that ran out on a
    loaded machine) must not leave the campaign and its workers searching for ever: their
    process group is killed once the test is over."""
    yield
    while _IN_BACKGROUND:
        process = _IN_BACKGROUND.pop()
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


def _background(tmp_path: Path, *argv: str) -> subprocess.Popen[str]:
    """`kvcheck fuzz ARGV --duration inf` in its own process group, stderr to stderr.txt."""
    with (tmp_path / "stderr.txt").open("w") as errors:
        process = subprocess.Popen(
            [sys.executable, "-m", "kvcheck.cli", "fuzz", *argv, "--duration", "inf"],
            stdout=subprocess.PIPE, stderr=errors, text=True, cwd=tmp_path,
            start_new_session=True,
        )  # fmt: skip
    _IN_BACKGROUND.append(process)
    return process


def _start_campaign(tmp_path: Path) -> tuple[subprocess.Popen[str], set[int]]:
    process = _background(tmp_path, "builtin:reference", "--workers", "2", "--json")
    # Until both workers search: a plain progress line ("..., per worker N, M), ...") with both
    # rates above 0.
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        rates = re.findall(r"per worker (\d+), (\d+)\)", (tmp_path / "stderr.txt").read_text())
        if rates and all(int(r) > 0 for r in rates[-1]):
            break
        time.sleep(0.2)
    workers = _children(process.pid)
    assert len(workers) >= 2, workers
    return process, workers


def _gone(pids: set[int], within: float) -> bool:
    until = time.monotonic() + within
    while any(_alive(p) for p in pids) and time.monotonic() < until:
        time.sleep(0.1)
    return not any(_alive(p) for p in pids)


def test_ctrl_c_ends_every_worker_keeps_the_count_and_exits_130(tmp_path: Path) -> None:
    if not Path("/proc/self/task").is_dir():
        pytest.skip("needs /proc to find the worker processes")
    process, workers = _start_campaign(tmp_path)
    os.killpg(process.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole group
    out, _ = process.communicate(timeout=60)
    err = (tmp_path / "stderr.txt").read_text()
    assert process.returncode == 130, err
    assert "Traceback" not in out + err
    assert "interrupted: stopping the workers" in err
    report = json.loads(out)
    assert report["interrupted"] is True and report["examples"] > 0
    assert _gone(workers, 5), "a worker outlived the campaign"


def test_workers_die_with_a_killed_parent(tmp_path: Path) -> None:
    if not Path("/proc/self/task").is_dir():
        pytest.skip("needs /proc to find the worker processes")
    process, workers = _start_campaign(tmp_path)
    process.kill()
    process.communicate(timeout=30)
    assert _gone(workers, 5), "a worker outlived its killed parent"


def test_a_failure_is_saved_as_it_arrives_so_a_killed_campaign_keeps_it(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    process = _background(tmp_path, "builtin:seed-prefix", "--workers", "1", "--keep-going")
    try:
        deadline = time.monotonic() + 90
        saved: list[str] = []
        while not saved and time.monotonic() < deadline:
            saved = re.findall(
                r"kvcheck fuzz: saved to (\S+)", (tmp_path / "stderr.txt").read_text()
            )
            time.sleep(0.2)
        assert saved, (tmp_path / "stderr.txt").read_text()
    finally:
        process.kill()
        process.wait(timeout=30)
    path = tmp_path / saved[0]
    assert path.is_file()
    monkeypatch.chdir(tmp_path)
    assert kvcheck(capfd, "replay", str(path))[0] == 1


def test_a_hanging_target_is_a_deadline_violation_in_the_workers(
    here: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The workers run every call under `--deadline`, as `check` does: a resolver that never
    returns is a saved `target-deadline` counterexample, not a campaign that hangs."""
    hangs = Path(__file__).parents[1] / "fixtures" / "hostile" / "hangs.py"
    code, out, err = kvcheck(
        capfd, "fuzz", f"{hangs}::loops_forever", "--workers", "1", "--duration", "60",
        "--no-database", "--deadline", "0.2", "--json",
    )  # fmt: skip
    assert code == 1, err
    report = json.loads(out)
    assert [f["violation"]["invariant"] for f in report["failures"]] == ["target-deadline"]
    assert report["seconds"] < 60
