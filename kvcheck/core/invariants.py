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


def on_request(id: str, meaning: str, checker: RequestChecker) -> Invariant:
    """Checked on every request the model knows of, after every event."""

    def check(expected: Expectation, observed: Observation) -> Iterator[Finding]:
        observed_by_rid = {req.rid: req for req in observed.requests}
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
        yield Finding(
            None,
            f"{len(exp.runs)} runs",
            obs.runs_repr,
            f"the resolver returned {obs.runs_repr} for launch {launch}, not a list of runs",
        )
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
            f"{exp.rid} {shown}; committed length expected {exp.committed}, "
            f"observed {obs.committed!r}",
        )

    return check


def check_verify_count(exp: RequestExpectation, obs: ObservedRequest) -> Iterator[Finding]:
    """`stats-verify-count`: `spec_verify_ct` is a plain int equal to the request's applied rows."""
    if not _values_equal(exp.verify_ct, obs.verify_ct):
        yield Finding(
            exp.rid,
            exp.verify_ct,
            obs.verify_ct,
            f"{exp.rid} ({exp.phase}) has {exp.verify_ct} applied verify rows, "
            f"spec_verify_ct is {obs.verify_ct!r}",
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
            f"{exp.rid} ({exp.phase}) accepted {exp.drafts} drafts on applied rows, "
            f"the counter says {obs.drafts!r}",
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
            f"{observed[0]!r} / {observed[1]!r} / {observed[2]}",
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
            f"{exp.global_drafts}, the resolver wrote {obs.global_drafts!r}{why}",
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
                f"launch {launch}: result.{name} should be {want} ({rule}), the resolver "
                f"wrote {value!r}{why}",
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
            f"batch_size={feeds[0][1]!r}{why}",
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
