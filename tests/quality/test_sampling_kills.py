"""The fast search (`kvcheck fuzz`'s default generator) judges the mutant corpus as the Hypothesis
search does: every mutant killed, every rewrite passes, each failure shrunk and replayable."""

from __future__ import annotations

import pytest

from kvcheck.core.run import run_scenario
from kvcheck.families.sglang.mutants.registry import Entry
from kvcheck.mutants import ENTRIES as ALL_ENTRIES
from kvcheck.search.check import SearchOutcome
from kvcheck.search.sampling import sample_search

# The kill matrix's CI budget (tests/quality/test_mutants.py), with its seed.
MAX_EXAMPLES = 150
# SGLang's corpus: the fast search (`sample_search`) takes SGLang's judging options by name.
ENTRIES = [entry for entry in ALL_ENTRIES if entry.family == "sglang"]


def judge(entry: Entry, seed: int) -> SearchOutcome:
    return sample_search(
        entry.target(),
        convention=entry.convention,
        global_counters=entry.global_counters,
        adaptive=entry.adaptive,
        max_examples=MAX_EXAMPLES,
        seed=seed,
    )


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.name for e in ENTRIES])
def test_the_fast_search_judges_every_corpus_entry_as_expected(entry: Entry) -> None:
    outcome = judge(entry, seed=0)
    failure = outcome.failure
    if entry.kind == "rewrite":
        assert failure is None, failure.violation
        return
    assert failure is not None, f"{entry.name} survived {MAX_EXAMPLES} scenarios"
    assert failure.violation is not None
    replayed = run_scenario(failure.scenario, entry.target())
    assert replayed.violation is not None
    assert replayed.violation.invariant == failure.violation.invariant
