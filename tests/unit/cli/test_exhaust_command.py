"""`kvcheck exhaust`: its JSON and text output, saved counterexamples, mutant annotations, limits
and usage errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcheck.cli.main import main


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["exhaust", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_counterexample_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "builtin:seed-prefix", "--no-save", "--json")
    data = json.loads(out)
    assert code == 1
    assert data["verdict"] == "fail"
    assert data["scenarios"] > 0 and data["states"] > 0
    assert data["violation"]["invariant"] == "committed-finished-frozen"
    assert [e["kind"] for e in data["events"]] == ["admit", "step", "step", "step"]
    assert data["convention"] == "preclaim"


def test_cli_saves_a_replayable_counterexample(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, _ = _run(capsys, "builtin:seed-prefix", "--save-dir", str(tmp_path))
    assert code == 1
    assert "shortest counterexample (4 events)" in out
    files = list(tmp_path.glob("*.kvcheck.json"))
    assert len(files) == 1
    assert main(["replay", str(files[0]), "--json"]) == 1
    replayed = json.loads(capsys.readouterr().out)
    assert replayed["violation"]["invariant"] == "committed-finished-frozen"


def test_cli_mutant_target_uses_its_annotation(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "mutant:ideal-total-in-sglang-mode", "--no-save", "--json")
    data = json.loads(out)
    assert code == 1
    assert data["global_counters"] == "sglang"
    assert data["convention"] == "honest"
    assert data["violation"]["invariant"] == "global-counters"


def test_cli_time_limit_is_incomplete_not_a_failure(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "builtin:reference", "--max-states", "200", "--json")
    assert code == 0
    assert json.loads(out)["verdict"] == "incomplete"


@pytest.mark.parametrize(
    "argv",
    [
        ["builtin:reference", "--strides", "0"],
        ["builtin:reference", "--strides", "two"],
        ["builtin:reference", "--kinds", "step,teleport"],
        ["builtin:reference", "--events", "0"],
        ["builtin:reference", "--overlap", "sometimes"],
        ["builtin:nope"],
        ["mutant:nope"],
        ["builtin:reference", "--algorithms", "medusa"],
        ["builtin:reference", "--grammars", "terminate@1"],
        ["builtin:reference", "--grammars", "regex"],
        ["builtin:reference", "--block-cap", "-1"],
        # Beyond what the target can be judged on (its probed shape): named, exit 2.
        ["builtin:reference", "--algorithms", "uno"],
        ["builtin:seed-fixed", "--grammars", "accept"],
        ["builtin:seed-fixed", "--block-cap", "1"],
    ],
)
def test_cli_usage_errors_are_one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, out, err = _run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_cli_bounds_reach_grammar_uno_and_block_cap_paths(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The newer dimensions are bounds too: each mutant of those paths has a shortest
    counterexample that uses its dimension, and the JSON bounds say what was enumerated."""
    cases = [
        (["mutant:grammar-over-commit", "--grammars", "none,terminate@2"], "grammar", 3),
        (["mutant:uno-width-from-draft-tokens", "--algorithms", "auto"], "uno", 4),
        (["mutant:block-cap-on-stale-rows", "--block-cap", "0,1"], "block_cap", 4),
    ]
    for argv, dimension, length in cases:
        code, out, _ = _run(capsys, *argv, "--events", "5", "--no-save", "--json")
        data = json.loads(out)
        assert code == 1, argv
        assert len(data["events"]) == length, argv
        if dimension == "grammar":
            assert data["bounds"]["grammars"] == [None, {"kind": "terminate", "at": 2}]
            assert any(e.get("grammar") for e in data["events"] if e["kind"] == "admit")
        elif dimension == "uno":
            assert data["bounds"]["algorithms"] == ["eagle", "eagle3", "ngram", "dflash", "uno"]
            assert data["config"]["algorithm"] == "uno"
        else:
            assert data["bounds"]["block_cap_lengths"] == [0, 1]
            assert data["config"]["block_cap"] is True


def test_cli_a_grammar_rewrite_is_proven_within_grammar_bounds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = _run(
        capsys,
        "mutant:grammar-0.5.20",
        *("--grammars", "none,accept,terminate@2,reject@1", "--events", "4", "--json"),
    )
    assert code == 0, out
    data = json.loads(out)
    assert data["verdict"] == "pass" and data["states"] > 1000


def test_cli_allocation_rules(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("mutant:alloc-inflated-live", "--events", "3", "--requests", "1", "--no-save")
    code, out, _ = _run(capsys, *argv, "--allocation", "0.5.17", "--json")
    data = json.loads(out)
    assert code == 1 and data["violation"]["invariant"] == "alloc-untouched-by-resolver"
    assert len(data["events"]) == 3
    # Without --allocation, a target touching kv_allocated_len gets its generation's newest
    # rule; "off" (where the field is not modelled) is refused, naming why (issue 23).
    code, out, _ = _run(capsys, *argv, "--json")
    assert code == 1 and json.loads(out)["bounds"]["allocations"] == ["0.5.17"]
    code, out, _ = _run(capsys, *argv)
    assert code == 1 and "; allocation {0.5.17}" in out  # the bounds line says the rule chosen
    code, _, err = _run(capsys, *argv, "--allocation", "off")
    assert code == 2 and "under allocation 0.5.17 only, not off" in err
    assert "touches req.kv.kv_allocated_len" in err
    code, _, err = _run(capsys, *argv, "--allocation", "0.4")
    assert code == 2 and "allocation rules must be among" in err
