"""The seam between the vLLM family's engine and a scheduler under test.

Level: vLLM's own `Scheduler` API (`add_request`, `schedule`, `update_from_output`,
`finish_requests`, `reset_prefix_cache`), with kvcheck's small records in place of vLLM's
objects. kvcheck's engine (`kvcheck.families.vllm.engine`) plays the engine core's loop (a batch
queue of depth D, the pipeline cadence) and the model runner: the fake runner decides AT LAUNCH,
from its own view of the request, whether a frame returns a sampled token, and at delivery it
returns `1 + a` tokens (`a <= k` accepted drafts, drawn by the scenario) whose values are a pure
function of (request, position), so that duplicates and gaps show. The scheduler under test
decides what to schedule and whom to preempt (under KV pressure from a finite block pool), and
does all the accounting.

Two kinds of target implement `SchedulerUnderTest`: kvcheck's own built-in schedulers and
mutants (`kvcheck.families.vllm.builtins`, `kvcheck.families.vllm.mutants`), and a release's
own scheduler code run over strict fakes (`kvcheck.families.vllm.real`). A target's `resolver`
is a `SchedulerFactory`: it builds a fresh scheduler for each scenario.

Changes to this file after its first commit are listed, dated, in the family's notes
(docs/vllm.md, "The seam").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final, Protocol

import attrs

# The draft placeholder an async scheduler writes into `spec_token_ids` at launch; the runner
# replaces it with the drafts it proposed in the previous step.
PLACEHOLDER_TOKEN: Final = -1


@attrs.frozen
class SchedulerSettings:
    """What the scheduler is built with (one scenario's config, the parts the scheduler sees)."""

    num_blocks: int  # KV blocks in the pool, the null block included as vLLM counts them
    block_size: int
    max_num_scheduled_tokens: int  # the token budget of one step
    max_num_seqs: int
    max_model_len: int
    num_spec_tokens: int  # k scheduled per decode (0: no speculative decoding)
    async_scheduling: bool  # AsyncScheduler (placeholders) vs Scheduler
    pp_size: int = 1
    use_v2_model_runner: bool = False
    defer_block_free: bool = False
    long_prefill_token_threshold: int = 0  # 0: none; >0 chunks prompts
    # Added 2026-12-03 (docs/vllm.md "The seam"): kvcheck's grammar, which the scheduler's
    # structured-output manager consults for a request that has one (None: no request has).
    grammar: Grammar | None = attrs.field(default=None, eq=False, hash=False)
    # Added 2026-12-03 (docs/vllm.md "Dynamic speculative decoding"): vLLM's
    # `num_speculative_tokens_per_batch_size`, inclusive batch-size ranges
    # `(first, last, drafts)`; () off. A scheduler that has dynamic SD drafts per step what
    # `spec_tokens_for_batch` gives for the step's batch size.
    spec_tokens_per_batch_size: DynamicSdTable = ()


# vLLM's `num_speculative_tokens_per_batch_size`: (first batch size, last batch size, drafts).
DynamicSdTable = tuple[tuple[int, int, int], ...]


def dynamic_sd_table_error(table: DynamicSdTable) -> str | None:
    """What is wrong with `table` as vLLM's dynamic SD schedule, None if nothing: the ranges
    positive, each first <= last, sorted without overlap, the first from batch size 1, the
    drafts not negative."""
    previous_last = 0
    for first, last, drafts in table:
        if first < 1 or first > last or drafts < 0:
            return f"({first}, {last}, {drafts}) is not a range of batch sizes with drafts >= 0"
        if first <= previous_last:
            return "the batch-size ranges must be sorted and must not overlap"
        previous_last = last
    if table and table[0][0] != 1:
        return "the first batch-size range must start at 1"
    return None


def spec_tokens_for_batch(table: DynamicSdTable, batch_size: int, num_spec_tokens: int) -> int:
    """The drafts a step of `batch_size` requests proposes under `table` (kvcheck's reading of
    vLLM's dynamic SD schedule): the entry of the range holding the batch size, else that of
    the last range before it (gaps and the tail carry it forward), never above the config's k.
    With no table, or no drafting at all, k."""
    if not table or num_spec_tokens <= 0:
        return num_spec_tokens
    chosen = table[0][2]
    for first, _, drafts in table:
        if first > batch_size:
            break
        chosen = drafts
    return min(chosen, num_spec_tokens)


@attrs.frozen
class NewRequest:
    """A request as `add_request` receives it."""

    request_id: str
    prompt_token_ids: tuple[int, ...]
    max_tokens: int
    min_tokens: int = 0
    eos_token_id: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    # Added 2026-12-03: the request's output is constrained by a grammar (vLLM's
    # `use_structured_output`); `SchedulerSettings.grammar` decides for it.
    structured_output: bool = False


@attrs.frozen
class ScheduledRequest:
    """One request in a launched step, as the runner receives it."""

    request_id: str
    num_scheduled_tokens: int  # n
    spec_token_ids: tuple[int, ...]  # the drafts scheduled (k = len); -1 = placeholder
    num_computed_tokens: int  # C as the runner is told (before this step's n)
    # Set when the runner gets the request's full token list (new or resumed after preemption):
    all_token_ids: tuple[int, ...] | None


@attrs.frozen
class Launch:
    """What one `schedule()` produced: the step (a frame once launched) and what it did."""

    step: int
    scheduled: tuple[ScheduledRequest, ...]
    preempted: tuple[str, ...]  # request ids preempted during this schedule()
    finished: tuple[str, ...]  # ids the scheduler reports finished since the last step
    # Added 2026-12-03: a structured-output request of this step has a frame in flight, so its
    # grammar needs that frame's tokens first (vLLM's `pending_structured_output_tokens`): the
    # engine delivers the oldest frame, then has the scheduler validate this step's drafts
    # (`update_draft_token_ids_in_output`) before the step samples.
    pending_structured_output_tokens: bool = False
    # Added 2026-12-03: the drafts the runner proposes in this step for the next (vLLM's
    # `SchedulerOutput.num_spec_tokens_to_schedule`); None where the scheduler does not say.
    num_spec_tokens_to_schedule: int | None = None


@attrs.frozen
class FrameOutput:
    """What the runner returns for one frame: per request, the sampled tokens (empty for a
    request whose frame samples nothing, e.g. a prefill chunk)."""

    step: int
    sampled: Mapping[str, tuple[int, ...]]


@attrs.frozen
class SpecStats:
    """The speculative-decoding statistics one `update_from_output` recorded, as vLLM's
    `SpecDecodingStats` keeps them (`v1/spec_decode/metrics.py`): one draft per counted frame of
    a request, its draft tokens, the accepted ones, and per draft position how many drafts had
    that position accepted."""

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_accepted_tokens_per_pos: tuple[int, ...] = ()

    @classmethod
    def of(cls, num_spec_tokens: int, observed: Sequence[tuple[int, int]]) -> SpecStats:
        """The statistics of `observed` (drafts, accepted) per counted frame, `num_spec_tokens`
        positions."""
        per_pos = [0] * num_spec_tokens
        for _, accepted in observed:
            for position in range(min(max(accepted, 0), num_spec_tokens)):
                per_pos[position] += 1
        return cls(
            num_drafts=len(observed),
            num_draft_tokens=sum(drafts for drafts, _ in observed),
            num_accepted_tokens=sum(accepted for _, accepted in observed),
            num_accepted_tokens_per_pos=tuple(per_pos),
        )


@attrs.frozen
class Delivered:
    """What `update_from_output` emitted: per request the new output tokens, and who finished."""

    new_token_ids: Mapping[str, tuple[int, ...]]
    finished: Mapping[str, str]  # request id -> finish reason ("length", "stop", "abort", ...)
    # Added after the draft (docs/vllm.md "The seam"): the speculative statistics the step
    # recorded; None where the scheduler recorded none (vLLM returns no `SpecDecodingStats`
    # for a step that counted no draft).
    spec_stats: SpecStats | None = None


@attrs.frozen
class RequestView:
    """The scheduler's accounting of one request, read back after every event."""

    status: str  # "waiting", "running", "preempted", "finished_*"
    num_computed_tokens: int  # C
    num_tokens: int  # T (prompt + delivered outputs)
    num_output_placeholders: int  # PH
    num_in_flight_tokens: int | None  # IF (None: the release has no such field)
    num_stale_output_tokens: int | None  # ST (0.27+), None where absent
    async_tokens_to_discard: int | None  # <=0.26, None where absent
    spec_token_ids: tuple[int, ...]
    output_token_ids: tuple[int, ...]
    # Changed from the draft: the launch-time flag that decides the reservation (0.16+), and
    # 0.33's drop-instead-of-deliver flag (None where the release has none).
    is_prefill_chunk: bool | None = None
    drop_stale_output: bool | None = None


@attrs.frozen
class PoolView:
    """The scheduler's block pool, read back after every event."""

    num_blocks: int
    free_blocks: int
    # Block id -> ref count, for every block whose count is not 0 (a negative count, from a
    # double free, shows here; changed from the draft's "ref > 0").
    ref_counts: Mapping[int, int]
    blocks_of: Mapping[str, tuple[int, ...]]  # request id -> its block ids
    deferred: tuple[int, ...]  # blocks waiting on a deferred free


class Grammar(Protocol):
    """kvcheck's grammar for the requests that have one (vLLM's structured-output grammar, as
    the scheduler's `StructuredOutputManager` consults it). It is kvcheck's, like the runner:
    it decides from its own state, never from the scheduler's."""

    def validate_tokens(self, request_id: str, drafts: Sequence[int]) -> list[int]:
        """The longest prefix of `drafts` (real token ids) the grammar accepts."""

    def accept_tokens(self, request_id: str, tokens: Sequence[int]) -> bool:
        """Advance the grammar over delivered tokens; False: it rejects them."""


class SchedulerUnderTest(Protocol):
    """A vLLM scheduler as kvcheck drives it: the released code (over fakes) or a built-in."""

    def add_request(self, request: NewRequest) -> None:
        """Queue a new request."""

    def schedule(self) -> Launch:
        """Choose and launch the next step."""

    def update_from_output(self, launch: Launch, output: FrameOutput) -> Delivered:
        """Deliver a frame's output; what the scheduler emitted."""

    # Added 2026-12-03: called only for a launch with `pending_structured_output_tokens`.
    def update_draft_token_ids_in_output(
        self, launch: Launch, drafts: Mapping[str, tuple[int, ...]]
    ) -> Launch:
        """Validate the runner's drafts of a deferred launch against the grammar (vLLM's
        `update_draft_token_ids_in_output`); the launch with its drafts as now scheduled."""

    def finish_requests(self, request_ids: Sequence[str], reason: str) -> None:
        """Finish requests (an abort: reason "aborted")."""

    def reset_prefix_cache(self, reset_running_requests: bool) -> bool:
        """Reset the prefix cache (preempting every running request when asked)."""

    def request_view(self, request_id: str) -> RequestView | None:
        """The scheduler's accounting of one request (None: it holds none)."""

    def pool_view(self) -> PoolView:
        """The block pool's state."""

    def request_ids(self) -> tuple[str, ...]:
        """Every request the scheduler holds."""

    # Added to the draft: whether `schedule()` has anything to do (vLLM's `has_requests()`,
    # which the engine core's loop asks before it schedules).
    def has_requests(self) -> bool:
        """Whether the engine loop should schedule (vLLM's `has_requests`)."""


class SchedulerFactory(Protocol):
    """What a vLLM target is: it builds a fresh scheduler for each scenario."""

    def __call__(self, settings: SchedulerSettings) -> SchedulerUnderTest:
        """A fresh scheduler built with `settings`."""
