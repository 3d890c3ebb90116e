"""Built-in resolvers, written for kvcheck from the semantics (not copied from SGLang).

The first three use SGLang's resolver signature `(self, result, batch) -> list[list[int]]` and the
0.5.11 attribute spelling (`spec_accepted_drafts`, `update_spec_acceptance_histogram`,
`result.num_accepted_drafts`), with the pre-claim convention: the decode launch already bumped
`kv_committed_len` by one, so a live row adds `accept_len - 1`.

- `seed-prefix`: the resolver before the stale-row fix. Every row, stale or not, gets its KV and
  statistics updated; the stride comes from the draft worker (the scheduler's current stride).
- `seed-fixed`: the fix from the seed write-up. Retracted rows are skipped, finished rows only
  give back the pre-claimed slot, statistics are updated for live rows only. It still reads the
  stride from the worker and still counts every row in the batch-global counter.
- `reference`: kvcheck's correct resolver: stride recorded at launch (from the result), stale
  rows excluded from the global counter too.
- `reference-v2`: kvcheck's correct resolver in today's API (0.5.20+ spellings, honest committed
  length, k and the output stride from the result, block/cap lengths), so the search draws every
  algorithm and block/cap lengths for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

Resolver = Callable[[Any, Any, Any], list[list[int]]]


def padded_runs(next_token_ids: list[int], accept_lens: list[int], stride: int) -> list[list[int]]:
    """Row i's accepted run is its first accept_len tokens in a row of width `stride`."""
    return [
        next_token_ids[row * stride : row * stride + accepted]
        for row, accepted in enumerate(accept_lens)
    ]


def commit_live_row(req: Any, accepted: int) -> None:
    """A live row under pre-claim: the launch already claimed one slot for the bonus token."""
    req.kv_committed_len += accepted - 1
    req.spec_verify_ct += 1
    req.spec_accepted_drafts += accepted - 1
    req.update_spec_acceptance_histogram(accepted - 1)


def seed_prefix(self: Any, result: Any, batch: Any) -> list[list[int]]:
    """`builtin:seed-prefix`: the resolver before the stale-row fix (docs/semantics.md §3.1-§3.3).

    Every row, stale or not, gets its KV and statistics updated, so a finished request's stale row
    moves C past its final value and a retracted one's lands on the zeroed C; the stride is the
    worker's current one and the draft total counts every row.
    """
    next_token_ids = result.next_token_ids.tolist()
    accept_lens = result.accept_lens.tolist()
    result.num_accepted_drafts = sum(accept_lens) - len(batch.reqs)
    result.num_accepted_drafts_per_req_cpu = [a - 1 for a in accept_lens]
    stride = self.draft_worker.speculative_num_draft_tokens
    for req, accepted in zip(batch.reqs, accept_lens, strict=True):
        commit_live_row(req, accepted)
    return padded_runs(next_token_ids, accept_lens, stride)


def seed_fixed(self: Any, result: Any, batch: Any) -> list[list[int]]:
    """`builtin:seed-fixed`: the seed write-up's stale-row fix, and what it still gets wrong.

    Retracted rows are skipped and finished rows only give the pre-claimed slot back, so C and the
    per-request statistics hold; but the stride still comes from the worker (wrong after an
    adaptive switch, §3.4) and the draft total still counts stale rows (§3.5).
    """
    next_token_ids = result.next_token_ids.tolist()
    accept_lens = result.accept_lens.tolist()
    result.num_accepted_drafts = sum(accept_lens) - len(batch.reqs)
    result.num_accepted_drafts_per_req_cpu = [a - 1 for a in accept_lens]
    stride = self.draft_worker.speculative_num_draft_tokens
    for req, accepted in zip(batch.reqs, accept_lens, strict=True):
        if req.is_retracted:
            continue  # reset_for_retract already zeroed its KV
        if req.finished():
            req.kv_committed_len -= 1  # give back the slot the launch pre-claimed
            continue
        commit_live_row(req, accepted)
    return padded_runs(next_token_ids, accept_lens, stride)


def reference(self: Any, result: Any, batch: Any) -> list[list[int]]:
    """`builtin:reference`: kvcheck's correct pre-claim resolver.

    Rows are cut with the stride recorded at launch (read from the result), stale rows neither
    commit nor count, and the draft total covers live rows only while the per-row list keeps every
    row.
    """
    next_token_ids = result.next_token_ids.tolist()
    accept_lens = result.accept_lens.tolist()
    stride = result.speculative_num_draft_tokens  # the stride this batch was launched with
    per_request: list[int] = []
    live_drafts = 0
    for req, accepted in zip(batch.reqs, accept_lens, strict=True):
        per_request.append(accepted - 1)
        if req.is_retracted:
            continue
        if req.finished():
            req.kv_committed_len -= 1
            continue
        commit_live_row(req, accepted)
        live_drafts += accepted - 1
    result.num_accepted_drafts = live_drafts
    result.num_accepted_drafts_per_req_cpu = per_request
    return padded_runs(next_token_ids, accept_lens, stride)


def output_stride(result: Any) -> int:
    """The row width of a result: UNO's output stride when set, else the draft-token count
    recorded at launch (0.5.20+)."""
    stride = result.speculative_output_stride
    return int(stride) if stride is not None else int(result.speculative_num_draft_tokens)


def reference_v2(self: Any, result: Any, batch: Any) -> list[list[int]]:
    """`builtin:reference-v2`: kvcheck's correct resolver in today's API (0.5.20+ spellings,
    honest committed length).

    A live row commits its whole run (a grammar row: what its grammar retained, advanced once
    per result through `self.advance_grammar_fsm`), counts `accept_len - k` drafts (k from the
    result: 2 for UNO) and its block/cap lengths when the result carries them; stale rows change
    nothing and count nowhere: the draft total, the controller's feed and the block/cap totals
    cover live rows only, while the per-row draft list keeps every row.
    """
    self.advance_grammar_fsm(result, batch)
    next_token_ids = result.next_token_ids.tolist()
    accept_lens = result.accept_lens.tolist()
    stride = output_stride(result)
    k = result.num_non_draft_tokens_per_req
    blocks = result.block_accept_lens.tolist() if result.block_accept_lens is not None else None
    caps = result.cap_lens.tolist() if result.cap_lens is not None else None
    per_row = [accepted - k for accepted in accept_lens]
    runs = padded_runs(next_token_ids, accept_lens, stride)
    live: list[int] = []
    for row, req in enumerate(batch.reqs):
        if req.is_retracted or req.finished():
            continue
        live.append(row)
        if req.grammar is not None:
            runs[row] = list(result.grammar_retained_tokens[row])
        req.kv.kv_committed_len += len(runs[row])
        req.spec_verify_ct += 1
        req.spec_num_correct_drafts += per_row[row]
        req.update_spec_correct_drafts_histogram(per_row[row])
        if blocks is not None:
            req.spec_num_block_accept_tokens += blocks[row]
        if caps is not None:
            req.spec_num_cap_tokens += caps[row]
            req.update_spec_cap_lens_histogram(caps[row])
    result.num_correct_drafts_per_req_cpu = per_row
    result.num_correct_drafts = sum(per_row[row] for row in live)
    result.num_block_accept_tokens = sum(blocks[row] for row in live) if blocks else 0
    result.num_cap_tokens = sum(caps[row] for row in live) if caps else 0
    # batch_size is the launched batch's size, stale rows included: it routes the samples to the
    # controller's slot for that size, the one the launch read its step count from.
    self.model_worker.on_verify_complete_cpu(
        [per_row[row] for row in live], batch_size=len(batch.reqs)
    )
    return runs


BUILTINS: Final[dict[str, Resolver]] = {
    "seed-prefix": seed_prefix,
    "seed-fixed": seed_fixed,
    "reference": reference,
    "reference-v2": reference_v2,
}
