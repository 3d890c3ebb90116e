"""Issue 12 items 1, 2, 9 and 10 end to end: hostile targets and places, and no command on any of
these inputs prints a traceback or raises (`run_cli` asserts it for every command here).

The commands run in this process (`kvcheck.cli.main.main`, which has torch imported already),
where an uncaught exception fails the test with its traceback; `capfd` reads what the command
and the target write to file descriptors 1 and 2. The one fresh process is the one whose point
it is: pytest running the generated regression test from its own folder. (Tracebacks at a real
process's start-up and exit: tests/unit/cli/test_main.py, tests/quality/test_cli_end_to_end.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import run_cli

FAST = ["--max-examples", "50", "--seed", "0", "--no-database"]
NOISY = """\
print("noisy: loaded")


class Noisy:
    def resolve(self, result, batch):
        print("noisy: called")
        raise ValueError("boom")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_in_a_read_only_directory_the_demo_exits_0_and_check_still_reports(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # /proc refuses new files to everyone, root included: a read-only working directory.
    monkeypatch.chdir("/proc")
    code, out, err = run_cli(capfd)
    assert code == 0, err
    assert "summary: 2 of 2" in out and "kvcheck: warning: " in err
    code, out, _ = run_cli(capfd, "check", "builtin:seed-prefix", "--json", *FAST)
    assert code == 1
    report = json.loads(out)
    assert report["verdict"] == "fail" and report["counterexample_file"] is None
    assert report["warnings"]


def test_no_traceback_from_any_command_on_hostile_input(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / "noisy.py").write_text(NOISY)
    (project / "plain").write_text("a file, not a directory\n")
    garbage = project / "garbage.kvcheck.json"
    garbage.write_text("{not json")

    def kvcheck(*argv: str, cwd: Path = project) -> tuple[int, str, str]:
        monkeypatch.chdir(cwd)
        return run_cli(capfd, *argv)

    # A noisy target, a save-dir that is a file: the finding and one JSON object all the same.
    code, out, err = kvcheck(
        "check", "noisy.py::Noisy.resolve", "--json", *FAST, "--save-dir", "plain"
    )
    assert code == 1
    report = json.loads(out)
    assert report["violation"]["invariant"] == "target-raised" and report["warnings"]
    assert "noisy: called" in err and "noisy:" not in out

    code, _, _ = kvcheck("check", "noisy.py::Noisy.resolve", *FAST, "--save-dir", "cx")
    assert code == 1
    [counterexample] = (project / "cx").iterdir()
    before = counterexample.read_bytes()

    outcomes = {
        "replay from elsewhere": (kvcheck("replay", str(counterexample), cwd=elsewhere), 1),
        "regress over its input": (
            kvcheck("regress", str(counterexample), "--out", str(counterexample), "--force"),
            2,
        ),
        "replay page over its input": (
            kvcheck("replay", str(counterexample), "--html", str(counterexample)),
            2,
        ),
        "replay page below a file": (
            kvcheck("replay", str(counterexample), "--html", str(project / "plain" / "p.html")),
            1,
        ),
        "garbage file": (kvcheck("replay", str(garbage), "--json"), 2),
        "a directory as file": (kvcheck("replay", str(project), "--json"), 2),
        "usage error": (kvcheck("check", "--json", "--max-examples", "x"), 2),
        "version": (kvcheck("--version"), 0),
    }
    for name, ((code, out, err), expected) in outcomes.items():
        assert code == expected, (name, out, err)
    assert counterexample.read_bytes() == before
    for name in ("garbage file", "a directory as file", "usage error"):
        assert json.loads(outcomes[name][0][1])["exit_code"] == 2
    assert "REPRODUCED" in outcomes["replay from elsewhere"][0][1]

    # The regression test, run by pytest from its own folder, fails on the violation.
    tests = project / "tests"
    assert kvcheck("regress", str(counterexample), "--out", f"{tests}/")[0] == 0
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
