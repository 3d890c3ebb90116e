"""Invariant checkers: each compares the reference model's expectation with what the engine
observed on the fakes, and returns the violations it finds.

The ids are part of the public contract (DESIGN.md §5); `INVARIANTS` lists them in the order they
are checked, so the first violation reported at an event is the most basic one that broke.
Every request is checked after every event, not only the rows of the delivered batch: a resolver
that corrupts a request outside the batch is caught too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Final

import attrs

from kvcheck.core.engine import Observation, ObservedDelivery, ObservedRequest
from kvcheck.core.model import Expectation, ExpectedDelivery, RequestExpectation


@attrs.frozen
class Violation:
    invariant: str
    event_index: int
    rid: str | None
    expected: Any
    observed: Any
    message: str

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


INVARIANTS: Final[dict[str, str]] = {
    "target-raised": "the resolver returns without raising",
    "runs-aligned": (
        "one returned run per row, stale rows included; run i is row i's first accept_len "
        "tokens under the stride recorded at launch"
    ),
    "no-negative": "committed length and statistics never go below zero",
    "committed-live": (
        "a live request's committed length is prompt + outputs - 1, plus 1 for a prefill in "
        "flight and (pre-claim) 1 for a decode launch in flight"
    ),
    "committed-finished-frozen": (
        "a finished request's committed length is final (pre-claim: one -1 at its stale row)"
    ),
    "committed-retracted-zero": "a retracted request holds committed length 0 until re-admission",
    "stats-verify-count": "spec_verify_ct counts the applied (non-stale) rows of the request",
    "stats-accepted-drafts": "the accepted-draft counter sums accept_len - 1 over applied rows",
    "stats-histogram": (
        "the acceptance histogram counts applied rows by accept_len - 1 and sums to the verify "
        "count"
    ),
    "global-counters": (
        "the batch-global accepted-draft counter the resolver writes on the result and the feed "
        "it gives the adaptive controller match the configured mode (ideal: stale rows "
        "excluded; sglang: all rows); the per-row draft list has one entry per row"
    ),
}

_COMMITTED_ID: Final = {
    "running": "committed-live",
    "waiting": "committed-live",
    "finished": "committed-finished-frozen",
    "retracted": "committed-retracted-zero",
}

RequestCheck = Callable[[RequestExpectation, ObservedRequest], Iterator[tuple[str, Any, Any, str]]]


def _values_equal(expected: Any, observed: Any) -> bool:
    # bool is an int subclass and a tensor compares element-wise: insist on a plain int.
    return type(observed) is int and observed == expected


def check_no_negative(
    exp: RequestExpectation, obs: ObservedRequest
) -> Iterator[tuple[str, Any, Any, str]]:
    fields = {
        "committed length": obs.committed,
        "spec_verify_ct": obs.verify_ct,
        "accepted drafts": obs.drafts,
    }
    for name, value in fields.items():
        if isinstance(value, int) and value < 0:
            yield "no-negative", ">= 0", value, f"{exp.rid}'s {name} went negative ({value})"
    for bucket, count in obs.histogram:
        if bucket < 0:
            yield (
                "no-negative",
                "buckets >= 0",
                dict(obs.histogram),
                f"{exp.rid}'s acceptance histogram has a negative bucket {bucket} (x{count})",
            )


def check_committed(
    exp: RequestExpectation, obs: ObservedRequest
) -> Iterator[tuple[str, Any, Any, str]]:
    if _values_equal(exp.committed, obs.committed):
        return
    invariant = _COMMITTED_ID[exp.phase]
    state = {
        "running": "is live",
        "waiting": "is waiting",
        "finished": "finished",
        "retracted": "is retracted",
    }[exp.phase]
    yield (
        invariant,
        exp.committed,
        obs.committed,
        f"{exp.rid} {state}; committed length expected {exp.committed}, observed {obs.committed!r}",
    )


def check_verify_count(
    exp: RequestExpectation, obs: ObservedRequest
) -> Iterator[tuple[str, Any, Any, str]]:
    if not _values_equal(exp.verify_ct, obs.verify_ct):
        yield (
            "stats-verify-count",
            exp.verify_ct,
            obs.verify_ct,
            f"{exp.rid} ({exp.phase}) has {exp.verify_ct} applied verify rows, "
            f"spec_verify_ct is {obs.verify_ct!r}",
        )


def check_accepted_drafts(
    exp: RequestExpectation, obs: ObservedRequest
) -> Iterator[tuple[str, Any, Any, str]]:
    if not _values_equal(exp.drafts, obs.drafts):
        yield (
            "stats-accepted-drafts",
            exp.drafts,
            obs.drafts,
            f"{exp.rid} ({exp.phase}) accepted {exp.drafts} drafts on applied rows, "
            f"the counter says {obs.drafts!r}",
        )


def check_histogram(
    exp: RequestExpectation, obs: ObservedRequest
) -> Iterator[tuple[str, Any, Any, str]]:
    total = sum(count for _, count in obs.histogram)
    if obs.histogram != exp.histogram or total != exp.verify_ct:
        yield (
            "stats-histogram",
            dict(exp.histogram),
            dict(obs.histogram),
            f"{exp.rid} ({exp.phase}) acceptance histogram expected {dict(exp.histogram)} "
            f"(total {exp.verify_ct}), observed {dict(obs.histogram)} (total {total})",
        )


REQUEST_CHECKS: Final[tuple[RequestCheck, ...]] = (
    check_no_negative,
    check_committed,
    check_verify_count,
    check_accepted_drafts,
    check_histogram,
)


def check_runs_aligned(
    exp: ExpectedDelivery, obs: ObservedDelivery
) -> Iterator[tuple[str | None, Any, Any, str]]:
    launch = exp.launch.number
    if obs.runs is None:
        yield (
            None,
            f"{len(exp.runs)} runs",
            obs.runs_repr,
            f"the resolver returned {obs.runs_repr} for launch {launch}, not a list of runs",
        )
        return
    if len(obs.runs) != len(exp.runs):
        yield (
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
            yield (
                rid,
                list(want),
                list(got),
                f"row {row} ({rid}) of launch {launch} (stride {exp.launch.stride} at launch) "
                f"should be {list(want)}, the resolver returned {list(got)}",
            )
            return


def _int_list(value: Any) -> Any:
    """A per-row list written by the target, as a list of plain ints when it is one."""
    try:
        items = value.tolist() if hasattr(value, "tolist") else value
        if isinstance(items, list | tuple) and all(type(x) is int for x in items):
            return list(items)
    except (TypeError, ValueError):
        pass
    return value


def check_global_counters(
    exp: ExpectedDelivery, obs: ObservedDelivery, not_judged: frozenset[str] = frozenset()
) -> Iterator[tuple[str | None, Any, Any, str]]:
    """The batch-level values a resolver leaves behind: the draft total and per-row list on the
    result, the adaptive controller's feed, the block/cap totals. Only those the target's API
    generation maintains are judged (`not_judged`, from `kvcheck.targets.api_shape`)."""
    if exp.global_drafts is None:  # global counters off
        return
    launch = exp.launch.number
    stale_rids = [rid for rid, s in zip(exp.launch.rids, exp.stale, strict=True) if s]
    why = f" (stale rows: {', '.join(stale_rids)})" if stale_rids else ""
    if "result-drafts-total" not in not_judged and not _values_equal(
        exp.global_drafts, obs.global_drafts
    ):
        yield (
            None,
            exp.global_drafts,
            obs.global_drafts,
            f"launch {launch}: batch-global accepted-draft counter expected "
            f"{exp.global_drafts}, the resolver wrote {obs.global_drafts!r}{why}",
        )
    per_row = _int_list(obs.per_row_drafts)
    if "result-drafts-per-row" not in not_judged and per_row != list(exp.per_row_drafts):
        yield (
            None,
            list(exp.per_row_drafts),
            per_row,
            f"launch {launch}: the per-row accepted-draft list on the result should be "
            f"{list(exp.per_row_drafts)} (accept_len - 1 for every row, stale ones included), "
            f"the resolver wrote {per_row!r}",
        )
    if exp.controller_feed is not None and "controller-feed" not in not_judged:
        want = list(exp.controller_feed)
        feeds = [(_int_list(f.per_req), f.batch_size) for f in obs.controller_feeds]
        if len(feeds) != 1 or feeds[0][0] != want:
            fed = ", ".join(repr(f[0]) for f in feeds) or "nothing"
            times = "" if len(feeds) == 1 else f" in {len(feeds)} calls"
            yield (
                None,
                want,
                [f[0] for f in feeds],
                f"launch {launch}: the adaptive controller should be fed {want}, the resolver "
                f"fed {fed}{times}{why}",
            )
        elif feeds[0][1] is not None and not _values_equal(len(want), feeds[0][1]):
            yield (
                None,
                len(want),
                feeds[0][1],
                f"launch {launch}: the adaptive controller was fed {len(want)} rows with "
                f"batch_size={feeds[0][1]!r}{why}",
            )
    if "result-block-cap" not in not_judged:
        names = ("num_block_accept_tokens", "num_cap_tokens")
        for name, value in zip(names, obs.block_cap_totals, strict=True):
            if not _values_equal(0, value):
                yield (
                    None,
                    0,
                    value,
                    f"launch {launch}: result.{name} should be 0 (kvcheck provides no "
                    f"block/cap lengths), the resolver wrote {value!r}",
                )


def check_event(index: int, expected: Expectation, observed: Observation) -> list[Violation]:
    """Every violation at one event, in `INVARIANTS` order."""
    found: list[Violation] = []
    if observed.target_error is not None:
        found.append(
            Violation(
                "target-raised",
                index,
                None,
                "a list of runs",
                observed.target_error,
                f"the resolver raised {observed.target_error}",
            )
        )
    exp_delivery, obs_delivery = expected.delivery, observed.delivery
    if exp_delivery is not None and obs_delivery is not None and observed.target_error is None:
        for rid, want, got, message in check_runs_aligned(exp_delivery, obs_delivery):
            found.append(Violation("runs-aligned", index, rid, want, got, message))
    observed_by_rid = {req.rid: req for req in observed.requests}
    per_request: list[Violation] = []
    for exp_req in expected.requests:
        obs_req = observed_by_rid.get(exp_req.rid)
        if obs_req is None:  # the engine and model disagree on who exists: a kvcheck bug
            raise AssertionError(f"engine has no request {exp_req.rid}")
        for check in REQUEST_CHECKS:
            for invariant, want, got, message in check(exp_req, obs_req):
                if invariant == "stats-histogram" and "histogram" in observed.not_judged:
                    continue  # the target's API generation keeps no histogram
                per_request.append(Violation(invariant, index, exp_req.rid, want, got, message))
    order = list(INVARIANTS)
    found.extend(sorted(per_request, key=lambda v: order.index(v.invariant)))
    if exp_delivery is not None and obs_delivery is not None:
        not_judged = observed.not_judged
        for rid, want, got, message in check_global_counters(
            exp_delivery, obs_delivery, not_judged
        ):
            found.append(Violation("global-counters", index, rid, want, got, message))
    return found
