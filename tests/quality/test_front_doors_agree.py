"""Both front doors give one verdict (issue 12, item 6): for every built-in, every fixture
generation's correct and buggy resolver and every corpus entry, `kvcheck check` with its default
options and the pytest plugin with the same seed and budget pass or fail together. (The plugin's
options themselves are tests/unit/test_plugin_options.py.)"""

from __future__ import annotations

import json
from contextlib import redirect_stderr, redirect_stdout
from io import StringIO

import pytest
import torch

import kvcheck.reporting.timeline
import kvcheck.search.check
from kvcheck.cli.main import main
from kvcheck.families.sglang.builtins import BUILTINS
from kvcheck.mutants import ENTRIES
from tests.helpers import SGLANG_FIXTURES

pytest_plugins = ["pytester"]

# Loaded here, not first inside a pytester run: pytester drops the modules an inline run imported,
# and importing torch's or Hypothesis's compiled extensions a second time crashes the process.
PRELOADED = (torch, kvcheck.search.check, kvcheck.reporting.timeline)

# Small and fixed, so the whole comparison stays affordable; the verdicts need not be the ones
# a long search gives, only the same at both doors.
EXAMPLES, SEED = "30", "0"


def targets() -> list[str]:
    index = json.loads((SGLANG_FIXTURES / "index.json").read_text())
    fixtures = [
        f"{SGLANG_FIXTURES / gen['path']}::{gen[kind]}"
        for gen in index["generations"]
        for kind in ("correct", "buggy")
    ]
    return [f"builtin:{name}" for name in BUILTINS] + fixtures + [e.spec for e in ENTRIES]


def cli_verdicts(specs: list[str]) -> dict[str, str]:
    verdicts = {}
    for spec in specs:
        out, err = StringIO(), StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = main(
                [
                    "check",
                    spec,
                    "--max-examples",
                    EXAMPLES,
                    "--seed",
                    SEED,
                    "--no-database",
                    "--no-save",
                    "--no-coverage",
                ]
            )
        assert code in (0, 1), f"{spec}: {err.getvalue()}"
        verdicts[spec] = "passed" if code == 0 else "failed"
    return verdicts


def test_check_and_the_plugin_agree_on_every_builtin_fixture_and_mutant(
    pytester: pytest.Pytester,
) -> None:
    specs = targets()
    assert len(specs) > 80
    expected = cli_verdicts(specs)
    argv = ["-p", "no:cacheprovider", "--kvcheck-max-examples", EXAMPLES, "--kvcheck-seed", SEED]
    argv += ["--kvcheck-save-dir", str(pytester.path / "counterexamples")]  # not the checkout's
    for spec in specs:
        argv += ["--kvcheck-target", spec]
    reports = pytester.inline_run(*argv).getreports("pytest_runtest_logreport")
    seen = {r.nodeid: r.outcome for r in reports if r.when == "call"}
    plugin = {spec: seen.get(f"kvcheck[{spec.replace('::', ':')}][auto]") for spec in specs}
    disagree = {
        spec: (expected[spec], plugin[spec]) for spec in specs if expected[spec] != plugin[spec]
    }
    assert disagree == {}
    # Both outcomes occur, so the comparison is not vacuous.
    assert set(expected.values()) == {"passed", "failed"}
