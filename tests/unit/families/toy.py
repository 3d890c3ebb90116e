"""A throwaway engine family for the tests: one counter that saturates at a limit.

It exists to show that a family is one package plus one registry line: the tests register it
with `kvcheck.core.family.registered("toy", "tests.unit.families.toy:FAMILY")` (or, for a
`kvcheck` subprocess, `KVCHECK_FAMILIES=toy=tests.unit.families.toy:FAMILY`) and run it through
the generic `check`, `fuzz`, `exhaust`, `replay`, reports and kill matrix without any module
under `kvcheck/` knowing it. It fills every part of `kvcheck.core.family.Family`, and imports
nothing above `kvcheck.core`.

- Config: `ToyConfig(limit)`. Events: `Add(n)` (JSON kind "add") and `Reset()` ("reset").
- Model: `count = min(count + n, limit)`; a reset sets it to 0.
- Engine: the target is `resolver(state, n) -> int`, called on `Add` through
  `kvcheck.core.calls`; `state` has `count` and `limit`. A reset is the engine's own.
- One invariant, `toy-count`: the counter equals the model's (a target that raises breaks it too).
- Judging: one option, `max_limit`, the largest limit a search draws (`--max-limit`).
- Targets: `toy:correct` clamps, `toy:unclamped` does not. The corpus (`toy-mutant:NAME`,
  importable as `kvcheck.mutants:toy_NAME`): the mutant `unclamped` and the correct rewrite
  `clamp-by-branch`.
"""

from __future__ import annotations

import argparse
import pickle
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

import attrs

from kvcheck.core.calls import TargetCalls
from kvcheck.core.draws import Draws
from kvcheck.core.family import Cell, Family, Judging, Line, NamedCorpus
from kvcheck.core.invariant import Finding, Invariant, Violation
from kvcheck.core.scenario import Scenario
from kvcheck.core.target import Target
from kvcheck.errors import KvcheckUsageError, ScenarioFormatError, TargetLoadError

NAME: Final = "toy"
PATH: Final = "tests.unit.families.toy:FAMILY"
# What `KVCHECK_FAMILIES` says to register it in a `kvcheck` subprocess.
ENVIRONMENT: Final = f"{NAME}={PATH}"

TARGET_PREFIX: Final = "toy:"
MUTANT_PREFIX: Final = "toy-mutant:"
DEFAULT_MAX_LIMIT: Final = 4
# The most an `Add` adds in a drawn scenario, and the longest drawn scenario.
MAX_DRAWN_ADD: Final = 3
MAX_DRAWN_EVENTS: Final = 12


# --- scenarios ---------------------------------------------------------------------------------


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


def scenario(limit: int, *events: ToyEvent) -> Scenario:
    """A toy scenario."""
    return Scenario(ToyConfig(limit), events, family=NAME)


# --- the judge ---------------------------------------------------------------------------------


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
        # The limit too: states of different start configs must not merge.
        return (self.limit, self.count)


@attrs.define
class ToyState:
    """What the target sees: the counter and its limit."""

    count: int
    limit: int


# The toy's resolvers live in this file, outside kvcheck's tree: what raises in them is theirs.
CALLS: Final = TargetCalls()


class ToyEngine:
    """Calls the target on each `Add`; observes the counter, or the text of what it raised."""

    def __init__(self, config: ToyConfig, target: Target) -> None:
        self.resolver = target.resolver
        self.state = ToyState(0, config.limit)
        self.unmodelled: list[str] = []

    @property
    def own_scheduler(self) -> bool:
        return False

    def apply(self, event: ToyEvent) -> int | str:
        if isinstance(event, Reset):
            self.state.count = 0
            return 0
        returned, raised = CALLS.run(
            self.resolver, ToyState(self.state.count, self.state.limit), event.n
        )
        if raised is not None:
            return raised
        self.state.count = int(returned)
        return self.state.count

    def clone(self) -> ToyEngine:
        twin = object.__new__(ToyEngine)
        twin.resolver, twin.unmodelled = self.resolver, []
        twin.state = ToyState(self.state.count, self.state.limit)
        return twin

    def state_key(self, inert: frozenset[str] = frozenset()) -> tuple[object, ...]:
        return (self.state.limit, self.state.count)


LANE: Final = "counter"


def check_count(expected: int, observed: int | str) -> Iterator[Finding]:
    if isinstance(observed, str):
        yield Finding(LANE, expected, observed, f"the target raised {observed}")
    elif expected != observed:
        yield Finding(LANE, expected, observed, f"counter is {observed}, expected {expected}")


INVARIANTS: Final = {
    "toy-count": Invariant(
        id="toy-count",
        meaning="the counter equals the model's",
        scope="event",
        check=check_count,
        explain="tests.unit.families.toy:explain_count",
        mutant="unclamped",
    )
}


def explain_count(facts: Any, violation: Violation) -> str:
    """How a toy violation came about."""
    return (
        f"the target left the counter at {violation.observed} where the model, clamping at "
        f"the limit, has {violation.expected}"
    )


@attrs.frozen
class ToyJudging:
    """The toy's one judging option: the largest limit a search draws."""

    max_limit: int = DEFAULT_MAX_LIMIT

    def to_dict(self) -> dict[str, Any]:
        return {"max_limit": self.max_limit}

    def key_parts(self) -> tuple[str, ...]:
        return (str(self.max_limit),)


def _max_limit(value: Any) -> int:
    if type(value) is not int or value < 1:
        raise KvcheckUsageError(f"toy: max_limit must be a positive integer, got {value!r}")
    return value


class ToyJudge:
    invariants: Final = INVARIANTS
    model = staticmethod(ToyModel)
    engine = staticmethod(ToyEngine)
    replay_choices: Final[Mapping[str, tuple[str, ...]]] = {}

    @staticmethod
    def check_event(index: int, expected: int, observed: int | str) -> list[Violation]:
        return [
            Violation(invariant.id, index, f.rid, f.expected, f.observed, f.message)
            for invariant in INVARIANTS.values()
            for f in invariant.check(expected, observed)
        ]

    @staticmethod
    def judging(requested: Mapping[str, Any], target: Target) -> Judging:
        unknown = sorted(set(requested) - {"max_limit"})
        if unknown:
            raise TypeError(f"unknown judging option(s) {', '.join(unknown)}; the toy's: max_limit")
        limit = _max_limit(requested.get("max_limit", DEFAULT_MAX_LIMIT))
        return Judging(ToyJudging(limit), f"limits 1..{limit}")

    @staticmethod
    def judging_of(config: ToyConfig) -> ToyJudging:
        return ToyJudging(config.limit)

    @staticmethod
    def rejudged(
        config: ToyConfig, requested: Mapping[str, str], target: Target, saved_target: bool
    ) -> tuple[ToyConfig, str | None]:
        return config, None


# --- targets -----------------------------------------------------------------------------------


def correct(state: ToyState, n: int) -> int:
    """The correct toy resolver: the counter saturates at the limit."""
    return min(state.count + n, state.limit)


def unclamped(state: ToyState, n: int) -> int:
    """The toy mutant: it forgets the limit."""
    return state.count + n


def clamp_by_branch(state: ToyState, n: int) -> int:
    """A correct rewrite: clamps by a branch instead of `min`."""
    total = state.count + n
    if total > state.limit:
        return state.limit
    return total


BUILTINS: Final[Mapping[str, Callable[[ToyState, int], int]]] = {
    "correct": correct,
    "unclamped": unclamped,
}


class ToyTargets:
    """`toy:NAME` (a built-in), `toy-mutant:NAME` and `kvcheck.mutants:toy_NAME` (the corpus)."""

    default_specs: Final = ("toy:correct",)
    correct_builtin: Final = "toy:correct"
    stand_ins: Final[Mapping[tuple[str, str], object]] = {}
    resolver_parameters: Final = ("state", "n")

    @staticmethod
    def claims(spec: str) -> bool:
        spec = spec.strip()
        return spec.startswith((TARGET_PREFIX, MUTANT_PREFIX)) or any(
            spec == entry.spec for entry in ENTRIES
        )

    @staticmethod
    def load(spec: str, *, allow_unavailable: bool, deadline: float | None) -> Target:
        spec = spec.strip()
        entry = next(
            (e for e in ENTRIES if spec in (e.spec, e.short_spec)),
            None,
        )
        if entry is not None:
            return attrs.evolve(entry.target(), deadline=deadline)
        resolver = BUILTINS.get(spec.removeprefix(TARGET_PREFIX))
        if not spec.startswith(TARGET_PREFIX) or resolver is None:
            raise TargetLoadError(
                f"no toy target {spec!r}; toy targets: toy:correct, toy:unclamped"
            )
        return _target(
            spec, resolver, f"the toy's {spec.removeprefix(TARGET_PREFIX)} counter", deadline
        )

    @staticmethod
    def spec_path(spec: str) -> str | None:
        return None


def _target(
    spec: str, resolver: Callable[..., Any], description: str, deadline: float | None = None
) -> Target:
    return Target(spec, resolver, description, {}, shape=None, deadline=deadline, family=NAME)


# --- the distribution and its front door ----------------------------------------------------


@attrs.frozen
class ToySpace:
    max_limit: int = DEFAULT_MAX_LIMIT
    max_events: int = MAX_DRAWN_EVENTS


def _draw_config(draws: Draws, max_limit: int = DEFAULT_MAX_LIMIT) -> ToyConfig:
    return ToyConfig(draws.integer(1, max_limit))


def _draw_event(draws: Draws) -> ToyEvent:
    if draws.choice(("add", "reset")) == "add":
        return Add(draws.integer(0, MAX_DRAWN_ADD))
    return Reset()


def draw_scenario(draws: Draws, space: ToySpace) -> Scenario:
    config = _draw_config(draws, space.max_limit)
    events = draws.many("toy-event", _draw_event, 0, space.max_events)
    return Scenario(config, tuple(events), family=NAME)


def _configs(max_limit: int = DEFAULT_MAX_LIMIT) -> Callable[[Draws], ToyConfig]:
    return lambda draws: _draw_config(draws, max_limit)


def _events() -> Callable[[Draws], ToyEvent]:
    return _draw_event


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


class ToyFrontDoor:
    releases: Final = None

    @staticmethod
    def add_options(parser: Any, **_wording: Any) -> None:
        parser.add_argument(
            "--max-limit",
            type=_positive,
            default=None,
            metavar="N",
            help=f"the largest limit a scenario draws (default: {DEFAULT_MAX_LIMIT}; exhaust: "
            "the bounds' largest)",
        )

    @staticmethod
    def requested(args: argparse.Namespace) -> dict[str, Any]:
        return {} if args.max_limit is None else {"max_limit": args.max_limit}

    @staticmethod
    def add_plugin_options(group: Any) -> None:
        group.addoption(
            "--kvcheck-max-limit",
            dest="kvcheck_max_limit",
            type=int,
            default=DEFAULT_MAX_LIMIT,
            help="the largest limit a toy scenario draws",
        )

    @staticmethod
    def plugin_items(option: Callable[[str], Any]) -> list[tuple[str, dict[str, Any]]]:
        limit = option("kvcheck_max_limit")
        return [(f"limits-1-{limit}", {"max_limit": limit})]

    @staticmethod
    def describe(options: ToyJudging, reason: str) -> str:
        return f"judged on {reason}"

    @staticmethod
    def verdict_lines(options: ToyJudging, reason: str, shape: Any) -> list[str]:
        return [f"judged      on {reason}"]

    @staticmethod
    def campaign_lines(options: ToyJudging, reason: str) -> list[str]:
        return [f"judged      on {reason} by every worker"]

    @staticmethod
    def report_fields(options: ToyJudging, reason: str) -> dict[str, Any]:
        return {}

    @staticmethod
    def spellings_table() -> None:
        return None


class ToyDistribution:
    front: Final = ToyFrontDoor()
    out_of_scope: Final[Mapping[str, str]] = {}
    uncounted_out_of_scope: Final = False
    parts: Final[Mapping[str, Callable[..., Callable[[Draws], Any]]]] = {
        "configs": _configs,
        "events": _events,
    }
    draw_scenario = staticmethod(draw_scenario)
    space_of = staticmethod(ToySpace)

    @staticmethod
    def space(target: Target, options: ToyJudging) -> ToySpace:
        return ToySpace(options.max_limit)

    @staticmethod
    def witnesses(space: ToySpace) -> tuple[Scenario, ...]:
        return ()

    @staticmethod
    def late_witnesses(space: ToySpace) -> tuple[Scenario, ...]:
        return ()

    @staticmethod
    def fits(space: ToySpace, scenario: Scenario) -> bool:
        return bool(scenario.config.limit <= space.max_limit)

    @staticmethod
    def pinned(space: ToySpace, scenario: Scenario) -> Scenario:
        return scenario

    @staticmethod
    def labels(scenario: Scenario, reached: Iterable[str]) -> set[str]:
        return set(reached) | {f"limit {scenario.config.limit}"}

    @staticmethod
    def label(options: ToyJudging) -> str:
        return f"limits 1..{options.max_limit}"


# --- moves: shrinking and the exhaustive search ---------------------------------------------


def _ints(text: str) -> tuple[int, ...]:
    return tuple(_positive(part) for part in text.split(","))


@attrs.frozen
class ToyBounds:
    """Scenarios of up to `events` events from each of `limits`, adding each of `amounts`."""

    events: int = 6
    limits: tuple[int, ...] = (1, 2, 3)
    amounts: tuple[int, ...] = (1, 2)

    def __attrs_post_init__(self) -> None:
        problems = []
        if type(self.events) is not int or not 1 <= self.events <= 50:
            problems.append(f"events must be in 1..50, got {self.events!r}")
        if not self.limits or any(limit < 1 for limit in self.limits):
            problems.append(f"limits must be >= 1, got {self.limits}")
        if not self.amounts or any(n < 0 for n in self.amounts):
            problems.append(f"amounts must be >= 0, got {self.amounts}")
        if problems:
            raise KvcheckUsageError("bounds: " + "; ".join(problems))

    def describe(self) -> str:
        return (
            f"up to {self.events} events, limits {{{','.join(map(str, self.limits))}}}, "
            f"adding {{{','.join(map(str, self.amounts))}}}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {"events": self.events, "limits": list(self.limits), "amounts": list(self.amounts)}


def _options_within(bounds: ToyBounds, max_limit: int | None) -> ToyJudging:
    return ToyJudging(max(bounds.limits) if max_limit is None else _max_limit(max_limit))


class ToyMoves:
    conformance_bounds: Final = ToyBounds(events=4, limits=(1, 2), amounts=(1, 2))

    @staticmethod
    def size(scenario: Scenario) -> tuple[int, int]:
        adds = sum(e.n for e in scenario.events if isinstance(e, Add))
        return len(scenario.events), scenario.config.limit + adds

    @staticmethod
    def event_variants(event: ToyEvent) -> Iterator[ToyEvent]:
        if isinstance(event, Add):
            yield from (Add(n) for n in range(event.n))

    @staticmethod
    def config_variants(scenario: Scenario) -> Iterator[Scenario]:
        for limit in range(1, scenario.config.limit):
            yield attrs.evolve(scenario, config=ToyConfig(limit))

    @staticmethod
    def allowed_configs(target: Target) -> Callable[[ToyConfig], bool]:
        return lambda config: True

    @staticmethod
    def renamed(scenario: Scenario) -> Scenario:
        return scenario

    @staticmethod
    def bounds(values: Mapping[str, Any]) -> ToyBounds:
        return ToyBounds(**values)

    @staticmethod
    def search_options(requested: Mapping[str, Any], bounds: ToyBounds) -> ToyJudging:
        for name in requested:
            if name != "max_limit":
                raise TypeError(f"exhaust() got an unexpected keyword argument {name!r}")
        return _options_within(bounds, requested.get("max_limit"))

    @staticmethod
    def check_bounds(target: Target, bounds: ToyBounds, options: ToyJudging) -> None:
        if all(limit > options.max_limit for limit in bounds.limits):
            raise KvcheckUsageError(
                f"bounds: nothing to enumerate: every limit is above max_limit {options.max_limit}"
            )

    @staticmethod
    def start_configs(bounds: ToyBounds, options: ToyJudging) -> list[ToyConfig]:
        return [ToyConfig(limit) for limit in bounds.limits if limit <= options.max_limit]

    @staticmethod
    def not_run(bounds: ToyBounds, options: ToyJudging) -> tuple[tuple[dict[str, Any], str], ...]:
        return tuple(
            ({"limit": limit}, f"limit {limit}: above max_limit {options.max_limit}")
            for limit in bounds.limits
            if limit > options.max_limit
        )

    @staticmethod
    def expand(
        model: ToyModel,
        config: ToyConfig,
        bounds: ToyBounds,
        steps: int,
        child: Callable[[ToyEvent], Any],
    ) -> list[ToyEvent]:
        # A reset of a counter at 0 changes nothing: it is left out.
        resets = [Reset()] if model.count else []
        return [*(Add(n) for n in bounds.amounts), *resets]

    @staticmethod
    def counts_as_step(event: ToyEvent) -> bool:
        return isinstance(event, Add)

    @staticmethod
    def inert(engine: ToyEngine, model: ToyModel) -> frozenset[str]:
        return frozenset()

    @staticmethod
    def release(engine: ToyEngine, model: ToyModel) -> None:
        return None

    @staticmethod
    def pickle_state(engine: ToyEngine, model: ToyModel, target: Target) -> bytes:
        return pickle.dumps((engine.state, engine.unmodelled, model))

    @staticmethod
    def unpickle_state(data: bytes, target: Target) -> tuple[ToyEngine, ToyModel]:
        state, unmodelled, model = pickle.loads(data)
        engine = object.__new__(ToyEngine)
        engine.resolver, engine.state, engine.unmodelled = target.resolver, state, unmodelled
        return engine, model

    @staticmethod
    def prepare_worker() -> None:
        return None

    @staticmethod
    def add_bounds_options(parser: Any) -> None:
        # `--events` is SGLang's too: the flag is shared, parsed as the first family declared it.
        parser.add_argument("--events", type=int, default=6, metavar="N", help="longest scenario")
        parser.add_argument(
            "--limits", type=_ints, default=(1, 2, 3), metavar="L,L", help="the limits (1,2,3)"
        )
        parser.add_argument(
            "--amounts", type=_ints, default=(1, 2), metavar="N,N", help="what adds add (1,2)"
        )

    @staticmethod
    def bounds_from_args(args: argparse.Namespace, target: Target | None) -> ToyBounds:
        return ToyBounds(events=args.events, limits=args.limits, amounts=args.amounts)

    @staticmethod
    def search_judging(
        args: argparse.Namespace, target: Target, bounds: ToyBounds, entry: Any
    ) -> tuple[ToyJudging, dict[str, str]]:
        options = _options_within(bounds, args.max_limit)
        why = "given" if args.max_limit is not None else "the bounds' largest limit"
        return options, {"max_limit": why}

    @staticmethod
    def options_to_dict(options: ToyJudging) -> dict[str, Any]:
        return options.to_dict()

    @staticmethod
    def describe_options(options: ToyJudging, reasons: Mapping[str, str]) -> list[str]:
        why = f" ({reasons['max_limit']})" if reasons.get("max_limit") else ""
        return [f"judged      on limits 1..{options.max_limit}{why}"]


# --- reporting -------------------------------------------------------------------------------


class ToyReporter:
    legend: Final = "cells: the counter (exp = model, obs = target when they differ)"
    phase_fills: Final = {"counting": "#e8f5e9", "saturated": "#fff3e0"}
    launch_strokes: Final = {"add": "#0288d1"}

    @staticmethod
    def facts(result: Any) -> Any:
        return result

    @staticmethod
    def lanes(facts: Any) -> tuple[str, ...]:
        return (LANE,)

    @staticmethod
    def notes(facts: Any, index: int) -> list[str]:
        event = facts.trace[index].event
        return [f"resolver called with n={event.n}"] if isinstance(event, Add) else []

    @staticmethod
    def cell(facts: Any, index: int, lane: str, violation: Violation | None) -> Cell:
        entry = facts.trace[index]
        expected, observed = entry.expected, entry.observed
        limit = facts.scenario.config.limit
        lines = [Line(f"count {expected}", "state")]
        if observed != expected:
            lines.append(Line(f"exp {expected} obs {observed}", "mismatch"))
        here = violation is not None and violation.event_index == index
        if violation is not None and here:
            lines.append(Line(violation.invariant, "violation"))
        return Cell(
            lane,
            "saturated" if expected == limit else "counting",
            tuple(lines),
            summary=str(observed),
            mismatch=observed != expected,
            violation=here,
        )


# --- the mutant corpus -------------------------------------------------------------------------


@attrs.frozen
class ToyEntry:
    name: str
    kind: str
    resolver: Callable[[ToyState, int], int]
    expect: str | None
    summary: str
    origin: str = "new"
    shrink_note: str = ""
    family: str = NAME
    options: ToyJudging = ToyJudging()

    @property
    def python_name(self) -> str:
        return "toy_" + self.name.replace("-", "_")

    @property
    def spec(self) -> str:
        return f"kvcheck.mutants:{self.python_name}"

    @property
    def short_spec(self) -> str:
        return MUTANT_PREFIX + self.name

    def target(self) -> Target:
        return _target(self.spec, self.resolver, f"toy corpus {self.kind} {self.name!r}")


UNCLAMPED: Final = ToyEntry(
    "unclamped", "mutant", unclamped, "toy-count", "forgets the limit", "the toy's docstring"
)
ENTRIES: Final = (
    UNCLAMPED,
    ToyEntry(
        "clamp-by-branch",
        "rewrite",
        clamp_by_branch,
        None,
        "clamps by a branch instead of min",
        "correct rewrite",
    ),
)


class ToyMutants:
    spec_prefix: Final = MUTANT_PREFIX
    entries: Final[Sequence[ToyEntry]] = ENTRIES

    @staticmethod
    def get(name: str) -> ToyEntry | None:
        return next((e for e in ENTRIES if e.name == name), None)

    @staticmethod
    def resolver(python_name: str) -> Any | None:
        return next((e.resolver for e in ENTRIES if e.python_name == python_name), None)

    @staticmethod
    def row_columns(entry: ToyEntry) -> dict[str, Any]:
        return {"max_limit": entry.options.max_limit}

    @staticmethod
    def list_columns(entry: ToyEntry) -> dict[str, Any]:
        return {"expect": entry.expect, "spec": entry.spec}

    @staticmethod
    def list_line(entry: ToyEntry) -> str:
        return f"{entry.kind:<8} {entry.name:<16} {entry.expect or '-':<10} {entry.summary}"

    @staticmethod
    def minimum_bounds(defaults: ToyBounds) -> ToyBounds:
        return defaults

    @staticmethod
    def bounds_for(target: Target, bounds: ToyBounds) -> ToyBounds:
        return bounds

    @staticmethod
    def shrink_gap(
        shrunk_config: Mapping[str, Any],
        shrunk_events: Sequence[Mapping[str, Any]],
        shortest_config: Mapping[str, Any],
        shortest_events: Sequence[Mapping[str, Any]],
    ) -> str | None:
        return None

    named_corpora: Final[Mapping[str, NamedCorpus]] = {}

    @staticmethod
    def check_flags(entry: ToyEntry) -> list[str]:
        return []


FAMILY: Final = Family(
    name=NAME,
    scenarios=ToyScenarios(),
    judge=ToyJudge(),
    targets=ToyTargets(),
    distribution=ToyDistribution(),
    moves=ToyMoves(),
    report=ToyReporter(),
    mutants=ToyMutants(),
)
