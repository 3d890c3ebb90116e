"""Bounded exhaustive checking (`kvcheck.search.exhaust`): shortest counterexamples, completeness
below them, limits and bad bounds. The proof within the issue's bounds and the other long searches
are quality measurements (tests/quality/test_exhaust.py); branching copies are
tests/unit/core/test_copying.py and the command tests/unit/cli/test_exhaust_command.py."""

from __future__ import annotations

import re

import attrs
import pytest

from kvcheck.families.sglang.search import Bounds
from kvcheck.search.exhaust import exhaust
from kvcheck.targets.loading import load_target

REFERENCE = load_target("builtin:reference")
SEED_PREFIX = load_target("builtin:seed-prefix")


def test_seed_fixed_shortest_counterexample_is_the_global_counter() -> None:
    result = exhaust(load_target("builtin:seed-fixed"), Bounds(), convention="preclaim")
    assert result.verdict == "fail" and result.depth == 4
    assert result.minimal_invariants == {"global-counters"}


def test_stop_when_found_ends_the_last_level_early_at_the_same_depth() -> None:
    seed_fixed = load_target("builtin:seed-fixed")
    full = exhaust(seed_fixed, Bounds(), convention="preclaim")
    early = exhaust(
        seed_fixed, Bounds(), convention="preclaim", stop_when_found=frozenset({"global-counters"})
    )
    assert (early.verdict, early.depth, early.minimal_invariants) == (
        "fail",
        4,
        {"global-counters"},
    )
    assert early.scenarios < full.scenarios and not early.invariants_complete
    assert full.invariants_complete
    assert early.failure is not None and early.failure.violation is not None
    # Asked about an invariant no counterexample breaks: the level is searched to its end.
    never = exhaust(
        seed_fixed, Bounds(), convention="preclaim", stop_when_found=frozenset({"runs-aligned"})
    )
    assert never.scenarios == full.scenarios and never.invariants_complete
    assert never.minimal_invariants == full.minimal_invariants
    with pytest.raises(ValueError, match="one process"):
        exhaust(seed_fixed, Bounds(), workers=2, stop_when_found=frozenset({"global-counters"}))


def test_no_violation_is_shorter_than_the_one_found() -> None:
    # Every shorter level was searched completely: the reference passes there, and so does the
    # seed-prefix resolver on scenarios one event shorter than its counterexample.
    result = exhaust(SEED_PREFIX, Bounds(events=3), convention="preclaim")
    assert result.verdict == "pass"


def test_limits_give_an_incomplete_verdict() -> None:
    result = exhaust(REFERENCE, Bounds(), convention="preclaim", max_states=500)
    assert result.verdict == "incomplete" and not result.complete
    assert result.failure is None


def test_bad_bounds_are_usage_errors() -> None:
    from kvcheck.errors import KvcheckUsageError

    with pytest.raises(KvcheckUsageError):
        Bounds(strides=(0,))
    with pytest.raises(KvcheckUsageError):
        Bounds(events=None, steps=None)
    with pytest.raises(KvcheckUsageError):
        Bounds(kinds=("step", "teleport"))


def test_allocation_rules_are_enumerated() -> None:
    # A resolver that adds to a live row's kv_allocated_len is caught at its first decode
    # delivery with allocation: admit, prefill, decode (no overlap). Without allocation it is
    # not judged at all: the field is not modelled there (issue 23).
    inflating = load_target("kvcheck.mutants:alloc_inflated_live")
    bounds = Bounds(events=3, requests=1, allocations=("0.5.17",), max_new=(4,), eos=(None,))
    result = exhaust(inflating, bounds, convention="honest", adaptive=False)
    assert result.failure is not None and result.depth == 3
    assert result.minimal_invariants == {"alloc-untouched-by-resolver"}
    from kvcheck.errors import KvcheckUsageError

    with pytest.raises(KvcheckUsageError, match=r"under allocation 0\.5\.17 only, not off"):
        exhaust(inflating, Bounds(events=3), convention="honest")

    with pytest.raises(KvcheckUsageError, match="allocation rules"):
        Bounds(allocations=("0.4",))  # type: ignore[arg-type]


def test_rules_that_cannot_run_with_adaptive_switching_are_left_out_and_said() -> None:
    # 0.5.12 under overlap with switching can write past Al (a scheduler fault): only its
    # sequential configs are enumerated, the report says so, and bounds with nothing else are
    # refused. 0.5.13+ reserve for the largest stride of the bounds.
    from kvcheck.errors import KvcheckUsageError
    from kvcheck.families.sglang.judging import SglangJudging
    from kvcheck.families.sglang.search import skipped_allocations
    from kvcheck.search.exhaust import Plan, start_configs

    bounds = Bounds(events=4, requests=1, allocations=("0.5.12", "0.5.13"), strides=(2, 4))
    assert skipped_allocations(bounds, adaptive=True) == (("0.5.12", True),)
    assert skipped_allocations(bounds, adaptive=False) == ()
    configs = start_configs(Plan("sglang", bounds, SglangJudging("preclaim", "ideal", True)))
    assert {(c.allocation, c.overlap) for c in configs} == {
        ("0.5.12", False),
        ("0.5.13", True),
        ("0.5.13", False),
    }
    assert {c.max_stride for c in configs if c.allocation == "0.5.13"} == {4}
    result = exhaust(REFERENCE, bounds, convention="preclaim")
    assert result.verdict == "pass"
    assert [entry for entry, _ in result.not_run] == [{"allocation": "0.5.12", "overlap": True}]
    from kvcheck.cli.exhaust import exhaust_to_json, format_exhaust

    assert "not run     allocation 0.5.12 with overlap on" in format_exhaust(result)
    assert exhaust_to_json(result)["not_run"] == [{"allocation": "0.5.12", "overlap": True}]
    with pytest.raises(
        KvcheckUsageError, match=re.escape("nothing to enumerate: allocation rule 0.5.12")
    ):
        exhaust(REFERENCE, attrs.evolve(bounds, allocations=("0.5.12",), overlap=(True,)))


def test_a_finished_delivered_request_is_inert_and_keyed_by_id() -> None:
    from kvcheck.families.sglang.scenario import Admit, Config, Step
    from kvcheck.families.sglang.search import inert_requests
    from kvcheck.search.exhaust import fresh_state, state_key

    def after(config: Config, *events: object) -> tuple[frozenset[str], bytes, bytes]:
        engine, model = fresh_state(REFERENCE, config)
        for event in events:
            model.apply(event)
            engine.apply(event)
        inert = inert_requests(engine, model)  # type: ignore[arg-type]
        return inert, state_key(engine, model, inert), state_key(engine, model)

    config = Config(convention="preclaim", overlap=True, stride=2)
    admit = Admit("r0", 3, 1, None)
    # Finished at the prefill's delivery, with a decode launch still in flight: not inert.
    assert after(config, admit, Step(), Step())[0] == frozenset()
    # Its stale row delivered: inert, and keyed alike whatever it accepted on the way.
    inert, reduced, full = after(config, admit, Step(), Step(), Step())
    assert inert == {"r0"}
    longer = after(config, Admit("r0", 3, 4, 2), Step(), Step(), Step((3,)), Step(), Step())
    assert longer[0] == {"r0"} and longer[1] == reduced and longer[2] != full
    # A running request never is, nor anything under an allocation rule.
    assert after(config, admit, Step())[0] == frozenset()
    allocating = Config(convention="preclaim", overlap=True, stride=2, allocation="0.5.16")
    assert after(allocating, admit, Step(), Step(), Step())[0] == frozenset()


def test_every_allocation_rule_starts_its_own_search() -> None:
    # Two rules start from the same empty pool; the state key tells them apart, so neither
    # start state merges into the other and every rule is enumerated.
    from kvcheck.families.sglang.judging import SglangJudging
    from kvcheck.search.exhaust import Plan, Shard

    bounds = Bounds(allocations=("off", "0.5.13", "0.5.16"))
    shard = Shard(REFERENCE, Plan("sglang", bounds, SglangJudging("preclaim", "ideal", True)))
    assert len(shard.configs) == len(shard.frontier) == 12


def test_page_sizes_and_pools_are_enumerated_for_the_rules_that_use_them() -> None:
    from kvcheck.errors import KvcheckUsageError
    from kvcheck.families.sglang.judging import SglangJudging
    from kvcheck.search.exhaust import Plan, start_configs

    bounds = Bounds(
        events=3,
        requests=1,
        strides=(3,),
        allocations=("off", "0.5.13", "0.5.17"),
        page_sizes=(1, 4),
        pool_tokens=(0, 128),
    )
    configs = start_configs(Plan("sglang", bounds, SglangJudging("honest", "ideal", False)))
    assert {(c.allocation, c.page_size, c.pool_pages) for c in configs if c.overlap} == {
        ("off", 1, 0),  # neither a page nor a pool without allocation
        ("0.5.13", 1, 0),  # no page rounding before 0.5.16
        ("0.5.13", 1, 128),
        ("0.5.17", 1, 0),
        ("0.5.17", 1, 128),
        ("0.5.17", 4, 0),
        ("0.5.17", 4, 32),
    }
    assert "; page sizes {1,4}; pool tokens {0,128}" in bounds.describe()
    assert Bounds().describe() == attrs.evolve(Bounds(), page_sizes=(1,)).describe()
    for bad in (
        {"page_sizes": (0,)},
        {"pool_tokens": (64,)},
        {"page_sizes": ()},
        {"page_sizes": (256,), "pool_tokens": (128,)},  # under one page: would be unbounded
        {"page_sizes": (4,), "pool_tokens": (130,)},  # would shrink to 128 tokens unsaid
    ):
        with pytest.raises(KvcheckUsageError, match=r"page sizes|pool sizes"):
            Bounds(**bad)  # type: ignore[arg-type]


def test_a_bounded_pool_enumerates_memory_pressure_and_the_retraction_order() -> None:
    # Prompts of 50 and 60 tokens in a pool of 128: a decode soon does not fit and the memory
    # check retracts one. Retracting from the back of the batch under 0.5.17's sorted order is
    # caught at its shortest; kvcheck's own path passes.
    from kvcheck.families.sglang.mutants.allocation import RetractsFromTheBack

    bounds = Bounds(
        events=6,
        requests=2,
        strides=(3,),
        kinds=("admit", "step"),
        prompt_lens=(50, 60),
        max_new=(16,),
        eos=(None,),
        overlap=(False,),
        allocations=("0.5.17",),
        pool_tokens=(128,),
    )
    assert exhaust(REFERENCE, bounds, convention="preclaim", adaptive=False).verdict == "pass"
    broken = attrs.evolve(REFERENCE, allocation=RetractsFromTheBack)
    result = exhaust(broken, bounds, convention="preclaim", adaptive=False)
    assert result.failure is not None and result.depth == 6
    assert result.minimal_invariants == {"alloc-retraction-order"}
    # Without the bounded pool nothing retracts, and the same path passes.
    unbounded = attrs.evolve(bounds, pool_tokens=(0,))
    assert exhaust(broken, unbounded, convention="preclaim", adaptive=False).verdict == "pass"
