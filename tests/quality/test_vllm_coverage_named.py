"""Issue 22: `kvcheck check vllm==0.33.0` runs at least 90% of the driven functions' lines, and
every branch of them that never runs is named with a reason (`coverage_scope.OUT_OF_SCOPE`):
a feature kvcheck does not model, a setting its engine leaves at one value, or a guard no state
reaches. The in-scope branches the search used to miss are driven instead (the distribution's
witnesses: a stale frame with rejected drafts, a stop while preempted, an unpadded admission,
a grammar that trims drafts and rejects tokens, a deferred free past a delivery).

Skipped when the wheel cannot be had; a failure under CI=true.
"""

from __future__ import annotations

import os

import pytest

from kvcheck.errors import TargetLoadError
from kvcheck.families.vllm.real.release import release_package
from kvcheck.search.check import check
from kvcheck.targets.loading import load_target


def test_every_unrun_branch_of_0_33_0_is_named_with_a_reason() -> None:
    try:
        release_package("0.33.0")
    except TargetLoadError as exc:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"vLLM 0.33.0 cannot be had here: {exc}")
    verdict = check(load_target("vllm==0.33.0"), seed=0, max_examples=300, database=None)
    assert verdict.passed
    coverage = verdict.coverage
    assert coverage is not None
    assert coverage.line_percent >= 90
    for part in coverage.files:
        unnamed = set(part.missed_branches) - set(part.out_of_scope_missed())
        assert not unnamed, f"{part.file}: never-run branches without a reason: {sorted(unnamed)}"
        assert all(part.out_of_scope_missed().values())
    assert coverage.only_out_of_scope_missed()
    # The stale paths of the bug class run: the roll-back's stale guard and a stop delivered
    # while preempted (scheduler.py:2360-2365, 2491-2494 @0.33.0).
    scheduler = coverage.files[0]
    assert scheduler.file.endswith("v1/core/sched/scheduler.py")
    assert {(2360, 2365), (2491, 2494)} <= scheduler.executed_branches
    # The grammar's paths run: invalidated drafts padded (update_draft_token_ids_in_output), a
    # rejection that finishes its request, the statistics leaving the invalidated drafts out
    # (:2912-2913, 2432-2435, 3317-3318 @0.33.0).
    assert {(2912, 2913), (2432, 2435), (3317, 3318)} <= scheduler.executed_branches
