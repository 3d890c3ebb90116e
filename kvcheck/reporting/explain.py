"""One sentence, in the domain's words, on how a run's first violation came about.

The sentence is the family's: each invariant's record names the function that tells it
(`Invariant.explain`, "module:function"), which is resolved here on first use and called with
the run's facts (the family's `Reporter.facts`) and the violation.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias

from kvcheck.core.family import family

if TYPE_CHECKING:
    from kvcheck.core.invariant import Violation
    from kvcheck.core.run import RunResult


# An invariant's explanation: the sentence on how a violation of it came about, or None where
# the trace does not tell (the checker's own sentence is given then). It takes the run's facts,
# as its family made them, and the violation.
Explainer: TypeAlias = Callable[[Any, "Violation"], str | None]
# By family name and invariant id.
_EXPLAINERS: dict[tuple[str, str], Explainer | None] = {}


def explainer_of(invariant_id: str, family_name: str) -> Explainer | None:
    """The explanation function the record of `family_name`'s invariant `invariant_id` names;
    None when it names none or the id is not an invariant's (a counterexample file from another
    kvcheck)."""
    key = (family_name, invariant_id)
    if key not in _EXPLAINERS:
        invariant = family(family_name).judge.invariants.get(invariant_id)
        name = invariant.explain if invariant is not None else None
        explainer: Explainer | None = None
        if name is not None:
            module, _, function = name.partition(":")
            explainer = getattr(importlib.import_module(module), function)
        _EXPLAINERS[key] = explainer
    return _EXPLAINERS[key]


def explain(result: RunResult) -> str:
    """One sentence, in the domain's words, on how the run's first violation came about.

    A run without a recorded trace gets the checker's own sentence.
    """
    violation = result.violation
    if violation is None:
        return "no violation"
    if not result.trace:
        return violation.message
    name = result.scenario.family
    facts = family(name).report.facts(result)
    try:
        explainer = explainer_of(violation.invariant, name)
        sentence = None if explainer is None else explainer(facts, violation)
    except (IndexError, KeyError, ValueError):  # an odd trace: fall back on the checker's words
        sentence = None
    return sentence or violation.message
