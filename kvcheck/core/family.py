"""Engine families: what kvcheck needs to know about one serving engine, behind one seam.

A family (SGLang's spec-v2 resolver today, vLLM's async scheduler next) brings its scenario
vocabulary, its reference model and engine, its invariants, how its targets are found, how its
scenarios are drawn, shrunk and enumerated, and how its runs are described. The generic layers
(running, search, shrinking, exhaustive search, counterexamples, reporting, the CLI and the
pytest plugin) reach a family only through `family(name)`; an import-linter contract forbids
them any other import of `kvcheck.families`.

A `Family` is a record of parts, each a small protocol of its own, the way pytest-xdist's
session drives any scheduler through its `Scheduling` protocol without asking which one it
has. The registry maps a name to the dotted path of the family object and imports it on first
use, the way Hypothesis maps a backend name to a provider class (`AVAILABLE_PROVIDERS`), so
`import kvcheck` loads no family and a family nobody names is never imported.

Values a family owns (its config, its events, what its model expects and its engine observes)
pass through the generic layers as `Any`: only the family looks inside them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final, Protocol, Self

import attrs

from kvcheck.errors import ScenarioFormatError

if TYPE_CHECKING:
    import argparse

    from kvcheck.core.invariant import Invariant, Violation
    from kvcheck.core.target import Target

# One line per family: its name (a scenario file's "family") and the dotted path of its
# `Family` object, imported on first use.
FAMILIES: dict[str, str] = {"sglang": "kvcheck.families.sglang:FAMILY"}
# The family of documents older than schema version 4 (which predate the field), and of the
# `Scenario(config, events)` calls that name none.
DEFAULT_FAMILY: Final = "sglang"

_LOADED: dict[str, Family] = {}


class ScenarioCodec(Protocol):
    """A family's scenario vocabulary: its config and events as data, and their JSON form.

    The envelope (`schema_version`, `family`, `config`, `events`) is generic
    (`kvcheck.core.scenario`); what sits inside `config` and each event is the family's.
    """

    @property
    def event_kinds(self) -> tuple[str, ...]:
        """The JSON kinds of its events, in the order `--kinds` lists them."""
        ...

    def config_to_dict(self, config: Any) -> dict[str, Any]:
        """The config as a JSON object."""
        ...

    def config_from_dict(self, data: Mapping[str, Any]) -> Any:
        """The config; `ScenarioFormatError` for a malformed one."""
        ...

    def event_to_dict(self, event: Any) -> dict[str, Any]:
        """The event as a JSON object, its kind under "kind"."""
        ...

    def event_from_dict(self, data: Any) -> Any:
        """The event; `ScenarioFormatError` for a malformed one."""
        ...

    def legacy_dict(self, config: Any, events: tuple[Any, ...]) -> dict[str, Any] | None:
        """The scenario as a document of the schema versions before 4 (no "family"), which
        names a finding (`Counterexample.digest`); None for a family born after version 4."""
        ...

    def validate(self, config: Any, events: tuple[Any, ...]) -> str | None:
        """Why this config and these events make no scenario (None: they do). `Scenario`
        raises `ValueError` with it, which the shrinker reads as "not a candidate"."""
        ...

    def describe_config(self, config: Any) -> str:
        """The config in a few words (a report's header)."""
        ...

    def describe_event(self, event: Any) -> str:
        """The event in a few words (a timeline's row)."""
        ...


class JudgingOptions(Protocol):
    """How a target is judged: one frozen record per family, in place of loose keywords
    (SGLang's: the committed-length convention, the global-counter mode, adaptive switching
    and overlap). Generic code passes it along and never looks inside."""

    def to_dict(self) -> dict[str, Any]:
        """The options as JSON (the `options` of `--json` reports and campaign plans)."""
        ...

    def key_parts(self) -> tuple[str, ...]:
        """The options as they enter an example-database key, in a fixed order."""
        ...


@attrs.frozen
class Judging:
    """What a search runs under: the options, why (said in reports), and the options to try
    next when the search fails under them (SGLang: the other convention; empty for most
    families), each with its reason."""

    options: JudgingOptions
    reason: str
    fallbacks: tuple[tuple[JudgingOptions, str], ...] = ()


# Each part's protocol below is written by the change that moves its generic consumer behind
# the seam; until then the part is typed `Any`.

# --- the judge: model, engine, checks (kvcheck.core.run, kvcheck.counterexamples) ---


class ReferenceModel(Protocol):
    """A family's reference model: what must hold after each event, written from the
    semantics, never by calling the code under test."""

    # The situations the run reached (coverage labels, `RunResult.reached`).
    reached: set[str]

    def apply(self, event: Any) -> Any:
        """What must hold after `event` (the family's expectation)."""
        ...

    def clone(self) -> Self:
        """An independent copy (the exhaustive search branches from it)."""
        ...

    def state_key(self, inert: frozenset[str] = frozenset()) -> tuple[object, ...]:
        """What the future of a run depends on, for merging equal states; `inert` names parts
        that cannot change any future verdict."""
        ...


class FamilyEngine(Protocol):
    """A family's engine: replays events around the target (its only caller) and observes."""

    @property
    def unmodelled(self) -> Sequence[str]:
        """Accesses outside what the family models that the target made and caught itself."""
        ...

    def apply(self, event: Any) -> Any:
        """Run `event` (calling the target where the event calls for it); the observation."""
        ...

    def clone(self) -> Self:
        """An independent copy (the exhaustive search branches from it)."""
        ...

    def state_key(self, inert: frozenset[str] = frozenset()) -> tuple[object, ...]:
        """What the future of a run depends on (see `ReferenceModel.state_key`)."""
        ...

    @property
    def own_scheduler(self) -> bool:
        """Whether kvcheck played the scheduler itself (its own allocation path on its own
        pool): a scheduler invariant broken alone is then kvcheck's fault, not the target's."""
        ...


class Judge(Protocol):
    """How a family judges a run: its model, its engine around a target, its checks."""

    @property
    def invariants(self) -> Mapping[str, Invariant]:
        """Its invariants by id, in checking order (most basic first)."""
        ...

    def model(self, config: Any) -> ReferenceModel:
        """A fresh reference model for `config`."""
        ...

    def engine(self, config: Any, target: Target) -> FamilyEngine:
        """A fresh engine for `config` around `target`."""
        ...

    def check_event(self, index: int, expected: Any, observed: Any) -> list[Violation]:
        """The violations after event `index`, most basic first (empty: it passed)."""
        ...


# --- targets: which specs a family claims, loading and probing them (kvcheck.targets) ---

# --- search: distribution (kvcheck.strategies, kvcheck.search.check, campaign, sampling) ---

# --- shrinking and exhaustive expansion (kvcheck.search.shrink, kvcheck.search.exhaust) ---


class SearchBounds(Protocol):
    """What an exhaustive search enumerates: a family's own record (SGLang's: requests, event
    kinds, strides, ...). The generic levels read only how long a scenario may grow."""

    @property
    def events(self) -> int | None:
        """The longest scenario, in events (None: until no new state is found)."""
        ...

    def describe(self) -> str:
        """The bounds in one line (reports, the kill matrix's explanations)."""
        ...

    def to_dict(self) -> dict[str, Any]:
        """The bounds as JSON (the `bounds` of `kvcheck exhaust --json`)."""
        ...


class Moves(Protocol):
    """How a family's scenarios are made smaller and enumerated.

    Shrinking (`kvcheck.search.shrink`): the generic loop cuts the scenario after its
    violation, deletes runs of events and replays each candidate; the family orders scenarios
    and offers simpler events and configs. The exhaustive search (`kvcheck.search.exhaust`):
    the generic levels apply each event the family lists to a copy of the state, check it,
    count it and merge equal states; the family lists the events, says what is inert, and
    sets up the bounds, the start configs and the command's flags. Scenarios pass as
    `kvcheck.core.scenario.Scenario` (typed `Any` here: that module imports this one).
    """

    def size(self, scenario: Any) -> tuple[int, ...]:
        """The shrink order: a candidate is tried only when smaller (fewer events first)."""
        ...

    def event_variants(self, event: Any) -> Iterator[Any]:
        """Simpler events to put in `event`'s place, most aggressive first."""
        ...

    def config_variants(self, scenario: Any) -> Iterator[Any]:
        """Simpler scenarios by their config (with what the change needs of the events)."""
        ...

    def allowed_configs(self, target: Target) -> Callable[[Any], bool]:
        """Which configs a shrunk scenario may take for `target`."""
        ...

    def renamed(self, scenario: Any) -> Any:
        """The scenario with its names made canonical (SGLang: requests r0, r1, ...)."""
        ...

    def bounds(self, values: Mapping[str, Any]) -> SearchBounds:
        """Bounds from keyword values (empty: the defaults); `KvcheckUsageError` if invalid."""
        ...

    def search_options(self, requested: Mapping[str, Any], bounds: Any) -> JudgingOptions:
        """The options `exhaust(**requested)` judges by within `bounds`, defaults filled in."""
        ...

    def check_bounds(self, target: Target, bounds: Any, options: Any) -> None:
        """`KvcheckUsageError` when the bounds give `target` nothing it may be searched on."""
        ...

    def start_configs(self, bounds: Any, options: Any) -> list[Any]:
        """The configs every scenario starts from, in a fixed order (a path's origin)."""
        ...

    def not_run(self, bounds: Any, options: Any) -> tuple[tuple[dict[str, Any], str], ...]:
        """What the bounds name but the start configs leave out: as JSON, and why in words."""
        ...

    def expand(
        self,
        model: Any,
        config: Any,
        bounds: Any,
        steps: int,
        child: Callable[[Any], Any],
    ) -> Sequence[Any]:
        """The events to branch on from a state that took `steps` steps; `child(event)`
        branches on one at once and returns the model's expectation after it."""
        ...

    def counts_as_step(self, event: Any) -> bool:
        """Whether `event` counts as a step (bounds on steps; fewer steps is the better path)."""
        ...

    def inert(self, engine: Any, model: Any) -> frozenset[str]:
        """The parts of a state that can no longer change a verdict (`state_key`'s `inert`)."""
        ...

    def release(self, engine: Any, model: Any) -> None:
        """Break the reference cycles of a state the search drops (freed without a collection)."""
        ...

    def pickle_state(self, engine: Any, model: Any, target: Target) -> bytes | None:
        """A state as bytes for another worker, without the target (None: it does not pickle)."""
        ...

    def unpickle_state(self, data: bytes, target: Target) -> tuple[FamilyEngine, ReferenceModel]:
        """The state `pickle_state` made, with this process's `target` put back."""
        ...

    def prepare_worker(self) -> None:
        """Import now what the family's runs import on first use (a worker, before it is ready)."""
        ...

    def add_bounds_options(self, parser: argparse._ActionsContainer) -> None:
        """Add `kvcheck exhaust`'s flags for the bounds."""
        ...

    def bounds_from_args(self, args: argparse.Namespace, target: Target | None) -> SearchBounds:
        """The bounds the flags ask for; with the target loaded, fitted to what it supports."""
        ...

    def search_judging(
        self, args: argparse.Namespace, target: Target, bounds: Any, entry: Any
    ) -> tuple[JudgingOptions, dict[str, str]]:
        """The options the judging flags ask for (else `entry`'s, a corpus entry or None), and
        why each was chosen by name (`NAME_reason` in `--json`; the first is saved with a
        counterexample)."""
        ...

    def options_to_dict(self, options: Any) -> dict[str, Any]:
        """The options as `kvcheck exhaust --json` gives them."""
        ...

    def describe_options(self, options: Any, reasons: Mapping[str, str]) -> list[str]:
        """The exhaust report's lines on the options, with `reasons` (`search_judging`)."""
        ...


# --- reporting: describers, timeline lanes and cells, explanations (kvcheck.reporting) ---

# --- mutants: the kill matrix's corpus (kvcheck.mutants) ---


@attrs.frozen
class Family:
    """One engine family, as the generic layers see it: its name and its parts."""

    name: str
    scenarios: ScenarioCodec
    judge: Judge
    moves: Moves
    # Parts whose protocol is written next to its generic consumer's move behind the seam.
    targets: Any = None
    distribution: Any = None
    report: Any = None
    mutants: Any = None


def family(name: str) -> Family:
    """The family registered as `name`, imported on first use.

    Raises `ScenarioFormatError` for a name no family is registered under (a scenario file
    names its family; the CLI turns this into exit 2 with the message).
    """
    loaded = _LOADED.get(name)
    if loaded is not None:
        return loaded
    path = FAMILIES.get(name)
    if path is None:
        raise ScenarioFormatError(
            f"unknown engine family {name!r}; this kvcheck knows: {', '.join(FAMILIES)}"
        )
    module_name, _, attribute = path.partition(":")
    loaded = getattr(importlib.import_module(module_name), attribute)
    if not isinstance(loaded, Family) or loaded.name != name:
        raise TypeError(f"{path} is not the Family named {name!r}")
    _LOADED[name] = loaded
    return loaded


def family_names() -> Sequence[str]:
    """The registered families' names, in registration order."""
    return tuple(FAMILIES)


def register(name: str, path: str) -> None:
    """Register the family object at `path` ("module:attribute") as `name`.

    A worker process calls this with the dotted paths its parent had, so a family registered
    at run time (a test's) is known there too."""
    if FAMILIES.get(name) != path:
        FAMILIES[name] = path
        _LOADED.pop(name, None)


def registered_paths() -> dict[str, str]:
    """Every registration, for a worker process to repeat (`register`)."""
    return dict(FAMILIES)


@contextmanager
def registered(name: str, path: str) -> Iterator[Family]:
    """Register a family for the duration of a block (a test's own family), then forget it."""
    before = FAMILIES.get(name)
    register(name, path)
    try:
        yield family(name)
    finally:
        _LOADED.pop(name, None)
        if before is None:
            FAMILIES.pop(name, None)
        else:
            FAMILIES[name] = before
