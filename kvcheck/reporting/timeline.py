"""Per-lane timelines of one run: renderer-independent data.

A timeline is built from a recorded run (`run_scenario(..., record=True)`): events down the side,
lanes across (SGLang's: one per request). The run's family lays it out (`Reporter`): its lanes,
the notes of each event and a cell per lane, which shows the lane's phase, what happened to it
at that event and which of its launches are still in flight. The cell of the violation is
marked, and the timeline carries the explanation of the violation (`kvcheck.reporting.explain`).

`kvcheck.reporting.render` draws it as plain text or a `rich` table, `kvcheck.reporting.html` as
an SVG swimlane.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from kvcheck.core.family import Cell as Cell
from kvcheck.core.family import Line as Line
from kvcheck.core.family import LineKind as LineKind
from kvcheck.core.family import family
from kvcheck.core.run import RunResult, run_scenario
from kvcheck.core.scenario import describe_event
from kvcheck.reporting.explain import explain

if TYPE_CHECKING:
    from kvcheck.core.invariant import Violation
    from kvcheck.core.scenario import Scenario
    from kvcheck.core.target import Target


@attrs.frozen
class Row:
    """One executed event: its description, what the scheduler did there, a cell per lane."""

    index: int
    event: str
    # What the scheduler did at this event (launches, deliveries, stride switches).
    notes: tuple[str, ...]
    cells: tuple[Cell, ...]
    # The violation is at this event but not about one lane (e.g. global counters).
    violation: bool = False


@attrs.frozen
class Timeline:
    """A recorded run laid out per lane, for the plain, rich and HTML renderers.

    Rows cover the executed events; `not_run` lists the events after the violation, which the run
    never reached, and `explanation` says in one sentence how the violation came about. `family`
    names the run's family, whose `config` this is and whose `Reporter` the renderers ask for
    the legend and the swimlane's colours.
    """

    target: str | None
    family: str
    config: Any
    lanes: tuple[str, ...]
    rows: tuple[Row, ...]
    # Events after the violation, which the run did not execute.
    not_run: tuple[str, ...]
    violation: Violation | None
    explanation: str

    @property
    def title(self) -> str:
        """The heading: target (when known) and the config in words."""
        who = f"{self.target}: " if self.target else ""
        return f"{who}{family(self.family).scenarios.describe_config(self.config)}"


def build_timeline(result: RunResult, *, target: str | None = None) -> Timeline:
    """The timeline of a recorded run (`run_scenario(..., record=True)`)."""
    scenario = result.scenario
    report = family(scenario.family).report
    facts = report.facts(result)
    violation = result.violation
    lanes = report.lanes(facts)
    notes, cell = report.notes, report.cell
    rows: list[Row] = []
    for entry in result.trace:
        cells = tuple(cell(facts, entry.index, lane, violation) for lane in lanes)
        rows.append(
            Row(
                index=entry.index,
                event=describe_event(scenario, entry.event),
                notes=tuple(notes(facts, entry.index)),
                cells=cells,
                violation=violation is not None
                and violation.event_index == entry.index
                and (violation.rid is None or violation.rid not in lanes),
            )
        )
    executed = len(result.trace)
    not_run = tuple(
        f"{index}  {describe_event(scenario, event)}"
        for index, event in enumerate(scenario.events)
        if index >= executed
    )
    return Timeline(
        target=target,
        family=scenario.family,
        config=scenario.config,
        lanes=lanes,
        rows=tuple(rows),
        not_run=not_run,
        violation=violation,
        explanation=explain(result) if violation is not None else "",
    )


def timeline_of(scenario: Scenario, target: Target, *, spec: str | None = None) -> Timeline:
    """Run `scenario` against a loaded target with recording and build its timeline."""
    return build_timeline(run_scenario(scenario, target, record=True), target=spec)
