"""Allocation and release (issue 10): the model's rules, the pool's ownership faults, and every
allocation invariant shown firing on a broken allocation path or allocator (the engine's side),
while kvcheck's own path passes the same scenario."""

from __future__ import annotations

import re
from typing import Any

import attrs
import pytest

import kvcheck
from kvcheck.core.run import run_scenario
from kvcheck.core.scenario import Scenario, from_json, legacy_scenario_dict, to_json
from kvcheck.errors import KvcheckInternalError
from kvcheck.families.sglang.allocation import RuleAllocation
from kvcheck.families.sglang.builtins import reference
from kvcheck.families.sglang.distribution import MEMORY_PRESSURE_WITNESS
from kvcheck.families.sglang.engine import Engine
from kvcheck.families.sglang.invariants import check_event
from kvcheck.families.sglang.model import ReferenceModel
from kvcheck.families.sglang.mutants.allocation import (
    EstimateIgnoresAllocated,
    ForgetsOverallocated,
    FreeFromCommitted,
    HalfReserve,
    LeakyPool,
    LeakyPoolPath,
    NoClamp,
    NoPageRounding,
    OverReserve,
    ReleasesAbortAtBuild,
    RetractKeepsRow,
    RetractsFromTheBack,
    SharingPool,
)
from kvcheck.families.sglang.pool import KvPool, PoolState
from kvcheck.families.sglang.scenario import (
    Abort,
    Admit,
    AllocationRule,
    Config,
    Event,
    Retract,
    Step,
    SwitchStride,
)
from kvcheck.targets.loading import load_target
from tests.helpers import target


def _pool(config: Config, cls: type[KvPool]) -> KvPool:
    return cls(config.page_size)


# Scenarios: two requests running (the second's pages follow the first's), a finish with a launch
# in flight, a retraction, an adaptive down-switch, an abort with its row in flight.
TWO = (Admit("r0", 5, 50), Admit("r1", 5, 50), Step(), Step((2, 2)))
FINISH = (Admit("r0", 6, 2), Step(), Step((2,)), Step((1,)))
RETRACT = (Admit("r0", 5, 50), Step(), Step((2,)), Retract("r0"), Step())
DOWN = (Admit("r0", 5, 50), Step(), Step((1,)), SwitchStride(2), Step((1,)))
ABORT = (Admit("r0", 5, 50), Step(), Step((2,)), Abort("r0"), Step())

BASE = Config(convention="preclaim", stride=4)
# Memory pressure: three requests outgrow a pool of 128 tokens at the decode build of event 7.
PRESSURE = MEMORY_PRESSURE_WITNESS[:8]
SORTED_PRESSURE = Config(convention="preclaim", stride=3, allocation="0.5.17", pool_pages=128)
PAGED = attrs.evolve(BASE, allocation="0.5.16", page_size=4)
RULE_0_5_13 = attrs.evolve(BASE, allocation="0.5.13")

# (invariant, broken path, broken pool class or None, events, config)
BROKEN_PATHS: list[
    tuple[str, type[RuleAllocation], type[KvPool] | None, tuple[Event, ...], Config]
] = [
    ("alloc-covers-reserve", HalfReserve, None, TWO, PAGED),
    (
        "alloc-never-shrinks",
        NoClamp,
        None,
        DOWN,
        attrs.evolve(BASE, allocation="0.5.12", adaptive=True, overlap=False),
    ),
    ("alloc-page-aligned", NoPageRounding, None, TWO, PAGED),
    ("alloc-expected", OverReserve, None, TWO, PAGED),
    ("alloc-estimate-matches", EstimateIgnoresAllocated, None, TWO, PAGED),
    ("alloc-retraction-order", RetractsFromTheBack, None, PRESSURE, SORTED_PRESSURE),
    ("kv-no-double-owner", RuleAllocation, SharingPool, TWO[:3], PAGED),
    ("kv-no-use-after-free", ReleasesAbortAtBuild, None, ABORT, RULE_0_5_13),
    ("kv-released-once", FreeFromCommitted, None, FINISH, PAGED),
    ("kv-released-once", ForgetsOverallocated, None, FINISH, PAGED),
    ("kv-retracted-empty", RetractKeepsRow, None, RETRACT, PAGED),
    ("kv-pool-conserved", RuleAllocation, LeakyPool, FINISH, PAGED),
]


REFERENCE = target(reference)


def _run(
    events: tuple[Event, ...], config: Config, path: type[RuleAllocation], pool: type[KvPool] | None
) -> list[Any]:
    """Model and engine side by side with `path` allocating: the violations at the first
    failing event, and its index."""
    model = ReferenceModel(config)
    allocation = path(config, _pool(config, pool) if pool is not None else None)
    engine = Engine(config, reference, not_judged=REFERENCE.shape.not_judged, allocation=allocation)
    for index, event in enumerate(events):
        violations = check_event(index, model.apply(event), engine.apply(event))
        if violations:
            return violations
    return []


@pytest.mark.parametrize(
    ("invariant", "path", "pool", "events", "config"),
    BROKEN_PATHS,
    ids=[f"{case[0]}-{case[1].__name__}" for case in BROKEN_PATHS],
)
def test_fires_on_broken_allocation(
    invariant: str,
    path: type[RuleAllocation],
    pool: type[KvPool] | None,
    events: tuple[Event, ...],
    config: Config,
) -> None:
    violations = _run(events, config, path, pool)
    assert violations, f"{path.__name__} passed"
    assert violations[0].invariant == invariant, violations
    assert violations[0].event_index == len(events) - 1
    # kvcheck's own path passes the same scenario: the scenario is not the cause.
    assert _run(events, config, RuleAllocation, None) == []


def test_broken_paths_cover_every_invariant_that_judges_the_scheduler() -> None:
    from kvcheck.families.sglang.invariants import INVARIANTS

    scheduler_ids = {i for i, invariant in INVARIANTS.items() if invariant.judges == "scheduler"}
    assert {case[0] for case in BROKEN_PATHS} == scheduler_ids


# --- the model's rules (docs/semantics.md §2.3, §2.5, §2.7) ---------------------------------------


def _model(config: Config, *events: Event) -> ReferenceModel:
    model = ReferenceModel(config)
    for event in events:
        model.apply(event)
    return model


@pytest.mark.parametrize(
    ("rule", "convention", "expected"),
    [
        ("0.5.6", "preclaim", 10 + 8),  # sized before the pre-claim: C = 10 at sizing
        ("0.5.12", "preclaim", 18),
        ("0.5.13", "honest", 10 + 2 * 6),  # A from the adaptive maximum (max_stride 6)
        ("0.5.16", "honest", 24),  # 22 rounded up to pages of 4
    ],
)
def test_reserve_rule_per_generation(rule: str, convention: str, expected: int) -> None:
    page = 4 if rule == "0.5.16" else 1
    config = Config(
        convention=convention,  # type: ignore[arg-type]
        stride=4,
        allocation=rule,  # type: ignore[arg-type]
        page_size=page,
        max_stride=6 if rule in ("0.5.13", "0.5.16") else None,
    )
    model = _model(config, Admit("r0", 10, 50), Step(), Step())
    assert model.requests["r0"].allocated == expected


def test_uno_reserves_f_plus_one() -> None:
    config = Config(convention="honest", stride=4, allocation="0.5.16", algorithm="uno")
    model = _model(config, Admit("r0", 10, 50), Step(), Step())
    assert model.requests["r0"].allocated == 10 + 2 * 5


def test_clamp_keeps_al_on_down_switch() -> None:
    events = (Admit("r0", 10, 50), Step(), Step((1,)), SwitchStride(2), Step((1,)))
    config = Config(convention="honest", allocation="0.5.12", adaptive=True, overlap=False)
    clamped = _model(config, *events)
    assert clamped.requests["r0"].allocated == 18  # max(10 + 8, 11 + 4)


@pytest.mark.parametrize(("rule", "overlap"), [("0.5.6", False), ("0.5.6", True), ("0.5.12", True)])
def test_rules_that_under_reserve_with_adaptive_switching_are_refused(
    rule: str, overlap: bool
) -> None:
    """0.5.6 shrinks Al on a down-switch; 0.5.12 under overlap reserves for the current count,
    so the launch in flight and the next one can write past Al: the scheduler's fault, never a
    resolver's verdict (found by CI as a double free blamed on SGLang 0.5.23)."""
    with pytest.raises(
        ValueError, match=re.escape(f"allocation rule {rule} with adaptive switching")
    ):
        Config(allocation=rule, adaptive=True, overlap=overlap)  # type: ignore[arg-type]
    Config(allocation=rule, adaptive=False, overlap=overlap)  # type: ignore[arg-type]


def test_release_leaves_al_by_generation_and_retraction_zeroes() -> None:
    finish = (Admit("r0", 10, 1), Step(), Step())
    kept = _model(Config(convention="honest", allocation="0.5.13"), *finish).requests["r0"]
    assert (kept.phase, kept.allocated, kept.holds_kv) == ("finished", 18, False)
    zeroed = _model(Config(convention="honest", allocation="0.5.16"), *finish).requests["r0"]
    assert zeroed.allocated == 0
    retracted = _model(Config(convention="honest", allocation="0.5.16"), *RETRACT).requests["r0"]
    assert (retracted.committed, retracted.allocated, retracted.holds_kv) == (0, 0, False)


# --- the pool ------------------------------------------------------------------------------------


def test_pool_faults_at_the_call() -> None:
    pool = KvPool(page_size=2, total_pages=3)
    pool.take_row("a")
    assert pool.extend("a", 0, 3)  # two pages
    pool.free_range("a", 0, 2)
    pool.free_range("a", 0, 2)  # the same positions again
    assert [f.kind for f in pool.state().faults] == ["double-free"]
    assert not pool.extend("a", 2, 12)  # needs 4 more pages, 2 free
    assert [f.kind for f in pool.state().faults] == ["out-of-memory"]
    pool.take_row("b")
    pool.extend("b", 0, 2)
    pool.free_page("a", pool.rows["b"][0])
    assert [f.kind for f in pool.state().faults] == ["use-after-free"]
    pool.free_row("a")
    assert [f.kind for f in pool.state().faults] == ["leak"]
    pool.check()
    assert pool.state().faults == ()


def test_engine_conserves_pool_on_a_long_run() -> None:
    config = Config(convention="preclaim", allocation="0.5.13", adaptive=True, max_stride=8)
    events = (
        Admit("r0", 7, 9),
        Admit("r1", 3, 20, eos_at=6),
        Step(),
        Step((3, 2)),
        SwitchStride(2),
        Step((4, 1)),
        Retract("r1"),
        Step((2, 2)),
        Step(),
        Step((2, 2)),
        Step((4, 4)),
        Step(),
        Step(),
    )
    result = run_scenario(Scenario(config, events), target(reference), record=True)
    assert result.violation is None
    pool = result.trace[-1].observed.pool
    assert pool is not None and pool.held == () and pool.available == pool.total


def test_resolver_inflating_al_is_caught_in_few_events() -> None:
    verdict = kvcheck.check("kvcheck.mutants:alloc_inflated_live", seed=0)
    assert verdict.violation is not None
    assert verdict.violation.invariant == "alloc-untouched-by-resolver"
    assert verdict.counterexample is not None and len(verdict.counterexample.events) <= 5


def test_allocation_config_round_trips_as_schema_3() -> None:
    config = Config(allocation="0.5.16", page_size=2, max_stride=6)
    scenario = Scenario(config, (Admit("r0", 3, 2), Step()))
    text = to_json(scenario)
    assert from_json(text) == scenario
    # Before version 4 the allocation rule made it version 3; without it, version 1.
    assert legacy_scenario_dict(scenario)["schema_version"] == 3
    assert legacy_scenario_dict(Scenario(Config(), (Step(),)))["schema_version"] == 1


def test_page_size_above_one_needs_the_paged_rule() -> None:
    with pytest.raises(ValueError, match="page size 1 only"):
        Config(allocation="0.5.12", page_size=2)


def test_real_release_resolver_passes_with_allocation() -> None:
    scenario = Scenario(attrs.evolve(PAGED, convention="preclaim"), FINISH)
    assert run_scenario(scenario, load_target("builtin:reference")).violation is None


# --- a fixed pool: admission, the decode memory check, retraction under pressure ---------------

PRESSURE = (
    Admit("r0", 40, 30),
    Admit("r1", 40, 30),
    Admit("r2", 40, 30),
    Step(),
    *(Step((4, 4, 4)),) * 8,
)


def test_memory_pressure_retracts_and_admission_waits() -> None:
    config = Config(convention="preclaim", allocation="0.5.12", pool_pages=128)
    result = run_scenario(Scenario(config, PRESSURE), REFERENCE, record=True)
    assert result.violation is None
    assert {"admission waits for memory", "retraction under memory pressure"} <= result.reached
    phases = {r.rid: r.phase for r in result.trace[9].expected.requests}
    # r2 did not fit at the first prefill; r1 (fewest outputs, latest in the batch) is retracted
    # when the decode estimate outgrows the pool; r2 is admitted once it fits.
    assert phases == {"r0": "running", "r1": "retracted", "r2": "waiting"}
    assert {r.rid: r.phase for r in result.trace[10].expected.requests}["r2"] == "running"
    for entry in result.trace:
        pool = entry.observed.pool
        assert pool is not None and pool.total == 128


@pytest.mark.parametrize(("rule", "retracted"), [("0.5.17", {"r0"}), ("0.5.16", {"r1"})])
def test_memory_retraction_order_follows_the_rule(
    rule: AllocationRule, retracted: set[str]
) -> None:
    # r0 is first in the batch but accepts 1 token a step, r1 accepts 4. Rules that sort
    # (`retraction_sorted`, 0.5.17+) retract the one with fewer outputs, r0, though r1 is later
    # in the batch; before 0.5.17 a speculative batch retracts from its back: r1.
    config = Config(convention="preclaim", allocation=rule, pool_pages=128)
    events = (Admit("r0", 40, 60), Admit("r1", 40, 60), Step(), *(Step((1, 4)),) * 12)
    result = run_scenario(Scenario(config, events), REFERENCE, record=True)
    assert result.violation is None
    seen = {r.rid for e in result.trace for r in e.expected.requests if r.phase == "retracted"}
    assert seen == retracted


def test_fixed_pool_needs_allocation_and_a_floor() -> None:
    with pytest.raises(ValueError, match="fixed pool"):
        Config(pool_pages=256)
    with pytest.raises(ValueError, match="fixed pool"):
        Config(allocation="0.5.16", page_size=4, pool_pages=16)
    assert Config(allocation="0.5.16", page_size=4, pool_pages=32).pool_pages == 32


# --- a target that brings its own allocation path ------------------------------------------------


def test_target_allocation_path_is_judged_by_search_and_exhaust() -> None:
    from kvcheck.families.sglang.search import Bounds
    from kvcheck.search.exhaust import exhaust

    forgets = attrs.evolve(REFERENCE, allocation=ForgetsOverallocated)
    verdict = kvcheck.check(forgets, convention="preclaim", max_examples=200, seed=0)
    assert verdict.violation is not None
    assert verdict.violation.invariant == "kv-released-once"
    bounds = Bounds(events=4, requests=1, allocations=("0.5.12",))
    result = exhaust(forgets, bounds, convention="preclaim")
    assert result.failure is not None and result.minimal_invariants == {"kv-released-once"}
    # Without an allocation rule the target's path is never built.
    assert (
        exhaust(forgets, attrs.evolve(bounds, allocations=("off",)), convention="preclaim").verdict
        == "pass"
    )


def test_a_resolver_writing_a_non_number_into_al_is_its_violation() -> None:
    """A finished row's release reads `Al` in the same delivery the resolver wrote it: a string
    there is `alloc-untouched-by-resolver` at that event, not kvcheck's allocator raising."""

    def writes_text(self: Any, result: Any, batch: Any) -> Any:
        runs = reference(self, result, batch)
        for req in batch.reqs:
            if not (req.is_retracted or req.finished()):
                req.kv.kv_allocated_len = "lots"
        return runs

    config = Config(convention="preclaim", overlap=False, stride=2, allocation="0.5.16")
    # r0 finishes on the first decode result (max_new_tokens 2): released in that delivery.
    found = run_scenario(Scenario(config, (Admit("r0", 3, 2), Step(), Step())), target(writes_text))
    assert found.violation is not None
    assert found.violation.invariant == "alloc-untouched-by-resolver"
    assert "'lots'" in found.violation.message


def test_only_kvcheck_own_path_over_its_own_pool_skips_the_unchanged_check() -> None:
    config = Config(convention="preclaim", allocation="0.5.13")
    assert RuleAllocation(config).pool.exclusive
    assert not RuleAllocation(config, KvPool(config.page_size)).pool.exclusive
    for broken in (HalfReserve(config), LeakyPoolPath(config)):
        assert not broken.pool.exclusive


def test_a_pool_changed_behind_its_methods_is_still_checked_unless_exclusive() -> None:
    pool = KvPool(page_size=2)
    pool.take_row("a")
    pool.extend("a", 0, 4)
    pool.check_changed()
    assert pool.state().faults == ()
    pool.owner.pop(pool.rows["a"][0])  # a path that bypasses KvPool's methods
    pool.check_changed()
    assert [f.kind for f in pool.state().faults] == ["use-after-free"]
    # A faulty pool stays changed: it is reported at every event, exclusive or not.
    pool.exclusive = True
    for _ in range(2):
        pool.check_changed()
        assert [f.kind for f in pool.state().faults] == ["use-after-free"]


def test_an_exclusive_pool_is_checked_again_once_a_method_changes_it() -> None:
    pool = KvPool(page_size=2)
    pool.exclusive = True
    pool.take_row("a")
    pool.extend("a", 0, 4)
    pool.check_changed()
    first = pool.state()
    pool.check_changed()
    assert pool.state() is first  # unchanged: the same state, no check
    pool.free_range("a", 0, 2)
    pool.check_changed()
    assert pool.state() == PoolState(available=1, held=(("a", 1),), total=2, faults=())


# --- the scheduler kvcheck plays never writes past its own allocation -----------------------------

# CI's false verdict on SGLang 0.5.23 (kv-released-once, blamed on the resolver): DFLASH, block/cap
# lengths, stride 5 switched down to 2 with the stride-5 launch in flight, under allocation rule
# 0.5.12, which reserves 2 * 2 where the two launches can write 5 + 2 past the committed length.
CI_DOWN_SWITCH = (
    Admit("r0", 1, 22),
    Admit("r1", 30, 14),
    Admit("r2", 59, 4),
    Step(),
    Step((5, 2, 2)),
    Step((6, 8)),
    Step((8, 8, 8, 8, 8, 8), blocks=(5, 8, 4, 1, 2, 4), caps=(3, 1, 2, 3)),
    Step((5, 3, 6, 8), blocks=(3, 3, 3, 1, 5, 4), caps=(5, 7, 6)),
    SwitchStride(2),
    Step((4, 8, 5, 2), blocks=(1, 6, 0, 2, 0, 8), caps=(8, 8, 8, 8, 8, 8)),
    Step((8, 4, 3, 4, 1, 4), blocks=(0, 0, 0, 2, 1), caps=(5, 8, 6, 2, 6, 1)),
)
CI_CONFIG = {
    "convention": "honest",
    "stride": 5,
    "adaptive": True,
    "algorithm": "dflash",
    "block_cap": True,
    "max_stride": 8,
    "pool_pages": 128,
}


class TargetsOwnPath(RuleAllocation):
    """kvcheck's path brought by a target as its own allocation code."""


def test_the_ci_down_switch_is_refused_under_0_5_12_and_passes_under_the_later_rules(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ValueError, match=re.escape("0.5.12 with adaptive switching under overlap")):
        Config(allocation="0.5.12", **CI_CONFIG)  # type: ignore[arg-type]
    v2 = load_target("builtin:reference-v2")
    for rule, page in (("0.5.13", 1), ("0.5.16", 1), ("0.5.16", 4)):
        config = Config(allocation=rule, page_size=page, **CI_CONFIG)  # type: ignore[arg-type]
        assert run_scenario(Scenario(config, CI_DOWN_SWITCH), v2).violation is None, rule
    # Model and scheduler both reserving for the current count, as 0.5.12 does, agree on every
    # length and still fault the pool: the events reach the under-reservation. Were it not
    # refused, the fault would still be no verdict: kvcheck's own scheduler broke, not the target.
    monkeypatch.setattr(ReferenceModel, "_reserve", lambda self, stride: 2 * stride)
    monkeypatch.setattr(RuleAllocation, "reserve", lambda self, stride: 2 * stride)
    config = Config(allocation="0.5.13", **CI_CONFIG)  # type: ignore[arg-type]
    own_fault = "kvcheck's own scheduler broke kv-released-once at event 10"
    with pytest.raises(KvcheckInternalError, match=re.escape(own_fault)):
        run_scenario(Scenario(config, CI_DOWN_SWITCH), v2)
    # A target bringing its own allocation path is judged on it: the same fault is its verdict.
    broken = attrs.evolve(v2, allocation=TargetsOwnPath)
    violation = run_scenario(Scenario(config, CI_DOWN_SWITCH), broken).violation
    assert violation is not None and violation.invariant == "kv-released-once", violation


@pytest.mark.parametrize(
    ("convention", "algorithm"),
    [("preclaim", "eagle"), ("honest", "eagle"), ("honest", "dflash"), ("honest", "uno")],
)
@pytest.mark.parametrize(
    ("rule", "overlap", "page"),
    [("0.5.12", False, 1), ("0.5.13", True, 1), ("0.5.16", True, 1), ("0.5.16", True, 4)],
)
def test_down_switches_with_every_draft_accepted_never_fault_a_correct_resolver(
    convention: str, algorithm: str, rule: str, overlap: bool, page: int
) -> None:
    """The worst case for the reserve: every launch at the largest stride accepts all of it, then
    the stride drops to 2 with that launch in flight; r0 finishes on the delivery that follows
    the switch, so its release frees exactly what it committed."""
    config = Config(
        convention=convention,  # type: ignore[arg-type]
        overlap=overlap,
        stride=8,
        adaptive=True,
        algorithm=algorithm,  # type: ignore[arg-type]
        allocation=rule,  # type: ignore[arg-type]
        page_size=page,
        max_stride=None if rule == "0.5.12" else 8,
    )
    full = Step((9, 9))
    events = (Admit("r0", 3, 19), Admit("r1", 5, 40), Step(), full, full)
    events += (
        SwitchStride(2),
        full,
        Admit("r2", 2, 5),
        full,
        SwitchStride(8),
        full,
        SwitchStride(3),
        full,
        full,
    )
    events += (Step(), Step(), Step())
    correct = "builtin:reference" if convention == "preclaim" else "builtin:reference-v2"
    result = run_scenario(Scenario(config, events), load_target(correct))
    assert result.violation is None, result.violation
