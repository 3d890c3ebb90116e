"""Every invariant id is shown firing on a hand-written resolver that breaks it.

Each broken resolver differs from a correct pre-claim resolver in one place. Each is shown
twice: on a hand-written scenario (deterministic, the first violation is the expected id) and
through the Hypothesis search (`check` finds it and reports that id).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import kvcheck
from kvcheck.core.run import run_scenario
from kvcheck.families.sglang.builtins import commit_live_row, padded_runs, reference, reference_v2
from kvcheck.families.sglang.invariants import INVARIANTS
from kvcheck.families.sglang.scenario import Admit, Grammar, Retract, Step
from tests.helpers import STRIDE_SWITCH_BEFORE_DELIVERY, scenario, target
from tests.unit.core.test_allocation import BROKEN_PATHS


def _rows(result: Any) -> tuple[list[int], list[int]]:
    return result.next_token_ids.tolist(), result.accept_lens.tolist()


def raises_on_stale(self: Any, result: Any, batch: Any) -> list[list[int]]:
    if any(req.finished() for req in batch.reqs):
        raise RuntimeError("stale row")
    return reference(self, result, batch)


def hangs_on_stale(self: Any, result: Any, batch: Any) -> list[list[int]]:
    """Loops forever on a stale row (interrupted at its deadline: `target-deadline`)."""
    while any(req.finished() for req in batch.reqs):
        pass
    return reference(self, result, batch)


def cumulative_offsets(self: Any, result: Any, batch: Any) -> list[list[int]]:
    """Slices rows at the running sum of accept lengths (the v1 layout), not at i * stride."""
    reference(self, result, batch)  # correct accounting; only the returned slices are wrong
    tokens, accepts = _rows(result)
    offsets = [sum(accepts[:i]) for i in range(len(accepts))]
    return [tokens[o : o + a] for o, a in zip(offsets, accepts, strict=True)]


def decrements_retracted(self: Any, result: Any, batch: Any) -> list[list[int]]:
    """Gives back a pre-claim for retracted rows too, though the reset already zeroed it."""
    tokens, accepts = _rows(result)
    for req, accepted in zip(batch.reqs, accepts, strict=True):
        if req.is_retracted or req.finished():
            req.kv_committed_len -= 1
            continue
        commit_live_row(req, accepted)
    result.num_accepted_drafts = sum(
        a - 1
        for req, a in zip(batch.reqs, accepts, strict=True)
        if not req.finished() and not req.is_retracted
    )
    return padded_runs(tokens, accepts, result.speculative_num_draft_tokens)


def adds_bonus_twice(self: Any, result: Any, batch: Any) -> list[list[int]]:
    """Adds accept_len for live rows although the launch already pre-claimed one slot."""
    runs = reference(self, result, batch)
    for req in batch.reqs:
        if not req.finished() and not req.is_retracted:
            req.kv_committed_len += 1
    return runs


def inflates_allocated(self: Any, result: Any, batch: Any) -> list[list[int]]:
    """Reserves for the next verify itself: adds to a live row's kv_allocated_len."""
    runs = reference(self, result, batch)
    for req in batch.reqs:
        if not (req.is_retracted or req.finished()):
            req.kv_allocated_len += 1000
    return runs


def applies_to_retracted(self: Any, result: Any, batch: Any) -> list[list[int]]:
    """Skips finished rows correctly but treats retracted rows as live (KV only)."""
    tokens, accepts = _rows(result)
    live = 0
    for req, accepted in zip(batch.reqs, accepts, strict=True):
        if req.finished():
            req.kv_committed_len -= 1
        elif req.is_retracted:
            req.kv_committed_len += accepted - 1
        else:
            commit_live_row(req, accepted)
            live += accepted - 1
    result.num_accepted_drafts = live
    return padded_runs(tokens, accepts, result.speculative_num_draft_tokens)


def counts_stale_verifies(self: Any, result: Any, batch: Any) -> list[list[int]]:
    """Correct KV, but spec_verify_ct is bumped for every row, stale ones included."""
    runs = reference(self, result, batch)
    for req in batch.reqs:
        if req.finished() or req.is_retracted:
            req.spec_verify_ct += 1
    return runs


def counts_bonus_as_draft(self: Any, result: Any, batch: Any) -> list[list[int]]:
    """Adds accept_len (bonus token included) to the accepted-draft counter."""
    runs = reference(self, result, batch)
    for req in batch.reqs:
        if not req.finished() and not req.is_retracted:
            req.spec_accepted_drafts += 1
    return runs


def histogram_off_by_one(self: Any, result: Any, batch: Any) -> list[list[int]]:
    """Buckets the histogram by accept_len instead of accept_len - 1."""
    tokens, accepts = _rows(result)
    live = 0
    for req, accepted in zip(batch.reqs, accepts, strict=True):
        if req.is_retracted:
            continue
        if req.finished():
            req.kv_committed_len -= 1
            continue
        req.kv_committed_len += accepted - 1
        req.spec_verify_ct += 1
        req.spec_accepted_drafts += accepted - 1
        req.update_spec_acceptance_histogram(accepted)
        live += accepted - 1
    result.num_accepted_drafts = live
    return padded_runs(tokens, accepts, result.speculative_num_draft_tokens)


def global_counter_all_rows(self: Any, result: Any, batch: Any) -> list[list[int]]:
    """Correct per request, but the batch-global counter includes stale rows (SGLang's way)."""
    runs = reference(self, result, batch)
    result.num_accepted_drafts = sum(a - 1 for a in result.accept_lens.tolist())
    return runs


def block_cap_on_stale_rows(self: Any, result: Any, batch: Any) -> list[list[int]]:
    """Today's API, correct except that stale rows add their block/cap lengths too."""
    runs = reference_v2(self, result, batch)
    if result.block_accept_lens is None:  # a scenario without block/cap lengths
        return runs
    blocks, caps = result.block_accept_lens.tolist(), result.cap_lens.tolist()
    for row, req in enumerate(batch.reqs):
        if req.is_retracted or req.finished():
            req.spec_num_block_accept_tokens += blocks[row]
            req.spec_num_cap_tokens += caps[row]
            req.update_spec_cap_lens_histogram(caps[row])
    return runs


def grammar_advanced_twice(self: Any, result: Any, batch: Any) -> list[list[int]]:
    """Today's API, but the memo is cleared and the grammars advanced a second time."""
    runs = reference_v2(self, result, batch)
    result.grammar_advanced = False
    self.advance_grammar_fsm(result, batch)
    return runs


def grammar_on_stale_rows(self: Any, result: Any, batch: Any) -> list[list[int]]:
    """Today's API, but a stale row's run is offered to its request's grammar too."""
    runs = reference_v2(self, result, batch)
    for row, req in enumerate(batch.reqs):
        if req.grammar is not None and (req.is_retracted or req.finished()):
            for token in runs[row]:
                req.grammar.accept_token(token)
    return runs


Resolver = Callable[[Any, Any, Any], list[list[int]]]

# Minimal hand-written scenarios: a finish on the prefill result with a stale decode row after it,
# a retraction with its launch in flight, and a stride switch between launch and delivery.
FINISH_ON_PREFILL = (Admit("r0", 10, 1), Step(), Step((3,)), Step())
RETRACT_IN_FLIGHT = (Admit("r0", 10, 50), Step(), Step((3,)), Retract("r0"), Step())
LIVE_ROWS = (Admit("r0", 10, 50), Step(), Step((3,)), Step((2,)))
# A finish on the prefill result, then its stale decode row with block/cap lengths 2 and 1.
STALE_BLOCK_CAP = (Admit("r0", 10, 1), Step(), Step((3,), (2,), (1,)), Step())
SWITCH = STRIDE_SWITCH_BEFORE_DELIVERY
# A grammar request: live rows (accept-all), and one that finishes on its prefill result.
GRAMMAR_LIVE = (Admit("r0", 10, 50, grammar=Grammar("accept")), Step(), Step((3,)), Step((2,)))
GRAMMAR_STALE = (Admit("r0", 10, 1, grammar=Grammar("accept")), Step(), Step((3,)), Step())

# Cases whose correct twin is today's reference (honest, block/cap lengths) rather than the
# pre-claim `reference`.
MODERN = {"convention": "honest", "block_cap": True}

CASES: list[tuple[str, Resolver, tuple[Any, ...], dict[str, Any]]] = [
    ("target-deadline", hangs_on_stale, FINISH_ON_PREFILL, {}),
    ("target-raised", raises_on_stale, FINISH_ON_PREFILL, {}),
    ("runs-aligned", cumulative_offsets, SWITCH, {"stride": 4, "adaptive": True}),
    ("no-negative", decrements_retracted, RETRACT_IN_FLIGHT, {}),
    ("committed-live", adds_bonus_twice, LIVE_ROWS, {}),
    (
        "committed-finished-frozen",
        kvcheck.families.sglang.builtins.seed_prefix,
        FINISH_ON_PREFILL,
        {},
    ),
    ("committed-retracted-zero", applies_to_retracted, RETRACT_IN_FLIGHT, {}),
    ("stats-verify-count", counts_stale_verifies, FINISH_ON_PREFILL, {}),
    ("stats-accepted-drafts", counts_bonus_as_draft, LIVE_ROWS, {}),
    ("stats-histogram", histogram_off_by_one, LIVE_ROWS, {}),
    ("stats-block-cap", block_cap_on_stale_rows, STALE_BLOCK_CAP, MODERN),
    ("global-counters", global_counter_all_rows, FINISH_ON_PREFILL, {}),
    ("grammar-advanced-once", grammar_advanced_twice, GRAMMAR_LIVE, MODERN),
    ("grammar-stale-untouched", grammar_on_stale_rows, GRAMMAR_STALE, MODERN),
    ("alloc-untouched-by-resolver", inflates_allocated, LIVE_ROWS, {"allocation": "0.5.16"}),
]


# The same bug can break a second invariant first, depending on the scenario the search drew:
# an over-counted live row that also finishes the request shows as a finished request's error.
ALSO_ACCEPTED: dict[str, set[str]] = {
    "committed-live": {"committed-finished-frozen"},
    "committed-finished-frozen": {"committed-retracted-zero"},
    # Offering a stale run to a grammar that terminated raises, as SGLang's grammar does: the
    # search may meet that raise (the target's) before a silent stale advance.
    "grammar-stale-untouched": {"target-raised"},
}


def test_every_invariant_has_a_breaking_resolver() -> None:
    # The allocation invariants a resolver cannot break alone (only the scheduler allocates)
    # are shown firing on broken allocation paths instead.
    by_engine = {invariant for invariant, *_ in BROKEN_PATHS}
    assert sorted(invariant for invariant, *_ in CASES) == sorted(set(INVARIANTS) - by_engine)


@pytest.mark.parametrize(
    ("invariant", "resolver", "events", "config"), CASES, ids=[c[0] for c in CASES]
)
def test_fires_on_hand_written_scenario(
    invariant: str, resolver: Resolver, events: tuple[Any, ...], config: dict[str, Any]
) -> None:
    result = run_scenario(scenario(*events, **config), target(resolver))
    assert result.violation is not None
    assert result.violation.invariant == invariant
    assert result.violation.event_index == len(events) - 1
    # The correct twin passes the same scenario: the scenario is not the cause.
    twin = reference_v2 if config is MODERN else reference
    assert run_scenario(scenario(*events, **config), target(twin)).violation is None


@pytest.mark.parametrize(
    ("invariant", "resolver", "events", "config"), CASES, ids=[c[0] for c in CASES]
)
def test_found_by_search(
    invariant: str,
    resolver: Resolver,
    events: tuple[Any, ...],
    config: dict[str, Any],
) -> None:
    verdict = kvcheck.check(
        target(resolver),
        convention=config.get("convention", "preclaim"),
        adaptive=config.get("adaptive", False),
        max_examples=300,
        seed=1,
    )
    assert not verdict.passed
    assert verdict.violation is not None
    assert verdict.violation.invariant in {invariant} | ALSO_ACCEPTED.get(invariant, set())


def test_a_fake_grammars_refusal_raised_through_the_target_is_not_kvchecks_fault() -> None:
    # The resolver offers a finished request's stale run to its terminated grammar; the fake
    # raises a ValueError (as a terminated matcher does) and the resolver lets it through. That is
    # the target's violation (`grammar-stale-untouched`, or `target-raised`), not kvcheck's.
    events = (
        Admit("r0", 10, 50, grammar=Grammar("terminate", 2)),
        Step(),
        Step((3,)),
        Step(),
        Step(),
    )
    result = run_scenario(scenario(*events, **MODERN), target(grammar_on_stale_rows))
    assert result.violation is not None
    assert result.violation.invariant == "target-raised"
    assert "GrammarRefusal" in result.violation.observed
