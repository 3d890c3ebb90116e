"""`kvcheck fuzz` campaigns in real processes: a failure found, shrunk, saved and replayable; a
clean campaign's count; --keep-going; a crashing worker; Ctrl-C and a killed parent end every
worker. (The campaign across machines on one Redis: test_fuzz_redis.py.)"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers import run_process


def kvcheck(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_process(*argv, cwd=cwd)


def test_a_failure_is_shrunk_saved_replayable_and_ends_the_campaign_early(
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    done = kvcheck(
        "fuzz", "builtin:seed-prefix", "--workers", "2", "--duration", "30", cwd=tmp_path
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 1, done.stdout + done.stderr
    assert elapsed < 30, f"the campaign ran {elapsed:.0f} s after its first failure"
    lines = done.stdout.splitlines()
    assert any(line.startswith("FAIL ") for line in lines)
    saved = next(line for line in lines if line.startswith("counterexample saved to "))
    path = tmp_path / saved.removeprefix("counterexample saved to ")
    assert path.is_file()
    command = next(line for line in lines if line.startswith("replay with: "))
    assert command == f"replay with: kvcheck replay {path.relative_to(tmp_path)}"
    replayed = kvcheck("replay", str(path), cwd=tmp_path)
    assert replayed.returncode == 1 and "REPRODUCED" in replayed.stdout
    # Shrunk: the smallest failing scenarios of seed-prefix are a handful of events.
    events = json.loads(path.read_text())["events"]
    assert len(events) <= 6


def test_a_clean_campaign_reports_its_count_as_one_json_object(tmp_path: Path) -> None:
    done = kvcheck(
        "fuzz", "builtin:reference", "--workers", "2", "--duration", "4", "--json", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)  # exactly one object: anything else fails to parse
    assert report["verdict"] == "pass" and report["failures"] == []
    assert report["workers"] == 2 and report["examples"] > 0
    assert [w["state"] for w in report["per_worker"]] == ["done", "done"]
    assert report["examples"] == sum(w["examples"] for w in report["per_worker"])
    assert all(w["examples"] > 0 for w in report["per_worker"])
    assert report["labels_reached"]
    assert "kvcheck fuzz: " in done.stderr  # plain progress lines when stderr is not a terminal


def test_keep_going_collects_distinct_failures_until_the_deadline(tmp_path: Path) -> None:
    started = time.monotonic()
    done = kvcheck(
        "fuzz", "builtin:seed-prefix", "--workers", "2", "--duration", "5", "--keep-going",
        "--json", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert time.monotonic() - started >= 5
    report = json.loads(done.stdout)
    failures = report["failures"]
    assert failures
    identities = [(f["violation"]["invariant"], json.dumps(f["events"])) for f in failures]
    assert len(set(identities)) == len(identities)
    for failure in failures:
        assert Path(tmp_path, failure["counterexample_file"]).is_file()


def fuzz_module(tmp_path: Path, source: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """`kvcheck fuzz module_target:resolve --workers 2 ARGV` on `source` written as an importable
    module (every worker imports it)."""
    (tmp_path / "module_target.py").write_text(source)
    env_path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "kvcheck.cli", "fuzz", "module_target:resolve", "--workers", "2",
         "--convention", "preclaim", *argv],
        capture_output=True, text=True, check=False, cwd=tmp_path,
        env=os.environ | {"PYTHONPATH": env_path},
    )  # fmt: skip


CRASHING = """
import multiprocessing
import os

from kvcheck.families.sglang.builtins import reference


def resolve(self, result, batch):
    if multiprocessing.current_process().name == "kvcheck-fuzz-1":
        os._exit(3)
    return reference(self, result, batch)
"""


def test_a_crashing_worker_is_reported_and_the_others_go_on(tmp_path: Path) -> None:
    done = fuzz_module(tmp_path, CRASHING, "--duration", "4", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["crashed_workers"] == [1]
    crashed, survivor = report["per_worker"][1], report["per_worker"][0]
    assert "exited with code 3" in crashed["error"]
    assert survivor["state"] == "done" and survivor["examples"] > 0
    assert "worker 1 crashed: the worker process exited with code 3; the others go on" in (
        done.stderr
    )


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
    tmp_path: Path,
) -> None:
    # Deterministic at load time (the probe), a coin toss in the workers: kvcheck gives no verdict.
    done = fuzz_module(tmp_path, NONDETERMINISTIC, "--duration", "20")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "two different results on the same scenario" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert done.stdout == ""


WORKERS_ONLY = """
import multiprocessing

from kvcheck.families.sglang.builtins import reference, seed_prefix


def resolve(self, result, batch):
    if multiprocessing.current_process().name.startswith("kvcheck-fuzz"):
        return seed_prefix(self, result, batch)
    return reference(self, result, batch)
"""


def test_a_failure_the_parent_cannot_reproduce_is_no_verdict(tmp_path: Path) -> None:
    # Deterministic within each process, different between them: the workers' own checks agree,
    # the parent's replay does not. Not a verdict (exit 2), but the file is kept.
    done = fuzz_module(tmp_path, WORKERS_ONLY, "--duration", "20")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "two different results on the same scenario" in done.stderr
    assert "no verdict; saved to .kvcheck/counterexamples/" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert done.stdout == ""
    assert list((tmp_path / ".kvcheck" / "counterexamples").glob("*.kvcheck.json"))


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


def _background(tmp_path: Path, *argv: str) -> subprocess.Popen[str]:
    """`kvcheck fuzz ARGV --duration inf` in its own process group, stderr to stderr.txt."""
    with (tmp_path / "stderr.txt").open("w") as errors:
        return subprocess.Popen(
            [sys.executable, "-m", "kvcheck.cli", "fuzz", *argv, "--duration", "inf"],
            stdout=subprocess.PIPE, stderr=errors, text=True, cwd=tmp_path,
            start_new_session=True,
        )  # fmt: skip


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
        import pytest

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
        import pytest

        pytest.skip("needs /proc to find the worker processes")
    process, workers = _start_campaign(tmp_path)
    process.kill()
    process.communicate(timeout=30)
    assert _gone(workers, 5), "a worker outlived its killed parent"


def test_a_failure_is_saved_as_it_arrives_so_a_killed_campaign_keeps_it(tmp_path: Path) -> None:
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
    assert kvcheck("replay", str(path), cwd=tmp_path).returncode == 1


def test_a_hanging_target_is_a_deadline_violation_in_the_workers(tmp_path: Path) -> None:
    """The workers run every call under `--deadline`, as `check` does: a resolver that never
    returns is a saved `target-deadline` counterexample, not a campaign that hangs."""
    hangs = Path(__file__).parents[1] / "fixtures" / "hostile" / "hangs.py"
    done = kvcheck(
        "fuzz", f"{hangs}::loops_forever", "--workers", "1", "--duration", "60",
        "--no-database", "--deadline", "0.2", "--json", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert [f["violation"]["invariant"] for f in report["failures"]] == ["target-deadline"]
    assert report["seconds"] < 60
