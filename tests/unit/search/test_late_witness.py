"""The memory-pressure witness (docs/release-allocation.md): it retracts under every rule that
allocates, and a search whose draws found nothing tries it in the last place of its budget,
whichever driver draws."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kvcheck.core.run import RunResult, run_scenario
from kvcheck.families.sglang.allocation_rules import ALLOCATION_RULES, allocation_features
from kvcheck.families.sglang.distribution import (
    MEMORY_PRESSURE_WITNESS,
    ScenarioSpace,
    adaptive_stand_in,
    late_witnesses,
)
from kvcheck.families.sglang.model import ReferenceModel
from kvcheck.search.check import SearchOutcome, search
from kvcheck.search.sampling import sample_search
from kvcheck.targets.loading import load_target

REFERENCE = load_target("builtin:reference")
SEED_PREFIX = load_target("builtin:seed-prefix")
ALLOCATING = [rule for rule in ALLOCATION_RULES if allocation_features(rule).allocates]
DRIVERS: list[Callable[..., SearchOutcome]] = [search, sample_search]


# Each rule that allocates, and with adaptive switching each that can run it (a space of the
# others is refused before drawing, `scenario_space`).
SPACES = [(rule, False) for rule in ALLOCATING] + [
    (rule, True) for rule in ALLOCATING if adaptive_stand_in((rule,), overlap=False) == rule
]


@pytest.mark.parametrize(("rule", "adaptive"), SPACES)
def test_the_witness_retracts_under_every_rule_that_allocates(rule: str, adaptive: bool) -> None:
    (witness,) = late_witnesses(ScenarioSpace(allocation=(rule,), adaptive=adaptive))
    model = ReferenceModel(witness.config)
    for event in witness.events:
        model.apply(event)
    assert "retraction under memory pressure" in model.reached, witness.config
    # The correct built-in passes it: the witness itself breaks nothing.
    assert run_scenario(witness, REFERENCE).violation is None


def test_a_space_without_allocation_has_no_late_witness() -> None:
    assert late_witnesses(ScenarioSpace(allocation=())) == ()
    assert late_witnesses(ScenarioSpace(allocation=("off",))) == ()


def _runs(
    driver: Callable[..., SearchOutcome], spec: Any, **kwargs: Any
) -> tuple[SearchOutcome, list[RunResult]]:
    runs: list[RunResult] = []
    outcome = driver(spec, convention="preclaim", on_run=runs.append, **kwargs)
    return outcome, runs


@pytest.mark.parametrize("driver", DRIVERS, ids=["hypothesis", "random"])
def test_a_search_that_finds_nothing_ends_on_the_witness_within_its_budget(
    driver: Callable[..., SearchOutcome],
) -> None:
    outcome, runs = _runs(driver, REFERENCE, max_examples=20, seed=3)
    assert outcome.failure is None
    assert outcome.examples == len(runs) == 20
    witnessed = [i for i, run in enumerate(runs) if run.scenario.events == MEMORY_PRESSURE_WITNESS]
    assert witnessed == [19]
    assert "retraction under memory pressure" in outcome.reached


@pytest.mark.parametrize("driver", DRIVERS, ids=["hypothesis", "random"])
def test_a_search_whose_draws_failed_never_runs_the_witness(
    driver: Callable[..., SearchOutcome],
) -> None:
    outcome, runs = _runs(driver, SEED_PREFIX, max_examples=50, seed=3)
    assert outcome.failure is not None
    assert all(run.scenario.events != MEMORY_PRESSURE_WITNESS for run in runs)


@pytest.mark.parametrize("driver", DRIVERS, ids=["hypothesis", "random"])
def test_a_budget_of_one_scenario_is_one_scenario(driver: Callable[..., SearchOutcome]) -> None:
    outcome, runs = _runs(driver, REFERENCE, max_examples=1, seed=3)
    assert outcome.examples == len(runs) == 1
