"""Grammars (docs/vllm.md "Grammars"): a request with structured output has its drafts validated
against kvcheck's grammar once its frame in flight returns (the scheduler pads the invalidated
ones with -1), its statistics leave them out, and a rejection of its tokens finishes it with an
error. The reference does this, the `grammar-trim-unpadded` and `stats-count-invalid` mutants
are caught, a scheduler that ignores a rejection is caught, and the releases are driven through
grammars only where their code has them."""

from __future__ import annotations

import pytest

from kvcheck.core.run import run_scenario
from kvcheck.core.scenario import from_json, to_json
from kvcheck.errors import ScenarioFormatError
from kvcheck.families.vllm.builtins import ReferenceScheduler, Req, builtin_target
from kvcheck.families.vllm.engine import FakeGrammar, VllmEngine
from kvcheck.families.vllm.scenario import (
    Add,
    Drain,
    Reject,
    Step,
    Trim,
    VllmConfig,
    VllmScenarios,
)
from kvcheck.targets.loading import load_target
from tests.unit.families.vllm.sequences import first_violation, release_or_skip, scenario

# Depth 2 and depth 3 (V2 runner, pp 2), k 3, room for both requests.
DEPTH_2 = VllmConfig(
    num_blocks=32, max_model_len=32, max_num_scheduled_tokens=32, num_spec_tokens=3
)
DEPTH_3 = VllmConfig(
    num_blocks=32,
    max_model_len=32,
    max_num_scheduled_tokens=32,
    num_spec_tokens=3,
    runner="v2",
    pp_size=2,
)
# r0's grammar accepts one draft of three; r1's rejects its first tokens.
TRIMMED = (Add("r0", 4, 10, grammar=True), Add("r1", 4, 10, grammar=True), Trim("r0", 1))
WITNESS = (*TRIMMED, Reject("r1"), Drain(3))


class ErrorIgnored(ReferenceScheduler):
    """vLLM 0.14.0-0.19.1's handling (scheduler.py:1228-1238 @0.14.0): a rejection is logged and
    the request goes on."""

    def _grammar_accepts(self, req: Req, tokens: list[int]) -> bool:
        super()._grammar_accepts(req, tokens)
        return True


def test_grammar_events_round_trip_and_bad_fields_are_refused() -> None:
    s = scenario(DEPTH_2, *WITNESS)
    assert from_json(to_json(s)) == s
    with pytest.raises(ScenarioFormatError, match="'grammar' must be a boolean"):
        VllmScenarios.event_from_dict(
            {"kind": "add", "rid": "r0", "prompt_len": 4, "max_tokens": 2, "grammar": 1}
        )
    with pytest.raises(ScenarioFormatError, match=r"'valid' must be an integer in 0\.\.8"):
        VllmScenarios.event_from_dict({"kind": "trim", "rid": "r0", "valid": 9})
    with pytest.raises(ScenarioFormatError, match="unknown reject fields"):
        VllmScenarios.event_from_dict({"kind": "reject", "rid": "r0", "valid": 0})


def test_the_grammar_decides_from_its_own_state() -> None:
    grammar = FakeGrammar()
    grammar.requests.add("r0")
    grammar.valid["r0"] = 1
    assert grammar.validate_tokens("r0", [7, 8, -1]) == [7]
    assert grammar.validate_tokens("r1", [7, 8, -1]) == [7, 8]  # no grammar: real drafts kept
    grammar.armed.add("r0")
    assert grammar.accept_tokens("r0", []) and not grammar.accept_tokens("r0", [7])
    assert grammar.accept_tokens("r0", [8]) and grammar.take_rejected() == {"r0"}


@pytest.mark.parametrize("config", [DEPTH_2, DEPTH_3], ids=["depth 2", "depth 3"])
def test_the_reference_pads_trimmed_drafts_and_finishes_a_rejected_request(
    config: VllmConfig,
) -> None:
    engine = VllmEngine(config, builtin_target("builtin:vllm-reference", ReferenceScheduler, ""))
    launches = []
    for event in WITNESS:
        observed = engine.apply(event)
        launches.extend(observed.launches)
    assert observed.finished == {"r0": "length", "r1": "error"}
    validated = [e for frame in launches for e in frame.entries if e.validated is not None]
    # A held step is validated after the oldest frame is delivered: r1's first decode waits on
    # its prefill, whose tokens the grammar rejects, so r1 is finished and skipped.
    assert validated and all(e.rid == "r0" for e in validated)
    # Each held step of r0: the runner's first draft kept, the other two padded with -1, and
    # the runner may accept only the one.
    assert all(e.validated[1:] == (-1, -1) and e.invalid == 2 for e in validated)
    assert all(e.acceptable == 1 for e in validated)
    assert first_violation("builtin:vllm-reference", scenario(config, *WITNESS)) is None


def test_an_unpadded_trim_and_counted_invalid_drafts_are_caught() -> None:
    shortest = scenario(DEPTH_2, Add("r0", 4, 10, grammar=True), Trim("r0", 0), Drain(3))
    assert first_violation("vllm-mutant:grammar-trim-unpadded", shortest) == "vllm-grammar"
    assert first_violation("vllm-mutant:stats-count-invalid", shortest) == "vllm-spec-stats"
    # Without a grammar nothing is trimmed: both behave as the reference.
    plain = scenario(DEPTH_2, Add("r0", 4, 10), Trim("r0", 0), Drain(3))
    assert first_violation("vllm-mutant:grammar-trim-unpadded", plain) is None
    assert first_violation("vllm-mutant:stats-count-invalid", plain) is None


def test_a_rejection_the_scheduler_ignores_is_caught() -> None:
    ignored = builtin_target("ignored", ErrorIgnored, "")
    # The second step delivers r1's first token, which its grammar rejects.
    rejected = (Add("r1", 4, 10, grammar=True), Reject("r1"), Step(0), Step(0))
    result = run_scenario(scenario(DEPTH_2, *rejected), ignored)
    assert result.violation is not None
    assert result.violation.invariant == "vllm-grammar"
    assert "the grammar rejected r1's tokens" in result.violation.message


@pytest.mark.parametrize("version", ["0.33.0", "0.34.0"])
def test_a_release_with_grammars_passes_the_witness(version: str) -> None:
    release_or_skip(version)
    target = load_target(f"vllm=={version}")
    assert run_scenario(scenario(DEPTH_3, *WITNESS), target).violation is None
    engine = VllmEngine(DEPTH_2, target)
    launches = []
    for event in WITNESS:
        observed = engine.apply(event)
        launches.extend(observed.launches)
    assert observed.finished == {"r0": "length", "r1": "error"}
    validated = [e.validated for frame in launches for e in frame.entries if e.validated]
    # 0.33.0 pads what the grammar rejects (scheduler.py:2906-2914); 0.34.0 schedules every
    # draft and leaves the grammar to the sampler (scheduler.py:3039 @0.34.0).
    padded = all(drafts[1:] == (-1, -1) for drafts in validated)
    assert validated and padded == (version == "0.33.0")


def test_releases_are_driven_through_grammars_only_where_their_code_has_them() -> None:
    for version in ("0.13.0", "0.14.0"):
        release_or_skip(version)
    targets = {v: load_target(f"vllm=={v}") for v in ("0.13.0", "0.14.0")}
    older, validating = (VllmEngine(DEPTH_2, target) for target in targets.values())
    # 0.13.0 has no `update_draft_token_ids_in_output`: a request added with a grammar runs
    # without one; 0.14.0-0.19.1 log a rejection and go on, so none is driven there (0.20.0 on
    # finish the request, as 0.33.0 does in the test above).
    assert not older.grammars_driven and not older.rejections_driven
    assert validating.grammars_driven and not validating.rejections_driven
    assert run_scenario(scenario(DEPTH_2, *WITNESS), targets["0.14.0"]).violation is None
