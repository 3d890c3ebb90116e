"""Issue 12 items 1, 2, 9 and 10 end to end, in real processes (where an uncaught exception
would print its traceback): hostile targets and places, and no command on any of these inputs
prints a traceback (`run_process` asserts it for every command here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import run_process

FAST = ["--max-examples", "50", "--seed", "0", "--no-database"]
NOISY = """\
print("noisy: loaded")


class Noisy:
    def resolve(self, result, batch):
        print("noisy: called")
        raise ValueError("boom")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_in_a_read_only_directory_the_demo_exits_0_and_check_still_reports() -> None:
    # /proc refuses new files to everyone, root included: a read-only working directory.
    demo = run_process(cwd=Path("/proc"))
    assert demo.returncode == 0, demo.stderr
    assert "summary: 2 of 2" in demo.stdout and "kvcheck: warning: " in demo.stderr
    check = run_process("check", "builtin:seed-prefix", "--json", *FAST, cwd=Path("/proc"))
    assert check.returncode == 1
    report = json.loads(check.stdout)
    assert report["verdict"] == "fail" and report["counterexample_file"] is None
    assert report["warnings"]


def test_no_traceback_from_any_command_on_hostile_input(tmp_path: Path) -> None:
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / "noisy.py").write_text(NOISY)
    (project / "plain").write_text("a file, not a directory\n")
    garbage = project / "garbage.kvcheck.json"
    garbage.write_text("{not json")

    # A noisy target, a save-dir that is a file: the finding and one JSON object all the same.
    found = run_process(
        "check", "noisy.py::Noisy.resolve", "--json", *FAST, "--save-dir", "plain", cwd=project
    )
    assert found.returncode == 1
    report = json.loads(found.stdout)
    assert report["violation"]["invariant"] == "target-raised" and report["warnings"]
    assert "noisy: called" in found.stderr and "noisy:" not in found.stdout

    saved = run_process("check", "noisy.py::Noisy.resolve", *FAST, "--save-dir", "cx", cwd=project)
    assert saved.returncode == 1
    [counterexample] = (project / "cx").iterdir()
    before = counterexample.read_bytes()

    outcomes = {
        "replay from elsewhere": (run_process("replay", str(counterexample), cwd=elsewhere), 1),
        "regress over its input": (
            run_process("regress", str(counterexample), "--out", str(counterexample), "--force"),
            2,
        ),
        "replay page over its input": (
            run_process("replay", str(counterexample), "--html", str(counterexample)),
            2,
        ),
        "replay page below a file": (
            run_process("replay", str(counterexample), "--html", str(project / "plain" / "p.html")),
            1,
        ),
        "garbage file": (run_process("replay", str(garbage), "--json"), 2),
        "a directory as file": (run_process("replay", str(project), "--json"), 2),
        "usage error": (run_process("check", "--json", "--max-examples", "x"), 2),
        "version": (run_process("--version"), 0),
    }
    for name, (completed, expected) in outcomes.items():
        assert completed.returncode == expected, (name, completed.stdout, completed.stderr)
    assert counterexample.read_bytes() == before
    for name in ("garbage file", "a directory as file", "usage error"):
        assert json.loads(outcomes[name][0].stdout)["exit_code"] == 2
    assert "REPRODUCED" in outcomes["replay from elsewhere"][0].stdout

    # The regression test, run by pytest from its own folder, fails on the violation.
    tests = project / "tests"
    assert run_process("regress", str(counterexample), "--out", f"{tests}/").returncode == 0
    pytest_run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "."],
        cwd=tests,
        capture_output=True,
        text=True,
        check=False,
    )
    assert pytest_run.returncode == 1, pytest_run.stdout
    assert "REPRODUCED" in pytest_run.stdout or "target-raised" in pytest_run.stdout
    assert "does not load" not in pytest_run.stdout
