"""Every fact about an invariant lives in its record
(`kvcheck.families.sglang.invariants.Invariant`):
whom it judges, whether it needs an allocation rule, the API aspects its findings belong to.
The run and the checks read those fields, not the invariant's id."""

from __future__ import annotations

import re

import attrs
import pytest

from kvcheck.core.run import run_scenario
from kvcheck.core.scenario import Scenario
from kvcheck.errors import KvcheckInternalError
from kvcheck.families.sglang import invariants
from kvcheck.families.sglang.allocation import RuleAllocation
from kvcheck.families.sglang.invariants import INVARIANTS
from kvcheck.families.sglang.model import ReferenceModel
from kvcheck.families.sglang.scenario import Config
from kvcheck.families.sglang.target import ASPECTS
from kvcheck.targets.loading import load_target
from tests.unit.core.test_allocation import CI_CONFIG, CI_DOWN_SWITCH


def test_whose_fault_a_violation_is_comes_from_the_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kvcheck's own scheduler faulting the pool (the under-reservation of
    tests/unit/core/test_allocation.py) is no verdict because `kv-released-once` judges the
    scheduler; recorded as judging the resolver, the same fault is the target's verdict."""
    monkeypatch.setattr(ReferenceModel, "_reserve", lambda self, stride: 2 * stride)
    monkeypatch.setattr(RuleAllocation, "reserve", lambda self, stride: 2 * stride)
    config = Config(allocation="0.5.13", **CI_CONFIG)  # type: ignore[arg-type]
    target = load_target("builtin:reference-v2")
    own_fault = "kvcheck's own scheduler broke kv-released-once at event 10"
    with pytest.raises(KvcheckInternalError, match=re.escape(own_fault)):
        run_scenario(Scenario(config, CI_DOWN_SWITCH), target)

    record = attrs.evolve(INVARIANTS["kv-released-once"], judges="resolver")
    monkeypatch.setitem(INVARIANTS, "kv-released-once", record)
    violation = run_scenario(Scenario(config, CI_DOWN_SWITCH), target).violation
    assert violation is not None and violation.invariant == "kv-released-once", violation


def test_an_invariant_that_judges_the_scheduler_needs_an_allocation_rule() -> None:
    # Without a pool or an allocation rule there is no scheduler allocation to judge.
    for invariant in INVARIANTS.values():
        if invariant.judges == "scheduler":
            assert invariant.needs_allocation, invariant.id


def test_invariants_that_need_allocation_are_left_out_only_without_it() -> None:
    needing = {i for i, invariant in enumerate(invariants._TABLE) if invariant.needs_allocation}
    assert needing
    event = {i for i, _ in invariants._EVENT_TESTS}
    per_request = {i for i, _ in invariants._PER_REQUEST_TESTS}
    assert {i for i, _ in invariants._EVENT_TESTS_NO_POOL} == event - needing
    assert {i for i, _ in invariants._PER_REQUEST_TESTS_NO_ALLOCATION} == per_request - needing


def test_every_aspect_belongs_to_an_invariant_and_is_known() -> None:
    # tests/unit/core/test_invariant_holds.py checks every finding's aspect against its record.
    declared = [aspect for invariant in INVARIANTS.values() for aspect in invariant.aspects]
    assert sorted(declared) == sorted(ASPECTS)


def test_a_steps_launch_faults_come_before_its_delivery_findings() -> None:
    """The faults a step caused before its delivery called the resolver are reported first, in
    the order they happened; the rest keep the table's order, and faults of the delivery itself
    (after the call) move nothing."""
    from kvcheck.families.sglang.engine import Observation
    from kvcheck.families.sglang.invariants import Violation
    from kvcheck.families.sglang.pool import PoolFault, PoolState

    table = ["grammar-stale-untouched", "committed-live", "kv-released-once", "kv-pool-conserved"]
    found = [Violation(invariant, 3, "r0", 0, 1, invariant) for invariant in table]
    faults = (PoolFault("out-of-memory", None, "oom"), PoolFault("leak", None, "leak"))
    pool = PoolState(available=0, held=(), total=4, faults=faults)

    def order(before_delivery: int) -> list[str]:
        observed = Observation((), None, pool=pool, faults_before_delivery=before_delivery)
        return [v.invariant for v in invariants._launch_faults_first(found, observed)]

    assert order(0) == table
    assert order(1) == ["kv-pool-conserved", *table[:3]]
    assert order(2) == ["kv-pool-conserved", "kv-released-once", *table[:2]]
