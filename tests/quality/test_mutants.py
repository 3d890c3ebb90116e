"""The mutant corpus and the kill matrix (`kvcheck mutants`).

The whole matrix runs once, in one module-scoped fixture, with a CI budget and a fixed seed:
every mutant must be killed, every correct rewrite must pass, the annotated invariant must be
among those the mutant's shortest counterexamples break (decided exhaustively, so it does not
depend on the seed), and the shrunk counterexamples must be as short as the exhaustive minimum
for at least 90% of the mutants (the rest must say why).
"""

from __future__ import annotations

import json
from collections import Counter

import attrs
import pytest

from kvcheck.cli.main import main
from kvcheck.core.invariants import INVARIANTS
from kvcheck.mutants import BY_NAME, ENTRIES, MUTANTS, REWRITES, get
from kvcheck.mutants import matrix as matrix_module
from kvcheck.mutants.matrix import Matrix, Row, run_matrix
from kvcheck.search.exhaust import Bounds, exhaust
from kvcheck.targets.loading import load_target

# The CI budget: every mutant dies within a few dozen scenarios, so 150 examples mostly cost the
# rewrites, which must survive all of them.
CI_MAX_EXAMPLES = 150
CI_SEED = 0
CORE_INVARIANTS = {
    "target-raised",
    "runs-aligned",
    "no-negative",
    "committed-live",
    "committed-finished-frozen",
    "committed-retracted-zero",
    "stats-verify-count",
    "stats-accepted-drafts",
    "stats-histogram",
    "global-counters",
}


@pytest.fixture(scope="module")
def kill_matrix() -> Matrix:
    return run_matrix(ENTRIES, max_examples=CI_MAX_EXAMPLES, seed=CI_SEED)


# --- the corpus ---------------------------------------------------------------------------------


def test_corpus_has_enough_distinct_entries() -> None:
    assert len(MUTANTS) >= 30
    assert len(REWRITES) >= 5
    assert len({e.name for e in ENTRIES}) == len(ENTRIES)
    assert len({e.resolver for e in ENTRIES}) == len(ENTRIES)


def test_every_mutant_is_annotated() -> None:
    for entry in MUTANTS:
        assert entry.expect in INVARIANTS, entry.name
        assert entry.origin and entry.summary, entry.name
    for entry in REWRITES:
        assert entry.expect is None


def test_corpus_spreads_over_conventions_generations_and_invariants() -> None:
    conventions = Counter(e.convention for e in MUTANTS)
    assert conventions["preclaim"] >= 10 and conventions["honest"] >= 10
    generations = {e.generation.name for e in MUTANTS}
    assert len(generations) >= 6
    assert {e.generation.name for e in REWRITES} >= {"0.5.10", "0.5.11", "0.5.12", "0.5.19"}
    # Every invariant of the core harness is the expected catch of some mutant.
    assert {e.expect for e in MUTANTS} >= CORE_INVARIANTS


def test_entries_load_as_importable_targets() -> None:
    for entry in ENTRIES:
        loaded = load_target(entry.spec)
        assert loaded.resolver is entry.resolver
        assert get(entry.short_spec) is entry


# --- the matrix ---------------------------------------------------------------------------------


def test_every_mutant_is_killed(kill_matrix: Matrix) -> None:
    survivors = [r.name for r in kill_matrix.rows if r.kind == "mutant" and not r.killed]
    assert survivors == []


def test_every_rewrite_passes(kill_matrix: Matrix) -> None:
    false_positives = [
        f"{r.name}: {r.invariant} {r.shrunk_events}"
        for r in kill_matrix.rows
        if r.kind == "rewrite" and not r.passed
    ]
    assert false_positives == []


def test_annotation_is_a_shortest_counterexample_invariant(kill_matrix: Matrix) -> None:
    wrong = [
        f"{r.name}: annotated {r.expect}, shortest break {r.exhaustive_invariants}"
        for r in kill_matrix.rows
        if r.kind == "mutant" and r.expect not in r.exhaustive_invariants
    ]
    assert wrong == []


def test_search_mostly_reports_the_annotated_invariant(kill_matrix: Matrix) -> None:
    summary = kill_matrix.summary
    assert summary.annotated_invariant >= 0.9 * summary.mutants


def test_shrunk_length_is_the_exhaustive_minimum(kill_matrix: Matrix) -> None:
    mutants = [r for r in kill_matrix.rows if r.kind == "mutant"]
    assert all(r.exhaustive_length is not None for r in mutants)
    optimal = [r for r in mutants if r.shrink_ratio == 1.0]
    assert len(optimal) >= 0.9 * len(mutants)
    unexplained = [r.name for r in mutants if r.shrink_ratio != 1.0 and not r.shrink_note]
    assert unexplained == []


def test_summary_and_json(kill_matrix: Matrix) -> None:
    data = matrix_module.matrix_to_json(kill_matrix)
    summary = data["summary"]
    assert summary["mutants"] == len(MUTANTS)
    assert summary["killed"] == len(MUTANTS)
    assert summary["rewrites"] == len(REWRITES)
    assert summary["false_positives"] == 0
    assert len(data["rows"]) == len(ENTRIES)
    row = next(r for r in data["rows"] if r["name"] == "worker-stride")
    for key in (
        "status",
        "examples_to_failure",
        "seconds_to_failure",
        "shrunk_length",
        "invariant",
        "invariant_matches",
        "exhaustive_length",
        "shrink_ratio",
    ):
        assert key in row
    json.dumps(data)
    text = matrix_module.format_matrix(kill_matrix)
    assert f"{len(MUTANTS)}/{len(MUTANTS)} mutants killed (100%)" in text
    assert "0 false positives" in text


# --- the command --------------------------------------------------------------------------------


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


# --- rewrites beyond sampling -------------------------------------------------------------------


@pytest.mark.parametrize("name", [e.name for e in REWRITES])
def test_rewrites_pass_exhaustively_on_short_scenarios(name: str) -> None:
    entry = BY_NAME[name]
    result = exhaust(
        entry.target(),
        Bounds(events=5, max_new=(1, 2, 4)),
        convention=entry.convention,
        global_counters=entry.global_counters,
        adaptive=entry.adaptive,
    )
    assert result.verdict == "pass", result.violation
