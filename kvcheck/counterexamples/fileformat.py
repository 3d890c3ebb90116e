"""The counterexample file format: a failing scenario that outlives the run that found it.

A counterexample file is JSON (`*.kvcheck.json`) holding everything needed to reproduce a finding
without Hypothesis: the scenario (its family, and its config and events in that family's form:
`kvcheck.core.scenario`), the target spec it was found against, the violation that was seen, and
the kvcheck version that saw it. This module reads and writes that form and nothing else;
replaying a file is `kvcheck.counterexamples.replay`.

The file name is derived from a hash of what identifies the finding (scenario, target, invariant,
event index, request), so finding the same counterexample twice writes the same file.

Nothing under `kvcheck.counterexamples` imports Hypothesis (an import-linter contract): `kvcheck
replay` and the regression tests it generates must work wherever kvcheck's engine runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Final

import attrs

from kvcheck.core.jsonable import jsonable
from kvcheck.core.scenario import (
    MAX_DOCUMENT_CHARS,
    MAX_EVENTS,
    MAX_ID_CHARS,
    Scenario,
    check_schema_version,
    legacy_scenario_dict,
    parse_json_document,
    scenario_from_dict,
    scenario_to_dict,
)
from kvcheck.errors import FileWriteError, ScenarioFormatError
from kvcheck.files import write_text
from kvcheck.version import VERSION

if TYPE_CHECKING:
    from kvcheck.core.invariant import Violation

FORMAT: Final = "kvcheck-counterexample"
SUFFIX: Final = ".kvcheck.json"
DEFAULT_DIR: Final = Path(".kvcheck") / "counterexamples"


@attrs.frozen
class SavedViolation:
    """The violation as stored in a file: plain JSON values, compared by identity on replay."""

    invariant: str
    event_index: int
    rid: str | None
    expected: Any = None
    observed: Any = None
    message: str = ""

    @classmethod
    def from_violation(cls, violation: Violation) -> SavedViolation:
        """The stored form of a violation just found: expected and observed made plain JSON."""
        return cls(
            invariant=violation.invariant,
            event_index=violation.event_index,
            rid=violation.rid,
            expected=jsonable(violation.expected),
            observed=jsonable(violation.observed),
            message=violation.message,
        )

    def to_dict(self) -> dict[str, Any]:
        """The `violation` object of a counterexample file."""
        return {
            "invariant": self.invariant,
            "event_index": self.event_index,
            "rid": self.rid,
            "expected": self.expected,
            "observed": self.observed,
            "message": self.message,
        }

    def where(self) -> str:
        """`<invariant> at event N (rid)`: how reports and replay summaries name the finding."""
        rid = f" ({self.rid})" if self.rid else ""
        return f"{self.invariant} at event {self.event_index}{rid}"

    def same_as(self, violation: Violation | SavedViolation) -> bool:
        """The same finding: same invariant, same event, same request."""
        return (
            self.invariant == violation.invariant
            and self.event_index == violation.event_index
            and self.rid == violation.rid
        )


@attrs.frozen
class Counterexample:
    """A failing scenario that outlives the run that found it: what a `*.kvcheck.json` file holds.

    `target` is the spec replayed by default; `violation` is what was seen there (None for a
    scenario saved without one). Only scenario, target and violation identify the finding
    (`digest`); the rest is metadata for people and for replay.
    """

    scenario: Scenario
    # The target spec replayed by default.
    target: str | None
    violation: SavedViolation | None
    kvcheck_version: str = VERSION
    # How the convention was chosen when it was found (free text, for people).
    convention_reason: str = ""
    # One sentence in the domain's words (kvcheck.reporting.explain).
    explanation: str = ""
    # The target it was found against, when the file now names another (e.g. the fixed one).
    found_against: str | None = None
    # The target was loaded with --allow-unavailable-imports; replay must load it the same way.
    allow_unavailable_imports: bool = False

    @property
    def digest(self) -> str:
        """A hash of what identifies the finding; metadata and messages are left out.

        The scenario is hashed in its form from before schema version 4, so a finding keeps
        the file name (and `kvcheck regress` test name) it was given then.
        """
        identity = {
            "scenario": legacy_scenario_dict(self.scenario),
            "target": self.target,
            "violation": None
            if self.violation is None
            else [self.violation.invariant, self.violation.event_index, self.violation.rid],
        }
        text = json.dumps(identity, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def file_name(self) -> str:
        """Target slug, invariant and `digest`: the same finding always gets the same file name."""
        parts = [_target_slug(self.target or "scenario")]
        if self.violation is not None:
            parts.append(self.violation.invariant)
        parts.append(self.digest)
        return "-".join(parts) + SUFFIX

    def retarget(self, target: str) -> Counterexample:
        """The same finding, replayed by default against `target` (e.g. the fixed resolver)."""
        origin = self.found_against or self.target
        return attrs.evolve(self, target=target, found_against=origin if origin != target else None)

    def to_dict(self) -> dict[str, Any]:
        """The file's JSON object, in a fixed order people can read: format, versions and
        family, target, violation and explanation, then the scenario's config and events.
        """
        data = scenario_to_dict(self.scenario)
        out: dict[str, Any] = {
            "format": FORMAT,
            "schema_version": data["schema_version"],
            "family": data["family"],
            "kvcheck_version": self.kvcheck_version,
            "target": self.target,
        }
        if self.found_against is not None:
            out["found_against"] = self.found_against
        if self.allow_unavailable_imports:
            out["allow_unavailable_imports"] = True
        out["violation"] = None if self.violation is None else self.violation.to_dict()
        if self.explanation:
            out["explanation"] = self.explanation
        if self.convention_reason:
            out["convention_reason"] = self.convention_reason
        out["config"] = data["config"]
        out["events"] = data["events"]
        return out

    def to_json(self) -> str:
        """The file's text: `to_dict` indented, ending in a newline."""
        return json.dumps(self.to_dict(), indent=2) + "\n"


def _slug(text: str, limit: int = 40) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()
    return slug[:limit].strip("-")


def _target_slug(spec: str) -> str:
    """The part of a file name that says which target failed: for a file target the file's name
    and the qualname, for an import (or a `prefix:NAME` form, such as `builtin:reference`) the
    last module and the qualname, for a directory its last two components, else the whole spec.
    The directories above a file say nothing about which resolver it is, and cutting the whole
    spec to its end would drop the file's name."""
    spec = spec.strip().replace("\\", "/")
    if "::" in spec:
        path, _, qualname = spec.partition("::")
        head = PurePosixPath(path).name.removesuffix(".py")
    elif spec.count(":") == 1 and "/" not in spec:
        module, _, qualname = spec.partition(":")
        head = module.rpartition(".")[2]
    elif "/" in spec:
        head, qualname = "-".join(PurePosixPath(spec.rstrip("/")).parts[-2:]), ""
    else:
        head, qualname = spec, ""
    parts = [_slug(head, 32), _slug(qualname, 32)]
    return "-".join(part for part in parts if part) or "target"


# --- files --------------------------------------------------------------------------------------


def save(counterexample: Counterexample, directory: str | os.PathLike[str] = DEFAULT_DIR) -> Path:
    """Write the file under `directory` (created if missing); returns its path.

    The write is atomic (`kvcheck.files.write_text`). A file of the same name is left as it is:
    the name is the finding's digest, so it already holds this finding. Raises `FileWriteError`
    (one line) when the file cannot be written.
    """
    path = Path(directory) / counterexample.file_name
    if path.is_file():
        return path
    try:
        return write_text(path, counterexample.to_json(), what="counterexample")
    except FileWriteError:
        if path.is_file():  # the same finding, written meanwhile by another run
            return path
        raise


def loads(text: str, source: str = "counterexample") -> Counterexample:
    """Parse a counterexample document.

    Raises `ScenarioFormatError` with one line that names `source`.
    """
    try:
        data = parse_json_document(text)
    except json.JSONDecodeError as exc:
        raise ScenarioFormatError(
            f"{source} is not valid JSON (corrupt or truncated?): {exc.msg} (line {exc.lineno}, "
            f"column {exc.colno})"
        ) from None
    except ScenarioFormatError as exc:
        raise ScenarioFormatError(f"{source}: {exc}") from None
    try:
        return from_dict(data)
    except ScenarioFormatError as exc:
        raise ScenarioFormatError(f"{source}: {exc}") from None


def load(path: str | os.PathLike[str]) -> Counterexample:
    """Read a counterexample file. Raises `ScenarioFormatError` with one line naming the file."""
    try:
        # Refused before it is read: a file of gigabytes would take the memory it is meant to
        # be protected from (UTF-8 has at least one byte per character).
        size = Path(path).stat().st_size
        if size > MAX_DOCUMENT_CHARS * 4:
            raise ScenarioFormatError(
                f"{str(path)!r} is {size:,} bytes, far more than a counterexample file holds "
                f"(at most {MAX_DOCUMENT_CHARS:,} characters)"
            )
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioFormatError(f"no such counterexample file: {str(path)!r}") from None
    except IsADirectoryError:
        raise ScenarioFormatError(
            f"{str(path)!r} is a directory, not a counterexample file"
        ) from None
    except UnicodeDecodeError:
        raise ScenarioFormatError(f"{str(path)!r} is not a text (UTF-8 JSON) file") from None
    except OSError as exc:
        raise ScenarioFormatError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
    return loads(text, source=str(path))


def from_dict(data: Any) -> Counterexample:
    """Validate a parsed counterexample document and build it.

    The schema version is checked before anything else; a missing `format` is accepted, another
    format is not. Raises `ScenarioFormatError` for any malformed field.
    """
    if not isinstance(data, Mapping):
        raise ScenarioFormatError("a counterexample must be a JSON object")
    fmt = data.get("format", FORMAT)
    if fmt != FORMAT:
        raise ScenarioFormatError(f"format is {fmt!r}, not {FORMAT!r}")
    check_schema_version(data)
    scenario = scenario_from_dict(data)
    target = _optional_str(data, "target")
    raw = data.get("violation")
    violation: SavedViolation | None = None
    if raw is not None:
        if not isinstance(raw, Mapping):
            raise ScenarioFormatError("'violation' must be an object or null")
        invariant, index, rid = raw.get("invariant"), raw.get("event_index"), raw.get("rid")
        if not isinstance(invariant, str) or type(index) is not int or index < 0:
            raise ScenarioFormatError(
                "'violation' needs a string 'invariant' and a non-negative integer 'event_index'"
            )
        if index >= MAX_EVENTS:
            raise ScenarioFormatError(
                f"'violation.event_index' is {index}, above the bound {MAX_EVENTS - 1}"
            )
        if rid is not None and not isinstance(rid, str):
            raise ScenarioFormatError("'violation.rid' must be a string or null")
        if rid is not None and len(rid) > MAX_ID_CHARS:
            raise ScenarioFormatError(
                f"'violation.rid' is {len(rid)} characters long, more than the bound {MAX_ID_CHARS}"
            )
        violation = SavedViolation(
            invariant,
            index,
            rid,
            raw.get("expected"),
            raw.get("observed"),
            str(raw.get("message", "")),
        )
    return Counterexample(
        scenario=scenario,
        target=target,
        violation=violation,
        kvcheck_version=_optional_str(data, "kvcheck_version") or "unknown",
        convention_reason=_optional_str(data, "convention_reason") or "",
        explanation=_optional_str(data, "explanation") or "",
        found_against=_optional_str(data, "found_against"),
        allow_unavailable_imports=_optional_bool(data, "allow_unavailable_imports"),
    )


def _optional_bool(data: Mapping[str, Any], key: str) -> bool:
    value = data.get(key, False)
    if not isinstance(value, bool):
        raise ScenarioFormatError(f"{key!r} must be true or false, got {value!r}")
    return value


def _optional_str(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ScenarioFormatError(f"{key!r} must be a string, got {value!r}")
    return value
