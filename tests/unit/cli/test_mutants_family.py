"""`kvcheck mutants --family NAME`: one engine family's kill matrix from the command line."""

from __future__ import annotations

import json

import pytest

from kvcheck.cli.main import main
from kvcheck.core.family import family


def test_the_vllm_kill_matrix_runs_alone(capsys: pytest.CaptureFixture[str]) -> None:
    corpus = family("vllm").mutants
    assert corpus is not None
    flags = ["--family", "vllm", "--max-examples", "100", "--no-exhaustive", "--json"]
    assert main(["mutants", *flags]) == 0
    report = json.loads(capsys.readouterr().out)
    rows = report["rows"]
    assert [row["name"] for row in rows] == [entry.name for entry in corpus.entries]
    assert {row["family"] for row in rows} == {"vllm"}
    summary = report["summary"]
    assert summary["killed"] == summary["mutants"] > 0
    assert summary["rewrites"] > 0 and summary["false_positives"] == 0


def test_list_and_only_keep_to_the_family(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mutants", "--family", "vllm", "--list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["entries"]
    assert listed and {entry["family"] for entry in listed} == {"vllm"}
    # An entry of another family's corpus is refused in one line, exit 2.
    assert main(["mutants", "--family", "vllm", "--only", "mutant:worker-stride"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "not in the vllm family's corpus" in err
    assert main(["mutants", "--family", "nope", "--list"]) == 2
    assert "invalid choice: 'nope'" in capsys.readouterr().err
