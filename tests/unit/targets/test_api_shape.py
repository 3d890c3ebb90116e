"""The API-shape probe (`kvcheck.families.sglang.probe`): versions from spellings, the convention,
what a target is held to, and errors during the probe run."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kvcheck.families.sglang.builtins import reference, seed_prefix
from kvcheck.families.sglang.engine import UnsupportedTargetError
from kvcheck.families.sglang.probe import detect_api_shape, probe_target
from kvcheck.targets.loading import load_target
from tests.helpers import SGLANG_FIXTURES

FIXTURES = SGLANG_FIXTURES
GENERATIONS: list[dict[str, Any]] = json.loads((FIXTURES / "index.json").read_text())["generations"]
GEN_IDS = [g["generation"] for g in GENERATIONS]


def spec(gen: dict[str, Any], kind: str) -> str:
    return f"{FIXTURES / gen['path']}::{gen[kind]}"


@pytest.mark.parametrize("gen", GENERATIONS, ids=GEN_IDS)
def test_spellings_place_the_resolver_in_its_versions(gen: dict[str, Any]) -> None:
    """The versions the probe reads off the correct resolver include its generation."""
    loaded = load_target(spec(gen, "correct"))
    shape = loaded.shape
    assert shape.mixed is None

    def v(text: str) -> tuple[int, ...]:
        return tuple(int(p) for p in text.split("."))

    assert v(shape.first) <= v(gen["first_version"])
    assert shape.last is None or v(gen["last_version"]) <= v(shape.last)


# --- hand-written resolvers ---------------------------------------------------------------------
#
# `req.kv_committed_len` and the worker's stride are spellings of every version up to 0.5.11, so
# a resolver using only those (and no grammar) fits 0.5.6-0.5.11: a window that straddles the
# pre-claim generations (0.5.11-0.5.14), which leaves the convention to what the probe run shows.


def _runs(self: Any, result: Any) -> list[list[int]]:
    stride = self.draft_worker.speculative_num_draft_tokens
    ids, accepts = result.next_token_ids.tolist(), result.accept_lens.tolist()
    return [ids[i * stride : i * stride + a] for i, a in enumerate(accepts)]


def gives_back_a_slot(self: Any, result: Any, batch: Any) -> list[list[int]]:
    """Pre-claim: a finished request's stale row gives back the slot its launch claimed."""
    for req, a in zip(batch.reqs, result.accept_lens.tolist(), strict=True):
        if req.is_retracted:
            continue
        if req.finished():
            req.kv_committed_len -= 1
        else:
            req.kv_committed_len += a - 1
            req.spec_verify_ct += 1
    return _runs(self, result)


def leaves_finished_alone(self: Any, result: Any, batch: Any) -> list[list[int]]:
    """Honest: a finished request's stale row changes nothing."""
    for req, a in zip(batch.reqs, result.accept_lens.tolist(), strict=True):
        if not (req.is_retracted or req.finished()):
            req.kv_committed_len += a
            req.spec_verify_ct += 1
    return _runs(self, result)


def every_row_minus_one(self: Any, result: Any, batch: Any) -> list[list[int]]:
    """Applies a - 1 to every row, stale or not: the finished row says nothing, the live rows do."""
    for req, a in zip(batch.reqs, result.accept_lens.tolist(), strict=True):
        req.kv_committed_len += a - 1
    return _runs(self, result)


def every_row_in_full(self: Any, result: Any, batch: Any) -> list[list[int]]:
    for req, a in zip(batch.reqs, result.accept_lens.tolist(), strict=True):
        req.kv_committed_len += a
    return _runs(self, result)


def raises(self: Any, result: Any, batch: Any) -> list[list[int]]:
    raise RuntimeError("boom")


def raises_on_stale_rows(self: Any, result: Any, batch: Any) -> list[list[int]]:
    for req, a in zip(batch.reqs, result.accept_lens.tolist(), strict=True):
        # The probe delivers a finished request's stale row first, a retracted one's later.
        if req.finished():
            raise ValueError("a finished row")
        if req.is_retracted:
            raise ValueError("a retracted row")
        req.kv_committed_len += a - 1
    return _runs(self, result)


def counts_drafts_without_histogram(self: Any, result: Any, batch: Any) -> list[list[int]]:
    """0.5.12+ spellings (`spec_num_correct_drafts`) but no histogram, which SGLang kept then."""
    for req, a in zip(batch.reqs, result.accept_lens.tolist(), strict=True):
        if not (req.is_retracted or req.finished()):
            req.kv_committed_len += a
            req.spec_verify_ct += 1
            req.spec_num_correct_drafts += a - 1
    stride = result.speculative_num_draft_tokens
    ids, accepts = result.next_token_ids.tolist(), result.accept_lens.tolist()
    return [ids[i * stride : i * stride + a] for i, a in enumerate(accepts)]


def modern(self: Any, result: Any, batch: Any) -> list[list[int]]:
    """0.5.19+ spellings: the ledger under `req.kv`, the stride recorded on the result, the
    controller fed and the result counters written."""
    stride = result.speculative_num_draft_tokens
    accepts = result.accept_lens.tolist()
    drafts = [a - 1 for a in accepts]
    live = [not (r.is_retracted or r.finished()) for r in batch.reqs]
    for req, a, d, is_live in zip(batch.reqs, accepts, drafts, live, strict=True):
        if is_live:
            req.kv.kv_committed_len += a
            req.spec_verify_ct += 1
            req.spec_num_correct_drafts += d
            req.update_spec_correct_drafts_histogram(d)
    result.num_correct_drafts = sum(d for d, is_live in zip(drafts, live, strict=True) if is_live)
    result.num_correct_drafts_per_req_cpu = drafts
    self.model_worker.on_verify_complete_cpu(drafts, batch_size=len(drafts))
    ids = result.next_token_ids.tolist()
    return [ids[i * stride : i * stride + a] for i, a in enumerate(accepts)]


def test_convention_from_a_finished_requests_stale_row() -> None:
    preclaim = detect_api_shape(gives_back_a_slot)
    assert (preclaim.first, preclaim.last) == ("0.5.6", "0.5.11")  # straddles 0.5.11-0.5.14
    assert preclaim.convention == "preclaim"
    assert "gives back one slot on a finished request's stale row" in preclaim.convention_reason
    honest = detect_api_shape(leaves_finished_alone)
    assert (honest.first, honest.last) == ("0.5.6", "0.5.11")
    assert honest.convention == "honest"
    assert "leaves a finished request's committed length alone" in honest.convention_reason


def test_convention_from_a_live_row_when_the_stale_row_says_nothing() -> None:
    preclaim = detect_api_shape(every_row_minus_one)
    assert preclaim.convention == "preclaim"
    assert preclaim.convention_reason.endswith("adds accept_len - 1 to the committed length")
    honest = detect_api_shape(every_row_in_full)
    assert honest.convention == "honest"
    assert honest.convention_reason.endswith("adds accept_len to the committed length")


def test_versions_decide_the_convention_before_the_probe_run() -> None:
    # seed-prefix's spellings are 0.5.11 only: pre-claim, whatever its rows do.
    old = detect_api_shape(seed_prefix)
    assert (old.first, old.last, old.mixed) == ("0.5.11", "0.5.11", None)
    assert old.versions == "0.5.11"
    assert "req.spec_accepted_drafts" in old.spellings
    assert old.convention == "preclaim"
    assert old.convention_reason.startswith("auto: its spellings (req.spec_accepted_drafts)")
    # req.kv.kv_committed_len is 0.5.19+, after the pre-claim generations: honest.
    new = detect_api_shape(modern)
    assert (new.first, new.last, new.mixed) == ("0.5.19", None, None)
    assert new.versions == "0.5.19+"
    assert new.convention == "honest"
    assert "req.kv.kv_committed_len" in new.convention_reason


def test_spellings_of_two_generations_are_mixed() -> None:
    # The reference reads the launch stride off the result (0.5.12+) but counts drafts in
    # req.spec_accepted_drafts (0.5.11 only).
    shape = detect_api_shape(reference)
    assert shape.mixed is not None
    assert "result.speculative_num_draft_tokens is 0.5.12+" in shape.mixed
    assert "req.spec_accepted_drafts up to 0.5.11" in shape.mixed
    assert shape.versions == "mixed"
    # With no version to go by, its stale finished row decides.
    assert shape.convention == "preclaim" and "stale row" in shape.convention_reason


def test_what_a_target_is_not_held_to() -> None:
    bare = detect_api_shape(leaves_finished_alone)
    # Never writes a result counter, never feeds the controller, old spellings, no histogram.
    assert bare.not_judged == {
        "histogram",
        "result-drafts-total",
        "result-drafts-per-row",
        "controller-feed",
        "result-block-cap",
    }
    assert ("histogram", "never updated; SGLang has one from 0.5.9") in bare.not_judged_why
    # Spellings from 0.5.9 on: no histogram is a finding, not an older generation's API.
    counts = detect_api_shape(counts_drafts_without_histogram)
    assert (counts.first, counts.last) == ("0.5.12", "0.5.13")
    assert "histogram" not in counts.not_judged
    assert not bare.feeds_controller
    full = detect_api_shape(modern)
    assert full.not_judged == {"result-block-cap"}
    assert full.feeds_controller
    # seed-prefix writes both result counters and updates a histogram, but feeds no controller.
    assert detect_api_shape(seed_prefix).not_judged == {"controller-feed", "result-block-cap"}


def test_where_the_stride_comes_from() -> None:
    assert detect_api_shape(seed_prefix).stride_source == (
        "self.draft_worker.speculative_num_draft_tokens (the worker's current value)"
    )
    assert detect_api_shape(modern).stride_source == "result.speculative_num_draft_tokens"
    assert detect_api_shape(raises).stride_source is None


def test_a_resolver_that_raises_is_probed_not_rejected() -> None:
    shape = detect_api_shape(raises)
    assert shape.probe_error == "RuntimeError: boom"
    assert "the probe run raised RuntimeError: boom" in shape.summary()
    assert shape.to_dict()["probe_error"] == "RuntimeError: boom"
    # It showed nothing, so the convention falls back to pre-claim and says why.
    assert shape.convention == "preclaim" and "inconclusive" in shape.convention_reason
    target = probe_target("test:raises", raises, "raises")
    assert target.shape == shape and target.resolver is raises


def test_the_first_probe_error_is_kept_and_live_rows_still_count() -> None:
    shape = detect_api_shape(raises_on_stale_rows)
    assert shape.probe_error == "ValueError: a finished row"
    # The live rows before the first stale one were observed: a - 1, pre-claim.
    assert shape.convention == "preclaim"
    assert shape.convention_reason.endswith("adds accept_len - 1 to the committed length")


def test_unmodelled_attributes_fail_the_probe() -> None:
    def reads_foo(self: Any, result: Any, batch: Any) -> list[list[int]]:
        return [[batch.reqs[0].foo]]

    with pytest.raises(UnsupportedTargetError, match=r"req\.foo"):
        detect_api_shape(reads_foo)
    with pytest.raises(UnsupportedTargetError):
        probe_target("test:reads_foo", reads_foo, "reads foo")


def test_self_methods_are_bound_for_the_probe() -> None:
    def helper(self: Any, result: Any) -> int:
        return int(result.speculative_num_draft_tokens)

    def uses_helper(self: Any, result: Any, batch: Any) -> list[list[int]]:
        stride = self.launch_stride(result)
        ids, accepts = result.next_token_ids.tolist(), result.accept_lens.tolist()
        return [ids[i * stride : i * stride + a] for i, a in enumerate(accepts)]

    shape = detect_api_shape(uses_helper, {"launch_stride": helper})
    assert shape.probe_error is None
    assert shape.stride_source == "result.speculative_num_draft_tokens"
    target = probe_target(
        "test:uses_helper", uses_helper, "uses a helper", {"launch_stride": helper}
    )
    assert dict(target.self_methods) == {"launch_stride": helper}
