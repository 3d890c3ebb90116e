"""The run-dependent part of the allocation code's out-of-scope reasons (`out_of_scope`)."""

from __future__ import annotations

from kvcheck.families.sglang.real.coverage_scope import OUT_OF_SCOPE, out_of_scope

CHOOSER = "ScheduleBatch._get_decode_retraction_order"


def test_the_paged_code_is_named_only_where_no_scenario_ran_pages() -> None:
    """Rules before 0.5.16 run at page size 1 only: where no scenario ran the release's code at
    a page size above 1, its paged helpers and branches are named with that reason; once one
    did, they are counted like any line."""
    unpaged = out_of_scope((), {}, paged=False)
    assert unpaged["get_last_loc"].startswith("page sizes above 1")
    assert unpaged["if page_size > 1:"] == unpaged["alloc_paged_token_slots_extend"]
    paged = out_of_scope((), {}, paged=True)
    assert paged == dict(OUT_OF_SCOPE) and "get_last_loc" not in paged


def test_the_chooser_is_named_where_no_scenario_reached_memory_pressure() -> None:
    """Where kvcheck calls the chooser (0.5.16+) but no scenario of the run retracted under
    memory pressure, it is named with that reason; once a scenario did, it is counted."""
    unreached = out_of_scope((), {}, chose_retractions=False)
    assert "memory-pressure retraction" in unreached[CHOOSER]
    assert CHOOSER not in out_of_scope((), {}, chose_retractions=True)
    assert 'if get_schedule().retraction_policy == "priority":' in unreached
