"""The run-dependent part of the allocation code's out-of-scope reasons (`out_of_scope`)."""

from __future__ import annotations

from kvcheck.families.sglang.real.coverage_scope import OUT_OF_SCOPE, out_of_scope

CHOOSER = "ScheduleBatch._get_decode_retraction_order"


def test_the_retraction_chooser_is_named_only_where_kvcheck_does_not_call_it() -> None:
    """0.5.16's chooser is compiled but never called (its speculative batches retract
    unsorted): named with that reason; where kvcheck calls it (0.5.17+) it is counted, its
    priority-policy arm named by its line."""
    called = out_of_scope((), {}, sorts_retractions=True)
    assert CHOOSER not in called
    assert called == dict(OUT_OF_SCOPE)
    uncalled = out_of_scope((), {}, sorts_retractions=False)
    assert "kvcheck does not call" in uncalled[CHOOSER]
    assert "0.5.16 managers/schedule_batch.py:2603-2609" in uncalled[CHOOSER]
    assert 'if get_schedule().retraction_policy == "priority":' in called


def test_the_chooser_is_named_where_no_scenario_reached_memory_pressure() -> None:
    """Where kvcheck calls the chooser (0.5.17+) but no scenario of the run retracted under
    memory pressure, it is named with that reason; once a scenario did, it is counted."""
    unreached = out_of_scope((), {}, sorts_retractions=True, chose_retractions=False)
    assert "memory-pressure retraction" in unreached[CHOOSER]
    assert CHOOSER not in out_of_scope((), {}, sorts_retractions=True, chose_retractions=True)
    # 0.5.16's reason stands whether or not pressure was reached.
    unsorted = out_of_scope((), {}, sorts_retractions=False, chose_retractions=False)
    assert "kvcheck does not call" in unsorted[CHOOSER]
