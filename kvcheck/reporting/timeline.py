"""Per-request timelines of one run: renderer-independent data.

A timeline is built from a recorded run (`run_scenario(..., record=True)`): events down the side,
requests across. Each cell shows the request's phase and committed KV length (expected by the
reference model, and what the target left when the two differ), what happened to the request at
that event (prefill, decode launch, a delivered row and whether it was stale) and which of its
launches are still in flight. The cell of the violation is marked, and the timeline carries the
explanation of the violation (`kvcheck.reporting.explain`).

`kvcheck.reporting.render` draws it as plain text or a `rich` table, `kvcheck.reporting.html` as
an SVG swimlane.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import attrs

from kvcheck.core.run import RunResult, run_scenario
from kvcheck.families.sglang.facts import RunFacts, short
from kvcheck.families.sglang.scenario import (
    Config,
    SwitchStride,
    describe_config,
    describe_event,
)
from kvcheck.reporting.explain import explain
from kvcheck.wording import plural

if TYPE_CHECKING:
    from kvcheck.core.invariant import Violation
    from kvcheck.core.scenario import Scenario
    from kvcheck.core.target import Target


# What a line of a cell is about; renderers map kinds to colours.
LineKind = Literal[
    "state", "mismatch", "launch", "in-flight", "applied", "stale", "lifecycle", "violation"
]


@attrs.frozen
class Line:
    """One line of text in a cell; `kind` says what it is about, and renderers colour by it."""

    text: str
    kind: LineKind


@attrs.frozen
class Cell:
    """One request at one event.

    The phase and committed length C the model expects, what the target left (`observed`), and
    what happened to the request there: a launch, a delivered row (applied or stale), launches
    still in flight, the violation. `phase` is None before the request is admitted.
    """

    rid: str
    # None before the request was admitted: the cell is blank.
    phase: str | None
    expected: int | None
    observed: Any
    lines: tuple[Line, ...]
    # Launch numbers of this request in flight after the event.
    in_flight: tuple[int, ...] = ()
    # Launch number whose row for this request was delivered at this event, and how.
    delivered: int | None = None
    stale: bool = False
    launched: int | None = None
    launched_kind: str | None = None
    violation: bool = False

    @property
    def mismatch(self) -> bool:
        """The target's C differs from the model's (or is not a plain int) for a known request."""
        return self.phase is not None and not (
            type(self.observed) is int and self.observed == self.expected
        )


@attrs.frozen
class Row:
    """One executed event: its description, what the scheduler did there, a cell per request."""

    index: int
    event: str
    # What the scheduler did at this event (launches, deliveries, stride switches).
    notes: tuple[str, ...]
    cells: tuple[Cell, ...]
    # The violation is at this event but not about one request (e.g. global counters).
    violation: bool = False


@attrs.frozen
class Timeline:
    """A recorded run laid out per request, for the plain, rich and HTML renderers.

    Rows cover the executed events; `not_run` lists the events after the violation, which the run
    never reached, and `explanation` says in one sentence how the violation came about.
    """

    target: str | None
    config: Config
    rids: tuple[str, ...]
    rows: tuple[Row, ...]
    # Events after the violation, which the run did not execute.
    not_run: tuple[str, ...]
    violation: Violation | None
    explanation: str

    @property
    def title(self) -> str:
        """The heading: target (when known) and the config in words."""
        who = f"{self.target}: " if self.target else ""
        return f"{who}{describe_config(self.config)}"


def build_timeline(result: RunResult, *, target: str | None = None) -> Timeline:
    """The timeline of a recorded run (`run_scenario(..., record=True)`)."""
    facts = RunFacts(result)
    violation = result.violation
    rids = tuple(facts.admits)
    rows: list[Row] = []
    for entry in facts.trace:
        cells = tuple(_cell(facts, entry.index, rid, violation) for rid in rids)
        rows.append(
            Row(
                index=entry.index,
                event=describe_event(entry.event),
                notes=tuple(_notes(facts, entry.index)),
                cells=cells,
                violation=violation is not None
                and violation.event_index == entry.index
                and (violation.rid is None or violation.rid not in rids),
            )
        )
    executed = len(facts.trace)
    not_run = tuple(
        f"{index}  {describe_event(event)}"
        for index, event in enumerate(result.scenario.events)
        if index >= executed
    )
    return Timeline(
        target=target,
        config=result.scenario.config,
        rids=rids,
        rows=tuple(rows),
        not_run=not_run,
        violation=violation,
        explanation=explain(result) if violation is not None else "",
    )


def _notes(facts: RunFacts, index: int) -> list[str]:
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


def _cell(facts: RunFacts, index: int, rid: str, violation: Violation | None) -> Cell:
    req = facts.request(index, rid)
    if req is None:
        return Cell(rid, None, None, None, ())
    observed = facts.observed(index, rid)
    lines: list[Line] = []
    if type(observed) is int and observed == req.committed:
        lines.append(Line(f"{req.phase}  C {req.committed}", "state"))
    else:
        lines.append(Line(f"{req.phase}  C exp {req.committed} / obs {observed!r}", "mismatch"))

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
    in_flight = tuple(
        number for number, launch in facts.in_flight(index).items() if rid in launch.rids
    )
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
        rid=rid,
        phase=req.phase,
        expected=req.committed,
        observed=observed,
        lines=tuple(lines),
        in_flight=in_flight,
        delivered=delivered,
        stale=stale,
        launched=launched,
        launched_kind=launched_kind,
        violation=is_violation,
    )


def timeline_of(scenario: Scenario, target: Target, *, spec: str | None = None) -> Timeline:
    """Run `scenario` against a loaded target with recording and build its timeline."""
    return build_timeline(run_scenario(scenario, target, record=True), target=spec)
