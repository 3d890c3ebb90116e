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
    options = {"convention": "preclaim", "global_counters": "ideal", "adaptive": False}
    row = {
        "name": "toy-reference",
        "kind": "rewrite",
        "flavour": "toy",
        "spec": spec,
        "family": toy_corpus.NAME,
        "options": options | {"overlap": None, "allocation_path": "model"},
    }
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


def _shrunk_above_minimum(**changes: Any) -> Row:
    admit = {"kind": "admit", "rid": "r0"}
    fields: dict[str, Any] = {
        "name": "m",
        "kind": "mutant",
        "columns": {},
        "expect": "runs-aligned",
        "origin": "new",
        "summary": "",
        "killed": True,
        "passed": None,
        "examples": 1,
        "examples_to_failure": 1,
        "seconds_to_failure": 0.1,
        "seconds": 0.1,
        "invariant": "runs-aligned",
        "shrunk_length": 4,
        "shrunk_events": (admit, {"kind": "step"}),
        "shrunk_config": {"overlap": False},
        "exhaustive_length": 2,
        "exhaustive_invariants": ("runs-aligned",),
        "exhaustive_events": (admit,),
        "exhaustive_config": {"overlap": False},
        "family": "sglang",
    }
    return Row(**{**fields, **changes})


def test_why_a_shrink_stopped_short_is_read_off_the_scenarios_by_the_family() -> None:
    assert _shrunk_above_minimum().shrink_reason == (
        "a local minimum of the shrinker: no single deletion or simplification still fails"
    )
    assert "the search first hit committed-live" in (
        _shrunk_above_minimum(invariant="committed-live").shrink_reason
    )
    assert "runs with overlap on" in (
        _shrunk_above_minimum(exhaustive_config={"overlap": True}).shrink_reason
    )
    two = ({"kind": "admit", "rid": "r0"}, {"kind": "admit", "rid": "r1"})
    assert "the shortest form uses 1 request(s), the shrunk one 2" in (
        _shrunk_above_minimum(shrunk_events=two).shrink_reason
    )
    with registered(toy_corpus.NAME, toy_corpus.PATH):  # a family that cannot tell
        row = _shrunk_above_minimum(family=toy_corpus.NAME, shrunk_events=two)
        assert row.shrink_reason.endswith("no single deletion or simplification still fails")
        shorter = _shrunk_above_minimum(family=toy_corpus.NAME, shrunk_length=1)
        assert "outside the exhaustive bounds (2 requests, up to 2 events" in shorter.shrink_reason
    shorter = _shrunk_above_minimum(shrunk_length=1)
    assert "(2 requests, up to 8 events" in shorter.shrink_reason
    assert "max_new {1,2,4}" in shorter.shrink_reason
