"""vLLM's invariants, most basic first (docs/vllm.md "Invariants" gives each one's scope).

Every checker takes the model's `Expectation` and the engine's `Observation` after one event.
What a checker trusts: the model (from the events alone) and kvcheck's own ledger of the frames
it launched and delivered and of the runner's decisions; what it judges: the scheduler's
counters (`RequestView`), its pool (`PoolView`), what it scheduled and what it emitted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

import attrs

from kvcheck.core.invariant import Finding, Invariant, Violation
from kvcheck.families.vllm.engine import DeliveryFact, Observation, accepted_drafts
from kvcheck.families.vllm.model import Expectation
from kvcheck.families.vllm.scenario import (
    EOS_TOKEN,
    GRAMMAR_ERROR,
    SAMPLED_PER_STEP,
    TOKEN_BASE,
    SpecStatsMode,
)
from kvcheck.families.vllm.target import PLACEHOLDER_TOKEN, SpecStats, spec_tokens_for_batch

_EXPLAIN: Final = "kvcheck.families.vllm.explain:"


def check_raised(expected: Expectation, observed: Observation) -> Iterator[Finding]:
    """The scheduler raised."""
    if observed.raised is not None:
        yield Finding(
            None, "no exception", observed.raised, f"the scheduler raised {observed.raised}"
        )


def check_launch(expected: Expectation, observed: Observation) -> Iterator[Finding]:
    """A launch over the budget, over k, over `max_model_len - C - s`, or malformed."""
    config = expected.config
    for frame in observed.launches:
        total = sum(entry.scheduled for entry in frame.entries)
        if total > config.max_num_scheduled_tokens:
            yield Finding(
                None,
                config.max_num_scheduled_tokens,
                total,
                f"step {frame.step} scheduled {total} tokens, over the budget of "
                f"{config.max_num_scheduled_tokens}",
            )
        for entry, item in zip(frame.entries, frame.launch.scheduled, strict=True):
            if entry.fault:
                yield Finding(entry.rid, "a well-formed launch", entry.fault, entry.fault)
            if entry.drafts > config.num_spec_tokens:
                yield Finding(
                    entry.rid,
                    config.num_spec_tokens,
                    entry.drafts,
                    f"step {frame.step} scheduled {entry.drafts} drafts for {entry.rid}, more than "
                    f"k = {config.num_spec_tokens}",
                )
            room = config.max_model_len - item.num_computed_tokens - SAMPLED_PER_STEP
            if entry.scheduled > room:
                yield Finding(
                    entry.rid,
                    room,
                    entry.scheduled,
                    f"step {frame.step} scheduled {entry.scheduled} tokens for {entry.rid} with "
                    f"C = "
                    f"{item.num_computed_tokens}: over max_model_len - C - s = {room}",
                )


def check_counters(expected: Expectation, observed: Observation) -> Iterator[Finding]:
    """A negative counter."""
    for rid, view in observed.views.items():
        counters = {
            "num_computed_tokens": view.num_computed_tokens,
            "num_output_placeholders": view.num_output_placeholders,
            "num_in_flight_tokens": view.num_in_flight_tokens,
            "num_stale_output_tokens": view.num_stale_output_tokens,
            "async_tokens_to_discard": view.async_tokens_to_discard,
        }
        for name, value in counters.items():
            if value is not None and value < 0:
                yield Finding(rid, ">= 0", value, f"{rid}'s {name} is {value}")


def check_in_flight(expected: Expectation, observed: Observation) -> Iterator[Finding]:
    """IF differs from the ledger's in-flight tokens, or ST exceeds IF."""
    for rid, view in observed.views.items():
        if view.num_in_flight_tokens is None:
            continue
        scheduled = sum(n for _, n, _, _ in observed.in_flight.get(rid, ()))
        if view.num_in_flight_tokens != scheduled:
            yield Finding(
                rid,
                scheduled,
                view.num_in_flight_tokens,
                f"{rid}'s num_in_flight_tokens is {view.num_in_flight_tokens}, but its frames in "
                f"flight hold {scheduled} scheduled tokens",
            )
        stale = view.num_stale_output_tokens
        if stale is not None and stale > view.num_in_flight_tokens:
            yield Finding(
                rid,
                f"<= {view.num_in_flight_tokens}",
                stale,
                f"{rid}'s num_stale_output_tokens {stale} exceeds its in-flight tokens "
                f"{view.num_in_flight_tokens}",
            )


def check_reservation(expected: Expectation, observed: Observation) -> Iterator[Finding]:
    """A launch whose reservation differs from the runner's sample decision."""
    for frame in observed.launches:
        for entry in frame.entries:
            if entry.placeholders_before is None or entry.placeholders_after is None:
                continue
            reserved = entry.placeholders_after - entry.placeholders_before
            wanted = SAMPLED_PER_STEP + entry.drafts if entry.samples else 0
            if reserved != wanted:
                runner = (
                    f"the runner samples it ({SAMPLED_PER_STEP} + {entry.drafts} drafts)"
                    if entry.samples
                    else "the runner discards its sample (a prefill chunk)"
                )
                yield Finding(
                    entry.rid,
                    wanted,
                    reserved,
                    f"step {frame.step} reserved {reserved} placeholders for {entry.rid} but "
                    f"{runner}: every returned token needs one, and only those",
                )


def check_dynamic_sd(expected: Expectation, observed: Observation) -> Iterator[Finding]:
    """With dynamic SD driven: a step's `num_spec_tokens_to_schedule` is the table's entry for
    its batch size (vLLM's `schedule()` reads the lookup by `len(num_scheduled_tokens)`,
    scheduler.py:1710-1713 @0.33.0), and no request is scheduled more drafts than the runner
    proposed for it in its previous frame: the async launch turns that step's count into its
    placeholders (async_scheduler.py:28-30, 46-53), so a scheduler that reserves k slots
    instead reserves KV and placeholders for drafts that do not exist."""
    if not observed.dynamic_sd:
        return
    config = expected.config
    for frame in observed.launches:
        launch = frame.launch
        said = launch.num_spec_tokens_to_schedule
        if launch.scheduled and said is not None:
            batch = len(launch.scheduled)
            want = spec_tokens_for_batch(
                config.spec_tokens_per_batch_size, batch, config.num_spec_tokens
            )
            if said != want:
                yield Finding(
                    None,
                    want,
                    said,
                    f"step {frame.step} of {batch} requests asked the runner for {said} drafts, "
                    f"not the table's {want} for that batch size",
                )
        for entry in frame.entries:
            if entry.drafted is not None and entry.drafts > entry.drafted:
                yield Finding(
                    entry.rid,
                    entry.drafted,
                    entry.drafts,
                    f"step {frame.step} scheduled {entry.drafts} drafts for {entry.rid}, but the "
                    f"runner proposed {entry.drafted} for it in its previous frame",
                )


def check_identity(expected: Expectation, observed: Observation) -> Iterator[Finding]:
    """C != T + PH - s within the identity's scope."""
    for rid, view in observed.views.items():
        if view.status != "running" or view.num_output_placeholders <= 0:
            continue
        if view.num_stale_output_tokens or view.async_tokens_to_discard:
            continue
        if view.is_prefill_chunk:
            continue
        frames = observed.in_flight.get(rid, ())
        current = observed.incarnation.get(rid)
        if not frames or any(inc != current or not samples for _, _, inc, samples in frames):
            continue
        wanted = view.num_tokens + view.num_output_placeholders - SAMPLED_PER_STEP
        if view.num_computed_tokens != wanted:
            yield Finding(
                rid,
                wanted,
                view.num_computed_tokens,
                f"{rid}: C = {view.num_computed_tokens} but T + PH - s = {view.num_tokens} + "
                f"{view.num_output_placeholders} - {SAMPLED_PER_STEP} = {wanted}",
            )


def _first_difference(got: tuple[int, ...], want: tuple[int, ...]) -> int:
    for index, (a, b) in enumerate(zip(got, want, strict=False)):
        if a != b:
            return index
    return min(len(got), len(want))


def _what_differs(got: tuple[int, ...], want: tuple[int, ...], at: int) -> str:
    """Tokens encode their position, so a token below the one due repeats a position and one
    above it skips some."""
    if at >= len(want):
        return "tokens after the end of its output"
    if EOS_TOKEN in (got[at], want[at]):
        return f"token {got[at]} where {want[at]} is due"
    if got[at] < want[at]:
        return f"position {got[at] - TOKEN_BASE} delivered again (a duplicate)"
    first, last = want[at] - TOKEN_BASE, got[at] - TOKEN_BASE - 1
    return f"positions {first} to {last} never delivered (lost)"


def check_exactly_once(expected: Expectation, observed: Observation) -> Iterator[Finding]:
    """An output that is not a prefix of the true sequence, or a wrong finish."""
    for rid, got in observed.emitted.items():
        want = expected.outputs.get(rid, ())
        if got != want[: len(got)]:
            at = _first_difference(got, want)
            yield Finding(
                rid,
                list(want[: len(got)]),
                list(got),
                f"{rid}'s delivered output differs from its true sequence at output index {at}: "
                f"{_what_differs(got, want, at)}",
            )
            continue
        reason = observed.finished.get(rid)
        if rid in observed.grammar_rejected:
            # The grammar rejected delivered tokens: the output ends there, with an error.
            want_reason, finished_wrong = GRAMMAR_ERROR, reason != GRAMMAR_ERROR
        else:
            want_reason = expected.reasons.get(rid, "")
            finished_wrong = got != want or reason != want_reason
        if reason is not None and rid not in expected.aborted and finished_wrong:
            yield Finding(
                rid,
                {"tokens": len(want), "reason": want_reason},
                {"tokens": len(got), "reason": reason},
                f"{rid} finished ({reason}) after {len(got)} of its {len(want)} outputs",
            )
    for rid, view in observed.views.items():
        want = expected.outputs.get(rid, ())
        got = view.output_token_ids
        if got != want[: len(got)]:
            yield Finding(
                rid,
                list(want[: len(got)]),
                list(got),
                f"{rid}'s output_token_ids differ from its true sequence at output index "
                f"{_first_difference(got, want)}",
            )


def check_pool(expected: Expectation, observed: Observation) -> Iterator[Finding]:
    """A pool ledger that does not add up."""
    pool = observed.pool
    if pool is None:
        return
    # A deferred block keeps its reference until the deferred free drops it: it counts as held,
    # and its count is one per table holding it plus one per deferred free waiting on it (so a
    # block freed both at once and later, or twice later, shows as a count that disagrees).
    held = sum(1 for count in pool.ref_counts.values() if count != 0)
    total = pool.free_blocks + held + 1
    if total != pool.num_blocks:
        yield Finding(
            None,
            pool.num_blocks,
            total,
            f"free {pool.free_blocks} + held {held} (deferred {len(pool.deferred)} among them) "
            f"+ null 1 = {total} blocks, of {pool.num_blocks}",
        )
    owners: dict[int, int] = {}
    for blocks in (*pool.blocks_of.values(), pool.deferred):
        for block in blocks:
            owners[block] = owners.get(block, 0) + 1
    for block in sorted(set(owners) | set(pool.ref_counts)):
        count = pool.ref_counts.get(block, 0)
        if count != owners.get(block, 0):
            yield Finding(
                None,
                owners.get(block, 0),
                count,
                f"block {block} has ref count {count} but {owners.get(block, 0)} block tables "
                f"and deferred frees hold it{' (freed more than once)' if count < 0 else ''}",
            )
    for rid in pool.blocks_of:
        if rid not in observed.request_ids:
            yield Finding(rid, "no blocks", pool.blocks_of[rid], f"{rid} is gone but owns blocks")


def check_deferred_free(expected: Expectation, observed: Observation) -> Iterator[Finding]:
    """With deferred frees, a block a frame in flight may still write stays with its request or
    waits in the deferred list until that frame returns: never free, never another's."""
    pool = observed.pool
    if not observed.defers or pool is None:
        return
    deferred = set(pool.deferred)
    reported: set[int] = set()
    for step, rid, blocks in observed.written_in_flight:
        held = set(pool.blocks_of.get(rid, ()))
        for block in blocks:
            if block in held or block in deferred or block in reported:
                continue
            reported.add(block)
            owners = sorted(other for other, table in pool.blocks_of.items() if block in table)
            where = f"held by {', '.join(owners)}" if owners else "back in the free pool"
            yield Finding(
                rid,
                "held or deferred",
                where,
                f"block {block} of {rid}, which the frame of step {step} still in flight may "
                f"write, is {where} before that frame returned",
            )


def check_placeholder_drafts(expected: Expectation, observed: Observation) -> Iterator[Finding]:
    """`-1` drafts scheduled after a gap (V1 runner, when asked)."""
    config = expected.config
    if not config.placeholder_drafts or config.runner != "v1":
        return
    for frame in observed.launches:
        for entry in frame.entries:
            if entry.placeholder_gap:
                yield Finding(
                    entry.rid,
                    "real drafts",
                    "-1 placeholders",
                    f"step {frame.step} scheduled {entry.rid}'s `-1` draft placeholders although "
                    "it was not in the previous batch: the V1 runner feeds them to the model",
                )


def check_grammar(expected: Expectation, observed: Observation) -> Iterator[Finding]:
    """Validated drafts that are not the runner's: fewer or more than the placeholders
    reserved, a draft the grammar accepts changed, one it rejects turned into anything but
    itself or `-1`; tokens the grammar rejected that do not finish their request with an
    error, or that a later delivery adds to."""
    for frame in observed.launches:
        for entry in frame.entries:
            if entry.validated is None or entry.proposed is None or entry.acceptable is None:
                continue
            kept = entry.acceptable
            valid = len(entry.validated) == entry.drafts and all(
                draft == proposed or (index >= kept and draft == PLACEHOLDER_TOKEN)
                for index, (draft, proposed) in enumerate(
                    zip(entry.validated, entry.proposed, strict=False)
                )
            )
            if not valid:
                want = entry.proposed[:kept] + (PLACEHOLDER_TOKEN,) * (len(entry.proposed) - kept)
                yield Finding(
                    entry.rid,
                    list(want),
                    list(entry.validated),
                    f"step {frame.step}'s drafts for {entry.rid}, validated against a grammar that "
                    f"accepts {kept} of the {len(entry.proposed)} proposed, are "
                    f"{list(entry.validated)}: not the {entry.drafts} drafts its placeholders "
                    "reserved, the valid ones kept and the others kept or padded with -1",
                )
    for fact in observed.deliveries:
        if fact.delivered is None:
            continue
        for rid in sorted(fact.rejected):
            reason = fact.delivered.finished.get(rid)
            if reason != GRAMMAR_ERROR:
                yield Finding(
                    rid,
                    GRAMMAR_ERROR,
                    reason or "not finished",
                    f"the grammar rejected {rid}'s tokens of step {fact.step}, but the step "
                    f"{'finished it (' + reason + ')' if reason else 'did not finish it'}",
                )
        for rid, tokens in fact.delivered.new_token_ids.items():
            if tokens and rid in observed.grammar_rejected - fact.rejected:
                yield Finding(
                    rid,
                    [],
                    list(tokens),
                    f"step {fact.step} delivered tokens to {rid} after its grammar rejected "
                    "its output and finished it",
                )


def expected_spec_stats(fact: DeliveryFact, k: int, mode: SpecStatsMode) -> SpecStats | None:
    """What one delivery's speculative statistics must be, from kvcheck's ledger: one draft per
    live request whose frame scheduled drafts, returned tokens and had them applied, its drafts
    and the runner's accepted ones. A stale frame (its request preempted or reset since the
    launch) may be delivered (vLLM 0.27+ does after a preemption) or dropped (as after a
    reset); a dropped one counts only when stale frames are `included`.

    None: not judged at this delivery, because the scheduler dropped a fresh frame's output
    (lost tokens, `vllm-exactly-once`'s to report; whether their drafts count is moot)."""
    applied = {} if fact.delivered is None else fact.delivered.new_token_ids
    counted: list[tuple[int, int]] = []
    for entry in fact.entries:
        if not (entry.samples and entry.rid in fact.live):
            continue
        if not applied.get(entry.rid):
            if entry.rid not in fact.stale:
                return None
            if mode == "excluded":
                continue
        if entry.drafts:
            # Drafts the grammar invalidated are not proposals (scheduler.py:3317-3318 @0.33.0).
            counted.append((entry.drafts - entry.invalid, accepted_drafts(entry, fact.accept)))
    return SpecStats.of(k, counted)


def _stats_as_recorded(stats: SpecStats | None, k: int) -> SpecStats:
    """`None` (nothing recorded) as empty statistics over k positions."""
    return SpecStats.of(k, ()) if stats is None else stats


def check_spec_stats(expected: Expectation, observed: Observation) -> Iterator[Finding]:
    """Speculative statistics that differ from the frames the step counts."""
    config = expected.config
    if config.spec_stats == "off":
        return
    k = config.num_spec_tokens
    for fact in observed.deliveries:
        if fact.delivered is None:
            continue
        want = expected_spec_stats(fact, k, config.spec_stats)
        if want is None:
            continue
        got = _stats_as_recorded(fact.delivered.spec_stats, k)
        if got != want:
            stale = sorted(fact.stale & fact.live)
            yield Finding(
                None,
                attrs.asdict(want),
                attrs.asdict(got),
                f"update_from_output of step {fact.step} recorded {got.num_drafts} drafts, "
                f"{got.num_draft_tokens} draft tokens, {got.num_accepted_tokens} accepted, per "
                f"position {list(got.num_accepted_tokens_per_pos)}; the frame counts "
                f"{want.num_drafts}, {want.num_draft_tokens}, {want.num_accepted_tokens}, "
                f"{list(want.num_accepted_tokens_per_pos)} (stale frames {config.spec_stats}"
                + (f"; stale for {stale}" if stale else "")
                + ")",
            )


def check_quiescence(expected: Expectation, observed: Observation) -> Iterator[Finding]:
    """An engine not idle and empty after a drain."""
    if not expected.quiescent:
        return
    if not observed.drained:
        yield Finding(
            None,
            "idle",
            f"busy after {observed.drain_steps} steps",
            f"the engine was not idle after {observed.drain_steps} steps of a drain "
            f"({len(observed.request_ids)} requests held, {observed.frames_in_flight} frames in "
            "flight)",
        )
    if observed.request_ids:
        yield Finding(
            None,
            [],
            list(observed.request_ids),
            f"the scheduler still holds {list(observed.request_ids)}",
        )
    for rid in expected.outputs:
        if rid not in expected.aborted and rid not in observed.finished:
            yield Finding(rid, "finished", "never finished", f"{rid} never finished")
    pool = observed.pool
    if pool is not None and (pool.free_blocks != pool.num_blocks - 1 or pool.ref_counts):
        yield Finding(
            None,
            pool.num_blocks - 1,
            pool.free_blocks,
            f"{pool.free_blocks} of {pool.num_blocks - 1} blocks free at quiescence",
        )


def _invariant(
    id: str, meaning: str, check: object, *, mutant: str, aspects: tuple[str, ...] = ()
) -> Invariant:
    """An event-scope record; `mutant`: the corpus entry the conformance suite finds it on (of
    the entries that break it, the one the exhaustive search reaches soonest within
    `VllmMoves.conformance_bounds` widened by the entry's `needs`)."""
    return Invariant(
        id=id,
        meaning=meaning,
        scope="event",
        check=check,  # type: ignore[arg-type]
        aspects=aspects,
        explain=_EXPLAIN + "explain",
        mutant=mutant,
    )


INVARIANTS: Final = {
    invariant.id: invariant
    for invariant in (
        _invariant(
            "vllm-no-exception",
            "the scheduler never raises",
            check_raised,
            mutant="preempt-assumes-idle",
        ),
        _invariant(
            "vllm-launch",
            "a launch respects the budget, k and `max_model_len - C - s`, and sends the runner "
            "a request's true tokens before it schedules it",
            check_launch,
            mutant="no-length-clamp",
        ),
        _invariant(
            "vllm-counters",
            "no counter is negative: C, PH, IF, ST and the discard count",
            check_counters,
            mutant="stale-rejection",
        ),
        _invariant(
            "vllm-in-flight",
            "IF equals the scheduled tokens of the request's frames in flight, and ST <= IF",
            check_in_flight,
            mutant="in-flight-after-drop",
        ),
        _invariant(
            "vllm-reservation",
            "a launch reserves `s + k` placeholders exactly for a frame the runner samples, and "
            "none for one it discards",
            check_reservation,
            mutant="no-stale-marking",
        ),
        _invariant(
            "vllm-dynamic-sd",
            "with dynamic SD, a step drafts the table's entry for its batch size, and no "
            "request is scheduled more drafts than the runner proposed for it",
            check_dynamic_sd,
            mutant="dynamic-sd-fixed-placeholders",
        ),
        _invariant(
            "vllm-identity",
            "C == T + PH - s for a running non-chunk request with only fresh sampling frames in "
            "flight and no stale share",
            check_identity,
            mutant="no-stale-gate",
        ),
        _invariant(
            "vllm-exactly-once",
            "every sampled position is delivered exactly once, in order: the output is a prefix "
            "of the true sequence, and all of it with the right reason at a finish",
            check_exactly_once,
            mutant="token-counted-discard",
        ),
        _invariant(
            "vllm-pool",
            "every block is free, held or the null block; a block's ref count equals the tables "
            "and deferred frees holding it (a block freed twice shows as a count too low)",
            check_pool,
            mutant="freed-twice",
        ),
        _invariant(
            "vllm-deferred-free",
            "with deferred frees, a freed request's blocks that a frame in flight may write go "
            "back to the pool only after that frame returns (and, as vllm-pool says, once)",
            check_deferred_free,
            mutant="eager-free",
        ),
        _invariant(
            "vllm-placeholder-drafts",
            "no `-1` draft placeholder is scheduled for a request missing from the previous "
            "batch (V1 runner; judged when the config asks)",
            check_placeholder_drafts,
            mutant="placeholder-survivors",
            aspects=("placeholder-drafts",),
        ),
        _invariant(
            "vllm-grammar",
            "a request's drafts validated against its grammar are the valid prefix padded with "
            "-1 to the number scheduled, and tokens the grammar rejects finish the request with "
            "an error, nothing delivered after",
            check_grammar,
            mutant="grammar-trim-unpadded",
        ),
        _invariant(
            "vllm-spec-stats",
            "a step's speculative statistics count one draft per live request whose frame "
            "scheduled drafts and returned tokens, with its drafts, accepted drafts and accepted "
            "positions; a stale frame whose output is dropped counts only when judged with "
            "stale frames included",
            check_spec_stats,
            mutant="stats-position-shifted",
        ),
        _invariant(
            "vllm-quiescence",
            "after a drain: the engine idle, no request held, every request finished, every "
            "block free",
            check_quiescence,
            mutant="finished-kept",
        ),
    )
}


def check_event(index: int, expected: Expectation, observed: Observation) -> list[Violation]:
    """The violations after event `index`, most basic first."""
    return [
        Violation(invariant.id, index, f.rid, f.expected, f.observed, f.message)
        for invariant in INVARIANTS.values()
        for f in invariant.check(expected, observed)
    ]
