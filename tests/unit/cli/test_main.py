"""The `kvcheck` front door: the issue's acceptance criteria, exit codes and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import run_cli

SMALL = ["--max-examples", "300", "--seed", "3"]


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks here save counterexamples and examples where kvcheck does by default (under
    the current directory): a scratch one, never the working tree."""
    monkeypatch.chdir(tmp_path)


def check_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, object]]:
    code, out, _ = run_cli(capsys, "check", *argv, "--json")
    return code, json.loads(out)


def test_seed_prefix_fails_with_a_short_counterexample(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = check_json(capsys, "builtin:seed-prefix", *SMALL)
    assert code == 1
    assert report["verdict"] == "fail"
    violation = report["violation"]
    assert isinstance(violation, dict)
    assert violation["invariant"] in {"committed-finished-frozen", "committed-retracted-zero"}
    events = report["events"]
    assert isinstance(events, list) and len(events) <= 5
    for key in ("target", "convention", "examples", "counterexample_file"):
        assert key in report


def test_seed_prefix_text_report_names_the_invariant(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "check", "builtin:seed-prefix", *SMALL)
    assert code == 1
    assert "FAIL" in out and "committed-" in out and "<- violation" in out


def test_seed_fixed_breaks_ideal_global_counters(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = check_json(capsys, "builtin:seed-fixed", *SMALL)
    assert code == 1
    violation = report["violation"]
    assert isinstance(violation, dict) and violation["invariant"] == "global-counters"


def test_seed_fixed_misreads_rows_after_a_stride_switch(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = check_json(
        capsys, "builtin:seed-fixed", "--global-counters", "sglang", "--adaptive", *SMALL
    )
    assert code == 1
    violation = report["violation"]
    assert isinstance(violation, dict) and violation["invariant"] == "runs-aligned"
    events = report["events"]
    assert isinstance(events, list)
    admitted = {e["rid"] for e in events if e["kind"] == "admit"}
    assert len(admitted) == 2  # row 0's slice does not depend on the stride (semantics §3.4)


def test_explicit_convention_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = check_json(capsys, "builtin:reference", "--convention", "honest", *SMALL)
    assert code == 1  # the reference pre-claims, so judged as honest it breaks committed-live
    assert report["convention"] == "honest"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["check", "builtin:nope"], "unknown builtin 'nope'; builtins: builtin:seed-prefix"),
        (["check", "not a target"], "malformed target"),
        (["check", "no_such_module_kv:fn"], "cannot import 'no_such_module_kv'"),
        (["check", "kvcheck.families.sglang.builtins:refrence"], "did you mean reference"),
        (["check", "kvcheck.families.sglang.builtins:BUILTINS"], "not a function"),
        (
            ["check", "kvcheck.families.sglang.scenario:describe_event"],
            "must accept (self, result, batch)",
        ),
        (["check", "builtin:reference", "--max-examples", "0"], "positive integer"),
        (["check", "builtin:reference", "--max-examples", "many"], "positive integer"),
        (["check", "builtin:reference", "--seed", "x"], "integer seed"),
        (["check", "builtin:reference", "--convention", "sideways"], "invalid choice"),
        (["check", "builtin:reference", "--global-counters", "most"], "invalid choice"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_input_is_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, _, err = run_cli(capsys, *argv)
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_bad_input_in_a_real_process_has_no_traceback() -> None:
    for argv in (["check", "builtin:nope"], ["check", "x", "--max-examples", "-3"]):
        completed = subprocess.run(
            [sys.executable, "-m", "kvcheck.cli", *argv],
            capture_output=True,
            text=True,
            check=False,
        )
        assert completed.returncode == 2
        assert "Traceback" not in completed.stderr
        assert completed.stderr.startswith("kvcheck: error: ")
        assert len(completed.stderr.strip().splitlines()) == 1


def test_bare_kvcheck_reports_on_the_seed_resolvers(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, _ = run_cli(capsys)
    assert code == 0
    assert "builtin:seed-prefix" in out and "builtin:seed-fixed" in out
    assert "summary: 2 of 2 built-in targets break an invariant" in out
    saved = sorted(p.name for p in (tmp_path / ".kvcheck" / "counterexamples").iterdir())
    assert len(saved) == 2
    assert out.count("replay with: kvcheck replay .kvcheck/counterexamples/") == 2
