"""`kvcheck.mutants` reads every corpus through the family registry: a family registered at run
time (`toy_corpus`) is looked up by name and prefix, its resolvers import as
`kvcheck.mutants:NAME`, `--list` shows its own columns, and `run_matrix` runs it, on the shared
worker pool too (the workers repeat the parent's registrations), with the same rows as in
process."""

from __future__ import annotations

import json
from typing import Any

import pytest

import kvcheck.mutants
from kvcheck.cli.main import main
from kvcheck.core.family import registered
from kvcheck.errors import TargetLoadError
from kvcheck.mutants import entries, get, is_entry_spec
from kvcheck.mutants.matrix import Row, run_matrix
from kvcheck.targets.loading import load_target
from tests.unit.mutants import toy_corpus


def test_a_registered_familys_corpus_is_found_through_the_registry() -> None:
    with registered(toy_corpus.NAME, toy_corpus.PATH):
        assert get("toy:toy-reference") is toy_corpus.ENTRY
        assert get("toy-reference") is toy_corpus.ENTRY
        assert is_entry_spec("toy:toy-reference") and is_entry_spec("mutant:worker-stride")
        assert toy_corpus.ENTRY in entries() and toy_corpus.ENTRY in kvcheck.mutants.ENTRIES
        assert get("mutant:worker-stride").family == "sglang"
        resolver = load_target("builtin:reference").resolver
        assert kvcheck.mutants.toy_reference is resolver
        assert load_target("kvcheck.mutants:toy_reference").resolver is resolver
    assert toy_corpus.ENTRY not in entries()
    assert not is_entry_spec("toy:toy-reference")
    with pytest.raises(TargetLoadError, match="no corpus entry"):
        get("toy:toy-reference")
    with pytest.raises(AttributeError):
        _ = kvcheck.mutants.toy_reference


def test_the_list_shows_the_familys_own_columns(capsys: pytest.CaptureFixture[str]) -> None:
    with registered(toy_corpus.NAME, toy_corpus.PATH):
        assert main(["mutants", "--list", "--only", "toy:toy-reference", "--json"]) == 0
        listed = json.loads(capsys.readouterr().out)
        assert main(["mutants", "--list", "--only", "toy-reference"]) == 0
        line = capsys.readouterr().out
    spec = "kvcheck.mutants:toy_reference"
    row = {"name": "toy-reference", "kind": "rewrite", "flavour": "toy", "spec": spec}
    assert listed == {"entries": [row]}
    assert line == "toy rewrite toy-reference\n"


def _timeless(row: Row) -> dict[str, Any]:
    data = row.to_dict()
    for key in ("seconds", "seconds_to_failure", "exhaustive_seconds"):
        data.pop(key)
    return data


def test_jobs_give_the_rows_of_a_run_in_process() -> None:
    with registered(toy_corpus.NAME, toy_corpus.PATH):
        chosen = [toy_corpus.ENTRY, get("mutant:finished-no-giveback")]
        alone = run_matrix(chosen, max_examples=20, exhaustive=False)
        pooled = run_matrix(chosen, max_examples=20, exhaustive=False, jobs=2)
    assert [_timeless(r) for r in pooled.rows] == [_timeless(r) for r in alone.rows]
    toy, mutant = alone.rows
    assert list(toy.to_dict())[:4] == ["name", "kind", "flavour", "expect"]
    assert (toy.family, toy.passed) == (toy_corpus.NAME, True)
    assert list(mutant.to_dict())[:7] == [
        "name",
        "kind",
        "generation",
        "convention",
        "global_counters",
        "adaptive",
        "expect",
    ]
    assert mutant.killed
