"""The invariants: one `Invariant` record each (id, meaning, scope, checker), in one table.

A checker compares the reference model's expectation with what the engine observed on the fakes
and yields a `Finding` for each difference; `check_event` turns findings into `Violation`s under
the invariant's id. The ids are part of the public contract (docs/contracts.md); `INVARIANTS` lists
them in the order they are checked, so the first violation reported at an event is the most basic
one that broke. Every request is checked after every event, not only the rows of the delivered
batch: a resolver that corrupts a request outside the batch is caught too.

Adding an invariant is one edit: write its checker and add its record to `_TABLE`
(docs/architecture.md, "Where to add an invariant"). The record holds every fact about it: whom
it judges, whether it needs an allocation rule, the API aspects its findings belong to, and the
name of its explanation; docs/invariants.md's table is generated from the records
(`invariants_table`). A record may also carry a quick test
(`Invariant.holds`): true only where the checker finds nothing, it lets `check_event` pass an event
without making generators, findings or messages; without one, the checker runs at every event.
tests/unit/core/test_invariant_holds.py holds `check_event` to what every checker reports.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Final, Literal, TypeAlias

from kvcheck.core.invariant import Finding as Finding
from kvcheck.core.invariant import Invariant as Invariant
from kvcheck.core.invariant import Judges as Judges
from kvcheck.core.invariant import Violation as Violation
from kvcheck.core.invariant import invariants_table as generic_invariants_table
from kvcheck.core.jsonable import show
from kvcheck.families.sglang.engine import Observation, ObservedDelivery, ObservedRequest
from kvcheck.families.sglang.model import Expectation, ExpectedDelivery, RequestExpectation
from kvcheck.families.sglang.target import ASPECTS
from kvcheck.wording import plural

# What a checker looks at: the whole event (the target's call, the delivery), each delivery, or
# each request (every request after every event, in the model's order).
Scope: TypeAlias = Literal["event", "delivery", "request"]
EventChecker: TypeAlias = Callable[[Expectation, Observation], Iterator[Finding]]
DeliveryChecker: TypeAlias = Callable[[ExpectedDelivery, ObservedDelivery], Iterator[Finding]]
RequestChecker: TypeAlias = Callable[[RequestExpectation, ObservedRequest], Iterator[Finding]]
# An invariant's quick test on its scope's pair, given the aspects the target is not held to: True
# only when its checker finds nothing there that is judged. Every event runs it for every
# invariant (the passing case then costs no generator, finding or message); the checker runs
# where it is False, and reports. tests/unit/core/test_invariant_holds.py checks each against
# its checker on perturbed pairs.
EventHolds: TypeAlias = Callable[[Expectation, Observation, frozenset[str]], bool]
DeliveryHolds: TypeAlias = Callable[[ExpectedDelivery, ObservedDelivery, frozenset[str]], bool]
RequestHolds: TypeAlias = Callable[[RequestExpectation, ObservedRequest, frozenset[str]], bool]


def on_event(
    id: str,
    meaning: str,
    checker: EventChecker,
    holds: EventHolds | None = None,
    each_request: RequestHolds | None = None,
    *,
    judges: Judges,
    explain: str | None,
    needs_allocation: bool = False,
    aspects: tuple[str, ...] = (),
    mutant: str | None = None,
    no_mutant: str | None = None,
) -> Invariant:
    """Checked once per event, on the expectation and the observation as a whole; its quick
    test is `holds` on the event and `each_request` on every request."""
    return Invariant(
        id,
        meaning,
        "event",
        checker,
        holds,
        each_request,
        judges,
        needs_allocation,
        aspects,
        explain,
        mutant,
        no_mutant,
    )


def on_delivery(
    id: str,
    meaning: str,
    checker: DeliveryChecker,
    holds: DeliveryHolds | None = None,
    *,
    judges: Judges,
    explain: str | None,
    needs_allocation: bool = False,
    aspects: tuple[str, ...] = (),
    mutant: str | None = None,
    no_mutant: str | None = None,
) -> Invariant:
    """Checked on the delivery of a launch, when the event delivered one."""

    def check(expected: Expectation, observed: Observation) -> Iterator[Finding]:
        if expected.delivery is not None and observed.delivery is not None:
            yield from checker(expected.delivery, observed.delivery)

    return Invariant(
        id,
        meaning,
        "delivery",
        check,
        holds,
        None,
        judges,
        needs_allocation,
        aspects,
        explain,
        mutant,
        no_mutant,
    )


# The last observation's requests by rid: every request-level invariant of an event looks them
# up, so they are indexed once per event (the observation is held, so identity is safe).
_BY_RID: list[Any] = [None, {}]


def _by_rid(observed: Observation) -> dict[str, ObservedRequest]:
    if _BY_RID[0] is not observed:
        _BY_RID[0], _BY_RID[1] = observed, {req.rid: req for req in observed.requests}
    by_rid: dict[str, ObservedRequest] = _BY_RID[1]
    return by_rid


def on_request(
    id: str,
    meaning: str,
    checker: RequestChecker,
    holds: RequestHolds | None = None,
    *,
    judges: Judges,
    explain: str | None,
    needs_allocation: bool = False,
    aspects: tuple[str, ...] = (),
    mutant: str | None = None,
    no_mutant: str | None = None,
) -> Invariant:
    """Checked on every request the model knows of, after every event."""

    def check(expected: Expectation, observed: Observation) -> Iterator[Finding]:
        observed_by_rid = _by_rid(observed)
        for exp_req in expected.requests:
            obs_req = observed_by_rid.get(exp_req.rid)
            if obs_req is None:  # the engine and model disagree on who exists: a kvcheck bug
                raise AssertionError(f"engine has no request {exp_req.rid}")
            yield from checker(exp_req, obs_req)

    return Invariant(
        id,
        meaning,
        "request",
        check,
        holds,
        None,
        judges,
        needs_allocation,
        aspects,
        explain,
        mutant,
        no_mutant,
    )


def _values_equal(expected: Any, observed: Any) -> bool:
    # bool is an int subclass and a tensor compares element-wise: insist on a plain int.
    return type(observed) is int and observed == expected


# --- the target's call and its runs -------------------------------------------------------------


def target_deadline_holds(expected: Expectation, observed: Observation, _: frozenset[str]) -> bool:
    """`target-deadline`'s quick test: no call ran past its deadline."""
    return observed.deadline_exceeded is None


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


def target_raised_holds(expected: Expectation, observed: Observation, _: frozenset[str]) -> bool:
    """`target-raised`'s quick test: the target did not raise."""
    return observed.target_error is None


def check_target_raised(expected: Expectation, observed: Observation) -> Iterator[Finding]:
    """`target-raised`: the resolver must return; what it raised is the finding (checked first)."""
    if observed.target_error is not None:
        yield Finding(
            None,
            "a list of runs",
            observed.target_error,
            f"the resolver raised {observed.target_error}",
        )


def runs_aligned_holds(expected: Expectation, observed: Observation, _: frozenset[str]) -> bool:
    """`runs-aligned`'s quick test: no delivery, the target raised, or the scheduler launched
    the model's rows and the runs are exactly the expected ones."""
    exp, obs = expected.delivery, observed.delivery
    if exp is None or obs is None or observed.target_error is not None:
        return True
    return obs.runs is not None and obs.rids == exp.launch.rids and obs.runs == exp.runs


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
            plural(len(exp.runs), "run"),
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
            plural(len(exp.runs), "run"),
            plural(len(obs.runs), "run"),
            f"launch {launch} has {plural(len(exp.runs), 'row')} (stale included) but the "
            f"resolver returned {plural(len(obs.runs), 'run')}",
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


def _no_grammar_rows(exp: ExpectedDelivery) -> bool:
    offered = exp.grammar_offered
    return offered.count(None) == len(offered)


def grammar_advanced_once_holds(
    exp: ExpectedDelivery, obs: ObservedDelivery, _: frozenset[str]
) -> bool:
    """`grammar-advanced-once`'s quick test: every live grammar row was offered its run."""
    return _no_grammar_rows(exp) or all(
        want == got for _, _, want, got in _grammar_rows(exp, obs, stale=False)
    )


def check_grammar_advanced_once(exp: ExpectedDelivery, obs: ObservedDelivery) -> Iterator[Finding]:
    """`grammar-advanced-once` (§1.4): a live grammar row's grammar is offered its run exactly
    once, token by token, up to the token that terminates it or the one it refuses."""
    for row, rid, want, got in _grammar_rows(exp, obs, stale=False):
        if want != got:
            yield _misplaced_grammar(exp, obs, row) or Finding(
                rid,
                list(want),
                list(got),
                f"the grammar of {rid} (row {row} of launch {exp.launch.number}) should be "
                f"offered {list(want)} once, it was offered {list(got)}",
            )
            return


def _misplaced_grammar(exp: ExpectedDelivery, obs: ObservedDelivery, row: int) -> Finding | None:
    """The finding for a row whose grammar stood at the wrong position before the call, or None.

    Every earlier decode row of the request was judged already, so a grammar that had been
    offered fewer (or more) tokens than the model's count before this call missed (or repeated)
    the grammar step on the request's prefill result (SGLang 0.5.17+ runs `advance_grammar_fsm`
    on the extend batch; earlier releases offer the prefilled token directly). The decode row
    only shows it, so the finding names the prefill step, not the row.
    """
    if row >= len(exp.grammar_offered_before) or row >= len(obs.grammar_offered_before):
        return None
    want, got = exp.grammar_offered_before[row], obs.grammar_offered_before[row]
    if want is None or got is None or want == got:
        return None
    rid, launch = exp.launch.rids[row], exp.launch.number
    what = "never taken" if got < want else "taken more than once"
    return Finding(
        rid,
        want,
        got,
        f"the grammar step on {rid}'s prefill result was {what}: before the result of launch "
        f"{launch} its grammar had been offered {plural(got, 'token')}, it should "
        f"have been offered {want} (the prefilled token and the runs of earlier rows), so row "
        f"{row}'s run met the grammar at the wrong output position",
    )


def grammar_stale_untouched_holds(
    exp: ExpectedDelivery, obs: ObservedDelivery, _: frozenset[str]
) -> bool:
    """`grammar-stale-untouched`'s quick test: no stale grammar row was offered a token."""
    return _no_grammar_rows(exp) or not any(
        got for _, _, _, got in _grammar_rows(exp, obs, stale=True)
    )


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


def no_negative_holds(exp: RequestExpectation, obs: ObservedRequest, _: frozenset[str]) -> bool:
    """`no-negative`'s quick test: no int counter and no histogram bucket below zero."""
    for value in (obs.committed, obs.verify_ct, obs.drafts):
        if isinstance(value, int) and value < 0:
            return False
    return all(bucket >= 0 for bucket, _ in obs.histogram)


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


def _committed_holds(phases: tuple[str, ...]) -> RequestHolds:
    """The committed-length quick test for requests in `phases`: C is as expected."""

    def holds(exp: RequestExpectation, obs: ObservedRequest, _: frozenset[str]) -> bool:
        return exp.phase not in phases or _values_equal(exp.committed, obs.committed)

    return holds


def _committed_in(phases: tuple[str, ...], state: str) -> RequestChecker:
    """The committed-length checker for requests in `phases` (one invariant id per phase group:
    live and waiting requests, finished ones, retracted ones)."""
    holds = _committed_holds(phases)

    def check(exp: RequestExpectation, obs: ObservedRequest) -> Iterator[Finding]:
        if holds(exp, obs, frozenset()):
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


def verify_count_holds(exp: RequestExpectation, obs: ObservedRequest, _: frozenset[str]) -> bool:
    """`stats-verify-count`'s quick test."""
    return _values_equal(exp.verify_ct, obs.verify_ct)


def check_verify_count(exp: RequestExpectation, obs: ObservedRequest) -> Iterator[Finding]:
    """`stats-verify-count`: `spec_verify_ct` is a plain int equal to the request's applied rows."""
    if not verify_count_holds(exp, obs, frozenset()):
        yield Finding(
            exp.rid,
            exp.verify_ct,
            obs.verify_ct,
            f"{exp.rid} ({exp.phase}) has {show(exp.verify_ct, obs.verify_ct)} applied verify "
            f"rows, spec_verify_ct is {show(obs.verify_ct, exp.verify_ct)}",
        )


def accepted_drafts_holds(exp: RequestExpectation, obs: ObservedRequest, _: frozenset[str]) -> bool:
    """`stats-accepted-drafts`'s quick test."""
    return _values_equal(exp.drafts, obs.drafts)


def check_accepted_drafts(exp: RequestExpectation, obs: ObservedRequest) -> Iterator[Finding]:
    """`stats-accepted-drafts`: the per-request draft counter, under any generation's name, is a
    plain int equal to the sum of a - 1 over applied rows.
    """
    if not accepted_drafts_holds(exp, obs, frozenset()):
        yield Finding(
            exp.rid,
            exp.drafts,
            obs.drafts,
            f"{exp.rid} ({exp.phase}) accepted {show(exp.drafts, obs.drafts)} drafts on "
            f"applied rows, the counter says {show(obs.drafts, exp.drafts)}",
        )


def histogram_holds(
    exp: RequestExpectation, obs: ObservedRequest, not_judged: frozenset[str]
) -> bool:
    """`stats-histogram`'s quick test (nothing to judge when the aspect is not)."""
    return "histogram" in not_judged or (
        obs.histogram == exp.histogram
        and sum([count for _, count in obs.histogram]) == exp.verify_ct
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


def block_cap_holds(exp: RequestExpectation, obs: ObservedRequest, _: frozenset[str]) -> bool:
    """`stats-block-cap`'s quick test."""
    return (
        _values_equal(exp.block_tokens, obs.block_tokens)
        and _values_equal(exp.cap_tokens, obs.cap_tokens)
        and obs.cap_histogram == exp.cap_histogram
    )


def check_block_cap(exp: RequestExpectation, obs: ObservedRequest) -> Iterator[Finding]:
    """Block-accept and cap statistics (0.5.16+): summed over applied rows, the cap lengths
    logged in a histogram; a stale row adds nothing."""
    if not block_cap_holds(exp, obs, frozenset()):
        observed = (obs.block_tokens, obs.cap_tokens, dict(obs.cap_histogram))
        expected = (exp.block_tokens, exp.cap_tokens, dict(exp.cap_histogram))
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


def alloc_untouched_holds(exp: ExpectedDelivery, obs: ObservedDelivery, _: frozenset[str]) -> bool:
    """`alloc-untouched-by-resolver`'s quick test: the call changed no `kv_allocated_len`."""
    return not obs.allocated_changed


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


def alloc_covers_reserve_holds(
    exp: RequestExpectation, obs: ObservedRequest, _: frozenset[str]
) -> bool:
    """`alloc-covers-reserve`'s quick test."""
    if exp.allocated is None or exp.phase != "running" or not _judged(exp, obs):
        return True
    allocated = _allocated(obs)
    return allocated is not None and allocated >= exp.alloc_floor


def check_alloc_covers_reserve(exp: RequestExpectation, obs: ObservedRequest) -> Iterator[Finding]:
    """`alloc-covers-reserve` (§2.9 invariant 3): after a decode launch a live request's Al
    covers its committed length at sizing plus the reserve R = 2A."""
    if not alloc_covers_reserve_holds(exp, obs, frozenset()):
        yield Finding(
            exp.rid,
            f">= {exp.alloc_floor}",
            obs.allocated,
            f"{exp.rid}'s kv_allocated_len is {obs.allocated!r}, below committed + reserve "
            f"({exp.alloc_floor}) of its last decode launch",
        )


def alloc_never_shrinks_holds(
    exp: RequestExpectation, obs: ObservedRequest, _: frozenset[str]
) -> bool:
    """`alloc-never-shrinks`'s quick test."""
    if exp.allocated is None or exp.phase != "running" or not _judged(exp, obs):
        return True
    allocated = _allocated(obs)
    return allocated is None or allocated >= exp.alloc_peak


def check_alloc_never_shrinks(exp: RequestExpectation, obs: ObservedRequest) -> Iterator[Finding]:
    """`alloc-never-shrinks` (§2.9 invariant 3, the clamp): a live request's Al never goes
    below the highest value it had in this residency."""
    if not alloc_never_shrinks_holds(exp, obs, frozenset()):
        allocated = _allocated(obs)
        yield Finding(
            exp.rid,
            f">= {exp.alloc_peak}",
            allocated,
            f"{exp.rid} is live and had kv_allocated_len {exp.alloc_peak}; it shrank to "
            f"{allocated}, stranding the slots past it",
        )


def alloc_page_aligned_holds(
    exp: RequestExpectation, obs: ObservedRequest, _: frozenset[str]
) -> bool:
    """`alloc-page-aligned`'s quick test."""
    if not exp.alloc_aligned or exp.phase != "running" or not _judged(exp, obs):
        return True
    allocated = _allocated(obs)
    return allocated is None or not allocated % exp.page_size


def check_alloc_page_aligned(exp: RequestExpectation, obs: ObservedRequest) -> Iterator[Finding]:
    """`alloc-page-aligned` (0.5.16+): once a decode launch sized it, a live request's Al is a
    multiple of the page size."""
    if not alloc_page_aligned_holds(exp, obs, frozenset()):
        allocated = _allocated(obs)
        yield Finding(
            exp.rid,
            f"a multiple of {exp.page_size}",
            allocated,
            f"{exp.rid}'s kv_allocated_len {allocated} is not page-aligned (page size "
            f"{exp.page_size}): the paged allocator hands out whole pages",
        )


def alloc_expected_holds(exp: RequestExpectation, obs: ObservedRequest, _: frozenset[str]) -> bool:
    """`alloc-expected`'s quick test."""
    return (
        exp.allocated is None
        or not _judged(exp, obs)
        or _values_equal(exp.allocated, obs.allocated)
    )


def check_alloc_expected(exp: RequestExpectation, obs: ObservedRequest) -> Iterator[Finding]:
    """`alloc-expected`: Al is exactly what the generation's rule gives (no over-allocation,
    what release leaves behind, zero after retraction)."""
    if not alloc_expected_holds(exp, obs, frozenset()):
        yield Finding(
            exp.rid,
            exp.allocated,
            obs.allocated,
            f"{exp.rid} ({exp.phase}) kv_allocated_len expected {exp.allocated}, observed "
            f"{obs.allocated!r}",
        )


# The pool's fault kinds (`kvcheck.families.sglang.pool`) by the invariant that reports them.
_FAULT_KINDS: Final[dict[str, tuple[str, ...]]] = {
    "kv-no-double-owner": ("double-owner",),
    "kv-no-use-after-free": ("use-after-free",),
    "kv-released-once": ("double-free", "leak"),
    "kv-pool-conserved": ("pool", "out-of-memory"),
}
_REPORTED_BY: Final[dict[str, str]] = {
    kind: invariant for invariant, kinds in _FAULT_KINDS.items() for kind in kinds
}


def _faults(invariant: str) -> EventChecker:
    """An event checker reporting the pool's ownership faults of the kinds `invariant`
    reports (`_FAULT_KINDS`), at the event where they happened."""
    kinds = _FAULT_KINDS[invariant]

    def check(expected: Expectation, observed: Observation) -> Iterator[Finding]:
        if observed.pool is None:
            return
        for fault in observed.pool.faults:
            if fault.kind in kinds:
                yield Finding(fault.rid, "no " + fault.kind, fault.kind, fault.message)
                return

    return check


def _no_faults(expected: Expectation, observed: Observation, _: frozenset[str]) -> bool:
    """The quick test of every fault-reporting invariant: the pool (if any) saw no fault."""
    return observed.pool is None or not observed.pool.faults


def _and(*checkers: EventChecker) -> EventChecker:
    def check(expected: Expectation, observed: Observation) -> Iterator[Finding]:
        for checker in checkers:
            yield from checker(expected, observed)

    return check


def _requests(checker: RequestChecker) -> EventChecker:
    """A request checker lifted to the whole event (its own part of an event invariant)."""
    return on_request("", "", checker, judges="resolver", explain=None).check


def _first_other_retraction(expected: Expectation, observed: Observation) -> int | None:
    """Where the requests the engine's memory check retracted first differ from those the
    model's did (None: one list starts the other)."""
    pairs = zip(expected.pressure_retracted, observed.pressure_retracted, strict=False)
    return next((i for i, (exp, obs) in enumerate(pairs) if exp != obs), None)


def retraction_order_holds(expected: Expectation, observed: Observation, _: frozenset[str]) -> bool:
    """`alloc-retraction-order`'s quick test."""
    if not observed.pressure_retracted or not expected.pressure_retracted:
        return True
    return _first_other_retraction(expected, observed) is None


def check_retraction_order(expected: Expectation, observed: Observation) -> Iterator[Finding]:
    """`alloc-retraction-order`: the decode memory check retracts in its rule's order. How many
    it retracts follows the estimate (`alloc-estimate-matches` and the pool's invariants judge
    that), so only the requests both took are compared, in the order taken."""
    at = _first_other_retraction(expected, observed)
    if at is not None:
        wanted, taken = expected.pressure_retracted[at], observed.pressure_retracted[at]
        yield Finding(
            taken,
            wanted,
            taken,
            f"memory pressure retracted {taken} where the allocation rule's order takes {wanted} "
            f"(retracted in order: expected {', '.join(expected.pressure_retracted)}; observed "
            f"{', '.join(observed.pressure_retracted)})",
        )


def estimate_matches_holds(expected: Expectation, observed: Observation, _: frozenset[str]) -> bool:
    """`alloc-estimate-matches`'s quick test."""
    pages, pool = observed.launch_pages, observed.pool
    return pages is None or pool is None or bool(pool.faults) or pages[0] == pages[1]


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


def released_holds(exp: RequestExpectation, obs: ObservedRequest, _: frozenset[str]) -> bool:
    """`check_released`'s quick test."""
    return (
        exp.allocated is None
        or exp.phase != "finished"
        or not (obs.holds_row or obs.pages)
        or not _judged(exp, obs)
    )


def check_released(exp: RequestExpectation, obs: ObservedRequest) -> Iterator[Finding]:
    """A finished request holds no row and no page (it was released)."""
    if not released_holds(exp, obs, frozenset()):
        yield Finding(
            exp.rid,
            "released",
            plural(obs.pages, "page"),
            f"{exp.rid} finished but still holds its row ({plural(obs.pages, 'page')}): never "
            "released",
        )


def pages_held_holds(exp: RequestExpectation, obs: ObservedRequest, _: frozenset[str]) -> bool:
    """`check_pages_held`'s quick test."""
    return (
        exp.allocated is None
        or exp.phase not in ("running", "waiting")
        or obs.pages == exp.pages
        or not _judged(exp, obs)
    )


def check_pages_held(exp: RequestExpectation, obs: ObservedRequest) -> Iterator[Finding]:
    """A live request holds exactly the pages covering its Al."""
    if not pages_held_holds(exp, obs, frozenset()):
        yield Finding(
            exp.rid,
            exp.pages,
            obs.pages,
            f"{exp.rid} ({exp.phase}) should hold {plural(exp.pages, 'page')}, its row holds "
            f"{obs.pages}",
        )


def retracted_empty_holds(exp: RequestExpectation, obs: ObservedRequest, _: frozenset[str]) -> bool:
    """`kv-retracted-empty`'s quick test."""
    return (
        exp.allocated is None
        or exp.phase != "retracted"
        or not _judged(exp, obs)
        or not (obs.holds_row or obs.pages or not _values_equal(0, obs.allocated))
    )


def check_retracted_empty(exp: RequestExpectation, obs: ObservedRequest) -> Iterator[Finding]:
    """`kv-retracted-empty`: until re-admission a retracted request has Al = 0 and no row."""
    if not retracted_empty_holds(exp, obs, frozenset()):
        yield Finding(
            exp.rid,
            "Al 0, no row",
            f"Al {obs.allocated!r}, {plural(obs.pages, 'page')}",
            f"{exp.rid} is retracted yet has kv_allocated_len {obs.allocated!r} and "
            f"{plural(obs.pages, 'page')}",
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


def global_counters_hold(
    exp: ExpectedDelivery, obs: ObservedDelivery, not_judged: frozenset[str]
) -> bool:
    """`global-counters`' quick test: every batch-level value the target is held to is right."""
    if exp.global_drafts is None:
        return True
    if "result-drafts-total" not in not_judged and not _values_equal(
        exp.global_drafts, obs.global_drafts
    ):
        return False
    if "result-drafts-per-row" not in not_judged and _int_list(obs.per_row_drafts) != list(
        exp.per_row_drafts
    ):
        return False
    if (
        exp.controller_feed is not None
        and next(_controller_findings(exp, obs, "", not_judged), None) is not None
    ):
        return False
    if exp.block_cap_totals is None or "result-block-cap" in not_judged:
        return True
    (want_blocks, want_caps), (blocks, caps) = exp.block_cap_totals, obs.block_cap_totals
    return _values_equal(want_blocks, blocks) and _values_equal(want_caps, caps)


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
            quantity="drafts-total",
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
            quantity="drafts-per-row",
        )
    if exp.controller_feed is not None:
        yield from _controller_findings(exp, obs, why, frozenset())
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
                quantity=name,
            )


def _samples(per_req: Any) -> Any:
    """A controller feed's samples as the controller uses them: SGLang's slot update reads only
    their sum and count (0.5.23 adaptive_spec_params.py `update`, lines 187-202), so their order
    is no part of the contract; compared sorted."""
    items = _int_list(per_req)
    return sorted(items) if isinstance(items, list) else items


def _controller_findings(
    exp: ExpectedDelivery, obs: ObservedDelivery, why: str, not_judged: frozenset[str]
) -> Iterator[Finding]:
    """The controller's samples (the counted rows' drafts, in any order: one call, or none when
    there are none, since an empty feed changes nothing) and its `batch_size=`, the launched
    batch's row count: SGLang routes the samples to that batch size's slot. An omitted
    `batch_size` is the callee's default 0 (0.5.13+), judged under `controller-routing`."""
    launch, want = exp.launch.number, list(exp.controller_feed or ())
    # With nothing to feed, a call with an empty list is as good as none.
    feeds = [f for f in obs.controller_feeds if want or _int_list(f.per_req) != []]
    if not want and not feeds:
        return  # nothing to learn from, and nothing fed: the controller is untouched either way
    if len(feeds) != 1 or _samples(feeds[0].per_req) != sorted(want):
        if "controller-feed" in not_judged:
            return
        fed = ", ".join(repr(_int_list(f.per_req)) for f in feeds) or "nothing"
        times = "" if len(feeds) == 1 else f" in {len(feeds)} calls"
        yield Finding(
            None,
            want,
            [_int_list(f.per_req) for f in feeds],
            f"launch {launch}: the adaptive controller's samples should be {want}, the resolver "
            f"fed {fed}{times}{why}",
            aspect="controller-feed",
            quantity="controller-samples",
        )
        return
    size, given = exp.controller_batch_size, feeds[0].batch_size
    omitted = given is None
    aspect = "controller-routing" if omitted else "controller-feed"
    if aspect in not_judged or _values_equal(size, 0 if omitted else given):
        return
    shown = " left out (the callee's default, 0)" if omitted else f"={show(given, size)}"
    yield Finding(
        None,
        size,
        0 if omitted else given,
        f"launch {launch}: the adaptive controller was fed with batch_size{shown}, where the "
        f"launched batch had {plural(len(exp.launch.rids), 'row')} (batch_size routes the "
        f"samples to that batch size's slot){why}",
        aspect=aspect,
        quantity="controller-batch-size",
    )


# --- the table ----------------------------------------------------------------------------------

_TABLE: Final[tuple[Invariant, ...]] = (
    on_event(
        "target-deadline",
        "every call of the resolver returns within its deadline (`--deadline`, default 0.25 s)",
        check_target_deadline,
        target_deadline_holds,
        judges="resolver",
        explain="kvcheck.families.sglang.explain:explain_target_deadline",
        no_mutant=(
            "a resolver that never returns is no plausible edit of one, and the kill matrix would "
            "wait out a deadline per scenario"
        ),
    ),
    on_event(
        "target-raised",
        "the resolver returns without raising",
        check_target_raised,
        target_raised_holds,
        judges="resolver",
        explain="kvcheck.families.sglang.explain:explain_target_raised",
        mutant="output-stride-unchecked",
    ),
    on_event(
        "alloc-retraction-order",
        "under memory pressure the decode memory check retracts in its rule's order: 0.5.17+ "
        "the fewest outputs first, then the longest prompt; before, a speculative batch from "
        "its back",
        check_retraction_order,
        retraction_order_holds,
        judges="scheduler",
        needs_allocation=True,
        explain=None,
        no_mutant=(
            "memory pressure needs two long prompts in a bounded pool, which the conformance "
            "bounds (one request, an unbounded pool) do not hold; the exhaustive search finds it "
            "within bounds that do (tests/unit/search/test_exhaust.py)"
        ),
    ),
    on_event(
        "alloc-estimate-matches",
        "the pages the memory check estimates for a decode launch are the pages the launch "
        "allocates (not judged at an event with an ownership or pool fault: that fault's own "
        "invariant reports it)",
        check_estimate_matches,
        estimate_matches_holds,
        judges="scheduler",
        needs_allocation=True,
        explain=None,
        mutant="estimate-ignores-allocated",
    ),
    on_delivery(
        "grammar-stale-untouched",
        "a stale row never advances its request's grammar",
        check_grammar_stale_untouched,
        grammar_stale_untouched_holds,
        judges="resolver",
        explain=None,
        mutant="grammar-stale-rows",
    ),
    on_delivery(
        "grammar-advanced-once",
        "a live grammar row's grammar is offered its run once, token by token, up to the token "
        "that terminates it or the one it refuses",
        check_grammar_advanced_once,
        grammar_advanced_once_holds,
        judges="resolver",
        explain=None,
        mutant="grammar-advanced-twice",
    ),
    on_event(
        "runs-aligned",
        "one run per row, stale rows included; run i is row i's first `accept_len` tokens under "
        "the stride recorded at launch (a live grammar row: what its grammar retained)",
        check_runs_aligned,
        runs_aligned_holds,
        judges="resolver",
        explain="kvcheck.families.sglang.explain:explain_runs_aligned",
        mutant="whole-padded-row",
    ),
    on_request(
        "no-negative",
        "committed length and statistics never go below zero",
        check_no_negative,
        no_negative_holds,
        judges="resolver",
        explain="kvcheck.families.sglang.explain:explain_no_negative",
        mutant="retracted-giveback",
    ),
    on_request(
        "committed-live",
        "live: committed == prompt + outputs - 1 (+1 with a prefill in flight, +1 per decode "
        "launch in flight under pre-claim)",
        _committed_in(("running", "waiting"), "is live"),
        _committed_holds(("running", "waiting")),
        judges="resolver",
        explain="kvcheck.families.sglang.explain:explain_committed_live",
        mutant="preclaim-only-with-overlap",
    ),
    on_request(
        "committed-finished-frozen",
        "finished: committed is final (pre-claim: one -1 at its stale row)",
        _committed_in(("finished",), "finished"),
        _committed_holds(("finished",)),
        judges="resolver",
        explain="kvcheck.families.sglang.explain:explain_committed_finished_frozen",
        mutant="finished-no-giveback",
    ),
    on_request(
        "committed-retracted-zero",
        "retracted: 0 until re-admission; its stale row changes nothing",
        _committed_in(("retracted",), "is retracted"),
        _committed_holds(("retracted",)),
        judges="resolver",
        explain="kvcheck.families.sglang.explain:explain_committed_retracted_zero",
        mutant="retracted-applied",
    ),
    on_delivery(
        "alloc-untouched-by-resolver",
        "(with an allocation rule) the resolver leaves every request's `kv_allocated_len` as it "
        "found it",
        check_alloc_untouched,
        alloc_untouched_holds,
        judges="resolver",
        explain=None,
        mutant="alloc-zeroed-stale",
    ),
    on_request(
        "alloc-covers-reserve",
        "after a decode launch a live request's `kv_allocated_len` covers its committed length "
        "at sizing plus `2A`",
        check_alloc_covers_reserve,
        alloc_covers_reserve_holds,
        judges="scheduler",
        needs_allocation=True,
        explain=None,
        mutant="alloc-half-reserve",
    ),
    on_request(
        "alloc-page-aligned",
        "from 0.5.16 a live request's `kv_allocated_len` is page-aligned once a decode launch "
        "sized it",
        check_alloc_page_aligned,
        alloc_page_aligned_holds,
        judges="scheduler",
        needs_allocation=True,
        explain=None,
        no_mutant=(
            "it judges the scheduler's rounding of an allocation to a page, which no corpus "
            "entry's allocation path changes"
        ),
    ),
    on_request(
        "alloc-never-shrinks",
        "a live request's `kv_allocated_len` never drops below its highest value this residency",
        check_alloc_never_shrinks,
        alloc_never_shrinks_holds,
        judges="scheduler",
        needs_allocation=True,
        explain=None,
        mutant="alloc-no-clamp",
    ),
    on_request(
        "alloc-expected",
        "`kv_allocated_len` is exactly what the allocation rule gives, after release (kept "
        "before 0.5.16, 0 after) and retraction (0) too",
        check_alloc_expected,
        alloc_expected_holds,
        judges="scheduler",
        needs_allocation=True,
        explain=None,
        mutant="alloc-over-reserve",
    ),
    on_event(
        "kv-no-double-owner",
        "no page has two owners; no row points at a page its request does not own",
        _faults("kv-no-double-owner"),
        _no_faults,
        judges="scheduler",
        needs_allocation=True,
        explain=None,
        mutant="pool-shares-pages",
    ),
    on_event(
        "kv-no-use-after-free",
        "no page is freed while another request owns it or a live row of the launch in flight "
        "reads it; no launch reads a released row",
        _faults("kv-no-use-after-free"),
        _no_faults,
        judges="scheduler",
        needs_allocation=True,
        explain=None,
        mutant="release-abort-at-build",
    ),
    on_event(
        "kv-released-once",
        "a request's KV is released exactly once per residency: nothing freed twice, nothing "
        "left in its row, nothing held once finished",
        _and(_faults("kv-released-once"), _requests(check_released)),
        _no_faults,
        released_holds,
        judges="scheduler",
        needs_allocation=True,
        explain=None,
        mutant="release-forgets-overallocated",
    ),
    on_request(
        "kv-retracted-empty",
        "a retracted request has `kv_allocated_len` 0 and no row until re-admission",
        check_retracted_empty,
        retracted_empty_holds,
        judges="scheduler",
        needs_allocation=True,
        explain=None,
        mutant="retract-keeps-kv",
    ),
    on_event(
        "kv-pool-conserved",
        "available + held == total pages after every event; a live request holds exactly the "
        "pages covering its `kv_allocated_len`",
        _and(_faults("kv-pool-conserved"), _requests(check_pages_held)),
        _no_faults,
        pages_held_holds,
        judges="scheduler",
        needs_allocation=True,
        explain=None,
        mutant="pool-loses-freed-pages",
    ),
    on_request(
        "stats-verify-count",
        "`spec_verify_ct` counts applied (non-stale) rows",
        check_verify_count,
        verify_count_holds,
        judges="resolver",
        explain="kvcheck.families.sglang.explain:explain_verify_count",
        mutant="verify-counts-tokens",
    ),
    on_request(
        "stats-accepted-drafts",
        "the accepted-draft counter sums `accept_len - k` (k = 1; UNO 2) over applied rows",
        check_accepted_drafts,
        accepted_drafts_holds,
        judges="resolver",
        explain="kvcheck.families.sglang.explain:explain_accepted_drafts",
        mutant="drafts-include-bonus",
    ),
    on_request(
        "stats-histogram",
        "the acceptance histogram counts applied rows by `accept_len - k` and sums to the verify "
        "count",
        check_histogram,
        histogram_holds,
        judges="resolver",
        aspects=("histogram",),
        explain="kvcheck.families.sglang.explain:explain_histogram",
        mutant="histogram-off-by-one",
    ),
    on_request(
        "stats-block-cap",
        "the block-accept and cap token counters and the cap-length histogram (0.5.16+) sum the "
        "block/cap lengths of applied rows only",
        check_block_cap,
        block_cap_holds,
        judges="resolver",
        explain=None,
        mutant="block-cap-on-stale-rows",
    ),
    on_delivery(
        "global-counters",
        "the batch-global draft total on `result` and the adaptive controller's samples match "
        "the mode, its `batch_size=` is the launched batch's row count (a routing key, "
        "docs/call-arguments.md); the per-row draft list on `result` has `accept_len - k` for "
        "every row; the block/cap totals are the rows' lengths summed under the mode (0 when "
        "the result carries none)",
        check_global_counters,
        global_counters_hold,
        judges="resolver",
        aspects=(
            "result-drafts-total",
            "result-drafts-per-row",
            "result-block-cap",
            "controller-feed",
            "controller-routing",
        ),
        explain="kvcheck.families.sglang.explain:explain_global_counters",
        mutant="total-includes-bonus",
    ),
)

# Every invariant by id, in the order they are checked.
INVARIANTS: Final[dict[str, Invariant]] = {invariant.id: invariant for invariant in _TABLE}


def invariants_table() -> str:
    """SGLang's invariants as a Markdown table (`kvcheck.core.invariant.invariants_table`)."""
    return generic_invariants_table(INVARIANTS, ASPECTS)


# The table split by scope, each invariant with its position in the table and its quick test;
# without a pool (event tests) or an allocation rule (request tests), those that need one are
# left out: their quick tests hold there.
_EVENT_TESTS: Final = tuple((i, v.holds) for i, v in enumerate(_TABLE) if v.scope == "event")
_EVENT_TESTS_NO_POOL: Final = tuple(
    (i, holds) for i, holds in _EVENT_TESTS if not _TABLE[i].needs_allocation
)
_DELIVERY_TESTS: Final = tuple((i, v.holds) for i, v in enumerate(_TABLE) if v.scope == "delivery")
# Tested on every request: request-scope invariants and the request part of event-scope ones.
_PER_REQUEST_TESTS: Final = tuple(
    (i, v.holds if v.scope == "request" else v.each_request)
    for i, v in enumerate(_TABLE)
    if v.scope == "request" or v.each_request is not None
)
_PER_REQUEST_TESTS_NO_ALLOCATION: Final = tuple(
    (i, holds) for i, holds in _PER_REQUEST_TESTS if not _TABLE[i].needs_allocation
)
# Per rid, the last (expectation, observation, aspects not judged) on which every per-request
# test held. Both records are frozen, and what a passing test read from them is plain ints
# (`_values_equal`), bools and tuples the engine built, so the same two objects (the model and
# the engine hand an untouched request's records on from event to event) pass again without
# being tested twice. Bounded; any entry is a pair that passed, whichever run or thread stored it.
_PASSED: dict[str, tuple[RequestExpectation, ObservedRequest, frozenset[str]]] = {}
_PASSED_MAX: Final = 1024


def _suspects(expected: Expectation, observed: Observation) -> list[Invariant]:
    """The invariants whose quick test fails at this event (or that have none), in table order:
    the others' checkers would find nothing judged, so only these run."""
    not_judged = observed.not_judged
    failing = [
        i
        for i, holds in (_EVENT_TESTS if observed.pool is not None else _EVENT_TESTS_NO_POOL)
        if holds is None or not holds(expected, observed, not_judged)
    ]
    exp_delivery, obs_delivery = expected.delivery, observed.delivery
    if exp_delivery is not None and obs_delivery is not None:
        for i, holds in _DELIVERY_TESTS:
            if holds is None or not holds(exp_delivery, obs_delivery, not_judged):
                failing.append(i)
    # The model and the engine list requests in admission order: by position, else by rid.
    obs_requests = observed.requests
    aligned = len(obs_requests) == len(expected.requests)
    passed = _PASSED
    for k, exp_req in enumerate(expected.requests):
        rid = exp_req.rid
        obs_req: ObservedRequest | None = obs_requests[k] if aligned else None
        if obs_req is None or obs_req.rid != rid:
            obs_req = _by_rid(observed).get(rid)
        if obs_req is None:  # the checkers raise for it
            failing.extend(i for i, _ in _PER_REQUEST_TESTS)
            break
        last = passed.get(rid)
        if last is not None and last[0] is exp_req and last[1] is obs_req and last[2] is not_judged:
            continue
        before = len(failing)
        tests = (
            _PER_REQUEST_TESTS
            if exp_req.allocated is not None
            else _PER_REQUEST_TESTS_NO_ALLOCATION
        )
        for i, holds in tests:
            if holds is None or not holds(exp_req, obs_req, not_judged):
                failing.append(i)
        if len(failing) == before:
            if len(passed) >= _PASSED_MAX:
                passed.clear()
            passed[rid] = (exp_req, obs_req, not_judged)
    if not failing:
        return []
    return [_TABLE[i] for i in sorted(set(failing))]


# The last (expectation, observation) on which every invariant held. The model and the engine
# hand the last pair on after an event that changed nothing (a retraction request, a repeated
# admission), and both are frozen all the way down (as `_PASSED` says), so the same two objects
# pass again untested. One tuple, replaced whole: any pair found there passed.
_LAST_PASSED: list[tuple[Expectation, Observation] | None] = [None]


def check_event(index: int, expected: Expectation, observed: Observation) -> list[Violation]:
    """Every violation at one event, in `INVARIANTS` order, except that the pool faults a
    step's launch caused come first (`_launch_faults_first`); findings on aspects the target is
    not held to (`Observation.not_judged`) are dropped.

    Every invariant is tested at every event: its quick test (`Invariant.holds`) first, and its
    checker where that fails, so messages are only made for what is reported."""
    last = _LAST_PASSED[0]
    if last is not None and last[0] is expected and last[1] is observed:
        return []
    suspects = _suspects(expected, observed)
    if not suspects:
        _LAST_PASSED[0] = (expected, observed)
        return []
    not_judged = observed.not_judged
    violations = [
        Violation(invariant.id, index, f.rid, f.expected, f.observed, f.message)
        for invariant in suspects
        for f in _judged_findings(invariant, expected, observed, not_judged)
    ]
    return _launch_faults_first(violations, observed)


def _launch_faults_first(violations: list[Violation], observed: Observation) -> list[Violation]:
    """`violations` with the pool faults a step caused before its delivery called the target
    (`Observation.faults_before_delivery`: its launch's) first, in the order they happened,
    after a retraction out of order (the memory check precedes the launch): a fault is reported
    at the call that caused it, and within a step the launch precedes the delivery, whose
    findings may only be what the fault left behind."""
    pool = observed.pool
    if pool is None or not observed.faults_before_delivery:
        return violations
    early = [
        "alloc-retraction-order",
        *(_REPORTED_BY[f.kind] for f in pool.faults[: observed.faults_before_delivery]),
    ]
    rank = {invariant: position for position, invariant in enumerate(dict.fromkeys(early))}
    return sorted(violations, key=lambda v: rank.get(v.invariant, len(rank)))


def _judged_findings(
    invariant: Invariant, expected: Expectation, observed: Observation, not_judged: frozenset[str]
) -> Iterator[Finding]:
    """An invariant's findings on a pair, less those on aspects the target is not held to."""
    return (
        f
        for f in invariant.check(expected, observed)
        if f.aspect is None or f.aspect not in not_judged
    )


def first_judged_finding(
    invariant_id: str, expected: Expectation, observed: Observation
) -> Finding | None:
    """The first finding of one invariant on a recorded pair that `check_event` would report
    (its aspect judged), for a report that must say which of its quantities is wrong."""
    findings = _judged_findings(INVARIANTS[invariant_id], expected, observed, observed.not_judged)
    return next(findings, None)
