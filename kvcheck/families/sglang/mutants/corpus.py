"""The mutant corpus: plausible buggy resolvers and correct rewrites, written for kvcheck from the
semantics (docs/semantics.md §1-§4), not copied from SGLang.

Each function is a resolver body `(g, self, result, batch)` written against a `Generation`'s
spellings (`g`), registered with the generation it is bound to, the convention it is judged
under, and, for a mutant, the invariant expected to catch it. The first lines of a docstring are
the entry's summary. Only bugs kvcheck's engine can expose are here. A bug in allocation or
release (semantics §4.16-§4.31, the upstream bugs of §5.4) is an entry whose resolver is correct
and whose allocation path (`kvcheck.families.sglang.mutants.allocation`) carries the bug. Grammar
entries
(§4.10) truncate a live grammar row's run where its grammar terminates or refuses a token.

A correct resolver of generation `g`, for reference: for each row, skip a retracted request; for
a finished one give back the pre-claimed slot (pre-claim convention only); for a live one add
`a - 1` (pre-claim) or `a` (honest) to the committed length and count the row (verify count,
`a - k` drafts, histogram bucket `a - k`). Write the draft total over live rows and the per-row
list over all rows on the result, feed the controller the live rows' drafts (0.5.12+), and return
row i's first `a_i` tokens of a row `S` wide, `S` being the stride recorded at launch.
"""

from __future__ import annotations

import itertools
from typing import Any

from kvcheck.families.sglang.builtins import padded_runs
from kvcheck.families.sglang.mutants import allocation
from kvcheck.families.sglang.mutants.generations import (
    G0_5_10,
    G0_5_11,
    G0_5_12,
    G0_5_13,
    G0_5_15,
    G0_5_16,
    G0_5_19,
    G0_5_20,
    Generation,
)
from kvcheck.families.sglang.mutants.registry import Corpus

corpus = Corpus()
mutant = corpus.mutant
rewrite = corpus.rewrite

# --- helpers shared where the bug is not ------------------------------------------------------


def _tensors(result: Any) -> tuple[list[int], list[int]]:
    return result.next_token_ids.tolist(), result.accept_lens.tolist()


def _stale(req: Any) -> bool:
    return bool(req.is_retracted or req.finished())


def _commit_live(g: Generation, req: Any, accepted: int) -> None:
    """The committed length of a live row under the generation's own convention."""
    g.add_committed(req, accepted - 1 if g.convention == "preclaim" else accepted)


def _settle_finished(g: Generation, req: Any) -> None:
    if g.convention == "preclaim":
        g.add_committed(req, -1)  # give back the slot the launch pre-claimed


def _publish(g: Generation, scheduler: Any, result: Any, batch: Any, accepts: list[int]) -> None:
    """Batch counters of a correct resolver, judged by the stale flags as they are now."""
    k = g.non_draft(result)
    live = [a - k for req, a in zip(batch.reqs, accepts, strict=True) if not _stale(req)]
    g.write_totals(result, sum(live), [a - k for a in accepts])
    g.feed_controller(scheduler, live)


def _grammar_keep(
    g: Generation, scheduler: Any, req: Any, run: list[int], *, abort: bool = True
) -> list[int]:
    """Offer `run` to the request's grammar token by token: keep up to the token that terminates
    it, stop before one it refuses (and abort the request, unless `abort` is off)."""
    kept: list[int] = []
    for token in run:
        try:
            req.grammar.accept_token(token)
        except ValueError:
            if abort:
                g.abort_for_grammar(scheduler, req)
            break
        kept.append(token)
        if req.grammar.is_terminated():
            break
    return kept


def _grammar_rows(
    g: Generation,
    self: Any,
    result: Any,
    batch: Any,
    *,
    commit_full: bool = False,
    return_full: bool = False,
    advance_twice: bool = False,
    advance_stale: bool = False,
    abort: bool = True,
) -> Any:
    """A correct grammar-aware resolver of generation `g` (each keyword plants one bug): live
    grammar rows commit and return what the grammar retained; statistics, totals and the
    controller feed use the raw accept length."""
    tokens, accepts = _tensors(result)
    stride, k = g.stride(self, result), g.non_draft(result)
    runs = padded_runs(tokens, accepts, stride)
    returned = [list(run) for run in runs]
    for row, (req, accepted) in enumerate(zip(batch.reqs, accepts, strict=True)):
        if req.is_retracted:
            continue
        if req.finished():
            if advance_stale and req.grammar is not None:
                _grammar_keep(g, self, req, runs[row])
            _settle_finished(g, req)
            continue
        kept = runs[row]
        if req.grammar is not None:
            if advance_twice:
                _grammar_keep(g, self, req, runs[row][:1], abort=abort)
            kept = _grammar_keep(g, self, req, runs[row], abort=abort)
            if not return_full:
                returned[row] = kept
        length = len(runs[row]) if commit_full else len(kept)
        g.add_committed(req, length - 1 if g.convention == "preclaim" else length)
        g.count_row(req, accepted - k)
    _publish(g, self, result, batch, accepts)
    return returned


def _correct_rows(g: Generation, batch: Any, accepts: list[int], k: int) -> None:
    for req, accepted in zip(batch.reqs, accepts, strict=True):
        if req.is_retracted:
            continue
        if req.finished():
            _settle_finished(g, req)
            continue
        _commit_live(g, req, accepted)
        g.count_row(req, accepted - k)


# =============================================================================================
# Mutants: stale rows (semantics §3.1-§3.3, §4.1-§4.5, §4.25)
# =============================================================================================


@mutant(
    "stale-rows-applied-honest",
    G0_5_10,
    expect="committed-finished-frozen",
    origin="semantics §3.1 (0.5.6-0.5.10)",
)
def stale_rows_applied_honest(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Every row, stale or not, gets its committed length and statistics (0.5.6-0.5.10)."""
    tokens, accepts = _tensors(result)
    for req, accepted in zip(batch.reqs, accepts, strict=True):
        g.add_committed(req, accepted)
        g.count_row(req, accepted - 1)
    g.write_totals(result, sum(accepts) - len(accepts), [a - 1 for a in accepts])
    return padded_runs(tokens, accepts, g.stride(self, result))


@mutant(
    "stale-rows-applied-preclaim",
    G0_5_11,
    expect="committed-finished-frozen",
    origin="semantics §3.1 (0.5.11)",
)
def stale_rows_applied_preclaim(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Every row adds a - 1 and is counted, stale or not: the 0.5.11 resolver after the
    pre-claim was introduced and before the stale-row fix."""
    tokens, accepts = _tensors(result)
    for req, accepted in zip(batch.reqs, accepts, strict=True):
        g.add_committed(req, accepted - 1)
        g.count_row(req, accepted - 1)
    g.write_totals(result, sum(accepts) - len(accepts), [a - 1 for a in accepts])
    return padded_runs(tokens, accepts, g.stride(self, result))


@mutant("stale-rows-counted", G0_5_13, expect="stats-verify-count", origin="semantics §3.3")
def stale_rows_counted(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """The committed length is settled correctly, but the statistics are updated before the
    stale check, so stale rows are counted too."""
    tokens, accepts = _tensors(result)
    for req, accepted in zip(batch.reqs, accepts, strict=True):
        g.count_row(req, accepted - 1)
        if req.is_retracted:
            continue
        if req.finished():
            _settle_finished(g, req)
            continue
        _commit_live(g, req, accepted)
    _publish(g, self, result, batch, accepts)
    return padded_runs(tokens, accepts, g.stride(self, result))


@mutant(
    "finished-giveback-honest",
    G0_5_15,
    expect="committed-finished-frozen",
    origin="semantics §4.1",
)
def finished_giveback_honest(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Keeps the pre-claim era's `-1` for a finished request's stale row after the launch
    stopped pre-claiming (0.5.15+), so the committed length drops below P + L - 1."""
    tokens, accepts = _tensors(result)
    for req, accepted in zip(batch.reqs, accepts, strict=True):
        if req.is_retracted:
            continue
        if req.finished():
            g.add_committed(req, -1)
            continue
        g.add_committed(req, accepted)
        g.count_row(req, accepted - 1)
    _publish(g, self, result, batch, accepts)
    return padded_runs(tokens, accepts, g.stride(self, result))


@mutant(
    "finished-no-giveback",
    G0_5_12,
    expect="committed-finished-frozen",
    origin="semantics §4.2",
)
def finished_no_giveback(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Skips every stale row outright: under pre-claim the finished request keeps the slot its
    last launch claimed (final committed length P + L instead of P + L - 1)."""
    tokens, accepts = _tensors(result)
    for req, accepted in zip(batch.reqs, accepts, strict=True):
        if _stale(req):
            continue
        _commit_live(g, req, accepted)
        g.count_row(req, accepted - 1)
    _publish(g, self, result, batch, accepts)
    return padded_runs(tokens, accepts, g.stride(self, result))


@mutant("retracted-giveback", G0_5_13, expect="no-negative", origin="semantics §4.3")
def retracted_giveback(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Treats a retracted row like a finished one and gives back a slot the reset already
    released: the committed length goes to -1."""
    tokens, accepts = _tensors(result)
    for req, accepted in zip(batch.reqs, accepts, strict=True):
        if _stale(req):
            g.add_committed(req, -1)
            continue
        _commit_live(g, req, accepted)
        g.count_row(req, accepted - 1)
    _publish(g, self, result, batch, accepts)
    return padded_runs(tokens, accepts, g.stride(self, result))


@mutant(
    "retracted-applied",
    G0_5_12,
    expect="committed-retracted-zero",
    origin="semantics §3.2, §4.3",
)
def retracted_applied(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Checks only `finished()`: a retracted request's stale row is applied as live, on top
    of the zeroed committed length (a - 1 slots it does not hold), and counted."""
    tokens, accepts = _tensors(result)
    for req, accepted in zip(batch.reqs, accepts, strict=True):
        if req.finished():
            _settle_finished(g, req)
            continue
        _commit_live(g, req, accepted)
        g.count_row(req, accepted - 1)
    _publish(g, self, result, batch, accepts)
    return padded_runs(tokens, accepts, g.stride(self, result))


@mutant(
    "retracted-applied-honest",
    G0_5_19,
    expect="committed-retracted-zero",
    origin="semantics §3.2, §4.3",
)
def retracted_applied_honest(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Honest convention, `req.kv` spelling: only finished rows are skipped, so a retracted
    request's stale row commits `a` slots it no longer holds."""
    tokens, accepts = _tensors(result)
    for req, accepted in zip(batch.reqs, accepts, strict=True):
        if req.finished():
            continue
        g.add_committed(req, accepted)
        g.count_row(req, accepted - 1)
    _publish(g, self, result, batch, accepts)
    return padded_runs(tokens, accepts, g.stride(self, result))


@mutant(
    "finished-applied",
    G0_5_12,
    expect="committed-finished-frozen",
    origin="semantics §3.1 (partial fix)",
)
def finished_applied(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Half of the stale-row fix: retracted rows are skipped, finished ones are still applied
    as live rows."""
    tokens, accepts = _tensors(result)
    for req, accepted in zip(batch.reqs, accepts, strict=True):
        if req.is_retracted:
            continue
        _commit_live(g, req, accepted)
        g.count_row(req, accepted - 1)
    _publish(g, self, result, batch, accepts)
    return padded_runs(tokens, accepts, g.stride(self, result))


@mutant(
    "finishing-run-dropped",
    G0_5_15,
    expect="committed-finished-frozen",
    origin="semantics §4.5",
)
def finishing_run_dropped(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Judges staleness as if the run were already appended: a row whose run reaches
    max_new_tokens is treated as finishing ("its KV is released anyway"), so the run that
    finishes a request is counted but never committed."""
    tokens, accepts = _tensors(result)
    for req, accepted in zip(batch.reqs, accepts, strict=True):
        if req.is_retracted:
            continue
        if req.finished():
            _settle_finished(g, req)
            continue
        if len(req.output_ids) + accepted >= req.sampling_params.max_new_tokens:
            g.count_row(req, accepted - 1)
            continue
        _commit_live(g, req, accepted)
        g.count_row(req, accepted - 1)
    _publish(g, self, result, batch, accepts)
    return padded_runs(tokens, accepts, g.stride(self, result))


@mutant(
    "abort-pending-skipped",
    G0_5_19,
    expect="committed-finished-frozen",
    origin="semantics §4.25",
)
def abort_pending_skipped(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Treats a request with a pending abort (`to_finish`) as already finished: the row that
    carries the abort loses its commit and statistics, though the scheduler still applies it."""
    tokens, accepts = _tensors(result)
    for req, accepted in zip(batch.reqs, accepts, strict=True):
        if _stale(req) or req.to_finish is not None:
            continue
        g.add_committed(req, accepted)
        g.count_row(req, accepted - 1)
    _publish(g, self, result, batch, accepts)
    return padded_runs(tokens, accepts, g.stride(self, result))


@mutant(
    "finished-len-as-finished",
    G0_5_19,
    expect="committed-finished-frozen",
    origin="issue 23 item 2",
)
def finished_len_as_finished(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Takes `req.finished_len is not None` for "finished": SGLang sets it for a length or
    stop-token finish only, so the stale row of an aborted (or grammar-finished) request is
    applied as a live one."""
    tokens, accepts = _tensors(result)
    k = g.non_draft(result)
    live = []
    for req, accepted in zip(batch.reqs, accepts, strict=True):
        if req.is_retracted or req.finished_len is not None:
            continue
        _commit_live(g, req, accepted)
        g.count_row(req, accepted - 1)
        live.append(accepted - k)
    g.write_totals(result, sum(live), [a - k for a in accepts])
    g.feed_controller(self, live)
    return padded_runs(tokens, accepts, g.stride(self, result))


@mutant(
    "retracted-stats-reset",
    G0_5_12,
    expect="stats-verify-count",
    origin="semantics §4.30",
)
def retracted_stats_reset(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Resets a retracted request's statistics at its stale row, as if re-admission started
    the request over; SGLang keeps them across retractions."""
    tokens, accepts = _tensors(result)
    for req, accepted in zip(batch.reqs, accepts, strict=True):
        if req.is_retracted:
            req.spec_verify_ct = 0
            g.set_drafts(req, 0)
            continue
        if req.finished():
            _settle_finished(g, req)
            continue
        _commit_live(g, req, accepted)
        g.count_row(req, accepted - 1)
    _publish(g, self, result, batch, accepts)
    return padded_runs(tokens, accepts, g.stride(self, result))


# =============================================================================================
# Mutants: stride and slicing (semantics §3.4, §4.7, §4.13, §2.9 invariant 10)
# =============================================================================================


@mutant(
    "worker-stride",
    G0_5_12,
    expect="runs-aligned",
    adaptive=True,
    origin="semantics §3.4",
)
def worker_stride(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """A 0.5.12 resolver that still slices with the draft worker's current stride, which an
    adaptive switch changed after this batch was launched."""
    tokens, accepts = _tensors(result)
    _correct_rows(g, batch, accepts, 1)
    _publish(g, self, result, batch, accepts)
    return padded_runs(tokens, accepts, self.draft_worker.speculative_num_draft_tokens)


@mutant("cumulative-offsets", G0_5_11, expect="runs-aligned", origin="semantics §4.7")
def cumulative_offsets(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Slices rows at cumulative offsets (the sum of earlier accept lengths, spec v1's packed
    layout) instead of i * S in the padded layout."""
    tokens, accepts = _tensors(result)
    _correct_rows(g, batch, accepts, 1)
    _publish(g, self, result, batch, accepts)
    starts = [0, *itertools.accumulate(accepts)]
    return [tokens[start : start + a] for start, a in zip(starts, accepts, strict=False)]


@mutant("stride-without-bonus", G0_5_19, expect="runs-aligned", origin="new")
def stride_without_bonus(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Takes the row width to be the number of drafts (S - 1), forgetting the bonus slot."""
    tokens, accepts = _tensors(result)
    _correct_rows(g, batch, accepts, 1)
    _publish(g, self, result, batch, accepts)
    return padded_runs(tokens, accepts, g.stride(self, result) - 1)


@mutant("whole-padded-row", G0_5_10, expect="runs-aligned", origin="new")
def whole_padded_row(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Returns each row's whole padded width, padding included, not its first a tokens."""
    tokens, accepts = _tensors(result)
    _correct_rows(g, batch, accepts, 1)
    _publish(g, self, result, batch, accepts)
    stride = g.stride(self, result)
    return [tokens[i * stride : (i + 1) * stride] for i in range(len(accepts))]


@mutant("run-without-bonus", G0_5_13, expect="runs-aligned", origin="new")
def run_without_bonus(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Returns only the accepted drafts of each row (a - 1 tokens), dropping the bonus token
    the verify step produced."""
    tokens, accepts = _tensors(result)
    _correct_rows(g, batch, accepts, 1)
    _publish(g, self, result, batch, accepts)
    stride = g.stride(self, result)
    return [tokens[i * stride : i * stride + a - 1] for i, a in enumerate(accepts)]


@mutant("live-runs-only", G0_5_12, expect="runs-aligned", origin="semantics §2.9 invariant 10")
def live_runs_only(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Returns runs for live rows only, so the caller's row i no longer lines up with batch
    row i once a stale row precedes it (and the count is wrong)."""
    tokens, accepts = _tensors(result)
    _correct_rows(g, batch, accepts, 1)
    _publish(g, self, result, batch, accepts)
    stride = g.stride(self, result)
    return [
        tokens[i * stride : i * stride + a]
        for i, (req, a) in enumerate(zip(batch.reqs, accepts, strict=True))
        if not _stale(req)
    ]


@mutant("return-inside-loop", G0_5_15, expect="runs-aligned", origin="new")
def return_inside_loop(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """`return runs` indented into the row loop: the resolver returns after the first row, so
    later rows get neither their run nor their accounting."""
    tokens, accepts = _tensors(result)
    stride = g.stride(self, result)
    runs: list[list[int]] = []
    fed: list[int] = []
    for i, (req, accepted) in enumerate(zip(batch.reqs, accepts, strict=True)):
        runs.append(tokens[i * stride : i * stride + accepted])
        if not _stale(req):
            g.add_committed(req, accepted)
            g.count_row(req, accepted - 1)
            fed.append(accepted - 1)
        g.write_totals(result, sum(fed), [a - 1 for a in accepts])
        g.feed_controller(self, fed)
        return runs
    return runs


@mutant("stride-from-longest-run", G0_5_11, expect="runs-aligned", origin="new")
def stride_from_longest_run(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Infers the row width from the longest accepted run instead of the launch stride."""
    tokens, accepts = _tensors(result)
    _correct_rows(g, batch, accepts, 1)
    _publish(g, self, result, batch, accepts)
    return padded_runs(tokens, accepts, max(accepts))


@mutant(
    "output-stride-unchecked",
    G0_5_20,
    expect="target-raised",
    origin="API generation 0.5.20",
)
def output_stride_unchecked(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """A 0.5.20 port that reads `result.speculative_output_stride` without the fallback to
    `speculative_num_draft_tokens`: it is None for EAGLE, and slicing with it raises."""
    tokens, accepts = _tensors(result)
    stride = result.speculative_output_stride
    runs = [tokens[i * stride : i * stride + a] for i, a in enumerate(accepts)]
    _correct_rows(g, batch, accepts, g.non_draft(result))
    _publish(g, self, result, batch, accepts)
    return runs


# =============================================================================================
# Mutants: per-request statistics (semantics §2.8, §4.9)
# =============================================================================================


@mutant("drafts-include-bonus", G0_5_11, expect="stats-accepted-drafts", origin="semantics §4.9")
def drafts_include_bonus(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Counts the bonus token as an accepted draft: adds a, not a - 1, to the draft counter."""
    tokens, accepts = _tensors(result)
    for req, accepted in zip(batch.reqs, accepts, strict=True):
        if req.is_retracted:
            continue
        if req.finished():
            _settle_finished(g, req)
            continue
        _commit_live(g, req, accepted)
        req.spec_verify_ct += 1
        g.add_drafts(req, accepted)
        g.record_histogram(req, accepted - 1)
    _publish(g, self, result, batch, accepts)
    return padded_runs(tokens, accepts, g.stride(self, result))


@mutant("histogram-off-by-one", G0_5_10, expect="stats-histogram", origin="semantics §4.9")
def histogram_off_by_one(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Files each row in histogram bucket a (the accept length) instead of a - 1 (drafts)."""
    tokens, accepts = _tensors(result)
    for req, accepted in zip(batch.reqs, accepts, strict=True):
        if _stale(req):
            continue
        g.add_committed(req, accepted)
        req.spec_verify_ct += 1
        g.add_drafts(req, accepted - 1)
        g.record_histogram(req, accepted)
    _publish(g, self, result, batch, accepts)
    return padded_runs(tokens, accepts, g.stride(self, result))


@mutant(
    "verify-skipped-without-drafts",
    G0_5_12,
    expect="stats-verify-count",
    origin="semantics §4.9",
)
def verify_skipped_without_drafts(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Updates the statistics only when the row accepted at least one draft, so a verify that
    accepted none (a = 1) is not counted."""
    tokens, accepts = _tensors(result)
    for req, accepted in zip(batch.reqs, accepts, strict=True):
        if req.is_retracted:
            continue
        if req.finished():
            _settle_finished(g, req)
            continue
        _commit_live(g, req, accepted)
        if accepted - 1 > 0:
            g.count_row(req, accepted - 1)
    _publish(g, self, result, batch, accepts)
    return padded_runs(tokens, accepts, g.stride(self, result))


@mutant("histogram-skips-zero", G0_5_19, expect="stats-histogram", origin="new")
def histogram_skips_zero(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Leaves rows that accepted no draft out of the histogram ("nothing to record"), so the
    histogram no longer sums to the verify count."""
    tokens, accepts = _tensors(result)
    for req, accepted in zip(batch.reqs, accepts, strict=True):
        if _stale(req):
            continue
        g.add_committed(req, accepted)
        req.spec_verify_ct += 1
        g.add_drafts(req, accepted - 1)
        if accepted > 1:
            g.record_histogram(req, accepted - 1)
        g.count_block_cap(req)
    _publish(g, self, result, batch, accepts)
    return padded_runs(tokens, accepts, g.stride(self, result))


@mutant("verify-counts-tokens", G0_5_13, expect="stats-verify-count", origin="new")
def verify_counts_tokens(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Adds the tokens verified (a) to spec_verify_ct instead of one per verify step."""
    tokens, accepts = _tensors(result)
    for req, accepted in zip(batch.reqs, accepts, strict=True):
        if req.is_retracted:
            continue
        if req.finished():
            _settle_finished(g, req)
            continue
        _commit_live(g, req, accepted)
        req.spec_verify_ct += accepted
        g.add_drafts(req, accepted - 1)
        g.record_histogram(req, accepted - 1)
    _publish(g, self, result, batch, accepts)
    return padded_runs(tokens, accepts, g.stride(self, result))


@mutant("drafts-assigned", G0_5_15, expect="stats-accepted-drafts", origin="new")
def drafts_assigned(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Assigns the row's drafts to the per-request counter (=) instead of adding them (+=)."""
    tokens, accepts = _tensors(result)
    for req, accepted in zip(batch.reqs, accepts, strict=True):
        if _stale(req):
            continue
        g.add_committed(req, accepted)
        req.spec_verify_ct += 1
        g.set_drafts(req, accepted - 1)
        g.record_histogram(req, accepted - 1)
    _publish(g, self, result, batch, accepts)
    return padded_runs(tokens, accepts, g.stride(self, result))


@mutant("histogram-dropped", G0_5_12, expect="stats-histogram", origin="API generation 0.5.12")
def histogram_dropped(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """A 0.5.12 port that lost the histogram update: its spellings are from a version that
    keeps one, so it is held to it."""
    tokens, accepts = _tensors(result)
    for req, accepted in zip(batch.reqs, accepts, strict=True):
        if req.is_retracted:
            continue
        if req.finished():
            _settle_finished(g, req)
            continue
        _commit_live(g, req, accepted)
        req.spec_verify_ct += 1
        g.add_drafts(req, accepted - 1)
    _publish(g, self, result, batch, accepts)
    return padded_runs(tokens, accepts, g.stride(self, result))


@mutant(
    "drafts-minus-k-and-bonus",
    G0_5_20,
    expect="stats-accepted-drafts",
    origin="API generation 0.5.20",
)
def drafts_minus_k_and_bonus(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """A 0.5.20 port that subtracts both the bonus token and k (`a - 1 - k`), counting the
    bonus twice; k = num_non_draft_tokens_per_req already includes it."""
    tokens, accepts = _tensors(result)
    k = g.non_draft(result)
    for req, accepted in zip(batch.reqs, accepts, strict=True):
        if _stale(req):
            continue
        g.add_committed(req, accepted)
        req.spec_verify_ct += 1
        g.add_drafts(req, accepted - 1 - k)
        g.record_histogram(req, accepted - k)
    _publish(g, self, result, batch, accepts)
    return padded_runs(tokens, accepts, g.stride(self, result))


# =============================================================================================
# Mutants: the committed length of live rows (semantics §1.2, §2.9 invariant 1, §4.6, §4.23)
# =============================================================================================


@mutant(
    "honest-commit-under-preclaim",
    G0_5_11,
    expect="committed-live",
    origin="API generation 0.5.10 -> 0.5.11",
)
def honest_commit_under_preclaim(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """0.5.10 code left in a 0.5.11 scheduler: a live row adds a although the launch already
    pre-claimed one slot, so every live row over-commits by one."""
    tokens, accepts = _tensors(result)
    for req, accepted in zip(batch.reqs, accepts, strict=True):
        if req.is_retracted:
            continue
        if req.finished():
            g.add_committed(req, -1)
            continue
        g.add_committed(req, accepted)
        g.count_row(req, accepted - 1)
    _publish(g, self, result, batch, accepts)
    return padded_runs(tokens, accepts, g.stride(self, result))


@mutant(
    "preclaim-commit-under-honest",
    G0_5_15,
    expect="committed-live",
    origin="API generation 0.5.14 -> 0.5.15",
)
def preclaim_commit_under_honest(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """0.5.14 code left in a 0.5.15 scheduler, whose launch no longer pre-claims: a live row
    adds a - 1 and every live row under-commits by one."""
    tokens, accepts = _tensors(result)
    for req, accepted in zip(batch.reqs, accepts, strict=True):
        if _stale(req):
            continue
        g.add_committed(req, accepted - 1)
        g.count_row(req, accepted - 1)
    _publish(g, self, result, batch, accepts)
    return padded_runs(tokens, accepts, g.stride(self, result))


@mutant("kv-local-copy", G0_5_19, expect="committed-live", origin="API generation 0.5.19")
def kv_local_copy(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """A port to 0.5.19's `req.kv` that reads the committed length into a local, adds the run
    to the local and never writes it back."""
    tokens, accepts = _tensors(result)
    for req, accepted in zip(batch.reqs, accepts, strict=True):
        if _stale(req):
            continue
        committed = req.kv.kv_committed_len
        committed += accepted
        g.count_row(req, accepted - 1)
    _publish(g, self, result, batch, accepts)
    return padded_runs(tokens, accepts, g.stride(self, result))


@mutant(
    "commit-capped-at-max-new",
    G0_5_13,
    expect="committed-finished-frozen",
    origin="semantics §4.23",
)
def commit_capped_at_max_new(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Commits at most up to max_new_tokens ("no KV past the cap"), while the scheduler keeps
    the over-shoot tokens in output_ids: the committed length falls behind the output."""
    tokens, accepts = _tensors(result)
    for req, accepted in zip(batch.reqs, accepts, strict=True):
        if req.is_retracted:
            continue
        if req.finished():
            _settle_finished(g, req)
            continue
        room = req.sampling_params.max_new_tokens - len(req.output_ids)
        _commit_live(g, req, min(accepted, max(room, 1)))
        g.count_row(req, accepted - 1)
    _publish(g, self, result, batch, accepts)
    return padded_runs(tokens, accepts, g.stride(self, result))


@mutant(
    "preclaim-only-with-overlap",
    G0_5_13,
    expect="committed-live",
    origin="semantics §4.6",
)
def preclaim_only_with_overlap(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Assumes the pre-claim happens only on the overlap path and adds a, not a - 1, when
    overlap is off; from 0.5.13 the same resolver and launch also run without overlap."""
    tokens, accepts = _tensors(result)
    for req, accepted in zip(batch.reqs, accepts, strict=True):
        if req.is_retracted:
            continue
        if req.finished():
            _settle_finished(g, req)
            continue
        g.add_committed(req, accepted - 1 if batch.enable_overlap else accepted)
        g.count_row(req, accepted - 1)
    _publish(g, self, result, batch, accepts)
    return padded_runs(tokens, accepts, g.stride(self, result))


@mutant("tensor-commit", G0_5_15, expect="committed-live", origin="new")
def tensor_commit(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Adds accept_lens[i] straight from the tensor (no .tolist() or .item()), so the
    committed length becomes a 0-d tensor instead of an int."""
    tokens, accepts = _tensors(result)
    for i, (req, accepted) in enumerate(zip(batch.reqs, accepts, strict=True)):
        if _stale(req):
            continue
        g.add_committed(req, result.accept_lens[i])
        g.count_row(req, accepted - 1)
    _publish(g, self, result, batch, accepts)
    return padded_runs(tokens, accepts, g.stride(self, result))


# =============================================================================================
# Mutants: batch counters and the adaptive controller (semantics §2.8, §3.5, §4.12)
# =============================================================================================


@mutant("global-counts-stale", G0_5_11, expect="global-counters", origin="semantics §3.5, §4.12")
def global_counts_stale(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Writes the batch draft total over every row, stale ones included (SGLang's behaviour,
    wrong under the ideal rule)."""
    tokens, accepts = _tensors(result)
    _correct_rows(g, batch, accepts, 1)
    g.write_totals(result, sum(accepts) - len(accepts), [a - 1 for a in accepts])
    return padded_runs(tokens, accepts, g.stride(self, result))


@mutant(
    "ideal-total-in-sglang-mode",
    G0_5_19,
    expect="global-counters",
    global_counters="sglang",
    origin="semantics §4.12",
)
def ideal_total_in_sglang_mode(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Excludes stale rows from the batch total where SGLang-exact accounting (the mode it is
    judged in) counts every row: the metrics diverge from SGLang's."""
    tokens, accepts = _tensors(result)
    _correct_rows(g, batch, accepts, 1)
    live = [a - 1 for req, a in zip(batch.reqs, accepts, strict=True) if not _stale(req)]
    g.write_totals(result, sum(live), [a - 1 for a in accepts])
    g.feed_controller(self, [a - 1 for a in accepts])
    return padded_runs(tokens, accepts, g.stride(self, result))


@mutant("total-includes-bonus", G0_5_10, expect="global-counters", origin="new")
def total_includes_bonus(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Writes the sum of accept lengths over live rows as the draft total, forgetting to
    subtract one bonus token per row."""
    tokens, accepts = _tensors(result)
    _correct_rows(g, batch, accepts, 1)
    live = [a for req, a in zip(batch.reqs, accepts, strict=True) if not _stale(req)]
    g.write_totals(result, sum(live), [a - 1 for a in accepts])
    return padded_runs(tokens, accepts, g.stride(self, result))


@mutant(
    "controller-fed-stale-rows",
    G0_5_12,
    expect="global-counters",
    origin="semantics §3.5 (0.5.12+ controller feed)",
)
def controller_fed_stale_rows(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Feeds the adaptive controller every row's drafts, stale rows included, so a finished
    request's leftover verify sways the next stride choice."""
    tokens, accepts = _tensors(result)
    _correct_rows(g, batch, accepts, 1)
    live = [a - 1 for req, a in zip(batch.reqs, accepts, strict=True) if not _stale(req)]
    g.write_totals(result, sum(live), [a - 1 for a in accepts])
    g.feed_controller(self, [a - 1 for a in accepts])
    return padded_runs(tokens, accepts, g.stride(self, result))


@mutant("per-row-list-live-only", G0_5_13, expect="global-counters", origin="new")
def per_row_list_live_only(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Writes the per-row draft list for live rows only; consumers index it by batch row, so
    it must keep one entry per row."""
    tokens, accepts = _tensors(result)
    _correct_rows(g, batch, accepts, 1)
    live = [a - 1 for req, a in zip(batch.reqs, accepts, strict=True) if not _stale(req)]
    g.write_totals(result, sum(live), live)
    g.feed_controller(self, live)
    return padded_runs(tokens, accepts, g.stride(self, result))


@rewrite("controller-batch-size-all-rows", G0_5_13)
def controller_batch_size_all_rows(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Feeds the controller the live rows only, with batch_size=batch.batch_size(): the launched
    batch's size, stale rows included, which picks the controller's slot for that size (SGLang
    routes by it; it is no count of the samples)."""
    tokens, accepts = _tensors(result)
    _correct_rows(g, batch, accepts, 1)
    live = [a - 1 for req, a in zip(batch.reqs, accepts, strict=True) if not _stale(req)]
    g.write_totals(result, sum(live), [a - 1 for a in accepts])
    g.feed_controller(self, live, batch_size=batch.batch_size())
    return padded_runs(tokens, accepts, g.stride(self, result))


@mutant("controller-batch-size-live-rows", G0_5_13, expect="global-counters", origin="new")
def controller_batch_size_live_rows(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Feeds the controller the live rows only, as the stale-row fix should, but gives it
    batch_size=len(live): the samples of a batch launched with stale rows land in the slot of a
    smaller batch size, and that slot's step count drifts."""
    tokens, accepts = _tensors(result)
    _correct_rows(g, batch, accepts, 1)
    live = [a - 1 for req, a in zip(batch.reqs, accepts, strict=True) if not _stale(req)]
    g.write_totals(result, sum(live), [a - 1 for a in accepts])
    g.feed_controller(self, live, batch_size=len(live))
    return padded_runs(tokens, accepts, g.stride(self, result))


@mutant(
    "block-total-from-accept-lens",
    G0_5_16,
    expect="global-counters",
    origin="API generation 0.5.16",
)
def block_total_from_accept_lens(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """A 0.5.16 port that falls back to accept_lens when the result has no block-accept
    lengths, so an EAGLE batch reports block-accept tokens it never had."""
    tokens, accepts = _tensors(result)
    _correct_rows(g, batch, accepts, 1)
    _publish(g, self, result, batch, accepts)
    block = result.block_accept_lens
    result.num_block_accept_tokens = int(sum(accepts if block is None else block))
    return padded_runs(tokens, accepts, g.stride(self, result))


# =============================================================================================
# Mutants: algorithms and block/cap lengths (issue 9: UNO, k, DFLASH, 0.5.16+ statistics)
# =============================================================================================


def _live_rows_0_5_20(g: Generation, result: Any, batch: Any, accepts: list[int], k: int) -> None:
    for req, accepted in zip(batch.reqs, accepts, strict=True):
        if _stale(req):
            continue
        g.add_committed(req, accepted)
        g.count_row(req, accepted - k)


@mutant("block-cap-on-stale-rows", G0_5_16, expect="stats-block-cap", origin="semantics §1.4")
def block_cap_on_stale_rows(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Adds every row's block-accept and cap lengths to its request, stale rows included."""
    tokens, accepts = _tensors(result)
    for row, (req, accepted) in enumerate(zip(batch.reqs, accepts, strict=True)):
        if _stale(req):
            if result.block_accept_lens is not None:
                req.spec_num_block_accept_tokens += int(result.block_accept_lens[row])
            if result.cap_lens is not None:
                req.spec_num_cap_tokens += int(result.cap_lens[row])
            continue
        g.add_committed(req, accepted)
        g.count_row(req, accepted - 1)
    _publish(g, self, result, batch, accepts)
    return padded_runs(tokens, accepts, g.stride(self, result))


@mutant(
    "block-cap-totals-count-stale-rows",
    G0_5_20,
    expect="global-counters",
    origin="semantics §1.4",
)
def block_cap_totals_count_stale_rows(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Correct per request, but the result's block/cap totals sum every row, stale ones too."""
    tokens, accepts = _tensors(result)
    k = g.non_draft(result)
    _live_rows_0_5_20(g, result, batch, accepts, k)
    _publish(g, self, result, batch, accepts)
    if result.block_accept_lens is not None:
        result.num_block_accept_tokens = int(sum(result.block_accept_lens.tolist()))
    if result.cap_lens is not None:
        result.num_cap_tokens = int(sum(result.cap_lens.tolist()))
    return padded_runs(tokens, accepts, g.stride(self, result))


@mutant("uno-width-from-draft-tokens", G0_5_20, expect="runs-aligned", origin="semantics §1.4")
def uno_width_from_draft_tokens(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Reads k from the result but cuts rows at speculative_num_draft_tokens, which is one short
    of an UNO row (F, not F + 1)."""
    tokens, accepts = _tensors(result)
    k = g.non_draft(result)
    _live_rows_0_5_20(g, result, batch, accepts, k)
    _publish(g, self, result, batch, accepts)
    return padded_runs(tokens, accepts, int(result.speculative_num_draft_tokens))


@mutant("k-hard-coded-one", G0_5_20, expect="stats-accepted-drafts", origin="semantics §1.4")
def k_hard_coded_one(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Reads the output stride but counts a - 1 drafts, as if every algorithm had one non-draft
    token (UNO has two)."""
    tokens, accepts = _tensors(result)
    _ = result.num_non_draft_tokens_per_req  # read, then ignored
    _live_rows_0_5_20(g, result, batch, accepts, 1)
    _publish(g, self, result, batch, accepts)
    return padded_runs(tokens, accepts, g.stride(self, result))


def _dflash_aware_0_5_14(
    g: Generation, self: Any, result: Any, batch: Any, *, dflash_preclaims: bool
) -> Any:
    tokens, accepts = _tensors(result)
    preclaimed = dflash_preclaims or not batch.spec_algorithm.is_dflash()
    runs = padded_runs(tokens, accepts, g.stride(self, result))
    for row, (req, accepted) in enumerate(zip(batch.reqs, accepts, strict=True)):
        if req.is_retracted:
            continue
        if req.finished():
            if preclaimed:
                g.add_committed(req, -1)
            continue
        if req.grammar is not None:  # 0.5.14 truncates a grammar row's run
            runs[row] = _grammar_keep(g, self, req, runs[row])
        kept = len(runs[row])
        g.add_committed(req, kept - 1 if preclaimed else kept)
        g.count_row(req, accepted - 1)
    _publish(g, self, result, batch, accepts)
    return runs


@mutant("dflash-preclaim", G0_5_13, expect="committed-live", origin="semantics §1.2 (0.5.14)")
def dflash_preclaim(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """0.5.14 shape, but treats DFLASH like EAGLE: commits a - 1 and gives a finished row's slot
    back, though a DFLASH launch never pre-claimed one."""
    return _dflash_aware_0_5_14(g, self, result, batch, dflash_preclaims=True)


# =============================================================================================
# Mutants: grammar requests (semantics §1.4, §4.10)
# =============================================================================================


@mutant(
    "grammar-over-commit", G0_5_20, expect="committed-finished-frozen", origin="semantics §4.10"
)
def grammar_over_commit(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Returns the grammar-truncated run but commits the untruncated one: the tokens past the
    grammar's end (or its refused token) keep KV the output never shows."""
    return _grammar_rows(g, self, result, batch, commit_full=True)


@mutant("grammar-untruncated-runs", G0_5_20, expect="runs-aligned", origin="semantics §4.10")
def grammar_untruncated_runs(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Commits what the grammar retained but returns the untruncated run, so the output shows
    tokens past the grammar's end."""
    return _grammar_rows(g, self, result, batch, return_full=True)


@mutant("grammar-advanced-twice", G0_5_20, expect="grammar-advanced-once", origin="semantics §4.10")
def grammar_advanced_twice(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Peeks at a live grammar row by offering its first token, then offers the whole run: the
    grammar is advanced twice over that token."""
    return _grammar_rows(g, self, result, batch, advance_twice=True)


@mutant("grammar-stale-rows", G0_5_20, expect="grammar-stale-untouched", origin="semantics §4.10")
def grammar_stale_rows(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Offers a finished request's stale row to its grammar too."""
    return _grammar_rows(g, self, result, batch, advance_stale=True)


@mutant(
    "grammar-refusal-not-aborted",
    G0_5_15,
    expect="committed-finished-frozen",
    origin="semantics §2.6",
    shrink_note=(
        "the search usually meets this bug as runs-aligned (a second request decoding beside "
        "the request that should have been aborted); the shrinker keeps the invariant it found, "
        "and the shortest runs-aligned witness is one event longer than the shortest "
        "counterexample overall, which breaks committed-finished-frozen"
    ),
)
def grammar_refusal_not_aborted(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Cuts the run before a token the grammar refuses but never aborts the request (the error
    is only logged), so it keeps decoding: its next row is applied though it should be stale."""
    return _grammar_rows(g, self, result, batch, abort=False)


# =============================================================================================
# Mutants: the allocated length (issue 10; semantics §2.3, §5)
# =============================================================================================


@mutant(
    "alloc-inflated-live",
    G0_5_20,
    expect="alloc-untouched-by-resolver",
    origin="issue 10",
)
def alloc_inflated_live(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Correct accounting, but every live row adds 1000 to `req.kv.kv_allocated_len`, as if
    the resolver reserved for the next verify itself: the pool thinks the request holds KV it
    was never given."""
    tokens, accepts = _tensors(result)
    k = g.non_draft(result)
    _correct_rows(g, batch, accepts, k)
    for req in batch.reqs:
        if not _stale(req):
            req.kv.kv_allocated_len += 1000
    _publish(g, self, result, batch, accepts)
    return padded_runs(tokens, accepts, g.stride(self, result))


@mutant(
    "alloc-zeroed-stale",
    G0_5_13,
    expect="alloc-untouched-by-resolver",
    origin="issue 10",
)
def alloc_zeroed_stale(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Correct accounting, but a stale row's `req.kv_allocated_len` is zeroed "to be safe",
    though before 0.5.16 release leaves it in place for the release bookkeeping."""
    tokens, accepts = _tensors(result)
    _correct_rows(g, batch, accepts, 1)
    for req in batch.reqs:
        if _stale(req):
            req.kv_allocated_len = 0
    _publish(g, self, result, batch, accepts)
    return padded_runs(tokens, accepts, g.stride(self, result))


def _correct(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """A correct resolver of generation `g` (the allocation mutants' bug is elsewhere)."""
    tokens, accepts = _tensors(result)
    k = g.non_draft(result)
    _correct_rows(g, batch, accepts, k)
    _publish(g, self, result, batch, accepts)
    return padded_runs(tokens, accepts, g.stride(self, result))


# =============================================================================================
# Mutants: the scheduler's allocation path (issue 10; semantics §4.16-§4.31, §5.4). The resolver
# is correct; the bug is in the allocation path the entry brings
# (`kvcheck.families.sglang.mutants.allocation`).
# =============================================================================================


@mutant(
    "alloc-half-reserve",
    G0_5_13,
    expect="alloc-covers-reserve",
    origin="semantics §2.3",
    allocation=allocation.HalfReserve,
)
def alloc_half_reserve(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """The decode reserve is A, not 2A: the overlap lag (C one verify behind) is not
    covered."""
    return _correct(g, self, result, batch)


@mutant(
    "alloc-no-clamp",
    G0_5_13,
    expect="alloc-never-shrinks",
    adaptive=True,
    origin="semantics §4.16, sglang#23336/#24055",
    allocation=allocation.NoClamp,
)
def alloc_no_clamp(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """The sizing has no `max(Al, .)` clamp: an adaptive down-switch shrinks the allocation
    and strands the slots past it."""
    return _correct(g, self, result, batch)


@mutant(
    "alloc-over-reserve",
    G0_5_13,
    expect="alloc-expected",
    origin="semantics §2.9 invariant 3 (upper bound)",
    allocation=allocation.OverReserve,
)
def alloc_over_reserve(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """The decode reserve is 3A: more than any release allocates."""
    return _correct(g, self, result, batch)


@mutant(
    "release-forgets-overallocated",
    G0_5_13,
    expect="kv-released-once",
    origin="sglang#13741 -> #13826",
    allocation=allocation.ForgetsOverallocated,
)
def release_forgets_overallocated(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Release frees the committed range only; the over-allocated tail stays in the row."""
    return _correct(g, self, result, batch)


@mutant(
    "retract-keeps-kv",
    G0_5_13,
    expect="kv-retracted-empty",
    origin="sglang#11970 -> #11981",
    allocation=allocation.RetractKeepsRow,
)
def retract_keeps_kv(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Retraction resets the lengths but never releases the request's row and pages."""
    return _correct(g, self, result, batch)


@mutant(
    "estimate-ignores-allocated",
    G0_5_13,
    expect="alloc-estimate-matches",
    origin="sglang#14972, #19881",
    allocation=allocation.EstimateIgnoresAllocated,
)
def estimate_ignores_allocated(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """The memory check counts every request's whole target instead of what it still lacks:
    estimate and allocation disagree."""
    return _correct(g, self, result, batch)


@mutant(
    "release-abort-at-build",
    G0_5_13,
    expect="kv-no-use-after-free",
    origin="semantics §4.25, sglang#18744",
    allocation=allocation.ReleasesAbortAtBuild,
)
def release_abort_at_build(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """An aborted request's KV is freed at the next build, while the launch in flight still
    reads its row for a live row."""
    return _correct(g, self, result, batch)


@mutant(
    "pool-shares-pages",
    G0_5_13,
    expect="kv-no-double-owner",
    origin="sglang#27731",
    allocation=allocation.SharingPoolPath,
)
def pool_shares_pages(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """The allocator hands out pages without taking them off the free list: a page gets two
    owners while the pool equation stays balanced."""
    return _correct(g, self, result, batch)


@mutant(
    "pool-loses-freed-pages",
    G0_5_13,
    expect="kv-pool-conserved",
    origin="issue 10 (pool conservation)",
    allocation=allocation.LeakyPoolPath,
)
def pool_loses_freed_pages(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """The allocator forgets to put freed pages back on the free list."""
    return _correct(g, self, result, batch)


# =============================================================================================
# Correct rewrites: different code, the same behaviour. Each must pass.
# =============================================================================================


@rewrite("loop-0.5.10", G0_5_10, adaptive=False)
def loop_0_5_10(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """A 0.5.10-style loop with the stale-row fix back-ported: honest convention, the worker's
    stride (0.5.10 has no adaptive switching under overlap), old counter names."""
    tokens = result.next_token_ids.tolist()
    accepts = result.accept_lens.tolist()
    stride = self.draft_worker.speculative_num_draft_tokens
    runs: list[list[int]] = []
    total = 0
    for i, req in enumerate(batch.reqs):
        accepted = accepts[i]
        runs.append(tokens[i * stride : i * stride + accepted])
        if req.is_retracted or req.finished():
            continue
        req.kv_committed_len += accepted
        req.spec_verify_ct += 1
        req.spec_accepted_tokens += accepted - 1
        req.update_spec_acceptance_histogram(accepted - 1)
        total += accepted - 1
    result.num_accepted_tokens = total
    result.accept_length_per_req_cpu = [a - 1 for a in accepts]
    return runs


@rewrite("two-pass-0.5.11", G0_5_11, adaptive=False)
def two_pass_0_5_11(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Classifies every row first (live, finished, retracted), then applies each class; slices
    through a 2-D view of next_token_ids."""
    width = g.stride(self, result)
    rows = result.next_token_ids.view(len(batch.reqs), width)
    accepts = [int(a) for a in result.accept_lens]
    kinds = [
        "retracted" if req.is_retracted else "finished" if req.finished() else "live"
        for req in batch.reqs
    ]
    for req, kind, accepted in zip(batch.reqs, kinds, accepts, strict=True):
        if kind == "finished":
            g.add_committed(req, -1)
        elif kind == "live":
            g.add_committed(req, accepted - 1)
            g.count_row(req, accepted - 1)
    drafts = [a - 1 for a in accepts]
    live_drafts = [d for d, kind in zip(drafts, kinds, strict=True) if kind == "live"]
    g.write_totals(result, sum(live_drafts), drafts)
    return [rows[i, :a].tolist() for i, a in enumerate(accepts)]


@rewrite("vectorised-0.5.12", G0_5_12)
def vectorised_0_5_12(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Computes runs, masks and totals with tensor operations; only the per-request writes
    loop in Python."""
    import torch

    rows = len(batch.reqs)
    stride = int(result.speculative_num_draft_tokens)
    accept = result.accept_lens.to(torch.int64)
    grid = result.next_token_ids.reshape(rows, stride)
    keep = torch.arange(stride).unsqueeze(0) < accept.unsqueeze(1)
    live = torch.tensor([not _stale(req) for req in batch.reqs], dtype=torch.bool)
    finished = torch.tensor(
        [req.finished() and not req.is_retracted for req in batch.reqs], dtype=torch.bool
    )
    drafts = accept - 1
    for i in torch.nonzero(live).flatten().tolist():
        req = batch.reqs[i]
        g.add_committed(req, int(drafts[i]))
        g.count_row(req, int(drafts[i]))
    for i in torch.nonzero(finished).flatten().tolist():
        g.add_committed(batch.reqs[i], -1)
    g.write_totals(result, int(drafts[live].sum()), drafts.tolist())
    g.feed_controller(self, drafts[live].tolist())
    return [grid[i][keep[i]].tolist() for i in range(rows)]


@rewrite("deferred-0.5.13", G0_5_13)
def deferred_0_5_13(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Accumulates each request's committed-length delta and statistics in dicts keyed by
    request, then applies them after the loop."""
    tokens, accepts = _tensors(result)
    stride = g.stride(self, result)
    delta: dict[int, int] = {}
    stats: dict[int, list[int]] = {}
    by_id = {id(req): req for req in batch.reqs}
    runs = []
    for i, (req, accepted) in enumerate(zip(batch.reqs, accepts, strict=True)):
        runs.append(tokens[stride * i : stride * i + accepted])
        if req.is_retracted:
            continue
        if req.finished():
            delta[id(req)] = delta.get(id(req), 0) - 1
            continue
        delta[id(req)] = delta.get(id(req), 0) + accepted - 1
        stats.setdefault(id(req), []).append(accepted - 1)
    for key, change in delta.items():
        g.add_committed(by_id[key], change)
    fed: list[int] = []
    for key, rows in stats.items():
        for drafts in rows:
            g.count_row(by_id[key], drafts)
            fed.append(drafts)
    g.write_totals(result, sum(fed), [a - 1 for a in accepts])
    g.feed_controller(self, fed)
    return runs


@rewrite("shape-stride-0.5.19", G0_5_19)
def shape_stride_0_5_19(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Derives the row width from the tensor shape (elements / rows), walks the rows from the
    last to the first, and fills the runs by index."""
    rows = len(batch.reqs)
    stride = result.next_token_ids.numel() // rows
    tokens, accepts = _tensors(result)
    runs: list[list[int]] = [[] for _ in range(rows)]
    live_drafts = []
    for i in reversed(range(rows)):
        req, accepted = batch.reqs[i], accepts[i]
        runs[i] = tokens[i * stride : i * stride + accepted]
        if req.finished() or req.is_retracted:
            continue
        req.kv.kv_committed_len = req.kv.kv_committed_len + accepted
        g.count_row(req, accepted - 1)
        live_drafts.append(accepted - 1)
    live_drafts.reverse()
    g.write_totals(result, sum(live_drafts), [a - 1 for a in accepts])
    g.feed_controller(self, live_drafts)
    return runs


@rewrite("functional-0.5.20", G0_5_20)
def functional_0_5_20(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """0.5.20 spellings (output stride with its fallback, k from the result), written as
    comprehensions and a filter."""
    stride = g.stride(self, result)
    k = g.non_draft(result)
    tokens, accepts = _tensors(result)
    rows = list(zip(batch.reqs, accepts, strict=True))
    applied = [(req, a) for req, a in rows if not (req.is_retracted or req.finished())]
    for req, a in applied:
        req.kv.kv_committed_len += a
        g.count_row(req, a - k)
    g.write_totals(result, sum(a - k for _, a in applied), [a - k for a in accepts])
    g.feed_controller(self, [a - k for _, a in applied])
    return [tokens[i * stride :][:a] for i, a in enumerate(accepts)]


@rewrite("sglang-counters-0.5.13", G0_5_13, global_counters="sglang")
def sglang_counters_0_5_13(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Per-request accounting with the stale-row fix, batch counters exactly as SGLang keeps
    them (every row, stale ones included); judged in SGLang-exact mode."""
    tokens, accepts = _tensors(result)
    _correct_rows(g, batch, accepts, 1)
    drafts = [a - 1 for a in accepts]
    g.write_totals(result, sum(drafts), drafts)
    g.feed_controller(self, drafts, batch_size=batch.batch_size())
    return padded_runs(tokens, accepts, g.stride(self, result))


@rewrite("dflash-aware-0.5.14", G0_5_13)
def dflash_aware_0_5_14(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """0.5.14's pre-claim resolver with its DFLASH branch: a DFLASH row commits its whole run and
    a finished DFLASH row gives nothing back (its launch never pre-claimed)."""
    return _dflash_aware_0_5_14(g, self, result, batch, dflash_preclaims=False)


@rewrite("grammar-0.5.20", G0_5_20)
def grammar_0_5_20(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Grammar-aware in today's API: a live grammar row commits and returns what its grammar
    retained (a refusal sets `to_finish`); statistics use the raw accept length."""
    return _grammar_rows(g, self, result, batch)


@rewrite("grammar-abort-request-0.5.15", G0_5_15)
def grammar_abort_request_0_5_15(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """0.5.15's grammar path: a refusal aborts through `self.abort_request(AbortReq(rid=...))`."""
    return _grammar_rows(g, self, result, batch)


@rewrite("early-exit-0.5.16", G0_5_16)
def early_exit_0_5_16(g: Generation, self: Any, result: Any, batch: Any) -> Any:
    """Honest convention with a while loop and the stale test spelled as one early `continue`
    on a combined predicate; the run is sliced before anything else."""
    tokens, accepts = _tensors(result)
    stride = g.stride(self, result)
    runs = []
    fed = []
    i = 0
    while i < len(accepts):
        req, accepted = batch.reqs[i], accepts[i]
        start = i * stride
        runs.append(tokens[start : start + accepted])
        i += 1
        if any((req.is_retracted, req.finished())):
            continue
        g.add_committed(req, accepted)
        g.count_row(req, accepted - 1)
        fed.append(accepted - 1)
    g.write_totals(result, sum(fed), [a - 1 for a in accepts])
    g.feed_controller(self, fed)
    return runs
