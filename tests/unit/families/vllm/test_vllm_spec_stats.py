"""vLLM's speculative statistics (`vllm-spec-stats`): what a step must count, with a dropped
stale frame excluded (the default) or included, on kvcheck's scheduler and its mutants."""

from __future__ import annotations

import attrs
import pytest

from kvcheck.core.run import run_scenario
from kvcheck.core.scenario import Scenario, from_json, to_json
from kvcheck.errors import KvcheckUsageError, ScenarioFormatError
from kvcheck.families.vllm.engine import DeliveryFact, FrameEntry
from kvcheck.families.vllm.invariants import expected_spec_stats
from kvcheck.families.vllm.judge import judging
from kvcheck.families.vllm.scenario import Add, Drain, Reset, Step, VllmConfig, VllmScenarios
from kvcheck.families.vllm.target import Delivered, SpecStats
from kvcheck.targets.loading import load_target

# A reset with drafts in flight, every draft accepted (so no rejection reaches the counters,
# vllm#46066's path): the frame in flight when the reset comes back is stale, and kvcheck's
# scheduler drops its output.
RESET = VllmConfig(
    num_blocks=32,
    block_size=4,
    max_num_scheduled_tokens=32,
    max_num_seqs=4,
    max_model_len=32,
    num_spec_tokens=2,
)
RESET_EVENTS = (Add("r0", 4, 10), *(Step(2),) * 3, Reset(), *(Step(2),) * 6, Drain(2))
# Two requests, one preempted under KV pressure with a frame in flight that is delivered.
PREEMPTING = VllmConfig(
    num_blocks=9,
    block_size=4,
    max_num_scheduled_tokens=32,
    max_num_seqs=2,
    max_model_len=24,
    num_spec_tokens=2,
    long_prefill_token_threshold=4,
)
PREEMPTING_EVENTS = (Add("r0", 1, 7), Add("r1", 7, 5), Drain(0))


def first_violation(spec: str, config: VllmConfig, events: tuple[object, ...]) -> str | None:
    result = run_scenario(Scenario(config, events, family="vllm"), load_target(spec))
    return None if result.violation is None else result.violation.invariant


@pytest.mark.parametrize(
    ("spec", "excluded", "included"),
    [
        ("builtin:vllm-reference", None, "vllm-spec-stats"),
        ("vllm-mutant:drop-on-preempt", None, "vllm-spec-stats"),
        ("vllm-mutant:stats-count-dropped", "vllm-spec-stats", None),
    ],
)
def test_a_dropped_stale_frame_counts_only_when_stale_frames_are_included(
    spec: str, excluded: str | None, included: str | None
) -> None:
    assert first_violation(spec, RESET, RESET_EVENTS) == excluded
    assert first_violation(spec, attrs.evolve(RESET, spec_stats="included"), RESET_EVENTS) == (
        included
    )
    assert first_violation(spec, attrs.evolve(RESET, spec_stats="off"), RESET_EVENTS) is None


def test_a_delivered_stale_frame_counts_its_drafts() -> None:
    assert first_violation("builtin:vllm-reference", PREEMPTING, PREEMPTING_EVENTS) is None
    assert (
        first_violation("vllm-mutant:stats-skip-stale", PREEMPTING, PREEMPTING_EVENTS)
        == "vllm-spec-stats"
    )


def test_the_accepted_positions_are_judged() -> None:
    events = (Add("r0", 2, 3), Drain(0))
    assert first_violation("builtin:vllm-reference", RESET, events) is None
    assert first_violation("vllm-mutant:stats-position-shifted", RESET, events) == (
        "vllm-spec-stats"
    )


def _entry(rid: str, drafts: int, samples: bool = True) -> FrameEntry:
    return FrameEntry(rid, 1, 1 + drafts, drafts, samples, None, None, False)


def test_the_expectation_counts_live_applied_sampling_frames_with_drafts() -> None:
    entries = (
        _entry("fresh", 3),
        _entry("no-drafts", 0),
        _entry("chunk", 2, samples=False),
        _entry("finished", 2),
        _entry("stale-dropped", 2),
        _entry("stale-delivered", 2),
    )
    emitted = {rid: (1001,) for rid in ("fresh", "no-drafts", "stale-delivered")}
    fact = DeliveryFact(
        step=4,
        sampled={},
        delivered=Delivered(emitted, {}),
        entries=entries,
        accept=2,
        live=frozenset(e.rid for e in entries) - {"finished"},
        stale=frozenset({"stale-dropped", "stale-delivered"}),
    )
    # fresh: 3 drafts, 2 accepted; stale-delivered: 2 drafts, 2 accepted.
    assert expected_spec_stats(fact, 3, "excluded") == SpecStats(2, 5, 4, (2, 2, 0))
    # A dropped stale frame adds its drafts when included.
    assert expected_spec_stats(fact, 3, "included") == SpecStats(3, 7, 6, (3, 3, 0))
    # A fresh frame whose output was dropped: lost tokens, not judged here in either mode.
    lost = attrs.evolve(
        fact, entries=(*entries, _entry("fresh-lost", 2)), live=fact.live | {"fresh-lost"}
    )
    assert expected_spec_stats(lost, 3, "excluded") is None
    assert expected_spec_stats(lost, 3, "included") is None


def test_the_mode_is_in_the_scenario_file_and_checked() -> None:
    scenario = Scenario(attrs.evolve(RESET, spec_stats="included"), RESET_EVENTS, family="vllm")
    assert from_json(to_json(scenario)) == scenario
    data = VllmScenarios.config_to_dict(RESET) | {"spec_stats": "sometimes"}
    with pytest.raises(ScenarioFormatError, match="'spec_stats' must be excluded"):
        VllmScenarios.config_from_dict(data)


def test_an_unknown_mode_is_a_usage_error() -> None:
    target = load_target("builtin:vllm-reference")
    assert judging({"spec_stats": "included"}, target).options.spec_stats == "included"
    with pytest.raises(KvcheckUsageError, match="unknown spec_stats mode"):
        judging({"spec_stats": "sometimes"}, target)
