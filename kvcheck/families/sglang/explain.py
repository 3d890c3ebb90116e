"""SGLang's explanations: one sentence, in the domain's words, on how a run's first violation
of an invariant came about. Each invariant's record (`kvcheck.families.sglang.invariants`)
names its function here (`Invariant.explain`); `kvcheck.reporting.explain` resolves the name
and calls it with the run's facts (`RunFacts`) and the violation. A function returns None where
the trace does not tell; the checker's own sentence is given then."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from kvcheck.families.sglang.facts import RunFacts, short
from kvcheck.families.sglang.invariants import first_judged_finding
from kvcheck.families.sglang.scenario import describe_event

if TYPE_CHECKING:
    from kvcheck.core.invariant import Violation


def _sentence(text: str) -> str:
    """Capitalise a sentence unless it starts with a request id or a code name."""
    first = text.split(" ", 1)[0]
    return text[0].upper() + text[1:] if first in ("the", "at", "launch") else text


def _change(before: Any, after: Any, what: str) -> str:
    if before == after:
        return f"left {what} at {short(before)}"
    if isinstance(before, int) and isinstance(after, int) and after > before:
        return f"extended {what} from {before} to {after}"
    if isinstance(before, int) and isinstance(after, int):
        return f"reduced {what} from {before} to {after}"
    return f"changed {what} from {short(before)} to {short(after)}"


def _lifecycle(facts: RunFacts, rid: str, index: int) -> str:
    phase = facts.phase(index, rid)
    if phase == "finished":
        at = facts.last_change_to("finished", rid, index)
        reason = facts.finish_reason(index, rid)
        return f"{rid} finished at event {at} ({reason})"
    if phase == "retracted":
        at = facts.last_change_to("retracted", rid, index)
        return f"{rid} was retracted at event {at}, which reset its committed length to 0"
    return f"{rid} is live"


def _event_text(facts: RunFacts, index: int) -> str:
    return describe_event(facts.scenario.events[index])


def _launch_text(facts: RunFacts, index: int) -> str:
    """How the result delivered at event `index` arrived, or "" when none was."""
    delivery = facts.delivery(index)
    if delivery is None:
        return ""
    number = delivery.launch.number
    launched_at = facts.launch_event.get(number)
    when = f" (launched at event {launched_at})" if launched_at not in (None, index) else ""
    return f"the result of launch {number}{when} arrived at event {index}"


def _row_text(facts: RunFacts, index: int, rid: str) -> str:
    """The row `rid` had in the result delivered at event `index`, or "" when it had none."""
    delivery = facts.delivery(index)
    if delivery is None or rid not in delivery.launch.rids:
        return ""
    row = delivery.launch.rids.index(rid)
    kind = "a stale row" if delivery.stale[row] else "a live row"
    return (
        f"{_launch_text(facts, index)} with {kind} for it (accept_len "
        f"{delivery.launch.accepts[row]})"
    )


def explain_target_deadline(facts: RunFacts, violation: Violation) -> str | None:
    """`target-deadline`: where the interrupted call ran."""
    index = violation.event_index
    when = _launch_text(facts, index) or (
        f"at event {index} ({_event_text(facts, index)}) the target's code ran"
    )
    return _sentence(
        f"{when}, and the resolver was {violation.observed}; it was interrupted there."
    )


def explain_target_raised(facts: RunFacts, violation: Violation) -> str | None:
    """`target-raised`: what the resolver raised, and when."""
    index = violation.event_index
    if facts.delivery(index) is not None:
        return f"The resolver raised {violation.observed} when {_launch_text(facts, index)}."
    return (
        f"The resolver raised {violation.observed} at event {index} ({_event_text(facts, index)})."
    )


def explain_global_counters(facts: RunFacts, violation: Violation) -> str | None:
    """`global-counters`: which batch value is wrong, after the stale rows' stories."""
    index = violation.event_index
    delivery = facts.delivery(index)
    if delivery is None:
        return None
    launch_text = _launch_text(facts, index)
    stale = [r for r, s in zip(delivery.launch.rids, delivery.stale, strict=True) if s]
    what = _wrong_batch_value(facts, index, delivery.launch.number, violation)
    if stale:
        why = "; ".join(_lifecycle(facts, r, index) for r in stale)
        return (
            f"{why}; {launch_text} with stale rows for {', '.join(stale)}, and the resolver {what}."
        )
    return _sentence(f"{launch_text} and the resolver {what}")


def explain_runs_aligned(facts: RunFacts, violation: Violation) -> str | None:
    """`runs-aligned`: the misread row, with the stride switches since its launch."""
    index, rid = violation.event_index, violation.rid
    delivery = facts.delivery(index)
    if delivery is None or rid is None:
        return None
    row = delivery.launch.rids.index(rid)
    launch = delivery.launch
    launched_at = facts.launch_event.get(launch.number, index)
    switches = facts.stride_switches(launched_at, index)
    switched = (
        f"; the worker's stride had switched to {switches[-1][1]} at event {switches[-1][0]}"
        if switches
        else ""
    )
    return (
        f"Launch {launch.number} was launched at event {launched_at} with stride "
        f"{launch.stride}{switched}; when its result arrived at event {index}, the run "
        f"returned for row {row} ({rid}) was {short(violation.observed)} instead of its "
        f"first {launch.accepts[row]} token(s) {short(violation.expected)}."
    )


def _counter_change(facts: RunFacts, violation: Violation, field: str, name: str) -> str | None:
    """A per-request statistic (`field` of the observed request, `name` in words): what the
    resolver did to it, after the request's story when it had finished or was retracted."""
    index, rid = violation.event_index, violation.rid
    if rid is None:
        return None
    phase = facts.phase(index, rid)
    row_text = _row_text(facts, index, rid)
    before, after = facts.observed(index - 1, rid, field), facts.observed(index, rid, field)
    if field == "histogram":
        before, after = dict(before or ()), dict(after or ())
    elif before is None:
        before = 0
    lead = _lifecycle(facts, rid, index) if phase in ("finished", "retracted") else ""
    happened = row_text or f"at event {index} ({_event_text(facts, index)})"
    joined = f"{lead}; {happened}" if lead else happened
    return _sentence(
        f"{joined}, and the resolver {_change(before, after, name)}; expected "
        f"{short(violation.expected)}."
    )


def explain_verify_count(facts: RunFacts, violation: Violation) -> str | None:
    """`stats-verify-count`."""
    return _counter_change(facts, violation, "verify_ct", "spec_verify_ct")


def explain_accepted_drafts(facts: RunFacts, violation: Violation) -> str | None:
    """`stats-accepted-drafts`."""
    return _counter_change(facts, violation, "drafts", "its accepted-draft counter")


def explain_histogram(facts: RunFacts, violation: Violation) -> str | None:
    """`stats-histogram`."""
    return _counter_change(facts, violation, "histogram", "its acceptance histogram")


def _committed_change(
    facts: RunFacts, violation: Violation, should: Callable[[], str]
) -> str | None:
    """A request's committed length: what the resolver did to it, after the request's story when
    it had finished or was retracted, and what `should()` says it should have been."""
    index, rid = violation.event_index, violation.rid
    if rid is None:
        return None
    phase = facts.phase(index, rid)
    row_text = _row_text(facts, index, rid)
    before = facts.observed(index - 1, rid)
    after = facts.observed(index, rid)
    if before is None or (
        phase == "retracted" and facts.last_change_to("retracted", rid, index) == index
    ):
        before = 0  # not admitted yet, or reset by the retraction at this very event
    ought = should()
    clauses = []
    if phase in ("finished", "retracted"):
        clauses.append(_lifecycle(facts, rid, index))
    if row_text:
        clauses.append(f"{row_text} and {_change(before, after, 'its committed length')}")
    else:
        what = f"{rid}'s committed length"
        clauses.append(
            f"at event {index} ({_event_text(facts, index)}) {_change(before, after, what)}"
        )
    return _sentence("; ".join(clauses) + f", but {ought}.")


def explain_no_negative(facts: RunFacts, violation: Violation) -> str | None:
    """`no-negative`."""
    return _committed_change(facts, violation, lambda: "it must never go below zero")


def explain_committed_live(facts: RunFacts, violation: Violation) -> str | None:
    """`committed-live`: the value it should have, with the terms that make it up."""

    def should() -> str:
        rid = violation.rid
        assert rid is not None  # _committed_change returns before asking otherwise
        formula = _live_formula(facts, violation.event_index, rid)
        return f"it should be {violation.expected}" + formula

    return _committed_change(facts, violation, should)


def explain_committed_finished_frozen(facts: RunFacts, violation: Violation) -> str | None:
    """`committed-finished-frozen`: pre-claim gives back the claimed slot at the stale row."""
    delivery = facts.delivery(violation.event_index)
    stale_row = delivery is not None and violation.rid in delivery.launch.rids
    expected = violation.expected
    if facts.scenario.config.convention == "preclaim" and stale_row:
        ought = f"it should have given back the pre-claimed slot ({expected})"
    else:
        ought = f"it should have stayed at {expected}"
    return _committed_change(facts, violation, lambda: ought)


def explain_committed_retracted_zero(facts: RunFacts, violation: Violation) -> str | None:
    """`committed-retracted-zero`."""
    return _committed_change(facts, violation, lambda: "it should stay 0 until re-admission")


def _live_formula(facts: RunFacts, index: int, rid: str) -> str:
    req, admit = facts.request(index, rid), facts.admits.get(rid)
    if req is None or admit is None or req.phase != "running":
        return ""
    terms = [f"prompt {admit.prompt_len}", f"+ outputs {req.outputs}", "- 1"]
    prefills = [
        launch
        for launch in facts.in_flight(index).values()
        if launch.kind == "prefill" and rid in launch.rids
    ]
    if prefills:
        terms.append(f"+ 1 for prefill launch {prefills[0].number} in flight")
    if facts.scenario.config.convention == "preclaim" and req.decode_in_flight:
        numbers = [
            str(launch.number)
            for launch in facts.in_flight(index).values()
            if launch.kind == "decode" and rid in launch.rids
        ]
        launches = ", ".join(numbers)
        terms.append(f"+ {req.decode_in_flight} pre-claimed for decode launch {launches} in flight")
    return f" ({' '.join(terms)})"


# What `global-counters` judges, by `Finding.quantity`: the words for each value.
_BATCH_VALUES: Final = {
    "drafts-total": "the batch-global accepted-draft total on the result",
    "drafts-per-row": "the per-row accepted-draft list on the result",
    "controller-samples": "the adaptive controller's samples",
    "num_block_accept_tokens": "result.num_block_accept_tokens",
    "num_cap_tokens": "result.num_cap_tokens",
}


def _wrong_batch_value(facts: RunFacts, index: int, launch: int, violation: Violation) -> str:
    """`global-counters`: which batch value is wrong, as "wrote X as A where B", in words.

    The checker is asked again on the recorded pair for its first judged finding, so the
    sentence names the value the violation is about (the draft total, the controller's samples
    or its batch_size, ...), not the first one kvcheck happens to know."""
    entry = facts.trace[index]
    mode = facts.scenario.config.global_counters
    rule = "stale rows excluded" if mode == "ideal" else "every row counted"
    finding = None
    if entry.observed.delivery is not None:
        finding = first_judged_finding("global-counters", entry.expected, entry.observed)
    quantity = finding.quantity if finding is not None else None
    got, want = short(violation.observed), short(violation.expected)
    if quantity == "controller-batch-size":
        return (
            f"fed the adaptive controller with batch_size={got}; batch_size routes the samples "
            f"to the controller's slot for that batch size, and launch {launch} had {want} rows, "
            f"so it should be {want} whatever the number of samples"
        )
    name = _BATCH_VALUES.get(quantity or "", "a batch-level value")
    return f"wrote {name} as {got} where the {mode} rule ({rule}) gives {want}"
