"""Bounded exhaustive checking, measured: the proof on the reference resolver within the issue's
bounds, the seed-prefix resolver's shortest counterexample, state merging against the plain
search, a search bounded by steps alone, and `kvcheck exhaust` proving the reference on
5-event scenarios. (Bounds, verdicts and the command's options are unit
tests: tests/unit/search/test_exhaust.py, tests/unit/cli/test_exhaust_command.py.)"""

from __future__ import annotations

import pytest

from kvcheck.cli.main import main
from kvcheck.core.run import run_scenario
from kvcheck.families.sglang.scenario import Admit, Step
from kvcheck.families.sglang.search import Bounds
from kvcheck.search.exhaust import ExhaustResult, exhaust
from kvcheck.targets.loading import load_target
from tests.helpers import quoted

REFERENCE = load_target("builtin:reference")
SEED_PREFIX = load_target("builtin:seed-prefix")


def test_reference_is_proven_within_the_issue_bounds() -> None:
    # 2 requests, 8 events, accept up to 3, strides {2,3}, every event kind, both overlap modes.
    bounds = Bounds()
    assert (bounds.requests, bounds.events, bounds.max_accept) == (2, 8, 3)
    assert bounds.strides == (2, 3)
    assert set(bounds.kinds) == {"admit", "step", "retract", "abort", "switch_stride"}
    result = exhaust(REFERENCE, bounds, convention="preclaim")
    assert result.options.adaptive
    assert result.verdict == "pass" and result.complete
    assert result.depth == 8
    assert result.states > 10_000 and result.scenarios > result.states
    # The figures the README quotes for this proof (`kvcheck exhaust builtin:reference`).
    assert quoted(r"on and off breaks an invariant \(([\d,]+) states") == (result.states,)
    assert quoted(r"the 8-event proof: ([\d,]+) instead of") == (result.states,)


def test_seed_prefix_counterexample_has_the_minimal_length() -> None:
    result = exhaust(SEED_PREFIX, Bounds(), convention="preclaim")
    assert result.verdict == "fail"
    scenario = result.counterexample
    assert scenario is not None
    # docs/semantics.md §3.1's finish-on-prefill form: admit; prefill launch; decode launch while
    # the prefill result finishes the request; the decode row arrives stale.
    assert [type(e) for e in scenario.events] == [Admit, Step, Step, Step]
    admit = scenario.events[0]
    assert isinstance(admit, Admit) and (admit.max_new_tokens == 1 or admit.eos_at == 1)
    assert result.depth == 4
    violation = result.violation
    assert violation is not None and violation.invariant == "committed-finished-frozen"
    replayed = run_scenario(scenario, SEED_PREFIX)
    assert replayed.violation == violation


@pytest.mark.parametrize(
    "spec, events",
    [("builtin:seed-prefix", 4), ("builtin:reference", 4), ("builtin:seed-fixed", 4)],
)
def test_state_merging_changes_nothing_but_the_work(spec: str, events: int) -> None:
    bounds = Bounds(events=events, kinds=("step", "admit", "retract"), max_new=(1, 4))
    target = load_target(spec)
    merged = exhaust(target, bounds, convention="preclaim")
    plain = exhaust(target, bounds, convention="preclaim", merge=False)
    assert merged.verdict == plain.verdict
    assert merged.depth == plain.depth
    assert merged.minimal_invariants == plain.minimal_invariants
    assert merged.states <= plain.states


def test_step_bound_alone_ends_the_search() -> None:
    result = exhaust(REFERENCE, Bounds(events=None, steps=2, strides=(2,)), convention="preclaim")
    assert result.verdict == "pass" and result.complete
    # Other events between the two steps are unbounded but finite.
    assert result.depth > 2


# --- the command --------------------------------------------------------------------------------


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["exhaust", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_pass_text(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "builtin:reference", "--events", "5")
    assert code == 0
    assert "no violation within bounds" in out
    assert "distinct states" in out and "scenarios" in out


# --- the reduction (inert finished requests keyed by id) and workers ---------------------------

# A representative subset of the corpus, one or more per family of defect (stale rows, finished
# and retracted requests, aborts, statistics, global counters, grammars, allocation, releases);
# the whole corpus agrees too at 5 events (CHANGELOG.md, the figures of issue 11).
REDUCTION_ENTRIES = (
    "stale-rows-applied-preclaim",
    "finished-no-giveback",
    "finished-applied",
    "finishing-run-dropped",
    "abort-pending-skipped",
    "retracted-giveback",
    "histogram-off-by-one",
    "global-counts-stale",
    "controller-fed-stale-rows",
    "grammar-advanced-twice",
    "alloc-zeroed-stale",
    "release-forgets-overallocated",
    "vectorised-0.5.12",
    "early-exit-0.5.16",
)


@pytest.mark.parametrize("name", REDUCTION_ENTRIES)
def test_the_reduction_keeps_verdict_and_minimal_length(name: str) -> None:
    from kvcheck.mutants import get
    from kvcheck.mutants.matrix import bounds_for

    entry = get(f"mutant:{name}")
    target = entry.target()
    bounds = bounds_for(target, Bounds(events=4, max_new=(1, 2, 4)))
    options = {
        "convention": entry.convention,
        "global_counters": entry.global_counters,
        "adaptive": entry.adaptive,
        "measure_coverage": False,
    }
    full = exhaust(target, bounds, reduce=False, **options)
    reduced = exhaust(target, bounds, **options)
    assert reduced.verdict == full.verdict
    assert reduced.depth == full.depth
    assert reduced.minimal_invariants == full.minimal_invariants
    assert reduced.states <= full.states


@pytest.fixture(scope="module")
def reference_at_6_events() -> ExhaustResult:
    """The reference searched in one process within 6 events, reduced: what the reduction and
    the workers are each compared against (one search for both)."""
    return exhaust(REFERENCE, Bounds(events=6), convention="preclaim")


def test_the_reduction_merges_states_on_the_reference(
    reference_at_6_events: ExhaustResult,
) -> None:
    full = exhaust(REFERENCE, Bounds(events=6), convention="preclaim", reduce=False)
    reduced = reference_at_6_events
    assert full.verdict == reduced.verdict == "pass"
    assert reduced.states < full.states * 0.9


def test_workers_prove_the_reference_alike(reference_at_6_events: ExhaustResult) -> None:
    one = reference_at_6_events
    two = exhaust(REFERENCE, Bounds(events=6), convention="preclaim", workers=2)
    assert one.verdict == two.verdict == "pass"
    assert (one.states, one.scenarios, one.depth) == (two.states, two.scenarios, two.depth)
