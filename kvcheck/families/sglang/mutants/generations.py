"""SGLang resolver API generations, as the mutant corpus speaks them.

A `Generation` names what one range of SGLang releases calls things (docs/semantics.md §1.1): the
per-request draft counter, the histogram method, the result counters, where the stride comes
from, whether the committed length lives on `req` or on `req.kv`, how the adaptive controller is
fed, and which committed-length convention the scheduler of those releases follows (§1.2).

Every mutant and rewrite in `kvcheck.families.sglang.mutants.corpus` is written once against these
helpers and
bound to one generation, so the same bug can be planted in code of another generation by binding
it again, and a new SGLang generation is one more `Generation` here (plus, if it introduces a
spelling kvcheck's fakes do not model yet, that spelling in `kvcheck.families.sglang.spellings`).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any, Final, Literal

import attrs

from kvcheck.families.sglang.fakes import FinishAbort
from kvcheck.families.sglang.names import AbortRequest
from kvcheck.families.sglang.scenario import Convention

StrideSource = Literal["worker", "result", "output-stride"]


@attrs.define
class ResolverCall:
    """The result and batch of the resolver call in progress, and the rows it counted: what
    `Generation.count_row` and `write_totals` need to handle block/cap lengths (0.5.16+) without
    every corpus function passing row indices."""

    result: Any
    batch: Any
    counted: list[int] = attrs.field(factory=list)


_CALL: contextvars.ContextVar[ResolverCall] = contextvars.ContextVar("kvcheck_corpus_call")


@contextlib.contextmanager
def resolver_call(result: Any, batch: Any) -> Iterator[ResolverCall]:
    """Mark a corpus resolver's call on `result` and `batch` (`registry.bind` does)."""
    token = _CALL.set(ResolverCall(result, batch))
    try:
        yield _CALL.get()
    finally:
        _CALL.reset(token)


ControllerCall = Literal["none", "per-req", "batch-size"]


@attrs.frozen
class Generation:
    """How one range of SGLang releases spells the resolver's API, for the mutant corpus.

    Corpus functions read and write only through these helpers, so a bug written once can be bound
    to any generation. `convention` is what those releases' decode launch does to C (§1.2).
    """

    name: str  # short id used in entry names and tables, e.g. "0.5.12"
    versions: str  # the SGLang releases whose resolvers spell things this way
    convention: Convention  # what those releases' decode launch does to the committed length
    draft_counter: str  # per-request accepted-draft counter on `req`
    histogram_method: str  # per-request histogram update method on `req`
    result_total: str  # batch draft total written on `result`
    result_per_row: str  # per-row draft list written on `result`
    stride_source: StrideSource
    controller: ControllerCall
    kv_on_req_kv: bool  # committed length at req.kv.kv_committed_len (0.5.19+)
    k_from_result: bool  # non-draft tokens per row read from the result (0.5.20+)
    block_cap: bool = False  # writes the block-accept and cap totals on the result (0.5.16+)
    # How a grammar refusal aborts the request (0.5.14+): `self.abort_request(AbortReq(rid=...))`
    # up to 0.5.15, `req.to_finish = FINISH_ABORT(...)` from 0.5.16.
    grammar_abort: Literal["abort-request", "to-finish"] = "to-finish"

    # -- what a resolver of this generation reads and writes ---------------------------------

    def stride(self, scheduler: Any, result: Any) -> int:
        """The row width as this generation's resolver reads it."""
        if self.stride_source == "worker":
            return int(scheduler.draft_worker.speculative_num_draft_tokens)
        if self.stride_source == "output-stride":
            stride = result.speculative_output_stride
            if stride is None:
                stride = result.speculative_num_draft_tokens
            if stride is None or stride < 1:
                raise ValueError(f"invalid speculative output stride {stride!r}")
            return int(stride)
        return int(result.speculative_num_draft_tokens)

    def non_draft(self, result: Any) -> int:
        """k: tokens per row that are not drafts (the bonus token; UNO adds one)."""
        return int(result.num_non_draft_tokens_per_req) if self.k_from_result else 1

    def committed(self, req: Any) -> Any:
        """The committed KV length C, from `req` or `req.kv` as this generation keeps it."""
        return req.kv.kv_committed_len if self.kv_on_req_kv else req.kv_committed_len

    def set_committed(self, req: Any, value: Any) -> None:
        """Assign C where this generation keeps it."""
        if self.kv_on_req_kv:
            req.kv.kv_committed_len = value
        else:
            req.kv_committed_len = value

    def add_committed(self, req: Any, delta: Any) -> None:
        """Add `delta` to C where this generation keeps it (a commit, or a give-back with -1)."""
        self.set_committed(req, self.committed(req) + delta)

    def drafts(self, req: Any) -> Any:
        """The per-request accepted-draft counter, under this generation's name."""
        return getattr(req, self.draft_counter)

    def add_drafts(self, req: Any, drafts: Any) -> None:
        """Add `drafts` to the per-request accepted-draft counter."""
        setattr(req, self.draft_counter, getattr(req, self.draft_counter) + drafts)

    def set_drafts(self, req: Any, drafts: Any) -> None:
        """Overwrite the per-request draft counter (reset, or `=` for `+=`: both are bugs)."""
        setattr(req, self.draft_counter, drafts)

    def record_histogram(self, req: Any, bucket: int) -> None:
        """Count one applied row in bucket `bucket` (a - k) of this generation's histogram."""
        getattr(req, self.histogram_method)(bucket)

    def count_row(self, req: Any, drafts: int) -> None:
        """The per-request statistics of one applied row: verify count, drafts, histogram, and
        from 0.5.16 the row's block-accept and cap lengths when the result carries them."""
        req.spec_verify_ct += 1
        self.add_drafts(req, drafts)
        self.record_histogram(req, drafts)
        self.count_block_cap(req)

    def count_block_cap(self, req: Any) -> None:
        """From 0.5.16: an applied row's block-accept and cap lengths, when the result carries
        them (the row is found by the request in the call's batch)."""
        if not self.block_cap:
            return
        call = _CALL.get()
        row = next(i for i, r in enumerate(call.batch.reqs) if r is req)
        call.counted.append(row)
        blocks, caps = call.result.block_accept_lens, call.result.cap_lens
        if blocks is not None:
            req.spec_num_block_accept_tokens += int(blocks[row])
        if caps is not None:
            req.spec_num_cap_tokens += int(caps[row])
            req.update_spec_cap_lens_histogram(int(caps[row]))

    def write_totals(self, result: Any, total: Any, per_row: Any) -> None:
        """Write the batch draft total and per-row draft list on the result, by this generation's
        names; 0.5.16+ also writes the block/cap totals over the rows it counted (`count_row`
        in this call; 0 when the result carries no lengths).
        """
        setattr(result, self.result_total, total)
        setattr(result, self.result_per_row, per_row)
        if self.block_cap:
            rows = _CALL.get().counted
            block, cap = result.block_accept_lens, result.cap_lens
            result.num_block_accept_tokens = (
                0 if block is None else sum(int(block[i]) for i in rows)
            )
            result.num_cap_tokens = 0 if cap is None else sum(int(cap[i]) for i in rows)

    def feed_controller(self, scheduler: Any, per_row: list[int], batch_size: Any = None) -> None:
        """Feed the adaptive controller (0.5.12+); `batch_size` defaults to the launched batch's
        row count, stale rows included, as every release from 0.5.13 passes it (a routing key
        that picks the controller's slot, not a count of the samples)."""
        if self.controller == "per-req":
            scheduler.model_worker.on_verify_complete_cpu(per_row)
        elif self.controller == "batch-size":
            size = len(_CALL.get().batch.reqs) if batch_size is None else batch_size
            scheduler.model_worker.on_verify_complete_cpu(per_row, batch_size=size)

    def abort_for_grammar(self, scheduler: Any, req: Any) -> None:
        """Abort `req` after its grammar refused a token, the way this generation does."""
        if self.grammar_abort == "abort-request":
            scheduler.abort_request(AbortRequest(rid=req.rid))
        else:
            req.to_finish = FinishAbort("grammar refused a token")

    @property
    def feeds_controller(self) -> bool:
        """Whether this generation's resolver feeds the adaptive controller (0.5.12+)."""
        return self.controller != "none"


G0_5_10: Final = Generation(
    name="0.5.10",
    versions="0.5.9-0.5.10",
    convention="honest",
    stride_source="worker",
    controller="none",
    kv_on_req_kv=False,
    k_from_result=False,
    draft_counter="spec_accepted_tokens",
    histogram_method="update_spec_acceptance_histogram",
    result_total="num_accepted_tokens",
    result_per_row="accept_length_per_req_cpu",
)
G0_5_11: Final = Generation(
    name="0.5.11",
    versions="0.5.11",
    convention="preclaim",
    draft_counter="spec_accepted_drafts",
    histogram_method="update_spec_acceptance_histogram",
    result_total="num_accepted_drafts",
    result_per_row="num_accepted_drafts_per_req_cpu",
    stride_source="worker",
    controller="none",
    kv_on_req_kv=False,
    k_from_result=False,
)
G0_5_12: Final = Generation(
    name="0.5.12",
    versions="0.5.12",
    convention="preclaim",
    stride_source="result",
    controller="per-req",
    kv_on_req_kv=False,
    k_from_result=False,
    draft_counter="spec_num_correct_drafts",
    histogram_method="update_spec_correct_drafts_histogram",
    result_total="num_correct_drafts",
    result_per_row="num_correct_drafts_per_req_cpu",
)
G0_5_13: Final = attrs.evolve(
    G0_5_12,
    name="0.5.13",
    versions="0.5.13-0.5.14",
    controller="batch-size",
    grammar_abort="abort-request",
)
G0_5_15: Final = attrs.evolve(G0_5_13, name="0.5.15", versions="0.5.15", convention="honest")
G0_5_16: Final = attrs.evolve(
    G0_5_15, name="0.5.16", versions="0.5.16-0.5.18", block_cap=True, grammar_abort="to-finish"
)
G0_5_19: Final = attrs.evolve(G0_5_16, name="0.5.19", versions="0.5.19", kv_on_req_kv=True)
G0_5_20: Final = attrs.evolve(
    G0_5_19,
    name="0.5.20",
    versions="0.5.20-0.5.23",
    stride_source="output-stride",
    k_from_result=True,
)

GENERATIONS: Final[tuple[Generation, ...]] = (
    G0_5_10,
    G0_5_11,
    G0_5_12,
    G0_5_13,
    G0_5_15,
    G0_5_16,
    G0_5_19,
    G0_5_20,
)
