"""`kvcheck mutants`: a subset in JSON and text, exit 1 when a mutant survives or a rewrite
fails, the list and usage errors. (The whole matrix is tests/quality/test_mutants.py.)"""

from __future__ import annotations

import json

import attrs
import pytest

from kvcheck.cli.main import main
from kvcheck.mutants import ENTRIES
from kvcheck.mutants import matrix as matrix_module
from kvcheck.mutants.matrix import Row


def test_cli_json_for_a_subset(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "mutants",
            "--only",
            "mutant:finished-no-giveback",
            "--only",
            "loop-0.5.10",
            "--max-examples",
            "50",
            "--json",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert data["summary"] == {
        **data["summary"],
        "mutants": 1,
        "killed": 1,
        "rewrites": 1,
        "false_positives": 0,
    }
    assert [r["name"] for r in data["rows"]] == ["finished-no-giveback", "loop-0.5.10"]
    assert data["rows"][0]["shrink_ratio"] == 1.0


def test_cli_text_report(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["mutants", "--only", "cumulative-offsets", "--max-examples", "50"])
    out = capsys.readouterr().out
    assert code == 0
    assert "killed" in out and "cumulative-offsets" in out and "runs-aligned" in out
    assert "summary: 1/1 mutants killed (100%)" in out


def test_cli_exit_1_when_a_mutant_survives_or_a_rewrite_fails(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = matrix_module.run_entry

    def weakened(entry: object, **options: object) -> Row:
        row = real(entry, **options)  # type: ignore[arg-type]
        if row.kind == "mutant":
            return attrs.evolve(row, killed=False, invariant=None, shrunk_length=None)
        return attrs.evolve(row, passed=False, invariant="committed-live", shrunk_length=3)

    monkeypatch.setattr(matrix_module, "run_entry", weakened)
    for name in ("finished-no-giveback", "loop-0.5.10"):
        code = main(["mutants", "--only", name, "--max-examples", "20", "--no-exhaustive"])
        out = capsys.readouterr().out
        assert code == 1
        assert "SURVIVED" in out or "FALSE POSITIVE" in out


def test_cli_list_and_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mutants", "--list"]) == 0
    out = capsys.readouterr().out
    assert len(out.strip().splitlines()) == len(ENTRIES)
    assert main(["mutants", "--only", "no-such-mutant"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "no corpus entry" in err
    assert main(["mutants", "--max-examples", "0"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
