"""The adaptive controller's `batch_size=` is a routing key, not a sample count.

SGLang 0.5.13+ resolvers call `on_verify_complete_cpu(per_req, batch_size=len(batch.reqs))`;
the controller pads that size to a CUDA-graph batch size and picks the slot it keeps for it
(0.5.23 `speculative/adaptive_spec_params.py`, `on_verify_complete` -> `_route`), the slot the
launch read its step count from (`activate_step_by_batch(batch.seq_lens.shape[0])` in
`eagle_worker_v2.py`). So with the ideal counters the live rows' samples go to the slot of the
launched batch's size, stale rows counted in that size.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from kvcheck.core.run import run_scenario
from kvcheck.families.sglang.model import ReferenceModel
from kvcheck.families.sglang.scenario import Admit, Config, Step
from kvcheck.mutants import get
from kvcheck.reporting.explain import explain
from kvcheck.search.check import check
from kvcheck.targets.loading import load_target
from tests.helpers import scenario, source_target

# r0 finishes (max_new_tokens 2) while launch 3 is in flight with rows r0 and r1: at its delivery
# r0's row is stale and r1's live.
EVENTS = (Admit("r0", 10, 2), Admit("r1", 10, 20), Step(), Step((2, 2)), Step((2, 2)), Step())
ONE_STALE_ROW = scenario(*EVENTS, stride=4, convention="honest")

_LIVE_ROWS = """
def resolve(self, result, batch):
    accepts = result.accept_lens.tolist()
    drafts = [a - 1 for a in accepts]
    live = []
    for i, req in enumerate(batch.reqs):
        if req.is_retracted or req.finished():
            continue
        live.append(drafts[i])
        req.kv.kv_committed_len += accepts[i]
        req.spec_verify_ct += 1
        req.spec_num_correct_drafts += drafts[i]
        req.update_spec_correct_drafts_histogram(drafts[i])
    result.num_correct_drafts = sum(live)
    result.num_correct_drafts_per_req_cpu = drafts
    self.model_worker.on_verify_complete_cpu(live, batch_size={batch_size})
    return _runs(result, result.speculative_num_draft_tokens)
"""


def _resolver(tmp_path: Path, batch_size: str) -> str:
    return source_target(tmp_path, textwrap.dedent(_LIVE_ROWS.format(batch_size=batch_size)))


def test_the_model_wants_the_launched_batch_size_in_every_counter_mode() -> None:
    for mode, samples in (("ideal", 1), ("sglang", 2)):
        model = ReferenceModel(Config(stride=4, convention="honest", global_counters=mode))
        deliveries = [model.apply(event).delivery for event in ONE_STALE_ROW.events]
        last = [d for d in deliveries if d is not None][-1]
        assert last.stale == (True, False)
        assert last.controller_feed is not None and len(last.controller_feed) == samples
        assert last.controller_batch_size == 2, mode
    off = ReferenceModel(Config(stride=4, convention="honest", global_counters="off"))
    assert all(
        d is None or d.controller_batch_size is None
        for d in (off.apply(e).delivery for e in ONE_STALE_ROW.events)
    )


def test_live_samples_routed_by_the_launched_batch_size_pass(tmp_path: Path) -> None:
    """The right fix of the review point: the live rows' samples, batch_size=len(batch.reqs)."""
    target = load_target(_resolver(tmp_path, "len(batch.reqs)"))
    assert run_scenario(ONE_STALE_ROW, target).violation is None
    verdict = check(target, max_examples=300, seed=3)
    assert verdict.passed, verdict.violation


def test_live_samples_routed_by_their_own_count_fail_naming_the_batch_size(
    tmp_path: Path,
) -> None:
    """batch_size=len(live) sends a 2-row batch's samples to the slot of batch size 1."""
    target = load_target(_resolver(tmp_path, "len(live)"))
    result = run_scenario(ONE_STALE_ROW, target, record=True)
    violation = result.violation
    assert violation is not None and violation.invariant == "global-counters"
    assert (violation.expected, violation.observed) == (2, 1)
    assert "batch_size=1" in violation.message and "2 rows" in violation.message
    text = explain(result)
    assert "batch_size=1" in text and "should be 2" in text
    assert "accepted-draft total" not in text
    verdict = check(target, max_examples=300, seed=3)
    assert verdict.violation is not None and verdict.violation.invariant == "global-counters"


@pytest.mark.parametrize(
    ("name", "passes"),
    [("controller-batch-size-all-rows", True), ("controller-batch-size-live-rows", False)],
)
def test_the_corpus_entries_on_routing(name: str, passes: bool) -> None:
    entry = get(name)
    routed = scenario(*EVENTS, stride=4, convention=entry.convention)
    result = run_scenario(routed, entry.target(), record=True)
    if passes:
        assert entry.kind == "rewrite" and result.violation is None
    else:
        assert entry.kind == "mutant" and result.violation is not None
        assert result.violation.invariant == "global-counters"
        assert "batch_size" in explain(result)


def test_a_wrong_sample_list_is_named_as_the_samples(tmp_path: Path) -> None:
    """Every row fed (stale included) in ideal mode: the samples are wrong, not the size."""
    body = _LIVE_ROWS.replace("on_verify_complete_cpu(live,", "on_verify_complete_cpu(drafts,")
    target = load_target(source_target(tmp_path, textwrap.dedent(body.format(batch_size="2"))))
    result = run_scenario(ONE_STALE_ROW, target, record=True)
    assert result.violation is not None and result.violation.invariant == "global-counters"
    text = explain(result)
    assert "the adaptive controller's samples" in text and "batch_size" not in text


def _variant(tmp_path: Path, old: str, new: str) -> str:
    body = _LIVE_ROWS.format(batch_size="len(batch.reqs)").replace(old, new)
    assert body != _LIVE_ROWS.format(batch_size="len(batch.reqs)")
    return source_target(tmp_path, textwrap.dedent(body))


def test_an_omitted_batch_size_is_the_callees_default_0_from_0_5_13(tmp_path: Path) -> None:
    """0.5.13+'s `on_verify_complete_cpu(..., batch_size: int = 0)`: left out, every sample
    lands in the smallest slot. The target's spellings are 0.5.19+, so it is judged."""
    spec = _variant(tmp_path, ", batch_size=len(batch.reqs))", ")")
    target = load_target(spec)
    assert "controller-routing" not in target.shape.not_judged
    result = run_scenario(ONE_STALE_ROW, target, record=True)
    assert result.violation is not None and result.violation.invariant == "global-counters"
    assert (result.violation.expected, result.violation.observed) == (2, 0)
    assert "left out" in result.violation.message
    assert "batch_size" in explain(result)


def test_an_omitted_batch_size_is_right_for_0_5_12(tmp_path: Path) -> None:
    """0.5.12's controller has no per-batch-size slots, and its callee takes no batch_size."""
    spec = _variant(tmp_path, ", batch_size=len(batch.reqs))", ")").replace("\n", "\n")
    body = (
        Path(spec.split("::")[0])
        .read_text()
        .replace("req.kv.kv_committed_len", "req.kv_committed_len")
    )
    Path(spec.split("::")[0]).write_text(body)
    target = load_target(spec)
    assert "controller-routing" in target.shape.not_judged
    assert run_scenario(ONE_STALE_ROW, target).violation is None


def test_the_release_keyword_and_any_sample_order_are_accepted(tmp_path: Path) -> None:
    """SGLang's parameter is `num_correct_drafts_per_req`; the slot update reads only the
    samples' sum and count, so their order is free."""
    spec = _variant(
        tmp_path,
        "on_verify_complete_cpu(live,",
        "on_verify_complete_cpu(num_correct_drafts_per_req=live[::-1],",
    )
    assert run_scenario(ONE_STALE_ROW, load_target(spec)).violation is None


def test_no_call_is_as_good_as_an_empty_feed(tmp_path: Path) -> None:
    """With every row stale (ideal mode) there is nothing to feed: skipping the call leaves the
    controller exactly as a call with [] does (its update returns at once on an empty list)."""
    spec = _variant(
        tmp_path,
        "    self.model_worker.on_verify_complete_cpu(",
        "    if live: self.model_worker.on_verify_complete_cpu(",
    )
    # r0 finishes while launch 3 (r0 only) is in flight: its delivery has no live row.
    alone = scenario(
        Admit("r0", 10, 2), Step(), Step((2,)), Step((2,)), Step(), stride=4, convention="honest"
    )
    target = load_target(spec)
    assert run_scenario(alone, target).violation is None
    assert run_scenario(ONE_STALE_ROW, target).violation is None
