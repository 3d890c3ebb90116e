"""A scenario as data: a family's config and the events applied to it in order, with a
versioned JSON envelope.

Everything kvcheck does is a function of a `Scenario`: the search generates them, a family's
engine replays them against a target, its reference model computes what must hold after each
event, and counterexample files store them. The envelope (`schema_version`, `family`, `config`,
`events`) is generic; what a config and an event are is the family's
(`kvcheck.core.family.ScenarioCodec`). The JSON form round-trips exactly
(`from_json(to_json(s)) == s`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

from kvcheck.core.family import DEFAULT_FAMILY, FAMILIES, family
from kvcheck.errors import ScenarioFormatError

# Version 2 added SGLang's algorithm, block/cap lengths and grammars; version 3 its allocation
# rule; version 4 the engine family (`"family"`, at the top level), which every scenario now
# names, so every scenario is written as version 4. Versions 1-3 predate families and are
# SGLang's (`ScenarioCodec.legacy_dict` writes that form).
SCHEMA_VERSION: Final = 4
SUPPORTED_SCHEMA_VERSIONS: Final = (1, 2, 3, 4)
FAMILY_SINCE_VERSION: Final = 4

# The longest list of events and the longest identifier a document may hold, and the whole
# document in characters (docs/file-bounds.md): what bounds its free text (messages,
# explanations, the saved expected and observed values) and what is read before any field is
# looked at. A family bounds its own fields.
MAX_EVENTS: Final = 10_000
MAX_ID_CHARS: Final = 256
MAX_DOCUMENT_CHARS: Final = 32 * 1024 * 1024
# No kvcheck document nests deeper than a handful of levels (a counterexample's violation may
# hold a per-row list of lists); anything far deeper is damage or a nesting bomb.
MAX_JSON_DEPTH: Final = 64


def _event_tuple(values: Iterable[Any]) -> tuple[Any, ...]:
    # A shared tuple, not a copy per scenario: the search builds millions of scenarios.
    return values if type(values) is tuple else tuple(values)


@attrs.frozen
class Scenario:
    """A test case as data: a family's config and the events applied to it in order.

    Constructing one asks the family whether the pair makes a scenario
    (`ScenarioCodec.validate`) and raises `ValueError` with its reason when not.
    """

    config: Any
    events: tuple[Any, ...] = attrs.field(converter=_event_tuple)
    family: str = DEFAULT_FAMILY

    def __attrs_post_init__(self) -> None:
        refused = family(self.family).scenarios.validate(self.config, self.events)
        if refused:
            raise ValueError(refused)


def scenario_to_dict(scenario: Scenario) -> dict[str, Any]:
    """The versioned JSON object of a scenario: `schema_version` (`SCHEMA_VERSION`), `family`,
    `config` and `events`.

    Counterexample files carry these same four fields at their top level.
    """
    codec = family(scenario.family).scenarios
    return {
        "schema_version": SCHEMA_VERSION,
        "family": scenario.family,
        "config": codec.config_to_dict(scenario.config),
        "events": [codec.event_to_dict(e) for e in scenario.events],
    }


def legacy_scenario_dict(scenario: Scenario) -> dict[str, Any]:
    """The scenario as kvcheck wrote it before schema version 4 where its family can say it
    (SGLang's scenarios), else its version 4 form.

    What identifies a finding (`Counterexample.digest`, and so its file name) is computed on
    this form, so a finding saved before version 4 keeps its name when it is found again; and
    a corpus in this form is read by kvcheck trees from before version 4 (the benchmarks).
    """
    legacy = family(scenario.family).scenarios.legacy_dict(scenario.config, scenario.events)
    return legacy if legacy is not None else scenario_to_dict(scenario)


def check_schema_version(data: Mapping[str, Any]) -> None:
    """Refuse a document this kvcheck cannot read.

    Raises `ScenarioFormatError` unless its `schema_version` is one of
    `SUPPORTED_SCHEMA_VERSIONS` (a missing one is refused too).
    """
    version = data.get("schema_version")
    # Exactly an integer: JSON's `true` and `1.0` compare equal to 1 in Python, and are not it.
    if type(version) is not int or version not in SUPPORTED_SCHEMA_VERSIONS:
        supported = ", ".join(str(v) for v in SUPPORTED_SCHEMA_VERSIONS)
        raise ScenarioFormatError(
            f"unsupported schema_version {version!r} ({type(version).__name__}); this kvcheck "
            f"reads version(s) {supported}, as integers"
        )


def scenario_family(data: Mapping[str, Any]) -> str:
    """The engine family a document (of a supported schema version) names: its `family` from
    version 4 on, SGLang's for versions 1-3, which predate the field.

    Raises `ScenarioFormatError` for a version 4 document without one, a family that is not a
    string, or one this kvcheck does not know (the message names the known families).
    """
    known = ", ".join(FAMILIES)
    if "family" not in data:
        version = data.get("schema_version")
        if isinstance(version, int) and version >= FAMILY_SINCE_VERSION:
            raise ScenarioFormatError(
                f"a schema_version {version} document must name its engine 'family' (known: "
                f"{known})"
            )
        return DEFAULT_FAMILY
    name = data["family"]
    if not isinstance(name, str):
        raise ScenarioFormatError(
            f"'family' must be a string naming an engine family (known: {known}), got "
            f"{type(name).__name__}"
        )
    if len(name) > MAX_ID_CHARS:
        raise ScenarioFormatError(
            f"'family' is {len(name)} characters long, more than the bound {MAX_ID_CHARS}"
        )
    if name not in FAMILIES:
        raise ScenarioFormatError(f"unknown engine family {name!r}; this kvcheck knows: {known}")
    return name


def scenario_from_dict(data: Mapping[str, Any]) -> Scenario:
    """Parse a scenario object (schema version and family first); `ScenarioFormatError` if
    malformed."""
    if not isinstance(data, Mapping):
        raise ScenarioFormatError("scenario must be a JSON object")
    check_schema_version(data)
    name = scenario_family(data)
    codec = family(name).scenarios
    events = data.get("events")
    if not isinstance(events, Sequence) or isinstance(events, str):
        raise ScenarioFormatError("scenario 'events' must be a list")
    if len(events) > MAX_EVENTS:
        raise ScenarioFormatError(
            f"scenario has {len(events)} events, more than the bound {MAX_EVENTS}"
        )
    config = data.get("config")
    if not isinstance(config, Mapping):
        raise ScenarioFormatError("scenario 'config' must be an object")
    parsed = codec.config_from_dict(config)
    try:
        return Scenario(parsed, tuple(codec.event_from_dict(e) for e in events), name)
    except ValueError as exc:
        raise ScenarioFormatError(f"invalid scenario: {exc}") from None


def to_json(scenario: Scenario) -> str:
    """The scenario as indented JSON with sorted keys; `from_json(to_json(s)) == s`."""
    return json.dumps(scenario_to_dict(scenario), indent=2, sort_keys=True)


def to_json_line(scenario: Scenario) -> str:
    """The scenario's JSON form on one line, for a message that must name it exactly."""
    return json.dumps(scenario_to_dict(scenario), separators=(",", ":"))


def from_json(text: str) -> Scenario:
    """Parse `to_json`'s text; `ScenarioFormatError` for invalid JSON or a malformed scenario."""
    try:
        data = parse_json_document(text)
    except json.JSONDecodeError as exc:
        raise ScenarioFormatError(f"not valid JSON: {exc}") from None
    return scenario_from_dict(data)


def describe_config(scenario: Scenario) -> str:
    """The scenario's config in a few words, as its family says it."""
    return family(scenario.family).scenarios.describe_config(scenario.config)


def describe_event(scenario: Scenario, event: Any) -> str:
    """One of the scenario's events in a few words, as its family says it."""
    return family(scenario.family).scenarios.describe_event(event)


def parse_json_document(text: str) -> Any:
    """`json.loads(text)` for a scenario or counterexample document, refusing one nested deeper
    than `MAX_JSON_DEPTH` with a `ScenarioFormatError` instead of a `RecursionError` now or
    later (every reader of the parsed value recurses). `json.JSONDecodeError` passes through."""
    if len(text) > MAX_DOCUMENT_CHARS:
        raise ScenarioFormatError(
            f"the document is {len(text):,} characters long, more than the bound "
            f"{MAX_DOCUMENT_CHARS:,} (damaged, or not a kvcheck document)"
        )
    # A UTF-8 byte order mark (some editors write one) is no part of the document.
    text = text.removeprefix("\ufeff")
    try:
        data = json.loads(text)
    except RecursionError:
        data = None
        deep = True
    except json.JSONDecodeError:
        raise
    except ValueError:  # an integer of thousands of digits, past Python's conversion limit
        raise ScenarioFormatError(
            "a number in the JSON has thousands of digits, too long to read (damaged, or not a "
            "kvcheck document)"
        ) from None
    else:
        deep = _deeper_than(data, MAX_JSON_DEPTH)
    if deep:
        raise ScenarioFormatError(
            f"the JSON is nested more than {MAX_JSON_DEPTH} levels deep (damaged, or not a "
            "kvcheck document)"
        )
    return data


def _deeper_than(data: Any, limit: int) -> bool:
    """Whether lists and objects in `data` nest more than `limit` levels (iteratively)."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth >= limit:
                return True
            children = value.values() if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children)
    return False
