"""Per-request timelines of one run, and a sentence that explains its violation.

A timeline is built from a recorded run (`run_scenario(..., record=True)`): events down the side,
requests across. Each cell shows the request's phase and committed KV length (expected by the
reference model, and what the target left when the two differ), what happened to the request at
that event (prefill, decode launch, a delivered row and whether it was stale) and which of its
launches are still in flight. The cell of the violation is marked.

`build_timeline` gives renderer-independent data; `render_plain` is text for logs and pipes,
`render_rich` a `rich` table for terminals, `print_timeline` picks one for a stream, and
`kvcheck.reporting.html` draws the same data as an SVG swimlane.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Any, Final, Literal

import attrs

from kvcheck.core.scenario import (
    Abort,
    Admit,
    Config,
    Scenario,
    SwitchStride,
    describe_config,
    describe_event,
)

if TYPE_CHECKING:
    from rich.console import RenderableType

    from kvcheck.core.invariants import Violation
    from kvcheck.core.model import ExpectedDelivery, Launch, RequestExpectation
    from kvcheck.core.run import RunResult, TraceEntry

# What a line of a cell is about; renderers map kinds to colours.
LineKind = Literal[
    "state", "mismatch", "launch", "in-flight", "applied", "stale", "lifecycle", "violation"
]


@attrs.frozen
class Line:
    text: str
    kind: LineKind


@attrs.frozen
class Cell:
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
        return self.phase is not None and not (
            type(self.observed) is int and self.observed == self.expected
        )


@attrs.frozen
class Row:
    index: int
    event: str
    # What the scheduler did at this event (launches, deliveries, stride switches).
    notes: tuple[str, ...]
    cells: tuple[Cell, ...]
    # The violation is at this event but not about one request (e.g. global counters).
    violation: bool = False


@attrs.frozen
class Timeline:
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
        who = f"{self.target}: " if self.target else ""
        return f"{who}{describe_config(self.config)}"


# --- facts about a recorded run -----------------------------------------------------------------


class _Facts:
    """Queries over a recorded trace that the timeline and the explanation share."""

    def __init__(self, result: RunResult) -> None:
        self.result = result
        self.scenario = result.scenario
        self.trace: Sequence[TraceEntry] = result.trace
        self.admits: dict[str, Admit] = {}
        for event in self.scenario.events:
            if isinstance(event, Admit) and event.rid not in self.admits:
                self.admits[event.rid] = event
        self.launch_event: dict[int, int] = {}
        self.launches: dict[int, Launch] = {}
        for entry in self.trace:
            for launch in self.launched_at(entry.index):
                self.launch_event.setdefault(launch.number, entry.index)
                self.launches.setdefault(launch.number, launch)

    def in_flight(self, index: int) -> dict[int, Launch]:
        if index < 0 or index >= len(self.trace):
            return {}
        return {launch.number: launch for launch in self.trace[index].expected.in_flight}

    def delivery(self, index: int) -> ExpectedDelivery | None:
        return self.trace[index].expected.delivery if 0 <= index < len(self.trace) else None

    def launched_at(self, index: int) -> list[Launch]:
        before, after = self.in_flight(index - 1), self.in_flight(index)
        found = [launch for number, launch in after.items() if number not in before]
        delivery = self.delivery(index)
        if delivery is not None and delivery.launch.number not in before:
            found.append(delivery.launch)  # overlap off: launched and delivered at once
        return sorted(found, key=lambda launch: launch.number)

    def prefill_delivered_at(self, index: int) -> list[Launch]:
        before, after = self.in_flight(index - 1), self.in_flight(index)
        return [
            launch
            for number, launch in before.items()
            if number not in after and launch.kind == "prefill"
        ]

    def request(self, index: int, rid: str) -> RequestExpectation | None:
        if not 0 <= index < len(self.trace):
            return None
        for req in self.trace[index].expected.requests:
            if req.rid == rid:
                return req
        return None

    def observed(self, index: int, rid: str, field: str = "committed") -> Any:
        if not 0 <= index < len(self.trace):
            return None
        for req in self.trace[index].observed.requests:
            if req.rid == rid:
                return getattr(req, field)
        return None

    def phase(self, index: int, rid: str) -> str | None:
        req = self.request(index, rid)
        return None if req is None else req.phase

    def last_change_to(self, phase: str, rid: str, upto: int) -> int | None:
        """The last event at or before `upto` at which `rid` entered `phase`."""
        for index in range(upto, -1, -1):
            if self.phase(index, rid) == phase and self.phase(index - 1, rid) != phase:
                return index
        return None

    def finish_reason(self, index: int, rid: str) -> str:
        for event in self.scenario.events[: index + 1]:
            if isinstance(event, Abort) and event.rid == rid:
                return "aborted"
        req, admit = self.request(index, rid), self.admits.get(rid)
        if req is None or admit is None:
            return "finished"
        if admit.eos_at is not None and admit.eos_at <= min(req.outputs, admit.max_new_tokens):
            return f"EOS at output {admit.eos_at}"
        if req.outputs >= admit.max_new_tokens:
            return f"length, max_new_tokens {admit.max_new_tokens}"
        return "aborted"

    def stride_switches(self, after: int, upto: int) -> list[tuple[int, int]]:
        if not self.scenario.config.adaptive:
            return []
        return [
            (index, event.stride)
            for index, event in enumerate(self.scenario.events)
            if after < index <= upto and isinstance(event, SwitchStride)
        ]


# --- building the timeline ----------------------------------------------------------------------


def build_timeline(result: RunResult, *, target: str | None = None) -> Timeline:
    """The timeline of a recorded run (`run_scenario(..., record=True)`)."""
    facts = _Facts(result)
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


def _notes(facts: _Facts, index: int) -> list[str]:
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


def _cell(facts: _Facts, index: int, rid: str, violation: Violation | None) -> Cell:
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
                Line(f"launch {delivered} result: a={accept}, +{accept} tokens", "applied")
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
                f"VIOLATION {violation.invariant}: expected {_short(violation.expected)}, "
                f"observed {_short(violation.observed)}",
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


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- the explanation ----------------------------------------------------------------------------

_STAT_FIELDS: Final = {
    "stats-verify-count": ("verify_ct", "spec_verify_ct"),
    "stats-accepted-drafts": ("drafts", "its accepted-draft counter"),
    "stats-histogram": ("histogram", "its acceptance histogram"),
}


def explain(result: RunResult) -> str:
    """One sentence, in the domain's words, on how the run's first violation came about.

    Works on recorded and unrecorded runs (an unrecorded one is replayed with recording first).
    """
    violation = result.violation
    if violation is None:
        return "no violation"
    if not result.trace:
        return violation.message
    facts = _Facts(result)
    try:
        sentence = _explain(facts, violation)
    except (IndexError, KeyError, ValueError):  # an odd trace: fall back on the checker's words
        sentence = None
    return sentence or violation.message


def _sentence(text: str) -> str:
    """Capitalise a sentence unless it starts with a request id or a code name."""
    first = text.split(" ", 1)[0]
    return text[0].upper() + text[1:] if first in ("the", "at", "launch") else text


def _change(before: Any, after: Any, what: str) -> str:
    if before == after:
        return f"left {what} at {_short(before)}"
    if isinstance(before, int) and isinstance(after, int) and after > before:
        return f"extended {what} from {before} to {after}"
    if isinstance(before, int) and isinstance(after, int):
        return f"reduced {what} from {before} to {after}"
    return f"changed {what} from {_short(before)} to {_short(after)}"


def _lifecycle(facts: _Facts, rid: str, index: int) -> str:
    phase = facts.phase(index, rid)
    if phase == "finished":
        at = facts.last_change_to("finished", rid, index)
        reason = facts.finish_reason(index, rid)
        return f"{rid} finished at event {at} ({reason})"
    if phase == "retracted":
        at = facts.last_change_to("retracted", rid, index)
        return f"{rid} was retracted at event {at}, which reset its committed length to 0"
    return f"{rid} is live"


def _explain(facts: _Facts, violation: Violation) -> str | None:
    index, rid, invariant = violation.event_index, violation.rid, violation.invariant
    delivery = facts.delivery(index)
    event_text = describe_event(facts.scenario.events[index])
    launch_text = ""
    if delivery is not None:
        number = delivery.launch.number
        launched_at = facts.launch_event.get(number)
        when = f" (launched at event {launched_at})" if launched_at not in (None, index) else ""
        launch_text = f"the result of launch {number}{when} arrived at event {index}"

    if invariant == "target-raised":
        if delivery is not None:
            return f"The resolver raised {violation.observed} when {launch_text}."
        return f"The resolver raised {violation.observed} at event {index} ({event_text})."

    if invariant == "global-counters" and delivery is not None:
        stale = [r for r, s in zip(delivery.launch.rids, delivery.stale, strict=True) if s]
        mode = facts.scenario.config.global_counters
        rule = "stale rows excluded" if mode == "ideal" else "every row counted"
        if stale:
            why = "; ".join(_lifecycle(facts, r, index) for r in stale)
            return (
                f"{why}; {launch_text} with stale rows for {', '.join(stale)}, and the resolver "
                f"wrote the batch-global accepted-draft counter as {_short(violation.observed)} "
                f"where the {mode} rule ({rule}) gives {_short(violation.expected)}."
            )
        return _sentence(
            f"{launch_text} and the resolver wrote the batch-global "
            f"accepted-draft counter as {_short(violation.observed)}, expected "
            f"{_short(violation.expected)} ({rule})."
        )

    if invariant == "runs-aligned" and delivery is not None and rid is not None:
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
            f"returned for row {row} ({rid}) was {_short(violation.observed)} instead of its "
            f"first {launch.accepts[row]} token(s) {_short(violation.expected)}."
        )

    if rid is None:
        return None
    phase = facts.phase(index, rid)
    row_text = ""
    if delivery is not None and rid in delivery.launch.rids:
        row = delivery.launch.rids.index(rid)
        kind = "a stale row" if delivery.stale[row] else "a live row"
        row_text = f"{launch_text} with {kind} for it (accept_len {delivery.launch.accepts[row]})"

    if invariant in _STAT_FIELDS:
        field, name = _STAT_FIELDS[invariant]
        before, after = facts.observed(index - 1, rid, field), facts.observed(index, rid, field)
        if field == "histogram":
            before, after = dict(before or ()), dict(after or ())
        elif before is None:
            before = 0
        lead = _lifecycle(facts, rid, index) if phase in ("finished", "retracted") else ""
        happened = row_text or f"at event {index} ({event_text})"
        joined = f"{lead}; {happened}" if lead else happened
        return _sentence(
            f"{joined}, and the resolver {_change(before, after, name)}; expected "
            f"{_short(violation.expected)}."
        )

    if invariant.startswith("committed-") or invariant == "no-negative":
        before = facts.observed(index - 1, rid)
        after = facts.observed(index, rid)
        if before is None or (
            phase == "retracted" and facts.last_change_to("retracted", rid, index) == index
        ):
            before = 0  # not admitted yet, or reset by the retraction at this very event
        expected = violation.expected
        if invariant == "committed-finished-frozen":
            stale_row = delivery is not None and rid in delivery.launch.rids
            if facts.scenario.config.convention == "preclaim" and stale_row:
                should = f"it should have given back the pre-claimed slot ({expected})"
            else:
                should = f"it should have stayed at {expected}"
        elif invariant == "committed-retracted-zero":
            should = "it should stay 0 until re-admission"
        elif invariant == "no-negative":
            should = "it must never go below zero"
        else:
            should = f"it should be {expected}" + _live_formula(facts, index, rid)
        clauses = []
        if phase in ("finished", "retracted"):
            clauses.append(_lifecycle(facts, rid, index))
        if row_text:
            clauses.append(f"{row_text} and {_change(before, after, 'its committed length')}")
        else:
            what = f"{rid}'s committed length"
            clauses.append(f"at event {index} ({event_text}) {_change(before, after, what)}")
        return _sentence("; ".join(clauses) + f", but {should}.")
    return None


def _live_formula(facts: _Facts, index: int, rid: str) -> str:
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


# --- rendering ----------------------------------------------------------------------------------

LEGEND: Final = (
    "cells: phase and committed KV length C (exp = reference model, obs = target when they "
    "differ); STALE = a row delivered after its request finished or was retracted"
)


def _violation_line(timeline: Timeline) -> str | None:
    v = timeline.violation
    if v is None:
        return None
    where = f" ({v.rid})" if v.rid else ""
    return f"{v.invariant} at event {v.event_index}{where}: {v.message}"


def render_plain(timeline: Timeline) -> str:
    """The timeline as plain text: a grid with one column per request."""
    headers = ["#", "event", *timeline.rids]
    grid: list[list[list[str]]] = []
    for row in timeline.rows:
        marker = "  <== VIOLATION" if row.violation else ""
        event_lines = [row.event + marker, *(f"  {note}" for note in row.notes)]
        cells = []
        for cell in row.cells:
            lines = [line.text for line in cell.lines]
            if cell.violation:
                lines = [f">> {text}" for text in lines]
            cells.append(lines)
        grid.append([[str(row.index)], event_lines, *cells])
    widths = [len(h) for h in headers]
    for cells in grid:
        for column, lines in enumerate(cells):
            widths[column] = max(widths[column], *(len(text) for text in lines or [""]))
    sep = "  "
    out = [f"timeline  {timeline.title}", LEGEND, ""]
    out.append(sep.join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    out.append(sep.join("-" * w for w in widths))
    for cells in grid:
        height = max(len(lines) for lines in cells)
        for k in range(height):
            parts = [
                (lines[k] if k < len(lines) else "").ljust(width)
                for lines, width in zip(cells, widths, strict=True)
            ]
            out.append(sep.join(parts).rstrip())
        out.append("")
    if timeline.not_run:
        out.append("not run (the replay stops at the first violation):")
        out.extend(f"  {text}" for text in timeline.not_run)
        out.append("")
    violation = _violation_line(timeline)
    if violation:
        out.append(f"violation: {violation}")
        out.append(f"why: {timeline.explanation}")
    else:
        out.append("no violation")
    return "\n".join(out)


_STYLES: Final[dict[str, str]] = {
    "state": "",
    "mismatch": "bold red",
    "launch": "cyan",
    "in-flight": "dim cyan",
    "applied": "green",
    "stale": "bold yellow",
    "lifecycle": "magenta",
    "violation": "bold white on red",
}


def render_rich(timeline: Timeline) -> RenderableType:
    """The timeline as a `rich` renderable (a boxed table with colours)."""
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(
        title=f"timeline  {timeline.title}",
        caption=LEGEND,
        box=box.ROUNDED,
        show_lines=True,
        title_justify="left",
        caption_justify="left",
    )
    table.add_column("#", justify="right", style="bold")
    table.add_column("event")
    for rid in timeline.rids:
        table.add_column(rid)
    for row in timeline.rows:
        event = Text(row.event, style="bold white on red" if row.violation else "bold")
        for note in row.notes:
            event.append("\n" + note, style="dim")
        cells: list[Text] = []
        for cell in row.cells:
            text = Text()
            for k, line in enumerate(cell.lines):
                text.append(("\n" if k else "") + line.text, style=_STYLES[line.kind])
            if cell.violation:
                text.stylize("on dark_red")
            cells.append(text)
        table.add_row(str(row.index), event, *cells)
    parts: list[RenderableType] = [table]
    if timeline.not_run:
        parts.append(
            Text(
                "not run (the replay stops at the first violation): " + "; ".join(timeline.not_run),
                style="dim",
            )
        )
    violation = _violation_line(timeline)
    if violation:
        parts.append(Text(f"violation: {violation}", style="bold red"))
        parts.append(Text(f"why: {timeline.explanation}"))
    else:
        parts.append(Text("no violation", style="bold green"))
    return Group(*parts)


def use_rich(stream: IO[str]) -> bool:
    """Colour and boxes only on a terminal (and not under NO_COLOR or TERM=dumb)."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def print_timeline(timeline: Timeline, stream: IO[str] | None = None) -> None:
    """Print with rich on a terminal, as plain text otherwise."""
    out = stream if stream is not None else sys.stdout
    if use_rich(out):
        from rich.console import Console

        Console(file=out).print(render_rich(timeline))
    else:
        out.write(render_plain(timeline) + "\n")


def timeline_of(scenario: Scenario, target: Any, *, spec: str | None = None) -> Timeline:
    """Run `scenario` against a loaded target with recording and build its timeline."""
    from kvcheck.core.run import run_scenario

    return build_timeline(run_scenario(scenario, target, record=True), target=spec)
