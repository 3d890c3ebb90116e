"""What a target is held to (`ApiShape.not_judged`): a result counter it never writes, a
histogram its spellings' generation lacks, the controller feed; judged through `check`."""

from __future__ import annotations

import textwrap
from pathlib import Path

from kvcheck.core.target import Target
from kvcheck.search.check import check
from kvcheck.targets.loading import load_target
from tests.helpers import source_target

_HONEST_LIVE_ONLY = """
def resolve(self, result, batch):
    accepts = result.accept_lens.tolist()
    drafts = [a - 1 for a in accepts]
    for i, req in enumerate(batch.reqs):
        if req.is_retracted or req.finished():
            continue
        req.kv.kv_committed_len += accepts[i]
        req.spec_verify_ct += 1
        req.spec_num_correct_drafts += drafts[i]
        {histogram}
    {counters}
    return _runs(result, result.speculative_num_draft_tokens)
"""


def honest(tmp_path: Path, histogram: str = "", counters: str = "pass") -> Target:
    body = _HONEST_LIVE_ONLY.format(
        histogram=histogram or "pass", counters=counters.replace("\n", "\n    ")
    )
    return load_target(source_target(tmp_path, body))


def test_a_resolver_that_writes_no_result_counter_is_not_faulted_on_it(tmp_path: Path) -> None:
    hist = "req.update_spec_correct_drafts_histogram(drafts[i])"
    target = honest(tmp_path, histogram=hist)
    shape = target.shape
    assert {"result-drafts-total", "result-drafts-per-row", "controller-feed"} <= shape.not_judged
    verdict = check(target, max_examples=60, seed=1)  # ideal mode: nothing written, nothing judged
    assert verdict.passed, verdict.violation
    assert verdict.convention == "honest" and not verdict.adaptive


def test_a_modern_resolver_without_a_histogram_is_faulted(tmp_path: Path) -> None:
    """Its spellings are 0.5.19+, where every resolver keeps the histogram."""
    target = honest(tmp_path)
    assert "histogram" not in target.shape.not_judged
    verdict = check(target, max_examples=60, seed=1)
    assert verdict.violation is not None and verdict.violation.invariant == "stats-histogram"


def test_feeding_stale_rows_to_the_controller_is_a_global_counters_finding(
    tmp_path: Path,
) -> None:
    """The result total counts live rows only (ideal), but the controller gets every row."""
    hist = "req.update_spec_correct_drafts_histogram(drafts[i])"
    counters = textwrap.dedent("""\
        live = [d for d, r in zip(drafts, batch.reqs) if not (r.is_retracted or r.finished())]
        result.num_correct_drafts = sum(live)
        self.model_worker.on_verify_complete_cpu(drafts, batch_size=batch.batch_size())""")
    target = honest(tmp_path, histogram=hist, counters=counters)
    ideal = check(target, global_counters="ideal", max_examples=200, seed=2)
    assert ideal.violation is not None and ideal.violation.invariant == "global-counters"
    assert "adaptive controller's samples should be" in ideal.violation.message
    assert ideal.adaptive  # auto: it feeds the controller, so strides switch
    # In sglang mode the controller gets every row, which is what it was given; only the
    # live-row total is now wrong.
    sglang = check(target, global_counters="sglang", max_examples=200, seed=2)
    assert sglang.violation is not None
    assert "accepted-draft counter" in sglang.violation.message


def test_a_double_controller_feed_is_a_finding(tmp_path: Path) -> None:
    hist = "req.update_spec_correct_drafts_histogram(drafts[i])"
    counters = textwrap.dedent("""\
        result.num_correct_drafts = sum(drafts)
        self.model_worker.on_verify_complete_cpu(drafts)
        self.model_worker.on_verify_complete_cpu(drafts)""")
    target = honest(tmp_path, histogram=hist, counters=counters)
    verdict = check(target, global_counters="sglang", max_examples=60, seed=1)
    assert verdict.violation is not None and verdict.violation.invariant == "global-counters"
    assert "in 2 calls" in verdict.violation.message
