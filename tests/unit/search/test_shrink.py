"""The domain shrinker (`kvcheck.search.shrink`): it works on the scenario itself, keeps the
invariant that was found, and never hands back a scenario that no longer fails."""

from __future__ import annotations

from hypothesis import HealthCheck, assume, given, seed, settings
from hypothesis import strategies as st

from kvcheck.core.run import RunResult, run_scenario
from kvcheck.core.scenario import Scenario
from kvcheck.core.target import Target
from kvcheck.families.sglang.scenario import Admit, Retract, Step, SwitchStride
from kvcheck.families.sglang.search import SMALLEST_STRIDE
from kvcheck.search.shrink import shrink
from kvcheck.strategies import scenarios
from kvcheck.targets.loading import load_target
from tests.helpers import STRIDE_SWITCH_BEFORE_DELIVERY, scenario

SEED_PREFIX = load_target("builtin:seed-prefix")
SEED_FIXED = load_target("builtin:seed-fixed")
REFERENCE = load_target("builtin:reference")

# seed-prefix's stale finished row (docs/semantics.md §3.1) buried in noise: odd request names, a
# bystander request, a stride switch, large numbers, a retraction, and events after the violation.
NOISY_STALE_FINISHED = scenario(
    Admit("zz", 30, 40),
    Admit("req-b", 17, 3),
    Step(),
    SwitchStride(3),
    Step((4, 4)),
    Step((3, 5)),
    Step((2, 2)),
    Admit("c", 5, 5),
    Step((1, 1, 1)),
    Step((3,)),
    Retract("c"),
    Step(),
    Step(),
    stride=6,
    adaptive=True,
)


def failing(s: Scenario, target: Target) -> RunResult:
    result = run_scenario(s, target)
    assert result.violation is not None
    return result


def test_seed_prefix_shrinks_to_its_known_minimum() -> None:
    original = failing(NOISY_STALE_FINISHED, SEED_PREFIX)
    assert original.violation is not None
    shrunk = shrink(original, SEED_PREFIX)
    result = shrunk.result
    # The exhaustive search's shortest counterexample for seed-prefix has 4 events
    # (tests/quality/test_exhaust.py): admit, prefill launch, decode launch, stale delivery.
    assert [type(e) for e in result.scenario.events] == [Admit, Step, Step, Step]
    assert result.violation is not None
    assert result.violation.invariant == original.violation.invariant
    assert result.violation.event_index == 3
    # Numbers go down to their floors too.
    (admit,) = (e for e in result.scenario.events if isinstance(e, Admit))
    assert (admit.prompt_len, admit.max_new_tokens, admit.eos_at) == (1, 1, None)
    assert result.scenario.config.stride == SMALLEST_STRIDE
    assert shrunk.runs > 0


def test_requests_are_renamed_in_order_of_appearance() -> None:
    shrunk = shrink(failing(NOISY_STALE_FINISHED, SEED_PREFIX), SEED_PREFIX).result
    rids = [e.rid for e in shrunk.scenario.events if isinstance(e, Admit | Retract)]
    assert rids == ["r0"]
    assert shrunk.violation is not None and shrunk.violation.rid == "r0"


def test_the_result_is_the_recorded_run_of_the_returned_scenario() -> None:
    shrunk = shrink(failing(NOISY_STALE_FINISHED, SEED_PREFIX), SEED_PREFIX).result
    assert len(shrunk.trace) == len(shrunk.scenario.events)  # recorded, up to the violation
    assert run_scenario(shrunk.scenario, SEED_PREFIX).violations == shrunk.violations


def test_the_invariant_found_is_kept_even_when_another_breaks_sooner() -> None:
    # seed-fixed misreads r1's row after the stride switch (runs-aligned); shorter scenarios
    # break global-counters instead (it counts stale rows), which must not replace the finding.
    original = failing(
        scenario(*STRIDE_SWITCH_BEFORE_DELIVERY, stride=4, adaptive=True), SEED_FIXED
    )
    assert original.violation is not None and original.violation.invariant == "runs-aligned"
    kept = shrink(original, SEED_FIXED).result
    assert kept.violation is not None and kept.violation.invariant == "runs-aligned"
    anything = shrink(original, SEED_FIXED, keep=lambda r: r.violation is not None).result
    assert anything.violation is not None
    assert len(anything.scenario.events) < len(kept.scenario.events)


def test_a_bug_without_stale_rows_shrinks_to_overlap_off() -> None:
    # The reference pre-claims, so judged as honest every live row is one short. Without overlap
    # a launch is delivered in its own step: admit, prefill, one decode is enough.
    original = failing(
        scenario(
            Admit("x", 10, 20),
            Admit("y", 10, 20),
            Step(),
            Step((3, 2)),
            Step((2, 2)),
            Step(),
            convention="honest",
        ),
        REFERENCE,
    )
    assert original.scenario.config.overlap
    shrunk = shrink(original, REFERENCE).result
    assert not shrunk.scenario.config.overlap
    assert [type(e) for e in shrunk.scenario.events] == [Admit, Step, Step]
    assert shrunk.violation is not None and shrunk.violation.invariant == "committed-live"


def test_max_runs_bounds_the_work() -> None:
    original = failing(NOISY_STALE_FINISHED, SEED_PREFIX)
    assert original.violation is not None
    untouched = shrink(original, SEED_PREFIX, max_runs=0)
    assert untouched.runs == 0
    # No candidate tried: only the events after the violation are cut (and requests renamed).
    assert len(untouched.result.scenario.events) == original.violation.event_index + 1
    assert untouched.result.violation is not None
    assert untouched.result.violation.invariant == original.violation.invariant
    assert shrink(original, SEED_PREFIX, max_runs=5).runs <= 5


@seed(20261130)
@settings(max_examples=30, database=None, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    scenarios(adaptive=True) | scenarios(convention="honest", global_counters="sglang"),
    st.sampled_from([SEED_PREFIX, SEED_FIXED]),
)
def test_never_returns_a_scenario_that_no_longer_fails(s: Scenario, target: Target) -> None:
    original = run_scenario(s, target)
    assume(original.violation is not None)
    assert original.violation is not None
    shrunk = shrink(original, target).result
    replayed = run_scenario(shrunk.scenario, target)
    assert replayed.violation is not None
    assert replayed.violation.invariant == original.violation.invariant
    assert len(shrunk.scenario.events) <= original.violation.event_index + 1
