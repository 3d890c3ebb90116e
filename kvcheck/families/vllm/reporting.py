"""How vLLM's runs are laid out on a timeline (`kvcheck.core.family.Reporter`), in vLLM's words:
one lane per request, a cell showing its status and `C`, `T`, `PH`, `IF`, `ST` after the event,
the frames launched (`schedule()`) and delivered (`update_from_output()`) in the event's notes.
"""

from __future__ import annotations

from typing import Any, Final

from kvcheck.core.family import Cell, Line
from kvcheck.core.invariant import Violation
from kvcheck.families.vllm.engine import Observation
from kvcheck.families.vllm.scenario import Add

LEGEND: Final = (
    "status; C (num_computed_tokens) T (num_tokens) PH (placeholders) IF (in flight) ST (stale)"
)


def facts(result: Any) -> Any:
    """The recorded run itself (a `RunResult`)."""
    return result


def lanes(facts: Any) -> tuple[str, ...]:
    """Request ids, as they were added."""
    return tuple(e.rid for e in facts.scenario.events if isinstance(e, Add))


def _observed(facts: Any, index: int) -> Observation | None:
    for entry in facts.trace:
        if entry.index == index:
            observed: Observation = entry.observed
            return observed
    return None


def notes(facts: Any, index: int) -> list[str]:
    """The frames launched and delivered at event `index`."""
    observed = _observed(facts, index)
    if observed is None:
        return []
    out = []
    for frame in observed.launches:
        parts = [
            f"{e.rid} n={e.scheduled} k={e.drafts}{'' if e.samples else ' (no sample)'}"
            for e in frame.entries
        ]
        preempted = (
            f"; preempted {', '.join(frame.launch.preempted)}" if frame.launch.preempted else ""
        )
        held = " (held for its grammar)" if frame.launch.pending_structured_output_tokens else ""
        out.append(
            f"schedule() step {frame.step}: {', '.join(parts) or 'nothing'}{preempted}{held}"
        )
        validated = [
            f"{e.rid} drafts {list(e.validated)} ({e.acceptable} valid)"
            for e in frame.entries
            if e.validated is not None
        ]
        if validated:
            out.append(
                f"update_draft_token_ids_in_output() step {frame.step}: {', '.join(validated)}"
            )
    for delivery in observed.deliveries:
        emitted = (
            "raised"
            if delivery.delivered is None
            else ", ".join(
                f"{rid} +{list(t)}" for rid, t in delivery.delivered.new_token_ids.items()
            )
        )
        rejected = (
            f"; the grammar rejected {', '.join(sorted(delivery.rejected))}"
            if delivery.rejected
            else ""
        )
        out.append(f"update_from_output() step {delivery.step}: {emitted or 'no tokens'}{rejected}")
    if observed.raised:
        out.append(f"the scheduler raised {observed.raised}")
    return out


def cell(facts: Any, index: int, lane: str, violation: Violation | None) -> Cell:
    """`lane` after event `index`."""
    observed = _observed(facts, index)
    broke = violation is not None and violation.event_index == index and violation.rid == lane
    if observed is None:
        return Cell(lane, None)
    view = observed.views.get(lane)
    in_flight = tuple(step for step, _, _, _ in observed.in_flight.get(lane, ()))
    delivered = next((d.step for d in observed.deliveries if lane in d.sampled), None)
    launched = next(
        (f.step for f in observed.launches if any(e.rid == lane for e in f.entries)), None
    )
    if view is None:
        reason = observed.finished.get(lane)
        if reason is None and lane not in observed.emitted and launched is None:
            return Cell(lane, None)
        phase = f"finished ({reason})" if reason else "gone"
        outputs = Line(f"{len(observed.emitted.get(lane, ()))} outputs", "lifecycle")
        return Cell(
            lane,
            phase,
            (outputs,),
            summary=phase,
            violation=broke,
            in_flight=in_flight,
            delivered=delivered,
            launched=launched,
        )
    summary = f"C{view.num_computed_tokens} T{view.num_tokens} PH{view.num_output_placeholders}"
    extra = f" IF{view.num_in_flight_tokens}" if view.num_in_flight_tokens is not None else ""
    if view.num_stale_output_tokens:
        extra += f" ST{view.num_stale_output_tokens}"
    if view.async_tokens_to_discard:
        extra += f" discard{view.async_tokens_to_discard}"
    lines: tuple[Line, ...] = (Line(view.status, "lifecycle"), Line(summary + extra, "state"))
    if broke and violation is not None:
        lines += (Line(violation.message, "violation"),)
    return Cell(
        lane,
        view.status,
        lines,
        summary=summary,
        violation=broke,
        in_flight=in_flight,
        delivered=delivered,
        stale=bool(view.num_stale_output_tokens),
        launched=launched,
        launched_kind="decode" if launched is not None else None,
        detail={
            "C": view.num_computed_tokens,
            "T": view.num_tokens,
            "PH": view.num_output_placeholders,
        },
    )


class VllmReporter:
    """vLLM's `Reporter`."""

    legend: Final = LEGEND
    phase_fills: Final = {
        "waiting": "#eeeeee",
        "running": "#d8ecff",
        "preempted": "#ffe2c2",
        "finished (stop)": "#dff5df",
        "finished (length)": "#dff5df",
        "gone": "#f4f4f4",
    }
    launch_strokes: Final = {"decode": "#3366cc"}
    facts = staticmethod(facts)
    lanes = staticmethod(lanes)
    notes = staticmethod(notes)
    cell = staticmethod(cell)
