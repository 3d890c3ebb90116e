"""The vLLM family's model, engine, invariants and corpus, on the survey's minimal sequences."""

from __future__ import annotations

import json
import random

import attrs
import pytest

from kvcheck.core.draws import RandomDraws
from kvcheck.core.run import run_scenario
from kvcheck.core.scenario import from_json, to_json
from kvcheck.errors import ScenarioFormatError
from kvcheck.families.vllm.distribution import VllmSpace, draw_scenario, witnesses
from kvcheck.families.vllm.invariants import INVARIANTS
from kvcheck.families.vllm.judging import VllmJudging
from kvcheck.families.vllm.mutants import CORPUS, MUTANTS
from kvcheck.families.vllm.scenario import (
    EOS_TOKEN,
    Abort,
    Add,
    Drain,
    Reset,
    Step,
    VllmConfig,
    VllmScenarios,
)
from kvcheck.targets.loading import load_target
from tests.unit.families.vllm.sequences import (
    PREEMPT_THEN_RESUME,
    PRESSURE,
    first_violation,
    scenario,
)

REFERENCE = load_target("builtin:vllm-reference")


def test_resume_before_stale_return_needs_depth_3() -> None:
    depth3 = scenario(PRESSURE, *PREEMPT_THEN_RESUME)
    depth2 = scenario(attrs.evolve(PRESSURE, pp_size=1), *PREEMPT_THEN_RESUME)
    assert (PRESSURE.depth, attrs.evolve(PRESSURE, pp_size=1).depth) == (3, 2)
    assert first_violation("vllm-mutant:no-stale-gate", depth3) == "vllm-identity"
    assert first_violation("vllm-mutant:no-stale-gate", depth2) is None
    # 0.26.0's behaviour (no stale marking, PH kept) takes the resume for a chunk.
    assert first_violation("vllm-mutant:no-stale-marking", depth3) == "vllm-reservation"
    assert first_violation("builtin:vllm-reference", depth3) is None


def test_the_duplicate_shows_once_the_identity_is_set_aside() -> None:
    result = run_scenario(
        scenario(PRESSURE, *PREEMPT_THEN_RESUME),
        load_target("vllm-mutant:no-stale-gate"),
        record=True,
    )
    assert result.violation is not None
    # Run to the end without judging: r1's output holds a position twice.
    from kvcheck.families.vllm.engine import VllmEngine

    engine = VllmEngine(PRESSURE, load_target("vllm-mutant:no-stale-gate"))
    for event in PREEMPT_THEN_RESUME:
        observed = engine.apply(event)
    out = observed.emitted["r1"]
    assert len(out) > len(set(out)), out


def test_reset_with_drafts_in_flight_loses_tokens_when_discards_count_tokens() -> None:
    config = VllmConfig(
        num_blocks=32,
        block_size=4,
        max_num_scheduled_tokens=32,
        max_model_len=32,
        num_spec_tokens=3,
    )
    s = scenario(config, Add("r0", 4, 10), *(Step(0),) * 3, Reset(), *(Step(1),) * 6, Drain(1))
    assert first_violation("vllm-mutant:token-counted-discard", s) == "vllm-exactly-once"
    assert first_violation("vllm-mutant:stale-rejection", s) == "vllm-counters"
    assert first_violation("builtin:vllm-reference", s) is None
    assert first_violation("vllm-mutant:drop-on-preempt", s) is None


def test_placeholder_gap_is_judged_only_when_asked() -> None:
    config = VllmConfig(
        num_blocks=20, block_size=4, max_num_scheduled_tokens=3, max_model_len=32, num_spec_tokens=2
    )
    events = (Add("r0", 2, 4), Add("r1", 1, 8), Drain(0))
    asked = scenario(attrs.evolve(config, placeholder_drafts=True), *events)
    assert first_violation("vllm-mutant:placeholder-survivors", asked) == "vllm-placeholder-drafts"
    assert first_violation("vllm-mutant:placeholder-survivors", scenario(config, *events)) is None
    assert first_violation("builtin:vllm-reference", asked) is None


def test_the_runner_decides_at_launch_that_a_chunk_samples_nothing() -> None:
    config = VllmConfig(
        num_blocks=32, block_size=4, max_num_scheduled_tokens=6, max_model_len=32, num_spec_tokens=0
    )
    result = run_scenario(scenario(config, Add("r0", 14, 2), Drain(0)), REFERENCE, record=True)
    assert result.violation is None
    launches = [f for entry in result.trace for f in entry.observed.launches]
    samples = [(e.scheduled, e.samples) for f in launches for e in f.entries]
    assert samples[:3] == [(6, False), (6, False), (2, True)]
    chunked = scenario(config, Add("r0", 2, 6), Add("r1", 14, 4), Drain(0))
    assert first_violation("vllm-mutant:final-chunk-unreserved", chunked) == "vllm-reservation"


def test_a_stop_inside_a_multi_token_frame_trims_the_rest() -> None:
    config = VllmConfig(num_blocks=32, block_size=4, max_model_len=32, num_spec_tokens=3)
    s = scenario(config, Add("r0", 3, 10, eos_at=2), Drain(3))
    result = run_scenario(s, REFERENCE, record=True)
    assert result.violation is None
    final = result.trace[-1].observed
    assert final.emitted["r0"] == (1003, 1004, EOS_TOKEN) and final.finished["r0"] == "stop"
    assert first_violation("vllm-mutant:stop-not-trimmed", s) == "vllm-exactly-once"


@pytest.mark.parametrize("entry", CORPUS, ids=lambda e: e.name)
def test_every_mutant_is_killed_by_its_invariant_and_rewrites_pass(entry: object) -> None:
    from kvcheck.families.vllm.mutants import Entry

    assert isinstance(entry, Entry)
    space = VllmSpace(VllmJudging(entry.placeholder_drafts))
    target = load_target(f"vllm-mutant:{entry.name}")
    found: set[str] = set()
    drawn = (draw_scenario(RandomDraws(random.Random(seed)), space) for seed in range(1500))
    for s in (*witnesses(space), *drawn):
        result = run_scenario(s, target)
        if result.violation is not None:
            found.add(result.violation.invariant)
            if entry.expect in found:
                break
    if entry.kind == "rewrite":
        assert found == set()
    else:
        assert entry.expect in found, found


def test_every_invariant_is_some_mutants_expectation() -> None:
    assert {e.expect for e in CORPUS if e.expect} == set(INVARIANTS)


def test_the_reference_passes_drawn_scenarios() -> None:
    space = VllmSpace()
    for seed in range(400):
        s = draw_scenario(RandomDraws(random.Random(seed)), space)
        result = run_scenario(s, REFERENCE)
        assert result.violation is None, (seed, result.violation)


def test_scenarios_round_trip_through_json() -> None:
    config = VllmConfig(runner="v2", pp_size=3, placeholder_drafts=True)
    s = scenario(config, Add("r0", 3, 5, eos_at=1), Step(2), Abort("r0"), Reset(), Drain(1))
    text = to_json(s)
    assert json.loads(text)["family"] == "vllm" and json.loads(text)["schema_version"] == 4
    assert from_json(text) == s
    for event in s.events:
        assert VllmScenarios.event_from_dict(VllmScenarios.event_to_dict(event)) == event


@pytest.mark.parametrize(
    "bad",
    [
        {"kind": "add", "rid": "r0", "prompt_len": 0, "max_tokens": 1},
        {"kind": "step", "accept": -1},
        {"kind": "reset", "extra": 1},
        {"kind": "nope"},
        {"kind": "abort", "rid": ""},
    ],
)
def test_malformed_events_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ScenarioFormatError):
        VllmScenarios.event_from_dict(bad)


def test_configs_that_make_no_scenario_are_refused() -> None:
    with pytest.raises(ScenarioFormatError):
        VllmScenarios.config_from_dict({"runner": "v3"})
    with pytest.raises(ValueError, match="V1 runner"):
        scenario(VllmConfig(runner="v1", pp_size=2), Drain(0))
    with pytest.raises(ValueError, match="cannot hold one"):
        scenario(VllmConfig(num_blocks=3, block_size=4, max_model_len=64), Drain(0))
    assert MUTANTS["no-stale-gate"].expect == "vllm-identity"


def test_exhaust_finds_the_duplicate_at_depth_3_and_nothing_at_depth_2() -> None:
    from kvcheck.families.vllm.search import VllmBounds
    from kvcheck.search.exhaust import exhaust

    mutant = load_target("vllm-mutant:no-stale-gate")
    found = exhaust(mutant, bounds=VllmBounds(events=9, depths=(3,)))
    assert found.failure is not None and found.failure.violation is not None
    assert found.failure.violation.invariant == "vllm-exactly-once"
    assert exhaust(mutant, bounds=VllmBounds(events=9, depths=(2,))).failure is None


@pytest.mark.parametrize("spec_stats", ["excluded", "included", "off"])
@pytest.mark.parametrize("placeholder_drafts", [False, True])
def test_every_witness_is_judged_under_the_drawn_options(
    spec_stats: str, placeholder_drafts: bool
) -> None:
    from kvcheck.families.vllm.distribution import fits

    space = VllmSpace(VllmJudging(placeholder_drafts, spec_stats))  # type: ignore[arg-type]
    assert all(fits(space, s) for s in witnesses(space))
