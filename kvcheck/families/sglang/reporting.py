"""SGLang's runs on a timeline (`kvcheck.core.family.Reporter`): a lane per request, each cell
its phase and committed KV length (expected by the reference model, and what the target left
when the two differ), what happened to it at that event (prefill, decode launch, a delivered row
and whether it was stale) and which of its launches are still in flight; the notes of a row say
what the scheduler did there."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from kvcheck.core.family import Cell, Line
from kvcheck.families.sglang.facts import RunFacts, short
from kvcheck.families.sglang.scenario import SwitchStride
from kvcheck.wording import plural

if TYPE_CHECKING:
    from kvcheck.core.invariant import Violation


LEGEND: Final = (
    "cells: phase and committed KV length C (exp = reference model, obs = target when they "
    "differ); STALE = a row delivered after its request finished or was retracted"
)

PHASE_FILL: Final = {
    "waiting": "#eceff1",
    "running": "#e8f5e9",
    "finished": "#e3e8f4",
    "retracted": "#fff3e0",
}
LAUNCH_STROKE: Final = {"decode": "#0288d1", "prefill": "#7b1fa2"}


def lanes(facts: RunFacts) -> tuple[str, ...]:
    """The requests, in the order they were first admitted."""
    return tuple(facts.admits)


def notes(facts: RunFacts, index: int) -> list[str]:
    """What the scheduler did at event `index`: stride switches, launches, deliveries."""
    notes: list[str] = []
    event = facts.scenario.events[index]
    if isinstance(event, SwitchStride) and facts.scenario.config.adaptive:
        notes.append(f"worker stride is now {event.stride}")
    for launch in facts.launched_at(index):
        what = (
            f"launch {launch.number}: {launch.kind} of {', '.join(launch.rids)}"
            if launch.rids
            else f"launch {launch.number}: {launch.kind}"
        )
        if launch.kind == "decode":
            what += f", stride {launch.stride}"
            if any(a != 1 for a in launch.accepts):
                what += f", accepts {list(launch.accepts)}"
        notes.append(what)
    for launch in facts.prefill_delivered_at(index):
        notes.append(f"result of launch {launch.number} (prefill) delivered")
    delivery = facts.delivery(index)
    if delivery is not None:
        stale = [rid for rid, s in zip(delivery.launch.rids, delivery.stale, strict=True) if s]
        text = f"result of launch {delivery.launch.number} (decode) delivered"
        if stale:
            text += f"; stale rows: {', '.join(stale)}"
        notes.append(text)
    return notes


def cell(facts: RunFacts, index: int, rid: str, violation: Violation | None) -> Cell:
    """Request `rid` after event `index`; blank before it was admitted."""
    req = facts.request(index, rid)
    if req is None:
        return Cell(rid, None)
    observed = facts.observed(index, rid)
    mismatch = not (type(observed) is int and observed == req.committed)
    lines: list[Line] = []
    if mismatch:
        summary = f"C exp {req.committed} / obs {observed!r}"
        lines.append(Line(f"{req.phase}  {summary}", "mismatch"))
    else:
        summary = f"C {req.committed}"
        lines.append(Line(f"{req.phase}  {summary}", "state"))

    before = facts.phase(index - 1, rid)
    if req.phase != before and req.phase == "retracted":
        lines.append(Line("retracted: KV released, C reset to 0", "lifecycle"))
    launched: int | None = None
    launched_kind: str | None = None
    flying = facts.in_flight(index)
    for launch in facts.launched_at(index):
        if rid in launch.rids:
            launched, launched_kind = launch.number, launch.kind
            # Overlap: the launch is in flight after this event; without it, delivered at once.
            state = " in flight" if launch.number in flying else ""
            if launch.kind == "prefill":
                kind = "re-admitted" if before == "retracted" else "admitted"
                lines.append(Line(f"{kind}: prefill launch {launch.number}{state}", "launch"))
            else:
                text = f"decode launch {launch.number} (stride {launch.stride}){state}"
                lines.append(Line(text, "launch"))
    delivered: int | None = None
    stale = False
    for launch in facts.prefill_delivered_at(index):
        if rid in launch.rids:
            delivered, stale = launch.number, before in ("finished", "retracted")
            if stale:
                lines.append(Line(f"launch {launch.number} result: STALE prefill row", "stale"))
            else:
                lines.append(Line(f"launch {launch.number} result: +1 token", "applied"))
    delivery = facts.delivery(index)
    if delivery is not None and rid in delivery.launch.rids:
        row = delivery.launch.rids.index(rid)
        delivered, stale = delivery.launch.number, delivery.stale[row]
        accept = delivery.launch.accepts[row]
        if stale:
            lines.append(Line(f"launch {delivered} result: STALE row, a={accept}", "stale"))
        else:
            lines.append(
                Line(
                    f"launch {delivered} result: a={accept}, +{plural(accept, 'token')}", "applied"
                )
            )
    if req.phase != before and req.phase == "finished":
        lines.append(Line(f"finished ({facts.finish_reason(index, rid)})", "lifecycle"))
    in_flight = tuple(number for number, launch in flying.items() if rid in launch.rids)
    for number in in_flight:
        if number != launched:
            lines.append(Line(f"launch {number} in flight", "in-flight"))
    is_violation = violation is not None and violation.event_index == index and violation.rid == rid
    if is_violation and violation is not None:
        lines.append(
            Line(
                f"VIOLATION {violation.invariant}: expected {short(violation.expected)}, "
                f"observed {short(violation.observed)}",
                "violation",
            )
        )
    return Cell(
        lane=rid,
        phase=req.phase,
        lines=tuple(lines),
        summary=summary,
        mismatch=mismatch,
        violation=is_violation,
        in_flight=in_flight,
        delivered=delivered,
        stale=stale,
        launched=launched,
        launched_kind=launched_kind,
        detail={"expected": req.committed, "observed": observed},
    )


class SglangReporter:
    """SGLang's timeline lanes, notes and cells, and the swimlane's colours."""

    legend: Final = LEGEND
    phase_fills: Final = PHASE_FILL
    launch_strokes: Final = LAUNCH_STROKE
    facts = staticmethod(RunFacts)
    lanes = staticmethod(lanes)
    notes = staticmethod(notes)
    cell = staticmethod(cell)
