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
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final, Protocol, Self

import attrs

from kvcheck.errors import ScenarioFormatError

if TYPE_CHECKING:
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

# --- reporting: describers, timeline lanes and cells, explanations (kvcheck.reporting) ---

# --- mutants: the kill matrix's corpus (kvcheck.mutants) ---


class MutantEntry(Protocol):
    """One resolver of a family's corpus: a plausible bug (a `mutant`, which kvcheck must
    catch) or a correct rewrite (a `rewrite`, which it must pass)."""

    @property
    def name(self) -> str:
        """Its name (`kvcheck mutants --only NAME`), unique in its family's corpus."""
        ...

    @property
    def kind(self) -> str:
        """`mutant` or `rewrite`."""
        ...

    @property
    def family(self) -> str:
        """The name of the family whose corpus holds it."""
        ...

    @property
    def expect(self) -> str | None:
        """A mutant's annotated invariant, the one expected to catch it (None: a rewrite)."""
        ...

    @property
    def origin(self) -> str:
        """Where its bug class comes from ("semantics §4.2", "new", "correct rewrite")."""
        ...

    @property
    def summary(self) -> str:
        """What it does, in one line."""
        ...

    @property
    def shrink_note(self) -> str:
        """Why its shrunk counterexample may be longer than the shortest one ("" for none)."""
        ...

    @property
    def spec(self) -> str:
        """Its importable target spec, `kvcheck.mutants:<python name>`."""
        ...

    @property
    def short_spec(self) -> str:
        """Its spec prefix and name (`mutant:NAME`)."""
        ...

    @property
    def options(self) -> JudgingOptions:
        """The options it is judged under (the scheduler it is meant to run in)."""
        ...

    def target(self) -> Target:
        """It as a target, probed like any loaded one."""
        ...


class Mutants(Protocol):
    """A family's mutant corpus, which the generic kill matrix (`kvcheck.mutants.matrix`) runs:
    its entries, looked up by name, and what the matrix reports that is the family's."""

    @property
    def spec_prefix(self) -> str:
        """The prefix of an entry's short spec (SGLang's: `mutant:`)."""
        ...

    @property
    def entries(self) -> Sequence[MutantEntry]:
        """The corpus, mutants and rewrites, in definition order."""
        ...

    def get(self, name: str) -> MutantEntry | None:
        """The entry called `name` (no prefix); None when the corpus has none."""
        ...

    def resolver(self, python_name: str) -> Any | None:
        """The resolver at `kvcheck.mutants:<python_name>`; None when no entry is named so."""
        ...

    def row_columns(self, entry: Any) -> dict[str, Any]:
        """Its own columns of an entry's kill-matrix row (`--json`), after name and kind."""
        ...

    def list_columns(self, entry: Any) -> dict[str, Any]:
        """Its own columns of an entry in `kvcheck mutants --list --json`, after name and kind."""
        ...

    def list_line(self, entry: Any) -> str:
        """The entry as a line of `kvcheck mutants --list`."""
        ...

    def minimum_bounds(self, defaults: Any) -> Any:
        """The exhaustive bounds each mutant's shortest counterexample is looked for within,
        given the exhaustive search's defaults."""
        ...

    def bounds_for(self, target: Target, bounds: Any) -> Any:
        """`bounds` widened to what `target`'s scenarios may draw."""
        ...

    def shrink_gap(
        self,
        shrunk_config: Mapping[str, Any],
        shrunk_events: Sequence[Mapping[str, Any]],
        shortest_config: Mapping[str, Any],
        shortest_events: Sequence[Mapping[str, Any]],
    ) -> str | None:
        """Why shrinking stopped above the minimum, read off the two scenarios as JSON; None
        when nothing in them tells."""
        ...


@attrs.frozen
class Family:
    """One engine family, as the generic layers see it: its name and its parts."""

    name: str
    scenarios: ScenarioCodec
    judge: Judge
    # Parts whose protocol is written next to its generic consumer's move behind the seam.
    targets: Any = None
    distribution: Any = None
    moves: Any = None
    report: Any = None
    mutants: Mutants | None = None


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
