"""A failure (a violation and its scenario) as text people read and JSON machines read; the
commands build their reports from these."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvcheck.core.family import family
from kvcheck.core.jsonable import show
from kvcheck.core.scenario import Scenario, describe_config, describe_event
from kvcheck.wording import plural

if TYPE_CHECKING:
    from kvcheck.core.invariant import Violation


def format_events(scenario: Scenario, mark: int | None = None) -> list[str]:
    """The scenario's events as numbered lines; the one at index `mark` points at the violation."""
    width = len(str(max(len(scenario.events) - 1, 0)))
    lines = []
    for index, event in enumerate(scenario.events):
        arrow = "   <- violation" if index == mark else ""
        lines.append(f"  {index:>{width}}  {describe_event(scenario, event)}{arrow}")
    return lines


def format_failure(violation: Violation, scenario: Scenario, headline: str = "") -> list[str]:
    """The FAIL line, the explanation and the numbered events of a counterexample."""
    where = f" ({violation.rid})" if violation.rid else ""
    return [
        f"FAIL        {headline}{violation.invariant} at event {violation.event_index}{where}: "
        f"expected {show(violation.expected, violation.observed)}, "
        f"observed {show(violation.observed, violation.expected)}",
        f"            {violation.message}",
        f"counterexample: {plural(len(scenario.events), 'event')}; {describe_config(scenario)}",
        *format_events(scenario, violation.event_index),
    ]


def failure_to_json(violation: Violation, scenario: Scenario) -> dict[str, Any]:
    """The `violation`, `events` and `config` fields of a failing report."""
    codec = family(scenario.family).scenarios
    return {
        "violation": violation.to_dict(),
        "events": [codec.event_to_dict(e) for e in scenario.events],
        "config": codec.config_to_dict(scenario.config),
    }
