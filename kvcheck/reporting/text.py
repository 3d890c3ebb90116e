"""Turning verdicts into text people read and JSON machines read."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvcheck.core.scenario import (
    Scenario,
    config_to_dict,
    describe_config,
    describe_event,
    event_to_dict,
)

if TYPE_CHECKING:
    from kvcheck.core.invariants import Violation
    from kvcheck.search.check import Verdict


def format_events(scenario: Scenario, mark: int | None = None) -> list[str]:
    width = len(str(max(len(scenario.events) - 1, 0)))
    lines = []
    for index, event in enumerate(scenario.events):
        arrow = "   <- violation" if index == mark else ""
        lines.append(f"  {index:>{width}}  {describe_event(event)}{arrow}")
    return lines


def format_verdict(verdict: Verdict) -> str:
    lines = [
        f"target      {verdict.target}  ({verdict.description})",
        f"convention  {verdict.convention}  ({verdict.convention_reason})",
        f"options     global counters {verdict.global_counters}, "
        f"adaptive {'on' if verdict.adaptive else 'off'}"
        + (f" ({verdict.adaptive_reason})" if verdict.adaptive_reason.startswith("auto") else ""),
    ]
    if verdict.api_shape is not None:
        lines.append(f"api shape   {verdict.api_shape.summary()}")
    violation, scenario = verdict.violation, verdict.counterexample
    if violation is None or scenario is None:
        lines.append(
            f"PASS        no violation in {verdict.examples} scenarios ({verdict.seconds:.2f} s)"
        )
        return "\n".join(lines)
    lines += [
        *format_failure(violation, scenario),
        f"found after {verdict.outcome.examples_to_failure} scenarios; "
        f"{verdict.examples} run in {verdict.seconds:.2f} s including shrinking",
    ]
    return "\n".join(lines)


def format_failure(violation: Violation, scenario: Scenario, headline: str = "") -> list[str]:
    """The FAIL line, the explanation and the numbered events of a counterexample."""
    where = f" ({violation.rid})" if violation.rid else ""
    return [
        f"FAIL        {headline}{violation.invariant} at event {violation.event_index}{where}: "
        f"expected {violation.expected!r}, observed {violation.observed!r}",
        f"            {violation.message}",
        f"counterexample: {len(scenario.events)} events; {describe_config(scenario.config)}",
        *format_events(scenario, violation.event_index),
    ]


def failure_to_json(violation: Violation, scenario: Scenario) -> dict[str, Any]:
    """The `violation`, `events` and `config` fields of a failing report."""
    return {
        "violation": violation.to_dict(),
        "events": [event_to_dict(e) for e in scenario.events],
        "config": config_to_dict(scenario.config),
    }


def verdict_to_json(verdict: Verdict) -> dict[str, Any]:
    data: dict[str, Any] = {
        "verdict": verdict.verdict,
        "target": verdict.target,
        "convention": verdict.convention,
        "convention_reason": verdict.convention_reason,
        "global_counters": verdict.global_counters,
        "adaptive": verdict.adaptive,
        "examples": verdict.examples,
        "seconds": round(verdict.seconds, 3),
        "adaptive_reason": verdict.adaptive_reason,
        "api_shape": verdict.api_shape.to_dict() if verdict.api_shape is not None else None,
    }
    violation, scenario = verdict.violation, verdict.counterexample
    if violation is not None and scenario is not None:
        data |= failure_to_json(violation, scenario)
        data["examples_to_failure"] = verdict.outcome.examples_to_failure
        data["counterexample_file"] = None
    return data
