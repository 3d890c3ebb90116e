"""Real resolver shapes: every SGLang API generation's fixture, read from source and judged.

For each generation in tests/fixtures/sglang/index.json the correct resolver passes and the buggy
one fails with its expected invariant, through the CLI with `--convention auto --global-counters
sglang`, a small budget and a fixed seed, and the report names each one's API shape. The probe on
the fixtures, what a target is held to, the spellings and the load errors are unit tests
(tests/unit/targets/, tests/unit/core/test_fakes.py).
"""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest

from kvcheck.cli.main import main
from tests.helpers import SGLANG_FIXTURES

FIXTURES = SGLANG_FIXTURES
INDEX = json.loads((FIXTURES / "index.json").read_text())
GENERATIONS: list[dict[str, Any]] = INDEX["generations"]
GEN_IDS = [g["generation"] for g in GENERATIONS]
BY_ID = dict(zip(GEN_IDS, GENERATIONS, strict=True))
# Small and fixed: the whole file runs in well under a minute on two cores. A search stops at
# its first failure, so the buggy resolvers get the CLI's default budget at little cost.
FIXED = ["--seed", "0", "--no-save", "--no-database"]
BUDGET = ["--max-examples", "100", *FIXED]
BUGGY_BUDGET = ["--max-examples", "300", *FIXED]
SGLANG_AUTO = ["--convention", "auto", "--global-counters", "sglang"]


def spec(gen: dict[str, Any], kind: str) -> str:
    return f"{FIXTURES / gen['path']}::{gen[kind]}"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@functools.cache
def _json_verdict(target: str, options: tuple[str, ...]) -> tuple[int, dict[str, Any]]:
    from contextlib import redirect_stdout
    from io import StringIO

    buffer = StringIO()
    with redirect_stdout(buffer):
        code = main(["check", target, *options, "--json"])
    return code, json.loads(buffer.getvalue())


def json_verdict(gen: dict[str, Any], kind: str, *options: str) -> tuple[int, dict[str, Any]]:
    budget = BUGGY_BUDGET if kind == "buggy" else BUDGET
    return _json_verdict(spec(gen, kind), (*(options or SGLANG_AUTO), *budget))


# --- every generation: correct passes, buggy fails with its invariant -------------------------


@pytest.mark.parametrize("gen", GENERATIONS, ids=GEN_IDS)
def test_correct_resolver_passes(gen: dict[str, Any]) -> None:
    code, report = json_verdict(gen, "correct")
    assert (code, report["verdict"]) == (0, "pass"), report.get("violation")
    assert report["convention"] == gen["convention"]
    assert report["convention_reason"].startswith("auto:")


@pytest.mark.parametrize("gen", GENERATIONS, ids=GEN_IDS)
def test_buggy_resolver_fails_with_its_invariant(gen: dict[str, Any]) -> None:
    code, report = json_verdict(gen, "buggy")
    assert (code, report["verdict"]) == (1, "fail")
    expected = {gen["buggy_invariant"], *gen["buggy_also_trips"]}
    assert report["violation"]["invariant"] in expected, report["violation"]["message"]
    assert report["convention"] == gen["convention"]


@pytest.mark.parametrize("gen", GENERATIONS, ids=GEN_IDS)
def test_report_names_the_api_shape(gen: dict[str, Any]) -> None:
    _, report = json_verdict(gen, "correct")
    shape = report["api_shape"]
    assert shape["convention"] == report["convention"]
    assert gen["api"]["committed"] in shape["spellings"]
    assert f"req.{gen['api']['req_drafts']}" in shape["spellings"]
    if gen["api"]["req_histogram"] is None:
        assert "histogram" in shape["not_held_to"]
    else:
        assert "histogram" in shape["held_to"]
    assert ("controller-feed" in shape["held_to"]) == (gen["api"]["controller"] is not None)
    assert report["adaptive"] == (gen["api"]["controller"] is not None)


def test_text_report_has_the_api_shape_line(capsys: pytest.CaptureFixture[str]) -> None:
    gen = BY_ID["v0_5_19"]
    code, out, _ = run_cli(capsys, "check", spec(gen, "correct"), *SGLANG_AUTO, *BUDGET)
    assert code == 0
    assert "convention  honest  (auto: its spellings (req.kv.kv_committed_len)" in out
    assert "adaptive on (auto: the target feeds the adaptive controller)" in out
    assert (
        "api shape   SGLang 0.5.19+ spellings; stride from result.speculative_num_draft_tokens"
        in out
    )


def test_ideal_mode_faults_sglangs_stale_row_counting() -> None:
    """SGLang's own (correct) resolver counts stale rows: a global-counters finding in `ideal`."""
    code, report = json_verdict(BY_ID["v0_5_23"], "correct", "--global-counters", "ideal")
    assert code == 1
    assert report["violation"]["invariant"] == "global-counters"
    assert "stale rows" in report["violation"]["message"]
