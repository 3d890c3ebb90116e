"""Running one scenario: engine and reference model side by side, checked after every event.

This is the only place the model and the engine meet (through the invariant checkers). It stops at
the first event with a violation: later events would only report consequences of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from kvcheck.core.calls import one_tensor_thread
from kvcheck.core.family import FamilyEngine, Judge, family
from kvcheck.core.invariant import Violation
from kvcheck.core.isolation import maybe_apart, running
from kvcheck.core.scenario import Scenario, to_json_line
from kvcheck.core.target import Target
from kvcheck.errors import KvcheckInternalError, UnsupportedTargetError


@attrs.frozen
class TraceEntry:
    """One executed event of a recorded run: the event, what the model expected after it and what
    the engine observed (the family's values). Timelines and explanations are built from these.
    """

    index: int
    event: Any
    expected: Any
    observed: Any


@attrs.frozen
class RunResult:
    """The outcome of `run_scenario`.

    `violations` are those at the first failing event (empty when the scenario passed); `trace`
    holds the executed events when recorded, the failing one included.
    """

    scenario: Scenario
    violations: tuple[Violation, ...]
    trace: tuple[TraceEntry, ...]
    # Situations the scenario reached (model labels), for coverage accounting.
    reached: frozenset[str]

    @property
    def violation(self) -> Violation | None:
        """The violation reported: the first at the failing event, invariants being checked most
        basic first. None when the scenario passed.
        """
        return self.violations[0] if self.violations else None


def run_scenario(
    scenario: Scenario,
    target: Target,
    *,
    record: bool = False,
    on_event: Callable[[int, int], None] | None = None,
) -> RunResult:
    """Replay `scenario` against `target`; deterministic, no Hypothesis involved.

    `on_event(index, total)` is called after each event (a replay's progress line). Raises
    `UnsupportedTargetError` when the target touches what kvcheck does not model, also when it
    caught the error itself and a violation followed.

    Once this process is isolated (a call of the target never returned: `kvcheck.core.isolation`)
    the run is done in a forked child.
    """
    with one_tensor_thread():
        result: RunResult = maybe_apart(_run_here, scenario, target, record, on_event)
    return result


def _run_here(
    scenario: Scenario,
    target: Target,
    record: bool,
    on_event: Callable[[int, int], None] | None,
) -> RunResult:
    running(scenario)
    judge = family(scenario.family).judge
    model = judge.model(scenario.config)
    engine = judge.engine(scenario.config, target)
    # Bound once per run: these run at every event, millions of times in a campaign.
    expect, observe, check_event = model.apply, engine.apply, judge.check_event
    trace: list[TraceEntry] = []
    for index, event in enumerate(scenario.events):
        expected = expect(event)
        observed = observe(event)
        if record:
            trace.append(TraceEntry(index, event, expected, observed))
        if on_event is not None:
            on_event(index, len(scenario.events))
        violations = check_event(index, expected, observed)
        if violations:
            _refuse_outside_model(engine, violations[0])
            _refuse_own_scheduler_fault(engine, judge, violations, scenario)
            return RunResult(scenario, tuple(violations), tuple(trace), frozenset(model.reached))
    return RunResult(scenario, (), tuple(trace), frozenset(model.reached))


def _refuse_outside_model(engine: FamilyEngine, violation: Violation) -> None:
    """No violation from a run in which the target touched what kvcheck does not model and
    caught the error itself (a fallback path kvcheck cannot judge): `UnsupportedTargetError`
    naming what it touched."""
    if not engine.unmodelled:
        return
    touched = list(dict.fromkeys(engine.unmodelled))
    more = f" (and {len(touched) - 1} more: {', '.join(touched[1:4])})" if len(touched) > 1 else ""
    raise UnsupportedTargetError(
        f"target {touched[0]}{more}, outside what kvcheck models, and caught the error itself; "
        f"the run then showed {violation.invariant} at event "
        f"{violation.event_index}, which may follow from that fallback, so kvcheck gives no "
        "verdict (see `kvcheck spellings` for what is modelled)"
    )


def _refuse_own_scheduler_fault(
    engine: FamilyEngine, judge: Judge, violations: list[Violation], scenario: Scenario
) -> None:
    """No verdict when only invariants that judge the scheduler (`Invariant.judges`) broke
    while kvcheck itself played the scheduler (`FamilyEngine.own_scheduler`): the resolver
    agreed with the model on everything it is judged by, so the fault is kvcheck's
    (docs/semantics.md §5.6 tells of one), and blaming the target for it would be a false
    verdict. A target that brings its own allocation path is judged on it as before."""
    if not engine.own_scheduler:
        return
    if any(judge.invariants[v.invariant].judges != "scheduler" for v in violations):
        return
    first = violations[0]
    raise KvcheckInternalError(
        f"kvcheck's own scheduler broke {first.invariant} at event {first.event_index} "
        f"({first.message}) while the target agreed with the reference model: a fault of "
        "kvcheck's scenario, not of the target, so no verdict; please report it with the "
        f"scenario: {to_json_line(scenario)}"
    )
