"""Adding a family touches no generic module: the toy (tests/unit/families/toy.py), registered
only here, runs through the registry and the command line (`check`, `replay`, `exhaust` in
process and on workers, the text and HTML reports, the kill matrix, the pytest plugin), in this
process and in a `kvcheck` subprocess that registers it from `KVCHECK_FAMILIES`; and nothing
under kvcheck/ names it."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import kvcheck.reporting.timeline
import kvcheck.search.check
from kvcheck.core.family import (
    FAMILIES,
    FAMILIES_VARIABLE,
    Family,
    family_for_spec,
    register_from_environment,
    registered,
)
from kvcheck.counterexamples.fileformat import load
from kvcheck.errors import KvcheckUsageError
from tests.helpers import PLUGIN_FAST, ROOT, run_cli, run_process
from tests.unit.families import toy

pytest_plugins = ["pytester"]

# Loaded here, not first inside a pytester run (tests/unit/test_plugin.py says why).
PRELOADED = (kvcheck.search.check, kvcheck.reporting.timeline)

FAST = ("--no-database", "--seed", "0", "--max-examples", "40")


@pytest.fixture
def registered_toy() -> Iterator[Family]:
    with registered(toy.NAME, toy.PATH) as family:
        yield family


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _saved(directory: Path) -> Path:
    (path,) = directory.glob("*.kvcheck.json")
    return path


def test_the_toy_is_known_only_while_registered() -> None:
    assert toy.NAME not in FAMILIES
    with registered(toy.NAME, toy.PATH) as family:
        assert family is toy.FAMILY
        assert family_for_spec("toy:correct") is family
        assert family_for_spec("kvcheck.mutants:toy_unclamped") is family
        assert family_for_spec("kvcheck.mutants:worker_stride").name == "sglang"
    assert toy.NAME not in FAMILIES


def test_check_passes_the_correct_target(
    registered_toy: Family, in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(capsys, "check", "toy:correct", *FAST)
    assert code == 0
    lines = out.splitlines()
    # The toy's own lines on how it was judged: no SGLang convention, options or API shape.
    assert lines[:3] == [
        "target      toy:correct  (the toy's correct counter)",
        "judged      on limits 1..4",
        lines[2],
    ]
    assert lines[2].startswith("PASS        no violation in 40 scenarios")
    assert "convention" not in out and "api shape" not in out
    assert not list(in_tmp.rglob("*.kvcheck.json"))


def test_check_fails_the_mutant_with_a_shrunk_saved_counterexample_that_replays(
    registered_toy: Family, in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    html = in_tmp / "timeline.html"
    code, out, _ = run_cli(
        capsys, "check", "toy:unclamped", *FAST, "--save-dir", "found", "--html", str(html)
    )
    assert code == 1
    assert "FAIL        toy-count at event 0 (counter): expected 1, observed 2" in out
    # The text report: the toy's timeline, its legend, cell and explanation.
    assert "cells: the counter (exp = model, obs = target when they differ)" in out
    assert ">> exp 1 obs 2" in out and "resolver called with n=2" in out
    assert "why: the target left the counter at 2 where the model, clamping at the limit" in out
    saved = load(_saved(in_tmp / "found"))
    # Shrunk to the shortest failure: a limit of 1 and one add of 2.
    assert saved.scenario == toy.scenario(1, toy.Add(2))
    assert saved.scenario.family == "toy" and saved.target == "toy:unclamped"
    assert saved.violation is not None and saved.violation.invariant == "toy-count"
    # The swimlane: the toy's lane, tinted by the toy's phase, its legend.
    page = html.read_text()
    assert "counter" in page and "toy-count" in page and toy.ToyReporter.phase_fills["saturated"]
    code, out, _ = run_cli(capsys, "replay", str(_saved(in_tmp / "found")), "--json")
    replayed = json.loads(out)
    assert code == 1 and replayed["replay"] == "same"
    assert replayed["violation"]["invariant"] == "toy-count"
    # The correct target passes the same file.
    code, _, _ = run_cli(capsys, "replay", str(_saved(in_tmp / "found")), "--target", "toy:correct")
    assert code == 0


def test_the_target_familys_judging_flag_reaches_it_and_others_are_refused(
    registered_toy: Family, in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(capsys, "check", "toy:correct", *FAST, "--max-limit", "2")
    assert code == 0 and "judged      on limits 1..2" in out
    refused = [
        ("check", "toy:correct", "--convention", "preclaim"),
        ("check", "builtin:reference", "--max-limit", "2"),
        ("exhaust", "toy:correct", "--strides", "2"),
        ("fuzz", "toy:correct", "--global-counters", "off"),
    ]
    for argv in refused:
        code, out, err = run_cli(capsys, *argv)
        assert code == 2 and out == "", argv
        assert re.search(
            r"is an option for (sglang|toy) targets; \S+ is a (toy|sglang) target", err
        )


def test_exhaust_in_process_and_on_workers(
    registered_toy: Family, in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(capsys, "exhaust", "toy:unclamped", "--json", "--save-dir", "found")
    failed = json.loads(out)
    assert code == 1 and failed["verdict"] == "fail" and failed["depth"] == 1
    assert failed["minimal_invariants"] == ["toy-count"] and failed["max_limit"] == 3
    assert load(_saved(in_tmp / "found")).scenario == toy.scenario(1, toy.Add(2))
    reports = []
    for workers in ("1", "2"):
        argv = ("exhaust", "toy:correct", "--json", "--limits", "1,2,5", "--max-limit", "3")
        code, out, _ = run_cli(capsys, *argv, "--workers", workers)
        assert code == 0
        reports.append(json.loads(out))
    alone, pooled = reports
    assert alone["verdict"] == pooled["verdict"] == "pass" and pooled["workers"] == 2
    # Limits 1 and 2: counts 0..1 and 0..2, five states; limit 5 is above --max-limit.
    assert alone["states"] == pooled["states"] == 5
    assert alone["scenarios"] == pooled["scenarios"]
    assert alone["not_run"] == [{"limit": 5}]
    assert alone["bounds"] == {"events": 8, "limits": [1, 2, 5], "amounts": [1, 2]}


def test_the_kill_matrix_runs_the_toy_corpus(
    registered_toy: Family, capsys: pytest.CaptureFixture[str]
) -> None:
    only = ("--only", "toy-mutant:unclamped", "--only", "toy-mutant:clamp-by-branch")
    code, out, _ = run_cli(capsys, "mutants", *only, "--max-examples", "30", "--json")
    assert code == 0
    mutant, rewrite = json.loads(out)["rows"]
    assert (mutant["name"], mutant["killed"], mutant["invariant"]) == (
        "unclamped",
        True,
        "toy-count",
    )
    assert mutant["shrunk_length"] == mutant["exhaustive_length"] == 1
    assert mutant["max_limit"] == 4
    assert (mutant["family"], mutant["options"]) == ("toy", {"max_limit": 4})
    assert (rewrite["name"], rewrite["passed"]) == ("clamp-by-branch", True)
    code, out, _ = run_cli(capsys, "mutants", "--list", *only)
    assert code == 0 and out.splitlines()[0].split()[:3] == ["mutant", "unclamped", "toy-count"]


def test_a_kvcheck_subprocess_registers_the_toy_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FAMILIES_VARIABLE, toy.ENVIRONMENT)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    passed = run_process("check", "toy:correct", *FAST, cwd=tmp_path)
    assert passed.returncode == 0, passed.stderr
    failed = run_process("check", "toy:unclamped", *FAST, "--save-dir", "found", cwd=tmp_path)
    assert failed.returncode == 1 and "toy-count" in failed.stdout
    replayed = run_process("replay", str(_saved(tmp_path / "found")), cwd=tmp_path)
    assert replayed.returncode == 1 and "toy-count" in replayed.stdout
    monkeypatch.setenv(FAMILIES_VARIABLE, "toy")
    malformed = run_process("check", "toy:correct", cwd=tmp_path)
    assert malformed.returncode == 2 and malformed.stdout == ""
    assert malformed.stderr.strip().splitlines() == [
        f"kvcheck: error: {FAMILIES_VARIABLE}: 'toy' is not name=module:attribute (entries "
        "are separated by commas)"
    ]


def test_register_from_environment_reads_comma_separated_entries() -> None:
    before = dict(FAMILIES)
    try:
        register_from_environment({FAMILIES_VARIABLE: f" {toy.ENVIRONMENT} , ,"})
        assert FAMILIES[toy.NAME] == toy.PATH
    finally:
        FAMILIES.clear()
        FAMILIES.update(before)
    with pytest.raises(KvcheckUsageError, match="'toy=toy' is not name=module:attribute"):
        register_from_environment({FAMILIES_VARIABLE: "toy=toy"})


def test_the_plugin_builds_the_targets_familys_items(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FAMILIES_VARIABLE, toy.ENVIRONMENT)
    try:
        result = pytester.runpytest(
            "--kvcheck-target",
            "toy:unclamped",
            "--kvcheck-target",
            "toy:correct",
            "--kvcheck-max-limit",
            "2",
            *PLUGIN_FAST,
        )
    finally:
        FAMILIES.pop(toy.NAME, None)  # the plugin registered it from the environment
    result.assert_outcomes(failed=1, passed=1)
    out = result.stdout.str()
    assert "FAILED kvcheck[toy:unclamped][limits-1-2]" in out
    assert "kvcheck: toy:unclamped breaks toy-count (judged on limits 1..2;" in out


def test_no_module_under_kvcheck_names_the_toy() -> None:
    named = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "kvcheck").rglob("*"))
        if path.is_file() and path.suffix in (".py", ".js", ".css", ".toml", ".md", ".typed")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"(?<![a-z])toy", line, re.IGNORECASE)
    ]
    assert named == []
