"""The strategies reach every situation the harness exists for, within the CI profile's budget.

If a change to the strategies stops generating, say, a second retraction of one request, the bug
class it exposes silently drops out of every search; this test makes that loud.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, seed, settings
from kvcheck.strategies import (
    ADAPTIVE_COVERAGE_TARGETS,
    COVERAGE_TARGETS,
    SHAPE_COVERAGE_TARGETS,
    label_run,
    scenarios,
)

from kvcheck.core.run import run_scenario
from kvcheck.core.scenario import Scenario
from kvcheck.search.profiles import PROFILE_EXAMPLES
from kvcheck.targets.builtins import reference
from kvcheck.targets.loading import load_target
from tests.helpers import target

CI_BUDGET = PROFILE_EXAMPLES["ci"]


def _reached(adaptive: bool, *, today: bool = False) -> set[str]:
    """Labels reached in the CI budget; `today`: with the strategy a target of today's shape
    gets (every algorithm, block/cap lengths, grammars), judged on `builtin:reference-v2`."""
    reached: set[str] = set()
    checked = load_target("builtin:reference-v2") if today else target(reference)
    shape = checked.shape
    strategy = (
        scenarios(
            adaptive=adaptive,
            convention=shape.convention,
            algorithms=shape.algorithms,
            block_cap=shape.block_cap,
            grammar=shape.grammar,
        )
        if today
        else scenarios(adaptive=adaptive)
    )

    @seed(20261130)
    @settings(
        max_examples=CI_BUDGET,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def explore(scenario: Scenario) -> None:
        result = run_scenario(scenario, checked)
        assert result.violation is None
        reached.update(label_run(scenario, result.reached))

    explore()
    return reached


def test_every_coverage_target_is_reached_in_the_ci_budget() -> None:
    missing = set(COVERAGE_TARGETS) - _reached(adaptive=False)
    assert not missing, f"never generated in {CI_BUDGET} scenarios: {sorted(missing)}"


def test_adaptive_targets_are_reached_in_the_ci_budget() -> None:
    missing = set(COVERAGE_TARGETS + ADAPTIVE_COVERAGE_TARGETS) - _reached(adaptive=True)
    assert not missing, f"never generated in {CI_BUDGET} scenarios: {sorted(missing)}"


def test_todays_shape_reaches_every_algorithm_grammar_and_block_cap_situation() -> None:
    # The paths of today's shape and the stale rows they must meet; the request counts and
    # per-stride labels are the tests above's (the same draws, here spread over five algorithms,
    # grammars and allocation settings as well).
    wanted = {"stale row of a finished request", "stale row of a retracted request"}
    missing = (wanted | set(SHAPE_COVERAGE_TARGETS)) - _reached(adaptive=False, today=True)
    assert not missing, f"never generated in {CI_BUDGET} scenarios: {sorted(missing)}"
