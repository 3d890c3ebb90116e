"""kvcheck's side of a vLLM run: the engine core's loop around the scheduler under test, and
the fake model runner. Both are kvcheck's code; the scheduler is the only target, called through
`kvcheck.core.calls`.

The loop is vLLM's `EngineCore.step_with_batch_queue` (engine/core.py:708- @0.33.0, :617-
@0.26.0): while the scheduler has requests it schedules and enqueues a frame (an empty one too);
it returns without a delivery while the queue has room and something was executed or is left to
schedule, and otherwise delivers the oldest frame. Aborts and resets come between two steps.

The fake runner decides AT LAUNCH, from its own view of the request, whether a frame samples:
vLLM's runner discards a request's sample when `optimistic_seq_len < num_tokens`
(gpu_model_runner.py:2056-2065 @0.33.0), its own token count assuming every draft of the frames
before was accepted. It learns a request (a new incarnation of it) when a launch sends the
request's whole token list: new, or resumed after a preemption. At delivery a sampling frame
returns `1 + a` tokens, `a` the scenario's accepted drafts clamped to the frame's k, continuing
the true sequence of the incarnation that launched it; a token is a pure function of its
position (`kvcheck.families.vllm.scenario.token_at`), so a position sampled twice or skipped
shows in what the scheduler delivers.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

from kvcheck.core.calls import TargetCalls
from kvcheck.core.target import Target
from kvcheck.families.vllm.scenario import (
    EOS_TOKEN,
    SAMPLED_PER_STEP,
    TOKEN_BASE,
    Abort,
    Add,
    Drain,
    Reject,
    Reset,
    Step,
    Trim,
    VllmConfig,
    VllmEvent,
    token_at,
)
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
)

_FAMILY_DIR: Final = __file__.rsplit("/", 1)[0] + "/"
# The targets kvcheck ships in this family's package: a fault raised there is the target's.
# The `real` subpackage (the adapter, the strict fakes, the loader) is kvcheck's own code, not a
# target: an exception whose innermost frame is there is kvcheck's fault (`KvcheckInternalError`,
# exit 2), while one raised in a release's compiled file (its own path, outside kvcheck's tree) is
# the release's (`vllm-no-exception`). `kvcheck.core.calls.TargetCalls.kvcheck_fault` tells them
# apart, as it does for SGLang's fakes.
CALLS: Final = TargetCalls(
    shipped_targets=(_FAMILY_DIR + "builtins.py", _FAMILY_DIR + "mutants.py")
)


class FakeGrammar:
    """kvcheck's grammar (`target.Grammar`) for the requests added with one. Like the runner it
    decides from its own state, never from the scheduler's: per request, how many of a frame's
    proposed drafts it accepts (`Trim`; all until told) and whether it rejects the next tokens
    delivered (`Reject`, armed until a delivery with tokens spends it). It logs what it decided
    for kvcheck's ledger."""

    def __init__(self) -> None:
        self.requests: set[str] = set()
        self.valid: dict[str, int] = {}
        self.armed: set[str] = set()
        # Since the engine last read them: the requests whose tokens it rejected.
        self.rejected: list[str] = []

    def validate_tokens(self, request_id: str, drafts: Sequence[int]) -> list[int]:
        """See `target.Grammar.validate_tokens`: the real drafts (up to the first `-1`), cut to
        the number this request's grammar accepts."""
        real = list(drafts)
        if PLACEHOLDER_TOKEN in real:
            real = real[: real.index(PLACEHOLDER_TOKEN)]
        limit = self.valid.get(request_id)
        if request_id not in self.requests or limit is None:
            return real
        return real[:limit]

    def accept_tokens(self, request_id: str, tokens: Sequence[int]) -> bool:
        """See `target.Grammar.accept_tokens`: False once for an armed request."""
        if tokens and request_id in self.armed:
            self.armed.discard(request_id)
            self.rejected.append(request_id)
            return False
        return True

    def take_rejected(self) -> frozenset[str]:
        """The requests rejected since the last call."""
        taken = frozenset(self.rejected)
        self.rejected = []
        return taken


def proposed_drafts(item: ScheduledRequest, k: int) -> tuple[int, ...]:
    """The `k` drafts kvcheck's runner proposes for a request of its batch, whatever the step
    scheduled of them (the scheduler cuts them to that): real token ids for the positions after
    the step's. Their values only need to be real ids; what is judged is how many the grammar
    keeps."""
    end = item.num_computed_tokens + item.num_scheduled_tokens
    return tuple(TOKEN_BASE + position for position in range(end, end + k))


def leading_real_drafts(drafts: Sequence[int]) -> int:
    """How many drafts come before the first `-1` placeholder."""
    drafts = list(drafts)
    return drafts.index(PLACEHOLDER_TOKEN) if PLACEHOLDER_TOKEN in drafts else len(drafts)


def settings_of(
    config: VllmConfig, grammar: FakeGrammar | None = None, dynamic_sd: bool = False
) -> SchedulerSettings:
    """What the scheduler is built with for `config` (and kvcheck's grammar); its dynamic SD
    table only where the scheduler has dynamic SD (`dynamic_sd`)."""
    return SchedulerSettings(
        num_blocks=config.num_blocks,
        block_size=config.block_size,
        max_num_scheduled_tokens=config.max_num_scheduled_tokens,
        max_num_seqs=config.max_num_seqs,
        max_model_len=config.max_model_len,
        num_spec_tokens=config.num_spec_tokens,
        async_scheduling=True,
        pp_size=config.pp_size,
        use_v2_model_runner=config.runner == "v2",
        long_prefill_token_threshold=config.long_prefill_token_threshold,
        defer_block_free=config.defer_frees,
        grammar=grammar,
        spec_tokens_per_batch_size=config.spec_tokens_per_batch_size
        if dynamic_sd and config.dynamic_sd
        else (),
    )


@attrs.frozen
class FrameEntry:
    """One request's share of a launched frame, as the runner saw it at launch."""

    rid: str
    incarnation: int
    scheduled: int  # n
    drafts: int  # k
    samples: bool  # the runner's launch-time decision
    # The engine's reading of the scheduler just around this launch: PH before and after.
    placeholders_before: int | None
    placeholders_after: int | None
    # The drafts were `-1` placeholders and the request was not in the previous executed frame
    # (the V1 runner then feeds them to the model as token ids).
    placeholder_gap: bool
    # What is wrong with the launch itself (unknown request, bad length, ...), "" if nothing.
    fault: str = ""
    # A request with a grammar: the drafts the runner may accept (a grammar-invalid draft never
    # matches the constrained sample; vLLM's runner caps acceptance at the grammar's valid
    # prefix, v1/worker/gpu/structured_outputs.py:15-47 @0.33.0), the drafts the grammar
    # invalidated (the statistics leave them out), and, for a launch whose drafts were
    # validated, what the runner proposed and what the scheduler then scheduled.
    acceptable: int | None = None
    invalid: int = 0
    proposed: tuple[int, ...] | None = None
    validated: tuple[int, ...] | None = None
    # Dynamic SD driven: the drafts the runner proposed for this request in its previous
    # frame (the step's `num_spec_tokens_to_schedule` then), the most it can verify now; a
    # draft slot scheduled beyond them holds a `-1` it never accepts. None: k, no cap.
    drafted: int | None = None


@attrs.frozen
class Frame:
    """A launched frame in the batch queue."""

    launch: Launch
    entries: tuple[FrameEntry, ...]
    # With deferred frees judged: each scheduled request's blocks just after the launch, the
    # blocks this frame may still write until it returns.
    blocks: Mapping[str, tuple[int, ...]] = attrs.field(factory=dict)

    @property
    def step(self) -> int:
        """The scheduler's step number of the launch."""
        return self.launch.step


@attrs.frozen
class DeliveryFact:
    """One delivered frame: what the runner returned and what the scheduler emitted."""

    step: int
    sampled: Mapping[str, tuple[int, ...]]
    delivered: Delivered | None  # None: the scheduler raised
    # kvcheck's ledger at delivery, for the speculative statistics: the frame as launched, the
    # drafts the runner accepted per request (`accept` clamped to the frame's k), the requests
    # still live (neither finished by an earlier frame nor aborted), and the requests preempted
    # or reset since the launch (the frame is stale for them).
    entries: tuple[FrameEntry, ...] = ()
    accept: int = 0
    live: frozenset[str] = frozenset()
    stale: frozenset[str] = frozenset()
    # The requests whose delivered tokens kvcheck's grammar rejected in this delivery.
    rejected: frozenset[str] = frozenset()


@attrs.frozen
class Observation:
    """What the engine saw after one event (the family's observation)."""

    launches: tuple[Frame, ...]
    deliveries: tuple[DeliveryFact, ...]
    views: Mapping[str, RequestView]
    pool: PoolView | None
    # kvcheck's ledger: frames in flight per request (step, n, incarnation, samples), the
    # runner's current incarnation, everything emitted so far, the finish reasons so far.
    in_flight: Mapping[str, tuple[tuple[int, int, int, bool], ...]]
    incarnation: Mapping[str, int]
    emitted: Mapping[str, tuple[int, ...]]
    finished: Mapping[str, str]
    request_ids: tuple[str, ...]
    frames_in_flight: int
    # A drain this event: whether the engine went idle, and in how many steps.
    drained: bool | None = None
    drain_steps: int = 0
    raised: str | None = None  # the scheduler raised (its exception as text)
    # Deferred frees judged (the config asks and the scheduler has them): per frame in flight,
    # oldest first, (step, request, the blocks the frame may still write).
    defers: bool = False
    written_in_flight: tuple[tuple[int, str, tuple[int, ...]], ...] = ()
    # Every request whose delivered tokens kvcheck's grammar has rejected so far.
    grammar_rejected: frozenset[str] = frozenset()
    # Dynamic SD driven (the config has a table and the scheduler has dynamic SD).
    dynamic_sd: bool = False


class Runner:
    """The fake model runner: per request, its incarnation, its optimistic token count (the
    launch-time view) and, per incarnation, the true sequence's length (advanced in delivery
    order, which is launch order)."""

    def __init__(
        self,
        eos_positions: dict[str, int | None],
        prompts: dict[str, int],
        draft_width: int | None = None,
    ) -> None:
        self.eos_positions = eos_positions
        # With dynamic SD driven, the config's k: a frame proposes, for every request of its
        # batch, the drafts its launch says (`num_spec_tokens_to_schedule`, k when it says
        # nothing), and `drafted` keeps per request what its last frame proposed. None: no
        # dynamic SD, nothing kept.
        self.draft_width = draft_width
        self.drafted: dict[str, int] = {}
        self.prompts = prompts
        self.incarnation: dict[str, int] = {}
        self.known_tokens: dict[str, int] = {}
        self.true_length: dict[tuple[str, int], int] = {}
        self.last_executed: frozenset[str] = frozenset()

    def true_tokens(self, rid: str, length: int) -> tuple[int, ...]:
        """The first `length` tokens of `rid`'s true sequence."""
        eos = self.eos_positions.get(rid)
        return tuple(token_at(position, eos) for position in range(length))

    def launch(
        self, launch: Launch, placeholders: Mapping[str, tuple[int | None, int | None]]
    ) -> Frame:
        """Record a launch: the runner's launch-time view of each scheduled request."""
        entries = []
        for item in launch.scheduled:
            rid, n = item.request_id, item.num_scheduled_tokens
            fault = ""
            if item.all_token_ids is not None:
                seeded = len(item.all_token_ids)
                if tuple(item.all_token_ids) != self.true_tokens(rid, seeded):
                    fault = (
                        f"sent {rid}'s tokens as {list(item.all_token_ids)}, not its true sequence"
                    )
                self.incarnation[rid] = self.incarnation.get(rid, 0) + 1
                self.known_tokens[rid] = seeded
                self.true_length[rid, self.incarnation[rid]] = seeded
            elif rid not in self.incarnation:
                fault = f"scheduled {rid} without ever sending the runner its tokens"
                self.incarnation[rid] = 1
                self.known_tokens[rid] = self.prompts.get(rid, 0)
                self.true_length[rid, 1] = self.known_tokens[rid]
            if n < 1:
                fault = fault or f"scheduled {n} tokens for {rid}"
            drafts = len(item.spec_token_ids)
            samples = item.num_computed_tokens + n >= self.known_tokens[rid]
            if samples:
                self.known_tokens[rid] += SAMPLED_PER_STEP + drafts
            gap = PLACEHOLDER_TOKEN in item.spec_token_ids and rid not in self.last_executed
            before, after = placeholders.get(rid, (None, None))
            entry = FrameEntry(
                rid, self.incarnation[rid], n, drafts, samples, before, after, gap, fault
            )
            if self.draft_width is not None:
                entry = attrs.evolve(entry, drafted=self.drafted.get(rid, self.draft_width))
            entries.append(entry)
        if self.draft_width is not None:
            # Decided at launch from what the step says, as vLLM's worker reads it
            # (gpu_model_runner.py:4729 @0.33.0): this frame proposes that many for each.
            width = launch.num_spec_tokens_to_schedule
            for item in launch.scheduled:
                self.drafted[item.request_id] = self.draft_width if width is None else width
        if launch.scheduled:
            self.last_executed = frozenset(item.request_id for item in launch.scheduled)
        return Frame(launch, tuple(entries))

    def deliver(self, frame: Frame, accept: int) -> FrameOutput:
        """The runner's output for `frame`, `accept` drafts accepted per request."""
        sampled: dict[str, tuple[int, ...]] = {}
        for entry in frame.entries:
            if not entry.samples:
                sampled[entry.rid] = ()
                continue
            accepted = accepted_drafts(entry, accept)
            key = (entry.rid, entry.incarnation)
            start = self.true_length[key]
            eos = self.eos_positions.get(entry.rid)
            sampled[entry.rid] = tuple(
                token_at(position, eos)
                for position in range(start, start + SAMPLED_PER_STEP + accepted)
            )
            self.true_length[key] = start + SAMPLED_PER_STEP + accepted
            if self.incarnation.get(entry.rid) == entry.incarnation:
                # The runner's optimistic count learns the drafts this frame rejected.
                self.known_tokens[entry.rid] -= entry.drafts - accepted
        return FrameOutput(frame.step, sampled)


def accepted_drafts(entry: FrameEntry, accept: int) -> int:
    """The drafts the runner accepts of `entry`'s frame when the step accepts `accept`: at most
    its k, and for a request with a grammar at most the drafts the grammar left valid."""
    accepted = min(accept, entry.drafts)
    if entry.drafted is not None:
        accepted = min(accepted, entry.drafted)
    return accepted if entry.acceptable is None else min(accepted, entry.acceptable)


class TargetRaised(Exception):
    """The scheduler under test raised; the engine stops driving it."""


class VllmEngine:
    """The engine core's loop and the fake runner around one scheduler under test."""

    def __init__(self, config: VllmConfig, target: Target) -> None:
        self.config = config
        self.factory = target.resolver
        self.unmodelled: list[str] = []
        self.prompts: dict[str, int] = {}
        self.eos_positions: dict[str, int | None] = {}
        # Dynamic SD is driven only where the scheduler has it (vLLM 0.24.0 on, kvcheck's
        # built-ins: the factory's `dynamic_sd`); elsewhere the table is not passed on.
        self.dynamic_sd = config.dynamic_sd and bool(getattr(self.factory, "dynamic_sd", False))
        self.runner = Runner(
            self.eos_positions,
            self.prompts,
            config.num_spec_tokens if self.dynamic_sd else None,
        )
        self.queue: deque[Frame] = deque()
        self.emitted: dict[str, tuple[int, ...]] = {}
        self.finished: dict[str, str] = {}
        self.aborted: frozenset[str] = frozenset()
        # (step, request) of every frame in the queue launched before a preemption or reset of
        # that request: stale when it returns.
        self.stale_marks: frozenset[tuple[int, str]] = frozenset()
        self.raised: str | None = None
        self.max_tokens_total = 0
        # `schedule()` calls so far: the scheduler's step clock, which the V2 runner's cadence
        # reads and the views do not show, so equal views at different steps are not one state.
        self.schedules = 0
        self.grammar = FakeGrammar()
        self.grammar_rejected: frozenset[str] = frozenset()
        self.scheduler: SchedulerUnderTest | None = None
        made, error = CALLS.run(
            self.factory, settings_of(config, self.grammar, dynamic_sd=self.dynamic_sd)
        )
        if error is not None:
            self.raised = error
        else:
            self.scheduler = made
        # Deferred frees are judged only where the scheduler has them (vLLM 0.24.0 on, and
        # kvcheck's built-ins): an older release frees at once whatever the config says.
        self.defers = config.defer_frees and bool(getattr(self.scheduler, "defers_frees", False))
        # Grammars are driven only where the scheduler validates drafts against one (vLLM
        # 0.14.0 on, and kvcheck's built-ins): elsewhere a request added with a grammar runs
        # without one. A rejection is driven only where it finishes the request (0.20.0 on).
        self.grammars_driven = bool(getattr(self.scheduler, "structured_output", False))
        self.rejections_driven = self.grammars_driven and bool(
            getattr(self.scheduler, "grammar_errors_finish", False)
        )
        # This event's facts.
        self._launches: list[Frame] = []
        self._deliveries: list[DeliveryFact] = []

    @property
    def own_scheduler(self) -> bool:
        """False: the scheduler is the target itself."""
        return False

    def _call(self, method: str, *args: Any) -> Any:
        if self.scheduler is None:
            raise TargetRaised(self.raised or "no scheduler")
        result, error = CALLS.run(getattr(self.scheduler, method), *args)
        if error is not None:
            self.raised = f"{method}: {error}"
            raise TargetRaised(self.raised)
        return result

    def _placeholders(self, rids: list[str]) -> dict[str, int | None]:
        out: dict[str, int | None] = {}
        for rid in rids:
            view = self._call("request_view", rid)
            out[rid] = None if view is None else view.num_output_placeholders
        return out

    def step(self, accept: int) -> bool:
        """One `step_with_batch_queue`; False when the engine is idle (nothing was done).

        A launch whose structured-output requests wait on their frame in flight
        (`pending_structured_output_tokens`) is held back: the oldest frame is delivered
        first, then the scheduler validates the held launch's drafts against the grammar and it
        joins the queue (engine/core.py:745-764, 801-822 @0.33.0)."""
        held: Frame | None = None
        if self._call("has_requests"):
            known = [rid for rid in self._call("request_ids")]
            before = self._placeholders(known)
            launch: Launch = self._call("schedule")
            self.schedules += 1
            self._mark_stale(launch.preempted)
            after = self._placeholders([item.request_id for item in launch.scheduled])
            frame = self.runner.launch(
                launch, {rid: (before.get(rid), ph) for rid, ph in after.items()}
            )
            frame = self._with_grammar_limits(frame)
            if self.defers:
                blocks_of = self._call("pool_view").blocks_of
                frame = attrs.evolve(
                    frame,
                    blocks={
                        entry.rid: tuple(blocks_of.get(entry.rid, ())) for entry in frame.entries
                    },
                )
            self._launches.append(frame)
            executed = bool(launch.scheduled)
            if executed and launch.pending_structured_output_tokens:
                held = frame
            else:
                self.queue.appendleft(frame)
                if len(self.queue) < self.config.depth and (executed or self._call("has_requests")):
                    return True
        elif not self.queue:
            return False
        if self.queue:
            self._deliver_oldest(accept)
        if held is not None:
            self.queue.appendleft(self._validate_drafts(held))
        return True

    def _with_grammar_limits(self, frame: Frame) -> Frame:
        """The runner's view of a request with a grammar at launch: it may accept only the
        drafts ahead of the first `-1` (vLLM's bitmask strips the padding,
        scheduler.py:2249-2254 @0.33.0); a launch held for validation revises this."""
        entries = tuple(
            attrs.evolve(entry, acceptable=leading_real_drafts(item.spec_token_ids))
            if entry.rid in self.grammar.requests
            else entry
            for entry, item in zip(frame.entries, frame.launch.scheduled, strict=True)
        )
        return attrs.evolve(frame, entries=entries)

    def _validate_drafts(self, frame: Frame) -> Frame:
        """Hand the scheduler the runner's drafts for a held launch to validate
        (`update_draft_token_ids_in_output`); the frame with kvcheck's ledger of what the
        grammar kept and what the scheduler now schedules."""
        k = self.config.num_spec_tokens
        if not k:
            return frame  # no drafter, nothing to validate (engine/core.py:803 @0.33.0)
        # The drafter proposes for every request of its batch (`take_draft_token_ids`): k, or
        # with dynamic SD what its previous frame proposed for the request.
        proposals = {
            item.request_id: proposed_drafts(item, k if entry.drafted is None else entry.drafted)
            for entry, item in zip(frame.entries, frame.launch.scheduled, strict=True)
        }
        launch: Launch = self._call("update_draft_token_ids_in_output", frame.launch, proposals)
        now = {item.request_id: item.spec_token_ids for item in launch.scheduled}
        entries = []
        for entry in frame.entries:
            # Cut to the drafts the step scheduled, as the scheduler cuts them.
            proposed = proposals[entry.rid][: entry.drafts]
            # A request finished or aborted meanwhile is skipped (its frame is swallowed).
            gone = entry.rid in self.finished or entry.rid in self.aborted
            if entry.drafts and entry.rid in self.grammar.requests and not gone:
                scheduled = tuple(now.get(entry.rid, ()))
                entry = attrs.evolve(
                    entry,
                    acceptable=len(self.grammar.validate_tokens(entry.rid, proposed)),
                    # The drafts the scheduler padded out (vLLM's `num_invalid_spec_tokens`):
                    # 0.14.0-0.33.0 pad what the grammar rejects; 0.34.0 keeps every draft
                    # and leaves the grammar to the sampler (scheduler.py:3039 @0.34.0).
                    invalid=scheduled.count(PLACEHOLDER_TOKEN),
                    proposed=proposed,
                    validated=scheduled,
                )
            entries.append(entry)
        validated = attrs.evolve(frame, launch=launch, entries=tuple(entries))
        self._launches = [validated if f is frame else f for f in self._launches]
        return validated

    def _deliver_oldest(self, accept: int) -> None:
        """Deliver the oldest frame in the queue, `accept` drafts accepted per request."""
        oldest = self.queue.pop()
        output = self.runner.deliver(oldest, accept)
        rids = {entry.rid for entry in oldest.entries}
        live = frozenset(rids - set(self.finished) - self.aborted)
        stale = frozenset(rid for rid in rids if (oldest.step, rid) in self.stale_marks)
        self.stale_marks = frozenset(m for m in self.stale_marks if m[0] != oldest.step)
        fact = DeliveryFact(oldest.step, output.sampled, None, oldest.entries, accept, live, stale)
        try:
            delivered: Delivered = self._call("update_from_output", oldest.launch, output)
        except TargetRaised:
            self._deliveries.append(fact)
            raise
        rejected = self.grammar.take_rejected()
        self.grammar_rejected = self.grammar_rejected | rejected
        self._deliveries.append(attrs.evolve(fact, delivered=delivered, rejected=rejected))
        for rid, tokens in delivered.new_token_ids.items():
            self.emitted[rid] = self.emitted.get(rid, ()) + tuple(tokens)
        for rid, reason in delivered.finished.items():
            self.finished.setdefault(rid, reason)

    def _mark_stale(self, rids: Iterable[str]) -> None:
        """`rids` were preempted or reset: their frames in the queue now are stale."""
        preempted = set(rids)
        self.stale_marks = self.stale_marks | {
            (frame.step, entry.rid)
            for frame in self.queue
            for entry in frame.entries
            if entry.rid in preempted
        }

    def _reset(self) -> None:
        """`reset_prefix_cache(reset_running_requests=True)`; the requests it took off the
        running state (their frames in flight stale from now on)."""
        before = {rid: view.status for rid, view in self._views().items()}
        self._call("reset_prefix_cache", True)
        after = self._views()
        self._mark_stale(
            rid
            for rid, status in before.items()
            if status == "running" and (rid not in after or after[rid].status != "running")
        )

    def _views(self) -> dict[str, RequestView]:
        views: dict[str, RequestView] = {}
        for rid in self._call("request_ids"):
            view = self._call("request_view", rid)
            if view is not None:
                views[rid] = view
        return views

    def apply(self, event: VllmEvent) -> Observation:
        """Run `event` against the scheduler; what the engine saw."""
        self._launches, self._deliveries = [], []
        drained: bool | None = None
        steps = 0
        if self.raised is None:
            try:
                if isinstance(event, Add):
                    self.prompts[event.rid] = event.prompt_len
                    self.max_tokens_total += event.max_tokens
                    self.eos_positions[event.rid] = (
                        None if event.eos_at is None else event.prompt_len + event.eos_at
                    )
                    grammar = event.grammar and self.grammars_driven
                    if grammar:
                        self.grammar.requests.add(event.rid)
                    self._call(
                        "add_request",
                        NewRequest(
                            event.rid,
                            self.runner.true_tokens(event.rid, event.prompt_len),
                            event.max_tokens,
                            eos_token_id=EOS_TOKEN,
                            structured_output=grammar,
                        ),
                    )
                elif isinstance(event, Trim):
                    self.grammar.valid[event.rid] = event.valid
                elif isinstance(event, Reject):
                    if event.rid in self.grammar.requests and self.rejections_driven:
                        self.grammar.armed.add(event.rid)
                elif isinstance(event, Step):
                    self.step(event.accept)
                elif isinstance(event, Abort):
                    self.aborted = self.aborted | {event.rid}
                    self._call("finish_requests", [event.rid], "aborted")
                elif isinstance(event, Reset):
                    self._reset()
                elif isinstance(event, Drain):
                    drained = False
                    limit = self.drain_limit()
                    while steps < limit:
                        if not self.step(event.accept):
                            drained = True
                            break
                        steps += 1
            except TargetRaised:
                pass
        return self.observe(drained, steps)

    def drain_limit(self) -> int:
        """The most steps a drain takes: every request's prompt and outputs one token a step,
        D times over, with a margin; a scheduler still busy then never gets idle."""
        work = sum(self.prompts.values()) + self.max_tokens_total
        return 32 + 2 * self.config.depth * (work + 8)

    def observe(self, drained: bool | None = None, steps: int = 0) -> Observation:
        """The scheduler's views and kvcheck's ledger, read now."""
        views: dict[str, RequestView] = {}
        pool: PoolView | None = None
        request_ids: tuple[str, ...] = ()
        if self.raised is None:
            try:
                request_ids = tuple(self._call("request_ids"))
                for rid in request_ids:
                    view = self._call("request_view", rid)
                    if view is not None:
                        views[rid] = view
                pool = self._call("pool_view")
            except TargetRaised:
                pass
        in_flight: dict[str, list[tuple[int, int, int, bool]]] = {}
        for frame in reversed(self.queue):  # oldest first
            for entry in frame.entries:
                in_flight.setdefault(entry.rid, []).append(
                    (frame.step, entry.scheduled, entry.incarnation, entry.samples)
                )
        return Observation(
            launches=tuple(self._launches),
            deliveries=tuple(self._deliveries),
            views=views,
            pool=pool,
            in_flight={rid: tuple(frames) for rid, frames in in_flight.items()},
            incarnation=dict(self.runner.incarnation),
            emitted=dict(self.emitted),
            finished=dict(self.finished),
            request_ids=request_ids,
            frames_in_flight=len(self.queue),
            drained=drained,
            drain_steps=steps,
            raised=self.raised,
            defers=self.defers,
            grammar_rejected=self.grammar_rejected,
            dynamic_sd=self.dynamic_sd,
            written_in_flight=tuple(
                (frame.step, rid, blocks)
                for frame in reversed(self.queue)
                for rid, blocks in frame.blocks.items()
            ),
        )

    def clone(self) -> VllmEngine:
        """An independent copy (the scheduler deep-copied)."""
        twin = copy.copy(self)
        # The scheduler holds kvcheck's grammar (its settings): one copy for both, so the
        # twin's scheduler consults the twin's grammar.
        memo: dict[int, Any] = {}
        twin.scheduler = copy.deepcopy(self.scheduler, memo)
        twin.grammar = copy.deepcopy(self.grammar, memo)
        twin.runner = copy.deepcopy(self.runner)
        twin.prompts = twin.runner.prompts
        twin.eos_positions = twin.runner.eos_positions
        twin.queue = deque(self.queue)
        twin.emitted = dict(self.emitted)
        twin.finished = dict(self.finished)
        twin.unmodelled = []
        twin._launches, twin._deliveries = [], []
        return twin

    def checkpoint(self) -> None:
        """None: `clone` is no plain copy (it starts the per-event lists afresh and shares the
        target), which a state put back in place would not match; the search clones."""
        return None

    def state_key(self, inert: frozenset[str] = frozenset()) -> tuple[object, ...]:
        """What the future of the run depends on, as plain values: the scheduler's own
        `state_key()` where it has one (kvcheck's built-ins), else what its views show; kvcheck's
        ledger (queue, runner, outputs); the step clock; and the config (the exhaustive search
        merges states across its start configs)."""
        own = getattr(self.scheduler, "state_key", None)
        if callable(own):
            scheduler: object = own()
        else:
            observed = self.observe()
            pool = observed.pool
            scheduler = (
                tuple((rid, attrs.astuple(view)) for rid, view in sorted(observed.views.items())),
                None
                if pool is None
                else (
                    pool.free_blocks,
                    tuple(sorted(pool.ref_counts.items())),
                    tuple(sorted(pool.blocks_of.items())),
                    pool.deferred,
                ),
            )
        runner = self.runner
        return (
            scheduler,
            tuple(attrs.astuple(frame) for frame in self.queue),
            tuple(sorted(runner.incarnation.items())),
            tuple(sorted(runner.known_tokens.items())),
            tuple(sorted(runner.true_length.items())),
            tuple(sorted(runner.last_executed)),
            tuple(sorted(runner.drafted.items())),
            tuple(sorted(self.emitted.items())),
            tuple(sorted(self.finished.items())),
            tuple(sorted(self.aborted)),
            tuple(sorted(self.stale_marks)),
            tuple(sorted(self.grammar.requests)),
            tuple(sorted(self.grammar.valid.items())),
            tuple(sorted(self.grammar.armed)),
            tuple(sorted(self.grammar_rejected)),
            self.raised,
            self.schedules,
            attrs.astuple(self.config),
        )
