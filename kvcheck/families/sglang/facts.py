"""Queries over a recorded run (`run_scenario(..., record=True)`) that SGLang's timeline cells
(`kvcheck.families.sglang.reporting`) and explanations (`kvcheck.families.sglang.explain`)
share: who was admitted when, which launch delivered at which event, what the model expected
and the engine observed around an event. `RunFacts` is the family's `Reporter.facts`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kvcheck.families.sglang.scenario import Abort, Admit, SwitchStride

if TYPE_CHECKING:
    from kvcheck.core.run import RunResult, TraceEntry
    from kvcheck.families.sglang.model import (
        Expectation,
        ExpectedDelivery,
        Launch,
        RequestExpectation,
    )


class RunFacts:
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
        """Launches in flight after event `index`, by number; {} outside the trace (index -1)."""
        if index < 0 or index >= len(self.trace):
            return {}
        return {launch.number: launch for launch in self.trace[index].expected.in_flight}

    def delivery(self, index: int) -> ExpectedDelivery | None:
        """The decode delivery the model expected at event `index`, if that event delivered one."""
        return self.trace[index].expected.delivery if 0 <= index < len(self.trace) else None

    def launched_at(self, index: int) -> list[Launch]:
        """The launches made at event `index`, by number.

        A launch is new in flight after the event, or (overlap off) delivered at it without having
        been in flight before.
        """
        before, after = self.in_flight(index - 1), self.in_flight(index)
        found = [launch for number, launch in after.items() if number not in before]
        delivery = self.delivery(index)
        if delivery is not None and delivery.launch.number not in before:
            found.append(delivery.launch)  # overlap off: launched and delivered at once
        return sorted(found, key=lambda launch: launch.number)

    def prefill_delivered_at(self, index: int) -> list[Launch]:
        """The prefill launches whose result was delivered at event `index` (in flight before it,
        not after it).
        """
        before, after = self.in_flight(index - 1), self.in_flight(index)
        return [
            launch
            for number, launch in before.items()
            if number not in after and launch.kind == "prefill"
        ]

    def request(self, index: int, rid: str) -> RequestExpectation | None:
        """The model's expectation for `rid` after event `index`; None before it was admitted."""
        if not 0 <= index < len(self.trace):
            return None
        expected: Expectation = self.trace[index].expected
        for req in expected.requests:
            if req.rid == rid:
                return req
        return None

    def observed(self, index: int, rid: str, field: str = "committed") -> Any:
        """What the engine observed of `rid`'s `field` (committed length by default) after event
        `index`, as the target left it; None outside the trace or before admission.
        """
        if not 0 <= index < len(self.trace):
            return None
        for req in self.trace[index].observed.requests:
            if req.rid == rid:
                return getattr(req, field)
        return None

    def phase(self, index: int, rid: str) -> str | None:
        """The model's lifecycle phase of `rid` after event `index`; None before admission."""
        req = self.request(index, rid)
        return None if req is None else req.phase

    def last_change_to(self, phase: str, rid: str, upto: int) -> int | None:
        """The last event at or before `upto` at which `rid` entered `phase`."""
        for index in range(upto, -1, -1):
            if self.phase(index, rid) == phase and self.phase(index - 1, rid) != phase:
                return index
        return None

    def finish_reason(self, index: int, rid: str) -> str:
        """Why `rid` had finished by event `index`, in words, re-derived from the scenario: aborted,
        its EOS position, or its length cap.
        """
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
        """`(event index, new stride)` of the switches in `(after, upto]`; none unless adaptive (the
        model ignores them otherwise).
        """
        if not self.scenario.config.adaptive:
            return []
        return [
            (index, event.stride)
            for index, event in enumerate(self.scenario.events)
            if after < index <= upto and isinstance(event, SwitchStride)
        ]


def short(value: Any, limit: int = 60) -> str:
    """`value` for a timeline cell: a string as is, anything else by repr; cut to `limit` chars."""
    text = repr(value) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[: limit - 3] + "..."
