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
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, Self, TypeAlias

import attrs

from kvcheck.errors import KvcheckUsageError, ScenarioFormatError

if TYPE_CHECKING:
    import argparse

    from kvcheck.core.copying import Checkpoint
    from kvcheck.core.draws import Draws
    from kvcheck.core.invariant import Invariant, Violation
    from kvcheck.core.target import Target

# One line per family: its name (a scenario file's "family") and the dotted path of its
# `Family` object, imported on first use.
FAMILIES: dict[str, str] = {
    "sglang": "kvcheck.families.sglang:FAMILY",
    "vllm": "kvcheck.families.vllm:FAMILY",
}
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

    def checkpoint(self) -> Checkpoint | None:
        """Its state as `restore` puts it back after events applied in place
        (`kvcheck.core.copying.checkpoint`), so that the exhaustive search tries a child on the
        parent's own objects and copies (`clone`) only the children it keeps; None where the
        state cannot be checkpointed (the search then clones for every child). Optional: a
        family that does not define it is cloned for every child."""
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

    def checkpoint(self) -> Checkpoint | None:
        """As `ReferenceModel.checkpoint`: what `clone` would copy, to put back in place."""
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

    def judging(self, requested: Mapping[str, Any], target: Target) -> Judging:
        """The options `target` is judged under when `requested` asks for these (by name, as
        `kvcheck.check()` takes them; missing ones as the family chooses), and why."""
        ...

    def judging_of(self, config: Any) -> JudgingOptions:
        """The options a scenario of `config` is judged by (a counterexample file's, a
        replay's)."""
        ...

    @property
    def replay_choices(self) -> Mapping[str, tuple[str, ...]]:
        """What a replay may ask of the judging, by the name of an option of `judging_of`: the
        values it may be set to besides "auto" (the default: the family decides) and "file"
        (always the file's). SGLang's: the convention, preclaim or honest."""
        ...

    def rejudged(
        self, config: Any, requested: Mapping[str, str], target: Target, saved_target: bool
    ) -> tuple[Any, str | None]:
        """The config a replay of a stored scenario of `config` against `target` (the file's
        own when `saved_target`) runs, judged as `requested` asks (a value for every
        `replay_choices` name), and what to tell the user about it (None: nothing)."""
        ...


# --- targets: which specs a family claims, loading and probing them (kvcheck.targets) ---


class TargetLoader(Protocol):
    """How a family's targets are found: the specs it claims, loading one (its probe included),
    and what a resolver read from source (`kvcheck.targets.source`) may import and must accept."""

    @property
    def default_specs(self) -> tuple[str, ...]:
        """The targets a search runs when given none (`kvcheck check` without a target)."""
        ...

    @property
    def correct_builtin(self) -> str:
        """The spec of a correct built-in target, which every search must pass (the conformance
        suite runs it: tests/unit/families/test_conformance.py)."""
        ...

    @property
    def stand_ins(self) -> Mapping[tuple[str, str], object]:
        """Stand-ins for names a resolver's file imports from the engine's own package, by
        (module, name): what such a file gets in their place, the engine being absent here."""
        ...

    @property
    def resolver_parameters(self) -> tuple[str, ...]:
        """The parameters every resolver takes, in order (SGLang's: self, result, batch)."""
        ...

    def claims(self, spec: str) -> bool:
        """Whether `spec` names one of this family's targets (`family_for_spec`)."""
        ...

    def load(self, spec: str, *, allow_unavailable: bool, deadline: float | None) -> Target:
        """The target `spec` names, probed; `TargetLoadError` (one line) when it cannot be.
        `allow_unavailable`: names a source file uses that cannot be provided fail only when
        used; `deadline`: seconds each call may take (None: no limit)."""
        ...

    def spec_path(self, spec: str) -> str | None:
        """The file or directory `spec` reads its target from, as written (None: it names no
        path), so that it can be made absolute (`kvcheck.targets.loading.absolute_spec`)."""
        ...


def family_for_spec(spec: str) -> Family:
    """The family whose targets `spec` names: the first other registered family that claims it,
    else the default family (which loads, or refuses, every spec no other claims). Only the
    families registered besides the default are imported to ask them."""
    for name in FAMILIES:
        if name != DEFAULT_FAMILY:
            candidate = family(name)
            if candidate.targets.claims(spec):
                return candidate
    return family(DEFAULT_FAMILY)


# --- search: distribution (kvcheck.strategies, kvcheck.search.check, campaign, sampling) ---


class Distribution(Protocol):
    """How a family's scenarios are drawn: the space a search of a target under some options
    draws from (opaque to the generic layers), the draw itself (written once against `Draws`,
    driven by Hypothesis or a seeded `random.Random`), what a search tries besides its draws,
    and the coverage labels of a run. `front` is what its front doors add."""

    @property
    def parts(self) -> Mapping[str, Callable[..., Callable[[Draws], Any]]]:
        """Draw functions of a scenario's parts by name, each built from its arguments
        (`kvcheck.strategies` offers each as a Hypothesis strategy of that name)."""
        ...

    @property
    def out_of_scope(self) -> Mapping[str, str]:
        """Source lines (stripped) whose branches only inputs outside the distribution take,
        with those inputs (a target's coverage report names them). A line ending in an opening
        bracket (`if (`) is named by its text joined with the next line's (`if (self.log_stats`).
        A key may also be a function's qualname (`Class.method`): only those inputs call it."""
        ...

    @property
    def uncounted_out_of_scope(self) -> bool:
        """Whether its targets' coverage figures leave out the never-run code that only
        out-of-scope inputs reach (the arms `out_of_scope` lines lead into and the functions it
        names), each listed with its reason: a family whose targets hold code for features
        kvcheck does not model (vLLM's connectors, encoders). False: every line counts."""
        ...

    @property
    def front(self) -> FrontDoor:
        """Its command-line flags, pytest options and commands."""
        ...

    def space(self, target: Target, options: Any) -> Any:
        """What a search of `target` under `options` draws; `KvcheckUsageError` for none."""
        ...

    @property
    def space_of(self) -> Callable[..., Any]:
        """The space its keyword settings name (`kvcheck.strategies.scenarios(**settings)`)."""
        ...

    def draw_scenario(self, draws: Draws, space: Any) -> Any:
        """One scenario (`kvcheck.core.scenario.Scenario`) of `space`, from `draws`' choices."""
        ...

    def witnesses(self, space: Any) -> tuple[Any, ...]:
        """Scenarios a search of `space` tries before it draws (counted as scenarios run)."""
        ...

    def late_witnesses(self, space: Any) -> tuple[Any, ...]:
        """Scenarios a search of `space` tries after its draws, only when they found no
        violation (counted as scenarios run: the last of the budget)."""
        ...

    def fits(self, space: Any, scenario: Any) -> bool:
        """Whether a scenario saved by an earlier search belongs to `space`."""
        ...

    def pinned(self, space: Any, scenario: Any) -> Any:
        """A saved scenario as `space` would have drawn it (what it pins, pinned)."""
        ...

    def labels(self, scenario: Any, reached: Iterable[str]) -> set[str]:
        """The coverage labels of a run: the situations its model `reached`, and more."""
        ...

    def label(self, options: Any) -> str:
        """The options in a word (progress lines, and the reasons of a verdict)."""
        ...


class FrontDoor(Protocol):
    """What a family adds to kvcheck's front doors: its judging flags on the command line and
    in the pytest plugin, how they become the options it is asked for (the mapping `Judge.
    judging` takes), and its tables and commands."""

    @property
    def add_options(self) -> Callable[..., None]:
        """Called with a command's parser (`argparse._ActionsContainer`) and the command's own
        wording as keywords, adds its judging flags to it."""
        ...

    def requested(self, args: argparse.Namespace) -> dict[str, Any]:
        """The judging options the parsed `args` ask for."""
        ...

    def add_plugin_options(self, group: Any) -> None:
        """Add its `--kvcheck-*` judging options to the pytest plugin's option group."""
        ...

    def plugin_items(self, option: Callable[[str], Any]) -> list[tuple[str, dict[str, Any]]]:
        """One (name, requested options) per property item of a target, read from the
        plugin's options (`option(dest)`)."""
        ...

    def describe(self, options: Any, reason: str) -> str:
        """How a verdict was judged, in one clause (a failing plugin item's headline)."""
        ...

    def verdict_lines(self, options: Any, reason: str, shape: Any) -> list[str]:
        """How a verdict was judged (`options`, and why: `reason`) and what the target's probe
        showed (`shape`, `Target.shape`), as lines of `kvcheck check`'s text report after the
        target's (each a label padded to 12 characters, then the text)."""
        ...

    def campaign_lines(self, options: Any, reason: str) -> list[str]:
        """How a campaign's workers judge (`options`, and why: `reason`), as lines of `kvcheck
        fuzz`'s text report after the target's, laid out as `verdict_lines`' (a campaign
        probes nothing of its own to show)."""
        ...

    def report_fields(self, options: Any, reason: str) -> dict[str, Any]:
        """Its own top-level fields of `check`'s and `fuzz`'s `--json` reports of a search under
        `options` (and why: `reason`), beside the generic `family` and `options` (SGLang's:
        `convention`, `convention_reason`, `global_counters`, `adaptive`, `adaptive_reason`,
        which predate those two); {} for a family whose reports need none of their own. The
        keys it gives stay as they are: they are a contract (docs/contracts.md)."""
        ...

    def spellings_table(self) -> str | None:
        """`kvcheck spellings`: the engine API spellings it models (None: it has none)."""
        ...

    @property
    def releases(self) -> Releases | None:
        """The engine's published releases, for `kvcheck releases` (None: it has none)."""
        ...


def distribution_of(name: str) -> Distribution:
    """The distribution of the family registered as `name`; `KvcheckUsageError` when it has
    none (its scenarios replay, but cannot be searched for)."""
    found = family(name).distribution
    if found is None:
        raise KvcheckUsageError(f"engine family {name!r} draws no scenarios: it cannot be searched")
    return found


class Releases(Protocol):
    """An engine's published releases, each loadable as a target (`kvcheck releases`)."""

    @property
    def engine(self) -> str:
        """The engine's name, as the command's help says it."""
        ...

    @property
    def spec_prefix(self) -> str:
        """The target spec of a release is this prefix and its version."""
        ...

    @property
    def oldest(self) -> str:
        """The oldest release kvcheck checks."""
        ...

    @property
    def modes(self) -> tuple[tuple[str, dict[str, Any]], ...]:
        """The searches each release gets: a column name and the options it asks for."""
        ...

    def available_versions(self) -> list[str]:
        """Every release on the package index, oldest first (empty: it did not answer)."""
        ...

    def version_key(self, version: str) -> tuple[int, ...]:
        """`version` as a key that sorts releases."""
        ...

    def shape_name(self, target: Target) -> str:
        """What a release's probe showed, in a word (the table's `api shape` column)."""
        ...

    def facts(self, version: str, first_broken: str | None) -> tuple[tuple[str, str], ...]:
        """The family's own columns of a release's row, each a (name, value) pair in order
        (vLLM's: the functions it runs, its generation, the upstream bug a FAIL is); empty
        when the family has none. `first_broken` is the invariant the release broke."""
        ...


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

    @property
    def conformance_bounds(self) -> SearchBounds:
        """Small bounds, cleared in a second or so by the correct built-in, within which the
        conformance suite compares the exhaustive search with the search and finds each
        invariant on the mutant its record names (`Invariant.mutant`)."""
        ...


# --- reporting: describers, timeline lanes and cells, explanations (kvcheck.reporting) ---

# What a line of a timeline cell is about; the renderers colour by it.
LineKind: TypeAlias = Literal[
    "state", "mismatch", "launch", "in-flight", "applied", "stale", "lifecycle", "violation"
]


@attrs.frozen
class Line:
    """One line of text in a timeline cell; `kind` says what it is about (renderers colour by
    it)."""

    text: str
    kind: LineKind


@attrs.frozen
class Cell:
    """One lane of a timeline (SGLang: a request) at one event, as its family lays it out.

    The text renderers show `lines`. The swimlane (`kvcheck.reporting.html`) tints the cell by
    `phase`, writes `phase` and `summary` in it, and draws each launch the lane's cells name
    as a bar from the event that launched it to the one its result was delivered at, ending
    in a dot, or a diamond when the row delivered was `stale`. `phase` None: the lane has not
    started yet (a blank cell). `detail` holds the family's own values (SGLang's: the
    committed length expected and observed)."""

    lane: str
    phase: str | None
    lines: tuple[Line, ...] = ()
    # One short line for the swimlane (SGLang: the committed length).
    summary: str = ""
    # What the target left differs from what the family's model expects.
    mismatch: bool = False
    violation: bool = False
    # Launch numbers of this lane in flight after the event.
    in_flight: tuple[int, ...] = ()
    # The launch whose row for this lane was delivered at this event, and whether it was stale.
    delivered: int | None = None
    stale: bool = False
    # The launch of this lane made at this event, and its kind (a key of `launch_strokes`).
    launched: int | None = None
    launched_kind: str | None = None
    detail: Mapping[str, Any] = attrs.field(factory=dict)


class Reporter(Protocol):
    """How a family lays its recorded runs out on a timeline (`kvcheck.reporting.timeline`)
    and how they are drawn. Its configs and events are described by its `ScenarioCodec`, and
    each invariant record names its explanation ("module:function", called with `facts` and
    the violation)."""

    @property
    def legend(self) -> str:
        """What a cell shows, in one line (printed under a text timeline's title)."""
        ...

    @property
    def phase_fills(self) -> Mapping[str, str]:
        """The swimlane's tint of a cell by its phase, in the legend's order."""
        ...

    @property
    def launch_strokes(self) -> Mapping[str, str]:
        """A launch bar's colour by the launch's kind, in the legend's order (the first is
        that of a launch no cell gives a kind)."""
        ...

    def facts(self, result: Any) -> Any:
        """Queries over a recorded run (a `kvcheck.core.run.RunResult`, which imports this
        module), made once per report; handed to `lanes`, `notes`, `cell` and the
        explanations."""
        ...

    def lanes(self, facts: Any) -> tuple[str, ...]:
        """The timeline's lanes, left to right (SGLang: request ids, as first admitted)."""
        ...

    def notes(self, facts: Any, index: int) -> list[str]:
        """What happened at event `index` that no one lane shows (launches, deliveries)."""
        ...

    def cell(self, facts: Any, index: int, lane: str, violation: Violation | None) -> Cell:
        """`lane` after event `index`; `violation` is the run's (it marks its own cell)."""
        ...


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


@attrs.frozen
class NamedCorpus:
    """A corpus beside a family's resolver corpus, run only when asked for by name
    (`Mutants.named_corpora`, `kvcheck mutants --corpus NAME`): its entries, and why the
    exhaustive minimum is not looked for on them ("" when it is)."""

    entries: Sequence[MutantEntry]
    no_exhaustive: str = ""


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

    @property
    def named_corpora(self) -> Mapping[str, NamedCorpus]:
        """Corpora beside `entries`, run only when asked for by name (`kvcheck mutants
        --corpus NAME`; SGLang's `release-trees`); their entries are found by `get` too."""
        ...

    def check_flags(self, entry: Any) -> list[str]:
        """The `kvcheck check` options that judge `entry` as the kill matrix does (its
        `options`), for the command that replays a row."""
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
    moves: Moves
    # Parts whose protocol is written next to its generic consumer's move behind the seam.
    targets: TargetLoader
    distribution: Distribution | None = None
    report: Reporter = attrs.field(kw_only=True)
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
    """Every registration, for a worker process to repeat (`repeat_registrations`)."""
    return dict(FAMILIES)


def repeat_registrations(paths: Mapping[str, str]) -> None:
    """In a worker process, before it loads a family: the environment's registrations, then
    the parent's (`registered_paths`), so a family registered at run time is known there."""
    register_from_environment()
    for name, path in paths.items():
        register(name, path)


# Families registered from outside for every command and worker of a run (a test's family, a
# family kept outside kvcheck): "name=module:attribute" entries, separated by commas.
FAMILIES_VARIABLE: Final = "KVCHECK_FAMILIES"


def register_from_environment(environ: Mapping[str, str] | None = None) -> None:
    """Register the families `KVCHECK_FAMILIES` names (`FAMILIES_VARIABLE`). The front doors
    (the command line, the pytest plugin) and worker processes call this before they load a
    family. A malformed entry is a `KvcheckUsageError` naming it; a path that does not import
    fails when the family is first used, as any registration's."""
    text = (os.environ if environ is None else environ).get(FAMILIES_VARIABLE, "")
    for entry in filter(None, (part.strip() for part in text.split(","))):
        name, equals, path = (part.strip() for part in entry.partition("="))
        module, colon, attribute = path.partition(":")
        if not (equals and colon and name and module and attribute):
            raise KvcheckUsageError(
                f"{FAMILIES_VARIABLE}: {entry!r} is not name=module:attribute (entries are "
                "separated by commas)"
            )
        register(name, path)


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
