"""The vLLM family through kvcheck's front door: check, the saved counterexample, replay."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcheck.cli.main import main
from kvcheck.core.family import family, family_for_spec


def test_the_family_is_registered_and_claims_its_specs() -> None:
    assert family("vllm").name == "vllm"
    assert family_for_spec("builtin:vllm-reference").name == "vllm"
    assert family_for_spec("vllm-mutant:no-stale-gate").name == "vllm"
    assert family_for_spec("builtin:seed-prefix").name == "sglang"


def test_check_passes_the_reference_and_fails_a_mutant_with_a_replayable_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ["--max-examples", "40", "--no-database", "--save-dir", str(tmp_path)]
    assert main(["check", "builtin:vllm-reference", *common]) == 0
    assert main(["check", "vllm-mutant:no-stale-gate", *common, "--json"]) == 1
    capsys.readouterr()
    saved = list(tmp_path.glob("*.kvcheck.json"))
    assert len(saved) == 1
    data = json.loads(saved[0].read_text())
    assert data["family"] == "vllm" and data["schema_version"] == 4
    assert data["violation"]["invariant"] == "vllm-identity"
    assert main(["replay", str(saved[0])]) == 1
    assert "REPRODUCED" in capsys.readouterr().out
    assert main(["replay", str(saved[0]), "--target", "builtin:vllm-reference"]) == 0


def test_an_unknown_builtin_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "builtin:vllm-nothing", "--max-examples", "1"]) == 2
    assert "no built-in vLLM scheduler 'vllm-nothing'" in capsys.readouterr().err
