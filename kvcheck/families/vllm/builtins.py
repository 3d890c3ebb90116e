"""kvcheck's own vLLM scheduler: the 0.33.0 generation's accounting, written from the semantics
(docs/vllm.md "Semantics"), small enough to read in one sitting, and the base every mutant of the
corpus (`kvcheck.families.vllm.mutants`) changes in one place.

What it implements of vLLM V1's `AsyncScheduler` (each fact with its release line in
docs/vllm.md): FCFS running and waiting queues; a running request asks for `T + len(spec) + PH -
C` tokens, clamped by the step budget, the long-prefill threshold and `max_model_len - C - s`;
allocation from a finite block pool, preempting the tail of `running` until it fits; the waiting
loop only when nothing was preempted, skipping a request whose stale output is still to be
delivered (the stale gate); at launch `C += n`, `IF += n`, the chunk test `C < T + PH` and, for a
non-chunk, `PH += s + k` and `k` draft placeholders; at delivery `IF -= n`, the stale share
drained by scheduled tokens, dropped stale frames, the rejection roll-back for fresh frames only,
append with the stop check (EOS, then length) trimming `C` at a stop, and every returned token
resolving a placeholder; preemption sets `ST = IF`, `PH = 0`, `C = 0`; a reset preempts every
running request with its stale output dropped.

One deliberate difference from both releases: under the V1 runner, a running request that is
not scheduled in a step loses its `-1` draft placeholders (the fix of vllm#37159's class), so
the V1 runner never
reads them (docs/vllm.md "Placeholder drafts").
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Final

import attrs

from kvcheck.core.target import Target
from kvcheck.families.vllm.scenario import EOS_TOKEN, NAME, SAMPLED_PER_STEP
from kvcheck.families.vllm.target import (
    PLACEHOLDER_TOKEN,
    Delivered,
    FrameOutput,
    Launch,
    NewRequest,
    PoolView,
    RequestView,
    ScheduledRequest,
    SchedulerSettings,
    SchedulerUnderTest,
    SpecStats,
    spec_tokens_for_batch,
)

WAITING: Final = "waiting"
RUNNING: Final = "running"
PREEMPTED: Final = "preempted"


class BlockPool:
    """KV blocks with reference counts; block 0 is the null block, never handed out."""

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.free: deque[int] = deque(range(1, num_blocks))
        self.ref: dict[int, int] = {}

    def take(self, count: int) -> list[int] | None:
        """`count` fresh blocks, or None when fewer are free."""
        if count > len(self.free):
            return None
        taken = [self.free.popleft() for _ in range(count)]
        for block in taken:
            self.ref[block] = self.ref.get(block, 0) + 1
        return taken

    def release(self, blocks: Sequence[int]) -> None:
        """Drop one reference to each block (in reverse, as vLLM frees a table); a block whose
        count reaches 0 is free again."""
        for block in reversed(blocks):
            self.ref[block] = self.ref.get(block, 0) - 1
            if self.ref[block] == 0:
                del self.ref[block]
                self.free.appendleft(block)


@attrs.define(eq=False)
class Req:
    """One request's state as the scheduler keeps it (vLLM's `Request`, the fields it reads)."""

    rid: str
    prompt: tuple[int, ...]
    max_tokens: int
    eos: int | None
    status: str = WAITING
    computed: int = 0  # C
    placeholders: int = 0  # PH
    in_flight: int = 0  # IF
    stale: int = 0  # ST
    drop_stale: bool = False
    spec: list[int] = attrs.field(factory=list)
    outputs: list[int] = attrs.field(factory=list)
    is_prefill_chunk: bool = False
    blocks: list[int] = attrs.field(factory=list)
    next_decode_step: int = 0
    # Whether the runner holds this request's tokens (False: the next launch sends them all).
    sent: bool = False
    # The 0.26 generation's discard counter, kept only by the mutants that have one.
    discard: int | None = None
    # Its output is constrained by the settings' grammar (vLLM's `use_structured_output`).
    structured: bool = False

    @property
    def num_tokens(self) -> int:
        """T: the prompt and the outputs appended so far."""
        return len(self.prompt) + len(self.outputs)

    @property
    def finished(self) -> bool:
        """T: the prompt and the outputs appended so far."""
        """Whether it is finished (any reason)."""
        return self.status.startswith("finished")


class ReferenceScheduler:
    """The correct built-in (`builtin:vllm-reference`); see the module docstring."""

    # It drafts per step by batch size when its settings carry a dynamic SD table (the
    # engine passes the table on only to a factory that says so).
    dynamic_sd = True

    def __init__(self, settings: SchedulerSettings) -> None:
        self.settings = settings
        self.pool = BlockPool(settings.num_blocks)
        self.requests: dict[str, Req] = {}
        self.waiting: deque[Req] = deque()
        self.running: list[Req] = []
        self.finished_since: list[str] = []
        self.current_step = 0
        self.lookahead = settings.num_spec_tokens
        # Deferred frees (`settings.defer_block_free`): (the last step launched when the blocks
        # were freed, the blocks), returned to the pool once that step's frame has returned.
        self.deferred: list[tuple[int, list[int]]] = []
        # (step, request) -> drafts the grammar invalidated in that launch (vLLM's
        # `num_invalid_spec_tokens`, kept on the launch's output until it is delivered).
        self.invalid_drafts: dict[tuple[int, str], int] = {}

    # --- requests in and out ---------------------------------------------------------------

    def add_request(self, request: NewRequest) -> None:
        """See `SchedulerUnderTest.add_request`."""
        req = Req(
            request.request_id,
            request.prompt_token_ids,
            request.max_tokens,
            request.eos_token_id,
            structured=request.structured_output and self.settings.grammar is not None,
        )
        self.requests[req.rid] = req
        self.waiting.append(req)

    def has_requests(self) -> bool:
        """See `SchedulerUnderTest.has_requests`."""
        return bool(self.running or self.waiting or self.finished_since)

    def request_ids(self) -> tuple[str, ...]:
        """See `SchedulerUnderTest.request_ids`."""
        return tuple(self.requests)

    def finish_requests(self, request_ids: Sequence[str], reason: str) -> None:
        """See `SchedulerUnderTest.finish_requests`."""
        for rid in request_ids:
            req = self.requests.get(rid)
            if req is None or req.finished:
                continue
            self._finish(req, f"finished_{reason}")

    def _finish(self, req: Req, status: str) -> None:
        if req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        req.status = status
        self._free_blocks(req)
        self._forget(req)
        self.finished_since.append(req.rid)

    def _forget(self, req: Req) -> None:
        del self.requests[req.rid]

    # The reference honours `settings.defer_block_free` (the engine judges deferral only
    # where the scheduler says it has it), validates drafts against the settings' grammar and
    # finishes a request whose tokens the grammar rejects (the engine drives grammars only
    # where the scheduler says so).
    defers_frees = True
    structured_output = True
    grammar_errors_finish = True

    def _must_defer(self, req: Req) -> bool:
        """Whether `req`'s blocks must wait: frees are deferred and a frame with it is out."""
        return self.settings.defer_block_free and req.in_flight > 0

    def _free_blocks(self, req: Req) -> None:
        if self._must_defer(req):
            if req.blocks:
                self.deferred.append((self.current_step, req.blocks))
        else:
            self.pool.release(req.blocks)
        req.blocks = []

    def _release_deferred(self, returned_step: int) -> None:
        """Return the deferred blocks no frame launched up to `returned_step` may write."""
        kept = []
        for fence, blocks in self.deferred:
            if fence <= returned_step:
                self.pool.release(blocks)
            else:
                kept.append((fence, blocks))
        self.deferred = kept

    # --- schedule ----------------------------------------------------------------------------

    def _allocate(self, req: Req, num_new: int) -> bool:
        slots = min(req.computed + num_new + self.lookahead, self.settings.max_model_len)
        needed = -(-slots // self.settings.block_size) - len(req.blocks)
        if needed <= 0:
            return True
        taken = self.pool.take(needed)
        if taken is None:
            return False
        req.blocks.extend(taken)
        return True

    def _early_stop(self, req: Req) -> bool:
        """Skip a request whose frames in flight already reach `max_tokens` even if every
        draft is rejected (`(C + 1) - (PH - 1) >= P0 + max_tokens`)."""
        return (
            req.placeholders > 0
            and req.computed + 2 - req.placeholders >= len(req.prompt) + req.max_tokens
        )

    def _running_tokens(self, req: Req, budget: int) -> int:
        num_new = req.num_tokens + len(req.spec) + req.placeholders - req.computed
        threshold = self.settings.long_prefill_token_threshold
        if 0 < threshold < num_new:
            num_new = threshold
        num_new = min(num_new, budget)
        return min(num_new, self.settings.max_model_len - req.computed - SAMPLED_PER_STEP)

    def _waiting_tokens(self, req: Req, budget: int) -> int:
        num_new = req.num_tokens - req.computed
        threshold = self.settings.long_prefill_token_threshold
        if 0 < threshold < num_new:
            num_new = threshold
        return min(num_new, budget)

    def _may_resume(self, req: Req) -> bool:
        """The stale gate: a request with deliverable stale output waits for it."""
        return not (req.stale and not req.drop_stale)

    def schedule(self) -> Launch:
        """See `SchedulerUnderTest.schedule`."""
        self.current_step += 1
        budget = self.settings.max_num_scheduled_tokens
        scheduled: list[tuple[Req, int, tuple[int, ...], bool]] = []
        preempted: list[str] = []
        index = 0
        while index < len(self.running) and budget > 0:
            req = self.running[index]
            if self._early_stop(req) or (
                self.settings.use_v2_model_runner and self.current_step < req.next_decode_step
            ):
                index += 1
                continue
            num_new = self._running_tokens(req, budget)
            if num_new <= 0:
                index += 1
                continue
            fitted = True
            while not self._allocate(req, num_new):
                if self._must_defer(self.running[-1]):
                    # Preempting it frees nothing now: its blocks would only be deferred.
                    fitted = False
                    break
                victim = self.running.pop()
                self._preempt(victim, drop_stale=False)
                preempted.append(victim.rid)
                if victim is req:
                    fitted = False
                    break
            if not fitted:
                break
            drafts: tuple[int, ...] = ()
            if req.spec:
                k = num_new + req.computed - req.num_tokens - req.placeholders
                if k > 0:
                    drafts = tuple(req.spec[:k])
                req.spec = []
            scheduled.append((req, num_new, drafts, False))
            budget -= num_new
            index += 1
        if not preempted:
            skipped: list[Req] = []
            while budget > 0 and self.waiting and len(self.running) < self.settings.max_num_seqs:
                req = self.waiting[0]
                if not self._may_resume(req):
                    skipped.append(self.waiting.popleft())
                    continue
                num_new = self._waiting_tokens(req, budget)
                if num_new <= 0 or not self._allocate(req, num_new):
                    break
                self.waiting.popleft()
                req.status = RUNNING
                req.computed = 0
                self.running.append(req)
                scheduled.append((req, num_new, (), not req.sent))
                req.sent = True
                budget -= num_new
            self.waiting.extendleft(reversed(skipped))
        launch = Launch(
            step=self.current_step,
            # Dynamic SD: the step proposes the table's drafts for its batch size, k without a
            # table (or with nothing scheduled).
            num_spec_tokens_to_schedule=spec_tokens_for_batch(
                self.settings.spec_tokens_per_batch_size,
                len(scheduled),
                self.settings.num_spec_tokens,
            )
            if scheduled
            else self.settings.num_spec_tokens,
            scheduled=tuple(
                ScheduledRequest(
                    req.rid,
                    n,
                    drafts,
                    req.computed,
                    (*req.prompt, *req.outputs) if full else None,
                )
                for req, n, drafts, full in scheduled
            ),
            preempted=tuple(preempted),
            finished=tuple(self.finished_since),
        )
        launch = self._after_schedule(launch)
        self.finished_since = []
        return launch

    def _is_chunk(self, req: Req) -> bool:
        return req.computed < req.num_tokens + req.placeholders

    def _after_schedule(self, launch: Launch) -> Launch:
        """The launch (`_update_after_schedule`, base and async): optimistic `C`, the in-flight
        count, the chunk flag and, for a frame that samples, its placeholders; the launch waits
        for validation when a request with a grammar still has a frame out (its grammar needs
        that frame's tokens before this one samples)."""
        scheduled_ids = set()
        pending = False
        for item in launch.scheduled:
            req = self.requests[item.request_id]
            scheduled_ids.add(req.rid)
            req.computed += item.num_scheduled_tokens
            req.in_flight += item.num_scheduled_tokens
            req.is_prefill_chunk = self._is_chunk(req)
            if req.is_prefill_chunk:
                continue
            pending = pending or (req.structured and req.placeholders > 0)
            req.placeholders += SAMPLED_PER_STEP + len(item.spec_token_ids)
            req.spec = [PLACEHOLDER_TOKEN] * self._placeholder_drafts(launch)
            if self.settings.use_v2_model_runner:
                req.next_decode_step = self.current_step + self.settings.pp_size
        self._clear_unscheduled_placeholders(scheduled_ids)
        return attrs.evolve(launch, pending_structured_output_tokens=pending)

    def _placeholder_drafts(self, launch: Launch) -> int:
        """How many `-1` drafts a launched request holds for its next step: what this step's
        runner proposes for it (`num_spec_tokens_to_schedule`), so its next step schedules
        and reserves only drafts that exist."""
        proposed = launch.num_spec_tokens_to_schedule
        return self.settings.num_spec_tokens if proposed is None else proposed

    def _clear_unscheduled_placeholders(self, scheduled_ids: set[str]) -> None:
        if self.settings.use_v2_model_runner:
            return  # the V2 runner keeps drafts per request across the pipeline's cadence
        for req in self.running:
            if req.rid not in scheduled_ids and PLACEHOLDER_TOKEN in req.spec:
                req.spec = []

    # --- preempt and reset --------------------------------------------------------------

    def _preempt(self, req: Req, drop_stale: bool) -> None:
        self._free_blocks(req)
        req.status = PREEMPTED
        req.computed = 0
        req.spec = []
        req.drop_stale = drop_stale or (req.drop_stale and req.stale > 0)
        req.stale = req.in_flight
        req.placeholders = 0
        req.sent = False
        self.waiting.appendleft(req)

    def reset_prefix_cache(self, reset_running_requests: bool) -> bool:
        """See `SchedulerUnderTest.reset_prefix_cache`."""
        if reset_running_requests:
            while self.running:
                self._preempt(self.running.pop(), drop_stale=True)
        return len(self.pool.free) == self.pool.num_blocks - 1

    # --- validate drafts against the grammar ---------------------------------------------

    def update_draft_token_ids_in_output(
        self, launch: Launch, drafts: Mapping[str, tuple[int, ...]]
    ) -> Launch:
        """See `SchedulerUnderTest.update_draft_token_ids_in_output`: a held launch's drafts
        become the runner's, cut to the number scheduled and to the prefix the grammar accepts,
        and padded back with `-1` to the number scheduled, which the placeholders reserved."""
        scheduled = []
        for item in launch.scheduled:
            req = self.requests.get(item.request_id)
            proposed = drafts.get(item.request_id)
            if req is None or req.finished or not item.spec_token_ids or proposed is None:
                scheduled.append(item)
                continue
            count = len(item.spec_token_ids)
            valid = list(proposed[:count])
            if req.structured and self.settings.grammar is not None:
                valid = self.settings.grammar.validate_tokens(req.rid, valid)
            invalid = count - len(valid)
            if invalid:
                self.invalid_drafts[launch.step, req.rid] = invalid
            scheduled.append(
                attrs.evolve(item, spec_token_ids=tuple(self._pad_validated(valid, invalid)))
            )
        return attrs.evolve(launch, scheduled=tuple(scheduled))

    def _pad_validated(self, valid: list[int], invalid: int) -> list[int]:
        """The validated drafts padded back to the number scheduled."""
        return valid + [PLACEHOLDER_TOKEN] * invalid

    # --- deliver ---------------------------------------------------------------------------

    def update_from_output(self, launch: Launch, output: FrameOutput) -> Delivered:
        """See `SchedulerUnderTest.update_from_output`."""
        new_tokens: dict[str, tuple[int, ...]] = {}
        finished: dict[str, str] = {}
        drafts_counted: list[tuple[int, int]] = []
        for item in launch.scheduled:
            req = self.requests.get(item.request_id)
            invalid = self.invalid_drafts.pop((launch.step, item.request_id), 0)
            stale = False
            if req is not None:
                req.in_flight -= item.num_scheduled_tokens
                if req.stale > 0:
                    stale = True
                    req.stale -= item.num_scheduled_tokens
            if req is None or req.finished:
                continue
            if self._dropped(req, stale):
                drafts_counted.extend(self._dropped_drafts_counted(item, output))
                continue
            generated = list(output.sampled.get(req.rid, ()))
            if item.spec_token_ids and generated:
                accepted = max(len(generated) - SAMPLED_PER_STEP, 0)
                self._roll_back(req, len(item.spec_token_ids) - accepted, stale)
                drafts_counted.append(self._drafts_counted(item, accepted, invalid))
            if not generated:
                continue
            kept, reason = self._append(req, generated, stale)
            if kept and not self._grammar_accepts(req, kept):
                reason = "error"
            new_tokens[req.rid] = tuple(kept)
            if reason is not None:
                finished[req.rid] = reason
                self._finish(req, f"finished_{reason}")
        self._release_deferred(launch.step)
        return Delivered(new_tokens, finished, self._spec_stats(drafts_counted))

    def _drafts_counted(
        self, item: ScheduledRequest, accepted: int, invalid: int = 0
    ) -> tuple[int, int]:
        """What one applied frame adds to the statistics: its drafts but those the grammar
        invalidated, and the accepted ones."""
        return len(item.spec_token_ids) - invalid, accepted

    def _grammar_accepts(self, req: Req, tokens: list[int]) -> bool:
        """The grammar advances over delivered tokens (stale ones too: they are the request's
        output); False: it rejects them and the request finishes with an error."""
        if not req.structured or self.settings.grammar is None:
            return True
        return self.settings.grammar.accept_tokens(req.rid, tokens)

    def _dropped_drafts_counted(
        self, item: ScheduledRequest, output: FrameOutput
    ) -> list[tuple[int, int]]:
        """What a dropped stale frame adds to the statistics: nothing, its output is not
        applied."""
        return []

    def _spec_stats(self, drafts_counted: list[tuple[int, int]]) -> SpecStats | None:
        """The step's statistics; None when it counted no draft."""
        if not drafts_counted:
            return None
        return SpecStats.of(self.settings.num_spec_tokens, drafts_counted)

    def _dropped(self, req: Req, stale: bool) -> bool:
        return stale and req.drop_stale

    def _roll_back(self, req: Req, rejected: int, stale: bool) -> None:
        """Rejected drafts come off `C` and `PH`, for fresh frames only: a stale frame's
        rejections predate the preemption's own roll-back."""
        if stale:
            return
        if req.computed > 0:
            req.computed -= rejected
        if req.placeholders > 0:
            req.placeholders -= rejected

    def _stop_reason(self, req: Req) -> str | None:
        """vLLM 0.33's `check_stop` order: end-of-sequence, then the length caps."""
        if req.outputs[-1] == (EOS_TOKEN if req.eos is None else req.eos):
            return "stop"
        if req.num_tokens >= self.settings.max_model_len or len(req.outputs) >= req.max_tokens:
            return "length"
        return None

    def _append(self, req: Req, generated: list[int], stale: bool) -> tuple[list[int], str | None]:
        reason = None
        kept = generated
        for count, token in enumerate(generated, 1):
            req.outputs.append(token)
            reason = self._stop_reason(req)
            if reason is not None:
                if not stale:
                    req.computed -= len(generated) - count
                kept = generated[:count]
                break
        if not stale and req.placeholders > 0:
            req.placeholders -= len(generated)
        return kept, reason

    # --- views --------------------------------------------------------------------------

    def request_view(self, request_id: str) -> RequestView | None:
        """See `SchedulerUnderTest.request_view`."""
        req = self.requests.get(request_id)
        if req is None:
            return None
        return RequestView(
            status=req.status,
            num_computed_tokens=req.computed,
            num_tokens=req.num_tokens,
            num_output_placeholders=req.placeholders,
            num_in_flight_tokens=req.in_flight,
            num_stale_output_tokens=req.stale if req.discard is None else None,
            async_tokens_to_discard=req.discard,
            spec_token_ids=tuple(req.spec),
            output_token_ids=tuple(req.outputs),
            is_prefill_chunk=req.is_prefill_chunk,
            drop_stale_output=req.drop_stale if req.discard is None else None,
        )

    def state_key(self) -> tuple[object, ...]:
        """Everything its future depends on (the exhaustive search merges equal states)."""
        return (
            tuple(attrs.astuple(req) for req in self.requests.values()),
            tuple(req.rid for req in self.waiting),
            tuple(req.rid for req in self.running),
            tuple(self.pool.free),
            tuple(sorted(self.pool.ref.items())),
            tuple(self.finished_since),
            self.current_step,
            tuple(sorted(self.invalid_drafts.items())),
        )

    def pool_view(self) -> PoolView:
        """See `SchedulerUnderTest.pool_view`."""
        owners: dict[str, tuple[int, ...]] = {}
        for req in self.requests.values():
            if req.blocks:
                owners[req.rid] = tuple(req.blocks)
        return PoolView(
            num_blocks=self.pool.num_blocks,
            free_blocks=len(self.pool.free),
            ref_counts=dict(self.pool.ref),
            blocks_of=owners,
            deferred=tuple(block for _, blocks in self.deferred for block in blocks),
        )


class DropOnPreemptScheduler(ReferenceScheduler):
    """A correct rewrite: every preemption drops its stale output (as a reset does), so a
    preempted request may resume at once and resamples what the dropped frames held."""

    def _preempt(self, req: Req, drop_stale: bool) -> None:
        super()._preempt(req, drop_stale=True)


@attrs.frozen
class Builtin:
    """One built-in scheduler: its name (`builtin:NAME`), its class and what it is."""

    name: str
    factory: Callable[[SchedulerSettings], SchedulerUnderTest]
    summary: str


BUILTINS: Final[Mapping[str, Builtin]] = {
    b.name: b
    for b in (
        Builtin(
            "vllm-reference",
            ReferenceScheduler,
            "kvcheck's own 0.33-generation async scheduler (stale output, drop on reset, the "
            "stale gate)",
        ),
    )
}


def builtin_target(
    spec: str, factory: Callable[[SchedulerSettings], SchedulerUnderTest], description: str
) -> Target:
    """A target kvcheck ships (a built-in or a corpus entry)."""
    return Target(
        spec=spec,
        resolver=factory,
        description=description,
        self_methods={},
        shape=None,
        family=NAME,
    )
