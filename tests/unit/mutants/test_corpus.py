"""The mutant corpus itself: enough distinct entries, annotated, spread over conventions,
generations and invariants, each loadable as a target. (The kill matrix over it is a quality
measurement: tests/quality/test_mutants.py.)"""

from __future__ import annotations

from collections import Counter

from kvcheck.families.sglang.invariants import INVARIANTS
from kvcheck.mutants import corpus_of, get
from kvcheck.targets.loading import load_target

# SGLang's corpus (the vLLM family's is tested in tests/unit/families/vllm/).
ENTRIES = corpus_of("sglang").entries
MUTANTS = tuple(e for e in ENTRIES if e.kind == "mutant")
REWRITES = tuple(e for e in ENTRIES if e.kind == "rewrite")

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
