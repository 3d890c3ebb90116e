"""vLLM's mutant corpus: kvcheck's reference scheduler (`builtins.ReferenceScheduler`) with one
upstream bug put back, each written from the bug's description (docs/vllm.md "Mutants" ties
each to its thread and row of the survey's bug table), and correct rewrites that must pass.

Each mutant changes one method of the reference, so what it breaks is that one behaviour.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import attrs

from kvcheck.core.family import NamedCorpus
from kvcheck.core.target import Target
from kvcheck.families.vllm.builtins import (
    DropOnPreemptScheduler,
    ReferenceScheduler,
    Req,
    builtin_target,
)
from kvcheck.families.vllm.judging import VllmJudging
from kvcheck.families.vllm.scenario import SAMPLED_PER_STEP
from kvcheck.families.vllm.target import (
    Delivered,
    FrameOutput,
    Launch,
    ScheduledRequest,
    SchedulerSettings,
    SchedulerUnderTest,
    SpecStats,
)


class StaleRejection(ReferenceScheduler):
    """vllm#46066 (row 1): the spec-rejection roll-back runs before the stale (discard) check,
    so a frame launched before a reset takes its old rejections off the resumed request's fresh
    `C` and `PH`; the `> 0` guards do not range-check."""

    def _roll_back(self, req: Req, rejected: int, stale: bool) -> None:
        super()._roll_back(req, rejected, stale=False)

    def _dropped(self, req: Req, stale: bool) -> bool:
        return False  # checked too late: the roll-back already ran (see update_from_output)

    def update_from_output(self, launch: Launch, output: FrameOutput) -> Delivered:
        """See `SchedulerUnderTest.update_from_output`."""
        # Roll back first, for every frame with drafts, then drop the stale ones.
        dropped: set[str] = set()
        for item in launch.scheduled:
            req = self.requests.get(item.request_id)
            if req is None or req.finished:
                continue
            stale = req.stale > 0
            generated = output.sampled.get(req.rid, ())
            if item.spec_token_ids and generated and stale:
                accepted = max(len(generated) - 1, 0)
                super()._roll_back(req, len(item.spec_token_ids) - accepted, stale=False)
            if stale and req.drop_stale:
                dropped.add(req.rid)
        kept_sampled = {
            rid: (() if rid in dropped else tokens) for rid, tokens in output.sampled.items()
        }
        return super().update_from_output(launch, FrameOutput(output.step, kept_sampled))


class NoStaleMarking(ReferenceScheduler):
    """vllm#47900/#48245 (rows 2-3), the 0.26.0 behaviour: preemption resets `C` but leaves
    `PH` and marks nothing stale, and the waiting loop has no stale gate; a request resumed
    before its stale frame returns is taken for a prefill chunk (no reservation) while the
    runner samples, and the stale frame lands on the resumed state."""

    def _preempt(self, req: Req, drop_stale: bool) -> None:
        placeholders = req.placeholders
        super()._preempt(req, drop_stale)
        req.stale = 0
        req.drop_stale = False
        req.placeholders = placeholders


class PreemptAssumesIdle(ReferenceScheduler):
    """vllm#47900's assumption (row 2) made an assertion: preemption asserts nothing of the
    request is in flight, which overlap scheduling makes false."""

    def _preempt(self, req: Req, drop_stale: bool) -> None:
        assert req.in_flight == 0, f"{req.rid} preempted with {req.in_flight} tokens in flight"
        super()._preempt(req, drop_stale)


class NoStaleGate(ReferenceScheduler):
    """vllm#48245 (row 3), the gate alone: stale output is marked at preemption, but the
    waiting loop resumes the request before it is delivered; the resumed recompute samples a
    position the stale frame delivers too (needs depth >= 3)."""

    def _may_resume(self, req: Req) -> bool:
        return True


class TokenCountedDiscard(ReferenceScheduler):
    """vllm#49620/#49860 (rows 4 and 6), the 0.26.0 reset path: a reset sets a discard count to
    the request's placeholders (tokens: `1 + k` per frame) and each delivered frame spends one,
    so frames launched after the resume are thrown away and their tokens are lost."""

    def reset_prefix_cache(self, reset_running_requests: bool) -> bool:
        """See `SchedulerUnderTest.reset_prefix_cache`."""
        if reset_running_requests:
            while self.running:
                req = self.running.pop()
                discard = req.placeholders
                super()._preempt(req, drop_stale=False)
                req.stale = 0
                req.discard = discard
        return len(self.pool.free) == self.pool.num_blocks - 1

    def update_from_output(self, launch: Launch, output: FrameOutput) -> Delivered:
        """See `SchedulerUnderTest.update_from_output`."""
        swallowed: set[str] = set()
        for item in launch.scheduled:
            req = self.requests.get(item.request_id)
            if req is not None and not req.finished and req.discard:
                req.discard -= 1
                swallowed.add(req.rid)
        kept = {rid: (() if rid in swallowed else t) for rid, t in output.sampled.items()}
        # A swallowed frame changes no counter but the in-flight count.
        for rid in swallowed:
            item = next(i for i in launch.scheduled if i.request_id == rid)
            self.requests[rid].in_flight -= item.num_scheduled_tokens
        rest = Launch(
            launch.step,
            tuple(i for i in launch.scheduled if i.request_id not in swallowed),
            launch.preempted,
            launch.finished,
        )
        return super().update_from_output(rest, FrameOutput(output.step, kept))


class FinalChunkUnreserved(ReferenceScheduler):
    """vllm#57562's candidate class (row 5): the scheduler's chunk flag and the runner's
    discard mask disagree; here the last chunk of a prompt that needed several steps is still
    taken for a chunk, so no placeholder is reserved for the token the runner samples."""

    def _is_chunk(self, req: Req) -> bool:
        chunked_before = req.computed > req.in_flight and req.placeholders == 0 and not req.outputs
        return super()._is_chunk(req) or (chunked_before and req.computed == req.num_tokens)


class PlaceholderSurvivors(ReferenceScheduler):
    """vllm#37159/#40768/#46899 (row 7), as both releases have it: `-1` draft placeholders of a
    request left out of a step survive, and are scheduled as drafts when it comes back."""

    def _clear_unscheduled_placeholders(self, scheduled_ids: set[str]) -> None:
        return None


class RejectionOffComputedOnly(ReferenceScheduler):
    """The roll-back takes rejected drafts off `C` but not off `PH` (the identity's class)."""

    def _roll_back(self, req: Req, rejected: int, stale: bool) -> None:
        if not stale and req.computed > 0:
            req.computed -= rejected


class NoLengthClamp(ReferenceScheduler):
    """The running loop forgets the `max_model_len - C - s` clamp (vllm scheduler.py:850-855
    @0.33.0 keeps it)."""

    def _running_tokens(self, req: Req, budget: int) -> int:
        num_new = req.num_tokens + len(req.spec) + req.placeholders - req.computed
        return min(num_new, budget)


class StopNotTrimmed(ReferenceScheduler):
    """A stop inside a multi-token frame keeps the tokens after the stop."""

    def _append(self, req: Req, generated: list[int], stale: bool) -> tuple[list[int], str | None]:
        kept, reason = super()._append(req, generated, stale)
        extra = generated[len(kept) :]
        req.outputs.extend(extra)
        return kept + extra, reason


class InFlightAfterFinishCheck(ReferenceScheduler):
    """`IF -= n` moved after the finished and dropped checks: a dropped stale frame leaves its
    tokens counted in flight for ever (0.33.0 decrements first, scheduler.py:2316-2318)."""

    def update_from_output(self, launch: Launch, output: FrameOutput) -> Delivered:
        """See `SchedulerUnderTest.update_from_output`."""
        dropped = {
            item.request_id: item.num_scheduled_tokens
            for item in launch.scheduled
            if (req := self.requests.get(item.request_id)) is not None
            and req.stale > 0
            and req.drop_stale
        }
        delivered = super().update_from_output(launch, output)
        for rid, n in dropped.items():
            if rid in self.requests:
                self.requests[rid].in_flight += n
        return delivered


class FreedTwice(ReferenceScheduler):
    """Preemption gives the blocks back but the request keeps its table, so they are freed
    again when it resumes or finishes."""

    def _preempt(self, req: Req, drop_stale: bool) -> None:
        blocks = list(req.blocks)
        super()._preempt(req, drop_stale)
        self.pool.release(blocks)


class FinishedKept(ReferenceScheduler):
    """Finished requests stay in the scheduler's table (vLLM's `test_memory_leak` class)."""

    def _forget(self, req: Req) -> None:
        return None


class StatsCountDropped(ReferenceScheduler):
    """vLLM 0.12.0-0.24.0 (docs/vllm.md "Speculative statistics"): a reset's stale frame is
    dropped only when its tokens are appended, after the statistics counted its drafts."""

    def _dropped_drafts_counted(
        self, item: ScheduledRequest, output: FrameOutput
    ) -> list[tuple[int, int]]:
        generated = output.sampled.get(item.request_id, ())
        if not (item.spec_token_ids and generated):
            return []
        return [self._drafts_counted(item, max(len(generated) - SAMPLED_PER_STEP, 0))]


class StatsPositionShifted(ReferenceScheduler):
    """The accepted-per-position histogram one position long: a draft with `a` accepted
    counts positions 0..a instead of 0..a-1 (so a draft with none accepted counts position 0)."""

    def _spec_stats(self, drafts_counted: list[tuple[int, int]]) -> SpecStats | None:
        stats = super()._spec_stats(drafts_counted)
        if stats is None:
            return None
        k = self.settings.num_spec_tokens
        per_pos = [0] * k
        for _, accepted in drafts_counted:
            for position in range(min(accepted + 1, k)):
                per_pos[position] += 1
        return attrs.evolve(stats, num_accepted_tokens_per_pos=tuple(per_pos))


class StatsSkipStale(ReferenceScheduler):
    """Statistics that leave out every stale frame, also one whose output is delivered (a
    preempted request's frame in flight, vLLM 0.27+'s deliver mode): the delivered tokens'
    drafts are never counted."""

    def update_from_output(self, launch: Launch, output: FrameOutput) -> Delivered:
        """See `SchedulerUnderTest.update_from_output`."""
        stale = {rid for rid, req in self.requests.items() if req.stale > 0}
        delivered = super().update_from_output(launch, output)
        fresh = [
            self._drafts_counted(item, len(output.sampled[item.request_id]) - SAMPLED_PER_STEP)
            for item in launch.scheduled
            if item.request_id not in stale
            and item.spec_token_ids
            and delivered.new_token_ids.get(item.request_id)
        ]
        return attrs.evolve(delivered, spec_stats=self._spec_stats(fresh))


class GrammarTrimUnpadded(ReferenceScheduler):
    """Drafts the grammar invalidated are cut off instead of padded back with `-1`
    (update_draft_token_ids_in_output pads them, scheduler.py:2910-2914 @0.33.0): the frame now
    schedules fewer drafts than its placeholders reserved, so its rejected drafts roll back too
    little of C and PH."""

    def _pad_validated(self, valid: list[int], invalid: int) -> list[int]:
        return valid


class StatsCountInvalid(ReferenceScheduler):
    """The statistics count the drafts the grammar invalidated as proposals (every release
    with the trimming subtracts them, `make_spec_decoding_stats`, scheduler.py:3317-3318
    @0.33.0, :1626-1627 @0.14.0)."""

    def _drafts_counted(
        self, item: ScheduledRequest, accepted: int, invalid: int = 0
    ) -> tuple[int, int]:
        return super()._drafts_counted(item, accepted, 0)


class EagerFree(ReferenceScheduler):
    """Deferred frees ignored: a finished, aborted or preempted request's blocks go back to the
    pool at once while a frame launched with it may still write them (what `defer_block_free`,
    vLLM 0.24.0 on, exists to prevent: a consumer connector's load into a reused block races
    the in-flight step's write)."""

    def _must_defer(self, req: Req) -> bool:
        return False


class DynamicSdFixedPlaceholders(ReferenceScheduler):
    """Dynamic SD (0.24.0 on): the step asks the runner for the table's drafts, but a launched
    request still holds k `-1` placeholders (vLLM's async launch sizes them by the step's
    `num_spec_tokens_to_schedule`, async_scheduler.py:28-30 @0.33.0), so its next step schedules
    and reserves drafts the runner never proposed."""

    def _placeholder_drafts(self, launch: Launch) -> int:
        return self.settings.num_spec_tokens


@attrs.frozen
class Entry:
    """One entry of the corpus (`kvcheck.core.family.MutantEntry`)."""

    name: str
    kind: str  # "mutant" or "rewrite"
    scheduler: Callable[[SchedulerSettings], SchedulerUnderTest]
    expect: str | None
    origin: str
    summary: str
    placeholder_drafts: bool = False
    shrink_note: str = ""
    # What its shortest counterexample needs of the exhaustive bounds beyond the conformance
    # suite's (`search.CONFORMANCE_BOUNDS`), as `VllmBounds` fields (`widened` reads them).
    needs: Mapping[str, Any] = attrs.field(factory=dict, eq=False)


CORPUS: Final[tuple[Entry, ...]] = (
    Entry(
        "eager-free",
        "mutant",
        EagerFree,
        "vllm-deferred-free",
        "defer_block_free (scheduler.py:188-195, 3077-3093 @0.33.0)",
        "a freed request's blocks return to the pool with its frames still in flight",
        # An abort with the request's frame in flight, on an engine that defers frees.
        needs={"defer_frees": True},
    ),
    Entry(
        "stale-rejection",
        "mutant",
        StaleRejection,
        "vllm-counters",
        "vllm#46066 (row 1)",
        "stale frames roll their rejected drafts back off the resumed request",
        # A reset beside a second request at depth 2 (the shortest, 7 events).
        needs={"requests": 2, "depths": (2,), "events": 7},
    ),
    Entry(
        "no-stale-marking",
        "mutant",
        NoStaleMarking,
        "vllm-reservation",
        "vllm#48245 (rows 2-3)",
        "preemption keeps PH and marks nothing stale; no stale gate",
    ),
    Entry(
        "preempt-assumes-idle",
        "mutant",
        PreemptAssumesIdle,
        "vllm-no-exception",
        "vllm#47900 (row 2)",
        "preemption asserts that nothing is in flight",
    ),
    Entry(
        "no-stale-gate",
        "mutant",
        NoStaleGate,
        "vllm-identity",
        "vllm#48245 (row 3)",
        "a preempted request resumes before its stale output is delivered",
        # Two requests that preempt each other at depth 3, 9 events (a smaller budget and
        # shorter outputs keep the states fewer).
        needs={"requests": 2, "depths": (3,), "events": 9, "budget": 8, "max_tokens": 8},
    ),
    Entry(
        "token-counted-discard",
        "mutant",
        TokenCountedDiscard,
        "vllm-exactly-once",
        "vllm#49620/#49860 (rows 4, 6)",
        "a reset's discard count is in tokens, spent per frame",
    ),
    Entry(
        "final-chunk-unreserved",
        "mutant",
        FinalChunkUnreserved,
        "vllm-reservation",
        "vllm#57562 class (row 5)",
        "the last chunk of a chunked prompt reserves no placeholder",
        # A prompt the budget splits into chunks.
        needs={"prompt_len": 13, "budget": 6, "num_spec_tokens": 0, "max_tokens": 1},
    ),
    Entry(
        "placeholder-survivors",
        "mutant",
        PlaceholderSurvivors,
        "vllm-placeholder-drafts",
        "vllm#37159/#40768/#46899 (row 7)",
        "-1 drafts of an unscheduled request survive",
        placeholder_drafts=True,
        # The V1 runner and a budget of one decode (1 + k), so a second request sits a step out.
        needs={
            "requests": 2,
            "depths": (2,),
            "budget": 3,
            "num_spec_tokens": 2,
            "prompt_len": 1,
            "max_tokens": 2,
        },
    ),
    Entry(
        "rejection-computed-only",
        "mutant",
        RejectionOffComputedOnly,
        # The shortest counterexamples (2 events) break the reservation first: the PH the
        # rejections left makes the next launch reserve more than the runner returns.
        "vllm-reservation",
        "new",
        "rejected drafts come off C but not PH",
    ),
    Entry(
        "no-length-clamp",
        "mutant",
        NoLengthClamp,
        "vllm-launch",
        "survey §2.2",
        "schedules past max_model_len - C - s",
    ),
    Entry(
        "stop-not-trimmed",
        "mutant",
        StopNotTrimmed,
        "vllm-exactly-once",
        "survey §2.5",
        "tokens after a stop inside a frame are kept",
        # Short outputs, so the length stop falls inside a frame of drafts within a few steps;
        # its shortest form (2 events) is a drain that accepts the drafts.
        needs={"prompt_len": 1, "max_tokens": 3, "drain_accepts": True},
    ),
    Entry(
        "in-flight-after-drop",
        "mutant",
        InFlightAfterFinishCheck,
        "vllm-in-flight",
        "survey §3.3",
        "a dropped stale frame is never taken off IF",
    ),
    Entry(
        "freed-twice",
        "mutant",
        FreedTwice,
        "vllm-pool",
        "survey §3.3",
        "preempted blocks are freed again later",
    ),
    Entry(
        "finished-kept",
        "mutant",
        FinishedKept,
        "vllm-quiescence",
        "survey §3.3",
        "finished requests stay in the scheduler",
    ),
    Entry(
        "stats-count-dropped",
        "mutant",
        StatsCountDropped,
        "vllm-spec-stats",
        "vLLM 0.12.0-0.24.0 (docs/vllm.md)",
        "a reset's dropped stale frame still counts its drafts",
        # A reset with drafts in flight at depth 2.
        needs={"depths": (2,), "events": 6},
    ),
    Entry(
        "stats-position-shifted",
        "mutant",
        StatsPositionShifted,
        "vllm-spec-stats",
        "new",
        "the accepted-per-position histogram counts one position too many",
    ),
    Entry(
        "stats-skip-stale",
        "mutant",
        StatsSkipStale,
        "vllm-spec-stats",
        "new",
        "a stale frame's drafts are never counted, also when its tokens are delivered",
        # Two requests decoding one draft each until the pool preempts the second with a
        # frame of drafts in flight (3 events: two adds and a drain).
        needs={"requests": 2, "depths": (2,), "num_spec_tokens": 1},
    ),
    Entry(
        "grammar-trim-unpadded",
        "mutant",
        GrammarTrimUnpadded,
        "vllm-grammar",
        "update_draft_token_ids_in_output (scheduler.py:2883-2918 @0.33.0)",
        "drafts the grammar invalidates are cut off, not padded back with -1",
        # A request with a grammar that accepts no draft, decoding with its frame in flight.
        needs={"grammar": True},
    ),
    Entry(
        "stats-count-invalid",
        "mutant",
        StatsCountInvalid,
        "vllm-spec-stats",
        "make_spec_decoding_stats (scheduler.py:3310-3318 @0.33.0)",
        "the statistics count the drafts the grammar invalidated",
        needs={"grammar": True},
    ),
    Entry(
        "dynamic-sd-fixed-placeholders",
        "mutant",
        DynamicSdFixedPlaceholders,
        "vllm-dynamic-sd",
        "dynamic SD (async_scheduler.py:24-30, scheduler.py:1709-1713 @0.33.0)",
        "placeholders stay k wide when the step's table entry drafts fewer",
        # One request decoding alone under a table that drafts fewer than k at batch size 1.
        needs={"dynamic_sd": True},
    ),
    Entry(
        "drop-on-preempt",
        "rewrite",
        DropOnPreemptScheduler,
        None,
        "correct rewrite",
        "every preemption drops its stale output and may resume at once",
    ),
)
MUTANTS: Final[Mapping[str, Entry]] = {entry.name: entry for entry in CORPUS}


MUTANT_PREFIX: Final = "vllm-mutant:"


def widened(bounds: Any, needs: Mapping[str, Any]) -> Any:
    """`bounds` (a `VllmBounds`) widened by what an entry `needs`: at least its events and
    requests, its depths added, its pool preempting if it asks, and its engine and request
    lengths (single values) as it gives them."""
    if not needs:
        return bounds
    changes = dict(needs)
    if "events" in needs and bounds.events is not None:
        changes["events"] = max(bounds.events, needs["events"])
    if "requests" in needs:
        changes["requests"] = max(bounds.requests, needs["requests"])
    if "depths" in needs:
        changes["depths"] = tuple(sorted({*bounds.depths, *needs["depths"]}))
    if "preemption" in needs:
        changes["preemption"] = bounds.preemption or needs["preemption"]
    return attrs.evolve(bounds, **changes)


@attrs.frozen
class VllmMutantEntry:
    """A corpus entry as the kill matrix sees it (`kvcheck.core.family.MutantEntry`)."""

    entry: Entry

    @property
    def name(self) -> str:
        """See `kvcheck.core.family.MutantEntry.name`."""
        return self.entry.name

    @property
    def kind(self) -> str:
        """See `kvcheck.core.family.MutantEntry.kind`."""
        return self.entry.kind

    @property
    def family(self) -> str:
        """See `kvcheck.core.family.MutantEntry.family`."""
        return "vllm"

    @property
    def expect(self) -> str | None:
        """See `kvcheck.core.family.MutantEntry.expect`."""
        return self.entry.expect

    @property
    def origin(self) -> str:
        """See `kvcheck.core.family.MutantEntry.origin`."""
        return self.entry.origin

    @property
    def summary(self) -> str:
        """See `kvcheck.core.family.MutantEntry.summary`."""
        return self.entry.summary

    @property
    def shrink_note(self) -> str:
        """See `kvcheck.core.family.MutantEntry.shrink_note`."""
        return self.entry.shrink_note

    @property
    def spec(self) -> str:
        """See `kvcheck.core.family.MutantEntry.spec`."""
        return MUTANT_PREFIX + self.entry.name

    @property
    def short_spec(self) -> str:
        """See `kvcheck.core.family.MutantEntry.short_spec`."""
        return MUTANT_PREFIX + self.entry.name

    @property
    def options(self) -> Any:
        """See `kvcheck.core.family.MutantEntry.options`."""
        return VllmJudging(self.entry.placeholder_drafts)

    def target(self) -> Target:
        """See `kvcheck.core.family.MutantEntry.target`."""
        return builtin_target(self.spec, self.entry.scheduler, self.entry.summary)


class VllmMutants:
    """vLLM's corpus for the kill matrix (`kvcheck.core.family.Mutants`)."""

    spec_prefix: Final = MUTANT_PREFIX
    entries: Final = tuple(VllmMutantEntry(entry) for entry in CORPUS)

    def get(self, name: str) -> VllmMutantEntry | None:
        """See `kvcheck.core.family.Mutants.get`."""
        return next((e for e in self.entries if e.name == name), None)

    @staticmethod
    def resolver(python_name: str) -> Any | None:
        """See `kvcheck.core.family.Mutants.resolver`."""
        return None  # vLLM's entries are reached as vllm-mutant:NAME only

    @staticmethod
    def row_columns(entry: Any) -> dict[str, Any]:
        """See `kvcheck.core.family.Mutants.row_columns`."""
        return {"expect": entry.expect, "origin": entry.origin}

    @staticmethod
    def list_columns(entry: Any) -> dict[str, Any]:
        """See `kvcheck.core.family.Mutants.list_columns`."""
        return {"expect": entry.expect, "origin": entry.origin, "summary": entry.summary}

    @staticmethod
    def list_line(entry: Any) -> str:
        """See `kvcheck.core.family.Mutants.list_line`."""
        expect = f" -> {entry.expect}" if entry.expect else ""
        return f"{entry.short_spec} [{entry.kind}]{expect}: {entry.summary} ({entry.origin})"

    @staticmethod
    def minimum_bounds(defaults: Any) -> Any:
        """See `kvcheck.core.family.Mutants.minimum_bounds`."""
        return defaults

    @staticmethod
    def bounds_for(target: Target, bounds: Any) -> Any:
        """`bounds` widened by what the corpus entry `target` needs (`Entry.needs`); other
        targets' bounds are left as they are."""
        entry = (
            MUTANTS.get(target.spec.removeprefix(MUTANT_PREFIX))
            if target.spec.startswith(MUTANT_PREFIX)
            else None
        )
        return bounds if entry is None else widened(bounds, entry.needs)

    # vLLM has one corpus (`kvcheck.core.family.Mutants.named_corpora`).
    named_corpora: Final[Mapping[str, NamedCorpus]] = {}

    @staticmethod
    def check_flags(entry: Any) -> list[str]:
        """See `kvcheck.core.family.Mutants.check_flags`: a vllm-mutant:NAME spec carries the
        entry's own placeholder setting, and its statistics are judged by default."""
        return []

    @staticmethod
    def shrink_gap(
        shrunk_config: Mapping[str, Any],
        shrunk_events: Sequence[Mapping[str, Any]],
        shortest_config: Mapping[str, Any],
        shortest_events: Sequence[Mapping[str, Any]],
    ) -> str | None:
        """See `kvcheck.core.family.Mutants.shrink_gap`."""
        return None
