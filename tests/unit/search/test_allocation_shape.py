"""Issue 23, item 3: a target is judged only under the allocation rules of the SGLang generations
its API shape fits, and `kv_allocated_len` is refused, not stale, where no rule is modelled.

`tests/fixtures/shapes/asserts_allocation.py` is a correct 0.5.23-shaped resolver that asserts
`req.kv.kv_committed_len <= req.kv.kv_allocated_len` on live rows, which every release keeps;
before the fix, scenarios without an allocation rule left `kv_allocated_len` at the prompt length
and the assertion failed it."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from kvcheck.core.run import RunResult, run_scenario
from kvcheck.core.scenario import Scenario
from kvcheck.errors import KvcheckUsageError
from kvcheck.families.sglang.builtins import commit_live_row, padded_runs, reference
from kvcheck.families.sglang.distribution import scenario_space, with_overlap
from kvcheck.families.sglang.engine import UnsupportedTargetError
from kvcheck.families.sglang.judging import SglangJudging
from kvcheck.families.sglang.scenario import Admit, Config, Step, SwitchStride
from kvcheck.search.check import check
from kvcheck.search.sampling import sample_search
from kvcheck.search.shrink import shrink
from kvcheck.targets.loading import load_target
from tests.helpers import TESTS_DIR, scenario, target

ASSERTS_ALLOCATION = (
    f"{TESTS_DIR / 'fixtures' / 'shapes' / 'asserts_allocation.py'}::Processor.resolve"
)
DECODES = (Admit("r0", 3, 6), Step(), Step((2,)), Step((2,)))


def _resolve_0_5_11(self: Any, result: Any, batch: Any) -> Any:
    """kvcheck's reference in 0.5.11's spellings throughout (the stride from the worker)."""
    stride = self.draft_worker.speculative_num_draft_tokens
    accept_lens = result.accept_lens.tolist()
    for req, accepted in zip(batch.reqs, accept_lens, strict=True):
        if req.is_retracted:
            continue
        if req.finished():
            req.kv_committed_len -= 1
            continue
        commit_live_row(req, accepted)
    result.num_accepted_drafts = sum(
        a - 1 for req, a in zip(batch.reqs, accept_lens, strict=True) if not req.finished()
    )
    result.num_accepted_drafts_per_req_cpu = [a - 1 for a in accept_lens]
    return padded_runs(result.next_token_ids.tolist(), accept_lens, stride)


def _reads_allocated(self: Any, result: Any, batch: Any) -> Any:
    """The 0.5.11-shaped resolver, reading `req.kv_allocated_len` (<= 0.5.15) on live rows."""
    for req in batch.reqs:
        if not (req.is_retracted or req.finished()):
            assert req.kv_allocated_len >= req.kv_committed_len
    return _resolve_0_5_11(self, result, batch)


def _reads_new_spelling(self: Any, result: Any, batch: Any) -> Any:
    for req in batch.reqs:
        req.kv.kv_allocated_len  # noqa: B018 - the read is the point
    return reference(self, result, batch)


def _writes_allocated(self: Any, result: Any, batch: Any) -> Any:
    for req in batch.reqs:
        req.kv_allocated_len = 0
    return reference(self, result, batch)


@pytest.mark.parametrize(
    ("resolver", "where"),
    [
        (_reads_allocated, "reads `req.kv_allocated_len`"),
        (_reads_new_spelling, "reads `req.kv.kv_allocated_len`"),
        (_writes_allocated, "writes `req.kv_allocated_len`"),
    ],
)
def test_allocated_length_without_a_rule_is_refused_not_stale(resolver: Any, where: str) -> None:
    with pytest.raises(UnsupportedTargetError, match="without an allocation rule") as raised:
        run_scenario(scenario(*DECODES, convention="preclaim"), target(resolver))
    assert where in str(raised.value)
    # Under a rule the same scenario runs and is judged.
    judged = run_scenario(
        scenario(*DECODES, convention="preclaim", allocation="0.5.13"), target(resolver)
    )
    assert judged.violation is None or resolver is _writes_allocated


def test_the_probe_gives_the_rules_of_the_generations_the_spellings_fit() -> None:
    fixture = load_target(ASSERTS_ALLOCATION).shape
    assert fixture.allocation_rules == ("0.5.17",)
    assert "touches req.kv.kv_allocated_len" in fixture.allocation_reason
    # 0.5.11 spellings reading `req.kv_allocated_len`: 0.5.11's rule only, never off.
    old = target(_reads_allocated).shape
    assert old.allocation_rules == ("0.5.11",)
    # A target that never touches it may also run without allocation.
    plain = target(_resolve_0_5_11).shape
    assert plain.allocation_rules == ("off", "0.5.11")
    assert plain.to_dict()["allocation_rules"] == ["off", "0.5.11"]


def test_a_correct_0_5_23_resolver_asserting_committed_within_allocated_passes_check() -> None:
    verdict = check(ASSERTS_ALLOCATION, seed=23, measure_coverage=False)
    assert verdict.passed, verdict.outcome.failure and verdict.outcome.failure.violation


def test_the_fast_search_keeps_to_the_target_rules() -> None:
    loaded = load_target(ASSERTS_ALLOCATION)
    rules: set[str] = set()

    def seen(result: RunResult) -> None:
        rules.add(result.scenario.config.allocation)

    outcome = sample_search(
        loaded, convention="honest", adaptive=True, max_examples=150, seed=5, on_run=seen
    )
    assert outcome.failure is None
    assert rules == {"0.5.17"}


def _reads_and_overcommits(self: Any, result: Any, batch: Any) -> Any:
    """Reads `req.kv_allocated_len` and commits one slot too many on live rows: a failure under
    every rule, which a shrinker that dropped the rule would turn into a refusal."""
    runs = reference(self, result, batch)
    for req in batch.reqs:
        if not (req.is_retracted or req.finished()):
            req.kv_committed_len += 1 if req.kv_allocated_len else 0
    return runs


def test_the_shrinker_never_drops_a_rule_the_target_needs() -> None:
    loaded = target(_reads_and_overcommits)
    failing = run_scenario(
        scenario(*DECODES, Step((1,)), convention="preclaim", allocation="0.5.6"), loaded
    )
    assert failing.violation is not None
    shrunk = shrink(failing, loaded)
    assert shrunk.result.violation is not None
    assert shrunk.result.scenario.config.allocation == "0.5.6"


def test_adaptive_switching_with_no_rule_of_the_target_that_runs_it_is_refused() -> None:
    # The 0.5.11 rule (unclamped, as 0.5.6-0.5.10's) never met adaptive switching, and "off"
    # is no option for a target reading kv_allocated_len: nothing to judge it under.
    with pytest.raises(KvcheckUsageError, match=r"allocation 0\.5\.11 only .*adaptive switching"):
        scenario_space(target(_reads_allocated), SglangJudging("preclaim", "ideal", True))
    # Without switching, its own rule is drawn.
    assert scenario_space(
        target(_reads_allocated), SglangJudging("preclaim", "ideal", False)
    ).allocation == ("0.5.11",)


def test_a_pinned_overlap_replaces_rule_0_5_12_within_the_target_rules() -> None:
    config = Config(convention="preclaim", overlap=False, adaptive=True, allocation="0.5.12")
    drawn = Scenario(config, (*DECODES, SwitchStride(2)))
    assert with_overlap(drawn, True).config.allocation == "0.5.13"
    assert with_overlap(drawn, True, ("0.5.12", "0.5.16")).config.allocation == "0.5.16"
    plain = with_overlap(drawn, True, ("off", "0.5.12")).config
    assert plain == attrs.evolve(config, overlap=True, allocation="off")
