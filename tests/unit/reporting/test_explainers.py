"""Each invariant's record names its explanation (`Invariant.explain`), or none; `explain`
dispatches through those names, and no explanation function is left unnamed."""

from __future__ import annotations

import inspect

import attrs
import pytest

from kvcheck.families.sglang import explain as sglang_explain
from kvcheck.families.sglang.invariants import INVARIANTS
from kvcheck.reporting import explain as explain_module
from kvcheck.reporting.explain import explain, explainer_of
from tests.unit.reporting.test_explain import STALE_RETRACTED, failing_run


def test_every_named_explanation_resolves_to_a_function_of_facts_and_violation() -> None:
    for invariant in INVARIANTS.values():
        explainer = explainer_of(invariant.id, "sglang")
        if invariant.explain is None:
            assert explainer is None, invariant.id
            continue
        assert explainer is not None and inspect.isfunction(explainer), invariant.id
        assert list(inspect.signature(explainer).parameters) == ["facts", "violation"]


def test_every_explanation_function_is_named_by_a_record() -> None:
    named = {invariant.explain for invariant in INVARIANTS.values()} - {None}
    defined = {
        f"{sglang_explain.__name__}:{name}"
        for name, value in vars(sglang_explain).items()
        if name.startswith("explain_") and inspect.isfunction(value)
    }
    assert defined == named


def test_an_unknown_invariant_has_no_explanation() -> None:
    assert explainer_of("no-such-invariant", "sglang") is None


def test_explain_dispatches_through_the_record(monkeypatch: pytest.MonkeyPatch) -> None:
    """The record's name decides the sentence: named none, the checker's own sentence is
    given."""
    result = failing_run(STALE_RETRACTED)
    assert result.violation is not None
    invariant = result.violation.invariant
    assert explain(result) != result.violation.message
    monkeypatch.setitem(INVARIANTS, invariant, attrs.evolve(INVARIANTS[invariant], explain=None))
    monkeypatch.setattr(explain_module, "_EXPLAINERS", {})
    assert explain(result) == result.violation.message
