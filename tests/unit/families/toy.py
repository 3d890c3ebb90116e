"""A throwaway engine family for the tests: one counter that saturates at a limit.

It exists to show that a family is one package plus one registry line: the tests register it
with `kvcheck.core.family.registered("toy", "tests.unit.families.toy:FAMILY")` and run it
through the generic `check`, `exhaust`, `replay` and reporting without any module under
`kvcheck/` knowing it. Nothing here imports a generic layer above `kvcheck.core`.

- Config: `ToyConfig(limit)`. Events: `Add(n)` (JSON kind "add") and `Reset()` ("reset").
- Model: `count = min(count + n, limit)`; a reset sets it to 0.
- Engine: the target is `resolver(state, n) -> int`, called on `Add`; `state` has `count` and
  `limit`. A reset is the engine's own.
- One invariant, `toy-count`: the counter equals the model's.
- Targets: `toy:correct` clamps, the mutant `toy:unclamped` does not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs

from kvcheck.core.family import Family
from kvcheck.core.invariant import Finding, Invariant, Violation
from kvcheck.core.target import Target
from kvcheck.errors import ScenarioFormatError

NAME: Final = "toy"
PATH: Final = "tests.unit.families.toy:FAMILY"


@attrs.frozen
class ToyConfig:
    limit: int = 3


@attrs.frozen
class Add:
    n: int = 1


@attrs.frozen
class Reset:
    pass


ToyEvent = Add | Reset


def _int(data: Mapping[str, Any], name: str, default: int) -> int:
    value = data.get(name, default)
    if type(value) is not int or not 0 <= value <= 1_000:
        raise ScenarioFormatError(f"toy: {name!r} must be an integer in 0..1000, got {value!r}")
    return value


class ToyScenarios:
    event_kinds: Final = ("add", "reset")

    @staticmethod
    def config_to_dict(config: ToyConfig) -> dict[str, Any]:
        return {"limit": config.limit}

    @staticmethod
    def config_from_dict(data: Mapping[str, Any]) -> ToyConfig:
        unknown = set(data) - {"limit"}
        if unknown:
            raise ScenarioFormatError(f"toy: unknown config fields {sorted(unknown)}")
        return ToyConfig(_int(data, "limit", 3))

    @staticmethod
    def event_to_dict(event: ToyEvent) -> dict[str, Any]:
        return {"kind": "add", "n": event.n} if isinstance(event, Add) else {"kind": "reset"}

    @staticmethod
    def event_from_dict(data: Any) -> ToyEvent:
        if not isinstance(data, Mapping) or data.get("kind") not in ("add", "reset"):
            raise ScenarioFormatError(f"toy: not an event: {data!r}")
        return Add(_int(data, "n", 1)) if data["kind"] == "add" else Reset()

    @staticmethod
    def legacy_dict(config: ToyConfig, events: tuple[ToyEvent, ...]) -> None:
        return None  # born after schema version 4

    @staticmethod
    def validate(config: ToyConfig, events: tuple[ToyEvent, ...]) -> str | None:
        return None if config.limit >= 1 else "toy: the limit must be at least 1"

    @staticmethod
    def describe_config(config: ToyConfig) -> str:
        return f"limit {config.limit}"

    @staticmethod
    def describe_event(event: ToyEvent) -> str:
        return f"add {event.n}" if isinstance(event, Add) else "reset"


class ToyModel:
    def __init__(self, config: ToyConfig) -> None:
        self.limit = config.limit
        self.count = 0
        self.reached: set[str] = set()

    def apply(self, event: ToyEvent) -> int:
        if isinstance(event, Reset):
            self.count = 0
            self.reached.add("reset")
        else:
            if self.count + event.n > self.limit:
                self.reached.add("saturated")
            self.count = min(self.count + event.n, self.limit)
        return self.count

    def clone(self) -> ToyModel:
        twin = ToyModel(ToyConfig(self.limit))
        twin.count, twin.reached = self.count, set(self.reached)
        return twin

    def state_key(self, inert: frozenset[str] = frozenset()) -> tuple[object, ...]:
        return (self.count,)


@attrs.define
class ToyState:
    """What the target sees: the counter and its limit."""

    count: int
    limit: int


class ToyEngine:
    def __init__(self, config: ToyConfig, target: Target) -> None:
        self.resolver = target.resolver
        self.state = ToyState(0, config.limit)
        self.unmodelled: list[str] = []

    @property
    def own_scheduler(self) -> bool:
        return False

    def apply(self, event: ToyEvent) -> int:
        if isinstance(event, Reset):
            self.state.count = 0
        else:
            self.state.count = int(self.resolver(self.state, event.n))
        return self.state.count

    def clone(self) -> ToyEngine:
        twin = object.__new__(ToyEngine)
        twin.resolver, twin.unmodelled = self.resolver, []
        twin.state = ToyState(self.state.count, self.state.limit)
        return twin

    def state_key(self, inert: frozenset[str] = frozenset()) -> tuple[object, ...]:
        return (self.state.count,)


def check_count(expected: int, observed: int) -> Any:
    if expected != observed:
        yield Finding(None, expected, observed, f"counter is {observed}, expected {expected}")


INVARIANTS: Final = {
    "toy-count": Invariant(
        id="toy-count",
        meaning="the counter equals the model's",
        scope="event",
        check=check_count,
        explain="tests.unit.families.toy:explain_count",
    )
}


def explain_count(facts: Any, violation: Violation) -> str:
    """How a toy violation came about."""
    return (
        f"the target left the counter at {violation.observed} where the model, clamping at "
        f"the limit, has {violation.expected}"
    )


class ToyJudge:
    invariants: Final = INVARIANTS
    model = staticmethod(ToyModel)
    engine = staticmethod(ToyEngine)

    @staticmethod
    def check_event(index: int, expected: int, observed: int) -> list[Violation]:
        return [
            Violation(invariant.id, index, f.rid, f.expected, f.observed, f.message)
            for invariant in INVARIANTS.values()
            for f in invariant.check(expected, observed)
        ]


def correct(state: ToyState, n: int) -> int:
    """The correct toy resolver: the counter saturates at the limit."""
    return min(state.count + n, state.limit)


def unclamped(state: ToyState, n: int) -> int:
    """The toy mutant: it forgets the limit."""
    return state.count + n


FAMILY: Final = Family(name=NAME, scenarios=ToyScenarios(), judge=ToyJudge())
