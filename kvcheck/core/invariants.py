"""The invariants: one `Invariant` record each (id, meaning, scope, checker), in one table.

A checker compares the reference model's expectation with what the engine observed on the fakes
and yields a `Finding` for each difference; `check_event` turns findings into `Violation`s under
the invariant's id. The ids are part of the public contract (CHANGELOG.md); `INVARIANTS` lists
them in the order they are checked, so the first violation reported at an event is the most basic
one that broke. Every request is checked after every event, not only the rows of the delivered
batch: a resolver that corrupts a request outside the batch is caught too.

Adding an invariant is one edit: write its checker and add its record to `INVARIANTS`
(docs/architecture.md, "Where to add an invariant").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Final, Literal, TypeAlias

import attrs

from kvcheck.core.engine import Observation, ObservedDelivery, ObservedRequest
from kvcheck.core.jsonable import show
from kvcheck.core.model import Expectation, ExpectedDelivery, RequestExpectation


@attrs.frozen
class Violation:
    """A broken invariant as reported: part of the public contract (`--json`, counterexample files).

    `invariant` is its id, `event_index` the 0-based event at which it broke, `rid` the request
    concerned (None for batch-level invariants), then the expected and observed values and one
    sentence.
    """

    invariant: str
    event_index: int
    rid: str | None
    expected: Any
    observed: Any
    message: str

    def to_dict(self) -> dict[str, Any]:
        """The violation field by field, the `violation` object of `--json` reports."""
        return attrs.asdict(self)


@attrs.frozen
class Finding:
    """One difference a checker saw: whose, expected and observed values, and a sentence.

    `aspect` names the part of SGLang's API the finding is about (`kvcheck.core.target.ASPECTS`)
    when only some API generations maintain it; a finding on an aspect the target is not held
    to is dropped.
    """

    rid: str | None
    expected: Any
    observed: Any
    message: str
    aspect: str | None = None


# What a checker looks at: the whole event (the target's call, the delivery), each delivery, or
# each request (every request after every event, in the model's order).
Scope: TypeAlias = Literal["event", "delivery", "request"]
EventChecker: TypeAlias = Callable[[Expectation, Observation], Iterator[Finding]]
DeliveryChecker: TypeAlias = Callable[[ExpectedDelivery, ObservedDelivery], Iterator[Finding]]
RequestChecker: TypeAlias = Callable[[RequestExpectation, ObservedRequest], Iterator[Finding]]


@attrs.frozen
class Invariant:
    """One invariant: its public id, what it means, what it looks at, and its check (a checker
    lifted to the whole event by `on_event`, `on_delivery` or `on_request`)."""

    id: str
    meaning: str
    scope: Scope
    check: EventChecker


def on_event(id: str, meaning: str, checker: EventChecker) -> Invariant:
    """Checked once per event, on the expectation and the observation as a whole."""
    return Invariant(id, meaning, "event", checker)


def on_delivery(id: str, meaning: str, checker: DeliveryChecker) -> Invariant:
    """Checked on the delivery of a launch, when the event delivered one."""

    def check(expected: Expectation, observed: Observation) -> Iterator[Finding]:
        if expected.delivery is not None and observed.delivery is not None:
            yield from checker(expected.delivery, observed.delivery)

    return Invariant(id, meaning, "delivery", check)


# The last observation's requests by rid: every request-level invariant of an event looks them
# up, so they are indexed once per event (the observation is held, so identity is safe).
_BY_RID: list[Any] = [None, {}]


def _by_rid(observed: Observation) -> dict[str, ObservedRequest]:
    if _BY_RID[0] is not observed:
        _BY_RID[0], _BY_RID[1] = observed, {req.rid: req for req in observed.requests}
    by_rid: dict[str, ObservedRequest] = _BY_RID[1]
    return by_rid


def on_request(id: str, meaning: str, checker: RequestChecker) -> Invariant:
    """Checked on every request the model knows of, after every event."""

    def check(expected: Expectation, observed: Observation) -> Iterator[Finding]:
        observed_by_rid = _by_rid(observed)
        for exp_req in expected.requests:
            obs_req = observed_by_rid.get(exp_req.rid)
            if obs_req is None:  # the engine and model disagree on who exists: a kvcheck bug
                raise AssertionError(f"engine has no request {exp_req.rid}")
            yield from checker(exp_req, obs_req)

    return Invariant(id, meaning, "request", check)


def _values_equal(expected: Any, observed: Any) -> bool:
    # bool is an int subclass and a tensor compares element-wise: insist on a plain int.
    return type(observed) is int and observed == expected


# --- the target's call and its runs -------------------------------------------------------------


def check_target_deadline(expected: Expectation, observed: Observation) -> Iterator[Finding]:
    """`target-deadline`: every call of the target returns within its deadline
    (`kvcheck.core.deadline`); one still running then was interrupted (checked first)."""
    seconds = observed.deadline_exceeded
    if seconds is not None:
        yield Finding(
            None,
            f"a return within {seconds:g} s",
            f"still running after {seconds:g} s",
            f"a call of the resolver was still running after its {seconds:g} s deadline and was "
            "interrupted (a hang, or far slower than a scheduler step allows)",
        )


def check_target_raised(expected: Expectation, observed: Observation) -> Iterator[Finding]:
    """`target-raised`: the resolver must return; what it raised is the finding (checked first)."""
    if observed.target_error is not None:
        yield Finding(
            None,
            "a list of runs",
            observed.target_error,
            f"the resolver raised {observed.target_error}",
        )


def check_runs_aligned(expected: Expectation, observed: Observation) -> Iterator[Finding]:
    """`runs-aligned` (§2.9 invariant 10): one run per row of the delivered launch.

    Stale rows included, run i must be exactly row i's first a_i token ids under the stride
    recorded at launch. Only the first misaligned row is reported; skipped when the target raised.
    """
    exp, obs = expected.delivery, observed.delivery
    if exp is None or obs is None or observed.target_error is not None:
        return
    launch = exp.launch.number
    if obs.runs is None:
        problem = obs.runs_problem or "not a list of runs"
        yield Finding(
            None,
            f"{len(exp.runs)} runs",
            obs.runs_repr,
            f"the resolver returned {obs.runs_repr} for launch {launch}: {problem} (SGLang "
            "extends output_ids with each run as it is)",
        )
        return
    if obs.rids != exp.launch.rids:
        yield _rows_diverged(observed, exp, obs)
        return
    if len(obs.runs) != len(exp.runs):
        yield Finding(
            None,
            f"{len(exp.runs)} runs",
            f"{len(obs.runs)} runs",
            f"launch {launch} has {len(exp.runs)} rows (stale included) but the resolver "
            f"returned {len(obs.runs)} runs",
        )
        return
    for row, (want, got) in enumerate(zip(exp.runs, obs.runs, strict=True)):
        if want != got:
            rid = exp.launch.rids[row]
            yield Finding(
                rid,
                list(want),
                list(got),
                f"row {row} ({rid}) of launch {launch} (stride {exp.launch.stride} at launch) "
                f"should be {list(want)}, the resolver returned {list(got)}",
            )
            return


def _rows_diverged(observed: Observation, exp: ExpectedDelivery, obs: ObservedDelivery) -> Finding:
    """The scheduler launched other rows than the model: a request's state had already left the
    model's (e.g. its `output_ids` grew twice, so it reached its length cap early). Says which,
    instead of blaming the number of runs the resolver returned."""
    want, got = exp.launch.rids, obs.rids
    observed_of = {r.rid: r for r in observed.requests}
    notes = []
    for rid in want:
        if rid not in got and rid in observed_of:
            o = observed_of[rid]
            state = "finished" if o.finished else "retracted" if o.retracted else "waiting"
            notes.append(
                f"{rid} is not in the scheduler's batch (it is {state} there, with {o.outputs} "
                "output tokens)"
            )
    notes += [f"{rid} is in the scheduler's batch only" for rid in got if rid not in want]
    return Finding(
        None,
        list(want),
        list(got),
        f"launch {exp.launch.number} should hold rows {', '.join(want) or 'none'} (stale "
        f"included) but the scheduler launched it with {', '.join(got) or 'none'}: "
        f"{'; '.join(notes)}. The requests had left the model's states before this launch, "
        "e.g. output_ids changed outside the scheduler (it extends them with the returned "
        "runs; a resolver must not)",
    )


def _grammar_rows(
    exp: ExpectedDelivery, obs: ObservedDelivery, stale: bool
) -> Iterator[tuple[int, str, tuple[int, ...], tuple[int, ...]]]:
    """(row, rid, expected, observed offered tokens) of the grammar rows that are (not) stale."""
    for row, want in enumerate(exp.grammar_offered):
        if want is None or exp.stale[row] != stale or row >= len(obs.grammar_offered):
            continue
        got = obs.grammar_offered[row]
        yield row, exp.launch.rids[row], want, () if got is None else got


def check_grammar_advanced_once(exp: ExpectedDelivery, obs: ObservedDelivery) -> Iterator[Finding]:
    """`grammar-advanced-once` (§1.4): a live grammar row's grammar is offered its run exactly
    once, token by token, up to the token that terminates it or the one it refuses."""
    for row, rid, want, got in _grammar_rows(exp, obs, stale=False):
        if want != got:
            yield Finding(
                rid,
                list(want),
                list(got),
                f"the grammar of {rid} (row {row} of launch {exp.launch.number}) should be "
                f"offered {list(want)} once, it was offered {list(got)}",
            )
            return


def check_grammar_stale_untouched(
    exp: ExpectedDelivery, obs: ObservedDelivery
) -> Iterator[Finding]:
    """`grammar-stale-untouched` (§1.4): a stale row never advances its request's grammar."""
    for row, rid, _, got in _grammar_rows(exp, obs, stale=True):
        if got:
            yield Finding(
                rid,
                [],
                list(got),
                f"{rid}'s row {row} of launch {exp.launch.number} is stale, yet its grammar was "
                f"offered {list(got)}",
            )
            return


# --- every request ------------------------------------------------------------------------------


def check_no_negative(exp: RequestExpectation, obs: ObservedRequest) -> Iterator[Finding]:
    """`no-negative` (§2.9 invariant 2): C, the verify count, the accepted drafts and the histogram
    buckets never go below zero. Values that are not ints are left to the other checkers.
    """
    fields = {
        "committed length": obs.committed,
        "spec_verify_ct": obs.verify_ct,
        "accepted drafts": obs.drafts,
    }
    for name, value in fields.items():
        if isinstance(value, int) and value < 0:
            yield Finding(exp.rid, ">= 0", value, f"{exp.rid}'s {name} went negative ({value})")
    for bucket, count in obs.histogram:
        if bucket < 0:
            yield Finding(
                exp.rid,
                "buckets >= 0",
                dict(obs.histogram),
                f"{exp.rid}'s acceptance histogram has a negative bucket {bucket} (x{count})",
            )


def _committed_in(phases: tuple[str, ...], state: str) -> RequestChecker:
    """The committed-length checker for requests in `phases` (one invariant id per phase group:
    live and waiting requests, finished ones, retracted ones)."""

    def check(exp: RequestExpectation, obs: ObservedRequest) -> Iterator[Finding]:
        if exp.phase not in phases or _values_equal(exp.committed, obs.committed):
            return
        shown = state if exp.phase != "waiting" else "is waiting"
        yield Finding(
            exp.rid,
            exp.committed,
            obs.committed,
            f"{exp.rid} {shown}; committed length expected "
            f"{show(exp.committed, obs.committed)}, observed {show(obs.committed, exp.committed)}",
        )

    return check


def check_verify_count(exp: RequestExpectation, obs: ObservedRequest) -> Iterator[Finding]:
    """`stats-verify-count`: `spec_verify_ct` is a plain int equal to the request's applied rows."""
    if not _values_equal(exp.verify_ct, obs.verify_ct):
        yield Finding(
            exp.rid,
            exp.verify_ct,
            obs.verify_ct,
            f"{exp.rid} ({exp.phase}) has {show(exp.verify_ct, obs.verify_ct)} applied verify "
            f"rows, spec_verify_ct is {show(obs.verify_ct, exp.verify_ct)}",
        )


def check_accepted_drafts(exp: RequestExpectation, obs: ObservedRequest) -> Iterator[Finding]:
    """`stats-accepted-drafts`: the per-request draft counter, under any generation's name, is a
    plain int equal to the sum of a - 1 over applied rows.
    """
    if not _values_equal(exp.drafts, obs.drafts):
        yield Finding(
            exp.rid,
            exp.drafts,
            obs.drafts,
            f"{exp.rid} ({exp.phase}) accepted {show(exp.drafts, obs.drafts)} drafts on "
            f"applied rows, the counter says {show(obs.drafts, exp.drafts)}",
        )


def check_histogram(exp: RequestExpectation, obs: ObservedRequest) -> Iterator[Finding]:
    """`stats-histogram`: buckets of a - 1 over applied rows, summing to the verify count.

    Its findings carry the `histogram` aspect: code from before 0.5.9 is not held to it.
    """
    total = sum(count for _, count in obs.histogram)
    if obs.histogram != exp.histogram or total != exp.verify_ct:
        yield Finding(
            exp.rid,
            dict(exp.histogram),
            dict(obs.histogram),
            f"{exp.rid} ({exp.phase}) acceptance histogram expected {dict(exp.histogram)} "
            f"(total {exp.verify_ct}), observed {dict(obs.histogram)} (total {total})",
            aspect="histogram",
        )


def check_block_cap(exp: RequestExpectation, obs: ObservedRequest) -> Iterator[Finding]:
    """Block-accept and cap statistics (0.5.16+): summed over applied rows, the cap lengths
    logged in a histogram; a stale row adds nothing."""
    observed = (obs.block_tokens, obs.cap_tokens, dict(obs.cap_histogram))
    expected = (exp.block_tokens, exp.cap_tokens, dict(exp.cap_histogram))
    if (
        not _values_equal(exp.block_tokens, obs.block_tokens)
        or not _values_equal(exp.cap_tokens, obs.cap_tokens)
        or obs.cap_histogram != exp.cap_histogram
    ):
        yield Finding(
            exp.rid,
            expected,
            observed,
            f"{exp.rid} ({exp.phase}) block-accept / cap tokens / cap histogram expected "
            f"{expected[0]} / {expected[1]} / {expected[2]} over applied rows, observed "
            f"{show(observed[0], expected[0])} / {show(observed[1], expected[1])} / "
            f"{observed[2]}",
        )


# --- allocation and release (with an allocation rule) -------------------------------------------


def check_alloc_untouched(exp: ExpectedDelivery, obs: ObservedDelivery) -> Iterator[Finding]:
    """`alloc-untouched-by-resolver`: the resolver never changes any request's
    `kv_allocated_len`; the scheduler alone sizes and releases the allocation."""
    for rid, before, after in obs.allocated_changed:
        yield Finding(
            rid,
            before,
            after,
            f"the resolver changed {rid}'s kv_allocated_len from {before!r} to {after!r} while "
            f"resolving launch {exp.launch.number}; only the scheduler allocates",
        )
        return


def _allocated(obs: ObservedRequest) -> int | None:
    return obs.allocated if type(obs.allocated) is int else None


def _judged(exp: RequestExpectation, obs: ObservedRequest) -> bool:
    """Allocation is judged on a request only with an allocation rule and when the engine and
    the model agree on whether it finished or was retracted: a lifecycle disagreement is the
    committed-length and run invariants' to report, not a release fault."""
    return (
        exp.allocated is not None
        and (exp.phase == "finished") == obs.finished
        and (exp.phase == "retracted") == obs.retracted
    )


def check_alloc_covers_reserve(exp: RequestExpectation, obs: ObservedRequest) -> Iterator[Finding]:
    """`alloc-covers-reserve` (§2.9 invariant 3): after a decode launch a live request's Al
    covers its committed length at sizing plus the reserve R = 2A."""
    if not _judged(exp, obs) or exp.phase != "running":
        return
    allocated = _allocated(obs)
    if allocated is None or allocated < exp.alloc_floor:
        yield Finding(
            exp.rid,
            f">= {exp.alloc_floor}",
            obs.allocated,
            f"{exp.rid}'s kv_allocated_len is {obs.allocated!r}, below committed + reserve "
            f"({exp.alloc_floor}) of its last decode launch",
        )


def check_alloc_never_shrinks(exp: RequestExpectation, obs: ObservedRequest) -> Iterator[Finding]:
    """`alloc-never-shrinks` (§2.9 invariant 3, the clamp): a live request's Al never goes
    below the highest value it had in this residency."""
    if not _judged(exp, obs) or exp.phase != "running":
        return
    allocated = _allocated(obs)
    if allocated is not None and allocated < exp.alloc_peak:
        yield Finding(
            exp.rid,
            f">= {exp.alloc_peak}",
            allocated,
            f"{exp.rid} is live and had kv_allocated_len {exp.alloc_peak}; it shrank to "
            f"{allocated}, stranding the slots past it",
        )


def check_alloc_page_aligned(exp: RequestExpectation, obs: ObservedRequest) -> Iterator[Finding]:
    """`alloc-page-aligned` (0.5.16+): once a decode launch sized it, a live request's Al is a
    multiple of the page size."""
    allocated = _allocated(obs)
    if (
        exp.alloc_aligned
        and exp.phase == "running"
        and _judged(exp, obs)
        and allocated is not None
        and allocated % exp.page_size
    ):
        yield Finding(
            exp.rid,
            f"a multiple of {exp.page_size}",
            allocated,
            f"{exp.rid}'s kv_allocated_len {allocated} is not page-aligned (page size "
            f"{exp.page_size}): the paged allocator hands out whole pages",
        )


def check_alloc_expected(exp: RequestExpectation, obs: ObservedRequest) -> Iterator[Finding]:
    """`alloc-expected`: Al is exactly what the generation's rule gives (no over-allocation,
    what release leaves behind, zero after retraction)."""
    if _judged(exp, obs) and not _values_equal(exp.allocated, obs.allocated):
        yield Finding(
            exp.rid,
            exp.allocated,
            obs.allocated,
            f"{exp.rid} ({exp.phase}) kv_allocated_len expected {exp.allocated}, observed "
            f"{obs.allocated!r}",
        )


def _faults(*kinds: str) -> EventChecker:
    """An event checker reporting the pool's ownership faults of `kinds` (`kvcheck.core.pool`),
    at the event where they happened."""

    def check(expected: Expectation, observed: Observation) -> Iterator[Finding]:
        if observed.pool is None:
            return
        for fault in observed.pool.faults:
            if fault.kind in kinds:
                yield Finding(fault.rid, "no " + fault.kind, fault.kind, fault.message)
                return

    return check


def _and(*checkers: EventChecker) -> EventChecker:
    def check(expected: Expectation, observed: Observation) -> Iterator[Finding]:
        for checker in checkers:
            yield from checker(expected, observed)

    return check


def _requests(checker: RequestChecker) -> EventChecker:
    return on_request("", "", checker).check


def check_estimate_matches(expected: Expectation, observed: Observation) -> Iterator[Finding]:
    """`alloc-estimate-matches`: the pages the scheduler's memory check estimated for a decode
    launch are the pages the launch then allocated (sglang#14972, #19881). Not judged at an
    event with ownership faults: those explain the difference and are reported by their own
    invariants."""
    if observed.launch_pages is not None and observed.pool is not None and not observed.pool.faults:
        estimate, allocated = observed.launch_pages
        if estimate != allocated:
            late = "too late" if allocated > estimate else "too early"
            yield Finding(
                None,
                estimate,
                allocated,
                f"the memory check estimated {estimate} pages for this decode launch, which "
                f"allocated {allocated}: retraction comes {late}",
            )


def check_released(exp: RequestExpectation, obs: ObservedRequest) -> Iterator[Finding]:
    """A finished request holds no row and no page (it was released)."""
    if _judged(exp, obs) and exp.phase == "finished" and (obs.holds_row or obs.pages):
        yield Finding(
            exp.rid,
            "released",
            f"{obs.pages} pages",
            f"{exp.rid} finished but still holds its row ({obs.pages} pages): never released",
        )


def check_pages_held(exp: RequestExpectation, obs: ObservedRequest) -> Iterator[Finding]:
    """A live request holds exactly the pages covering its Al."""
    if _judged(exp, obs) and exp.phase in ("running", "waiting") and obs.pages != exp.pages:
        yield Finding(
            exp.rid,
            exp.pages,
            obs.pages,
            f"{exp.rid} ({exp.phase}) should hold {exp.pages} pages, its row holds {obs.pages}",
        )


def check_retracted_empty(exp: RequestExpectation, obs: ObservedRequest) -> Iterator[Finding]:
    """`kv-retracted-empty`: until re-admission a retracted request has Al = 0 and no row."""
    if not _judged(exp, obs) or exp.phase != "retracted":
        return
    if obs.holds_row or obs.pages or not _values_equal(0, obs.allocated):
        yield Finding(
            exp.rid,
            "Al 0, no row",
            f"Al {obs.allocated!r}, {obs.pages} pages",
            f"{exp.rid} is retracted yet has kv_allocated_len {obs.allocated!r} and "
            f"{obs.pages} pages",
        )


# --- batch-level values of a delivery ------------------------------------------------------------


def _int_list(value: Any) -> Any:
    """A per-row list written by the target, as a list of plain ints when it is one."""
    try:
        items = value.tolist() if hasattr(value, "tolist") else value
        if isinstance(items, list | tuple) and all(type(x) is int for x in items):
            return list(items)
    except (TypeError, ValueError):
        pass
    return value


def check_global_counters(exp: ExpectedDelivery, obs: ObservedDelivery) -> Iterator[Finding]:
    """The batch-level values a resolver leaves behind: the draft total and per-row list on the
    result, the adaptive controller's feed, the block/cap totals. Each finding names its aspect,
    so only those the target's API generation maintains are judged."""
    if exp.global_drafts is None:  # global counters off
        return
    launch = exp.launch.number
    stale_rids = [rid for rid, s in zip(exp.launch.rids, exp.stale, strict=True) if s]
    why = f" (stale rows: {', '.join(stale_rids)})" if stale_rids else ""
    if not _values_equal(exp.global_drafts, obs.global_drafts):
        yield Finding(
            None,
            exp.global_drafts,
            obs.global_drafts,
            f"launch {launch}: batch-global accepted-draft counter expected "
            f"{show(exp.global_drafts, obs.global_drafts)}, the resolver wrote "
            f"{show(obs.global_drafts, exp.global_drafts)}{why}",
            aspect="result-drafts-total",
        )
    per_row = _int_list(obs.per_row_drafts)
    if per_row != list(exp.per_row_drafts):
        yield Finding(
            None,
            list(exp.per_row_drafts),
            per_row,
            f"launch {launch}: the per-row accepted-draft list on the result should be "
            f"{list(exp.per_row_drafts)} (accept_len - 1 for every row, stale ones included), "
            f"the resolver wrote {per_row!r}",
            aspect="result-drafts-per-row",
        )
    if exp.controller_feed is not None:
        yield from _check_controller_feed(list(exp.controller_feed), obs, launch, why)
    if exp.block_cap_totals is None:
        return
    names = ("num_block_accept_tokens", "num_cap_tokens")
    for name, want, value in zip(names, exp.block_cap_totals, obs.block_cap_totals, strict=True):
        if not _values_equal(want, value):
            rule = (
                "the result carries no block/cap lengths"
                if not exp.launch.block_caps
                else "its rows' lengths summed under the counter mode"
            )
            yield Finding(
                None,
                want,
                value,
                f"launch {launch}: result.{name} should be {show(want, value)} ({rule}), the "
                f"resolver wrote {show(value, want)}{why}",
                aspect="result-block-cap",
            )


def _check_controller_feed(
    want: list[int], obs: ObservedDelivery, launch: int, why: str
) -> Iterator[Finding]:
    feeds = [(_int_list(f.per_req), f.batch_size) for f in obs.controller_feeds]
    if len(feeds) != 1 or feeds[0][0] != want:
        fed = ", ".join(repr(f[0]) for f in feeds) or "nothing"
        times = "" if len(feeds) == 1 else f" in {len(feeds)} calls"
        yield Finding(
            None,
            want,
            [f[0] for f in feeds],
            f"launch {launch}: the adaptive controller should be fed {want}, the resolver "
            f"fed {fed}{times}{why}",
            aspect="controller-feed",
        )
    elif feeds[0][1] is not None and not _values_equal(len(want), feeds[0][1]):
        yield Finding(
            None,
            len(want),
            feeds[0][1],
            f"launch {launch}: the adaptive controller was fed {len(want)} rows with "
            f"batch_size={show(feeds[0][1], len(want))}{why}",
            aspect="controller-feed",
        )


# --- the table ----------------------------------------------------------------------------------

_TABLE: Final[tuple[Invariant, ...]] = (
    on_event(
        "target-deadline",
        "every call of the resolver returns within its deadline (--deadline)",
        check_target_deadline,
    ),
    on_event("target-raised", "the resolver returns without raising", check_target_raised),
    on_event(
        "alloc-estimate-matches",
        "the pages the memory check estimates for a decode launch are the pages it allocates",
        check_estimate_matches,
    ),
    on_delivery(
        "grammar-stale-untouched",
        "a stale row never advances its request's grammar",
        check_grammar_stale_untouched,
    ),
    on_delivery(
        "grammar-advanced-once",
        "a live grammar row's grammar is offered its run once, up to the token that terminates "
        "it or the one it refuses",
        check_grammar_advanced_once,
    ),
    on_event(
        "runs-aligned",
        "one returned run per row, stale rows included; run i is row i's first accept_len "
        "tokens under the stride recorded at launch (a live grammar row: the tokens its "
        "grammar retained)",
        check_runs_aligned,
    ),
    on_request(
        "no-negative",
        "committed length and statistics never go below zero",
        check_no_negative,
    ),
    on_request(
        "committed-live",
        "a live request's committed length is prompt + outputs - 1, plus 1 for a prefill in "
        "flight and (pre-claim) 1 for a decode launch in flight",
        _committed_in(("running", "waiting"), "is live"),
    ),
    on_request(
        "committed-finished-frozen",
        "a finished request's committed length is final (pre-claim: one -1 at its stale row)",
        _committed_in(("finished",), "finished"),
    ),
    on_request(
        "committed-retracted-zero",
        "a retracted request holds committed length 0 until re-admission",
        _committed_in(("retracted",), "is retracted"),
    ),
    on_delivery(
        "alloc-untouched-by-resolver",
        "the resolver leaves every request's kv_allocated_len as it found it",
        check_alloc_untouched,
    ),
    on_request(
        "alloc-covers-reserve",
        "after a decode launch a live request's kv_allocated_len covers its committed length "
        "at sizing plus the reserve 2A",
        check_alloc_covers_reserve,
    ),
    on_request(
        "alloc-page-aligned",
        "from 0.5.16, a live request's kv_allocated_len is page-aligned once a decode launch "
        "sized it",
        check_alloc_page_aligned,
    ),
    on_request(
        "alloc-never-shrinks",
        "a live request's kv_allocated_len never drops below its highest value this residency",
        check_alloc_never_shrinks,
    ),
    on_request(
        "alloc-expected",
        "kv_allocated_len is exactly what the allocation rule gives, after release and "
        "retraction too",
        check_alloc_expected,
    ),
    on_event(
        "kv-no-double-owner",
        "no page has two owners and no row points at a page its request does not own",
        _faults("double-owner"),
    ),
    on_event(
        "kv-no-use-after-free",
        "no page is freed while another request owns it or a launch in flight reads it for a "
        "live row, and no launch reads a released row",
        _faults("use-after-free"),
    ),
    on_event(
        "kv-released-once",
        "a request's KV is released exactly once per residency: nothing freed twice, nothing "
        "left in its row, nothing held after it finished",
        _and(_faults("double-free", "leak"), _requests(check_released)),
    ),
    on_request(
        "kv-retracted-empty",
        "a retracted request has kv_allocated_len 0 and holds no row until re-admission",
        check_retracted_empty,
    ),
    on_event(
        "kv-pool-conserved",
        "available + held == total pages after every event, and a live request holds exactly "
        "the pages covering its kv_allocated_len",
        _and(_faults("pool", "out-of-memory"), _requests(check_pages_held)),
    ),
    on_request(
        "stats-verify-count",
        "spec_verify_ct counts the applied (non-stale) rows of the request",
        check_verify_count,
    ),
    on_request(
        "stats-accepted-drafts",
        "the accepted-draft counter sums accept_len - k over applied rows (k = 1; UNO 2)",
        check_accepted_drafts,
    ),
    on_request(
        "stats-histogram",
        "the acceptance histogram counts applied rows by accept_len - k and sums to the verify "
        "count",
        check_histogram,
    ),
    on_request(
        "stats-block-cap",
        "the block-accept and cap token counters and the cap-length histogram (0.5.16+) sum "
        "the block/cap lengths of applied rows only",
        check_block_cap,
    ),
    on_delivery(
        "global-counters",
        "the batch-global accepted-draft counter the resolver writes on the result and the feed "
        "it gives the adaptive controller match the configured mode (ideal: stale rows "
        "excluded; sglang: all rows); the per-row draft list has one entry per row",
        check_global_counters,
    ),
)

# Every invariant by id, in the order they are checked.
INVARIANTS: Final[dict[str, Invariant]] = {invariant.id: invariant for invariant in _TABLE}


def check_event(index: int, expected: Expectation, observed: Observation) -> list[Violation]:
    """Every violation at one event, in `INVARIANTS` order; findings on aspects the target is
    not held to (`Observation.not_judged`) are dropped."""
    return [
        Violation(invariant.id, index, f.rid, f.expected, f.observed, f.message)
        for invariant in _TABLE
        for f in invariant.check(expected, observed)
        if f.aspect is None or f.aspect not in observed.not_judged
    ]
