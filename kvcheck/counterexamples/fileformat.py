"""Counterexample files: a failing scenario that outlives the run that found it.

A counterexample file is JSON (`*.kvcheck.json`) holding everything needed to reproduce a finding
without Hypothesis: the scenario (config and events, in `kvcheck.core.scenario`'s versioned
form), the
target spec it was found against, the violation that was seen, and the kvcheck version that saw
it. Replaying it (`replay`) runs the scenario once through the engine and the reference model, so
the same file gives the same answer in a fresh process next week, or a different one once the
target is fixed.

The file name is derived from a hash of what identifies the finding (scenario, target, invariant,
event index, request), so finding the same counterexample twice writes the same file.

This module never imports Hypothesis: `kvcheck replay` and the regression tests it generates must
work wherever kvcheck's engine runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import attrs

from kvcheck.core.scenario import (
    SCHEMA_VERSION,
    Scenario,
    check_schema_version,
    scenario_from_dict,
    scenario_to_dict,
)
from kvcheck.errors import KvcheckUsageError, ScenarioFormatError

if TYPE_CHECKING:
    from kvcheck.core.invariants import Violation
    from kvcheck.core.run import RunResult
    from kvcheck.core.target import Target
    from kvcheck.search.check import Verdict

FORMAT: Final = "kvcheck-counterexample"
SUFFIX: Final = ".kvcheck.json"
DEFAULT_DIR: Final = Path(".kvcheck") / "counterexamples"

ReplayStatus = Literal["same", "different", "none"]


def _version() -> str:
    from kvcheck import __version__

    return __version__


def jsonable(value: Any) -> Any:
    """`value` as plain JSON data: tuples become lists, mapping keys strings, the rest a repr."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return repr(value)


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
        return cls(
            invariant=violation.invariant,
            event_index=violation.event_index,
            rid=violation.rid,
            expected=jsonable(violation.expected),
            observed=jsonable(violation.observed),
            message=violation.message,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "invariant": self.invariant,
            "event_index": self.event_index,
            "rid": self.rid,
            "expected": self.expected,
            "observed": self.observed,
            "message": self.message,
        }

    def where(self) -> str:
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
    scenario: Scenario
    # The target spec replayed by default.
    target: str | None
    violation: SavedViolation | None
    kvcheck_version: str = attrs.field(factory=_version)
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
        """A hash of what identifies the finding; metadata and messages are left out."""
        identity = {
            "scenario": scenario_to_dict(self.scenario),
            "target": self.target,
            "violation": None
            if self.violation is None
            else [self.violation.invariant, self.violation.event_index, self.violation.rid],
        }
        text = json.dumps(identity, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def file_name(self) -> str:
        parts = [_slug(self.target or "scenario")]
        if self.violation is not None:
            parts.append(self.violation.invariant)
        parts.append(self.digest)
        return "-".join(parts) + SUFFIX

    def retarget(self, target: str) -> Counterexample:
        """The same finding, replayed by default against `target` (e.g. the fixed resolver)."""
        origin = self.found_against or self.target
        return attrs.evolve(self, target=target, found_against=origin if origin != target else None)

    def to_dict(self) -> dict[str, Any]:
        data = scenario_to_dict(self.scenario)
        out: dict[str, Any] = {
            "format": FORMAT,
            "schema_version": data["schema_version"],
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
        return json.dumps(self.to_dict(), indent=2) + "\n"


def _slug(text: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()
    return slug[-40:].strip("-") or "target"


# --- building -----------------------------------------------------------------------------------


def from_run(
    result: RunResult,
    target: str,
    *,
    convention_reason: str = "",
    allow_unavailable_imports: bool = False,
) -> Counterexample:
    """The counterexample of a failing run (recorded or not)."""
    from kvcheck.reporting.explain import explain

    violation = result.violation
    if violation is None:
        raise ValueError("the run has no violation")
    return Counterexample(
        scenario=result.scenario,
        target=target,
        violation=SavedViolation.from_violation(violation),
        convention_reason=convention_reason,
        explanation=explain(result),
        allow_unavailable_imports=allow_unavailable_imports,
    )


def from_verdict(
    verdict: Verdict, *, allow_unavailable_imports: bool = False
) -> Counterexample | None:
    """The counterexample of a failing verdict; None when it passed."""
    failure = verdict.outcome.failure
    if failure is None or failure.violation is None:
        return None
    return from_run(
        failure,
        verdict.target,
        convention_reason=verdict.convention_reason,
        allow_unavailable_imports=allow_unavailable_imports,
    )


# --- files --------------------------------------------------------------------------------------


def save(counterexample: Counterexample, directory: str | os.PathLike[str] = DEFAULT_DIR) -> Path:
    """Write the file under `directory` (created if missing); returns its path.

    The write is atomic, and an existing file with the same name is replaced: it holds the same
    finding, possibly with newer metadata.
    """
    folder = Path(directory)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / counterexample.file_name
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=SUFFIX, dir=folder)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(counterexample.to_json())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; these files are meant to be shared
        os.replace(tmp, path)
    except OSError as exc:
        raise ScenarioFormatError(
            f"cannot write a counterexample under {str(folder)!r}: {exc.strerror or exc}"
        ) from None
    return path


def loads(text: str, source: str = "counterexample") -> Counterexample:
    """Parse a counterexample document.

    Raises `ScenarioFormatError` with one line that names `source`.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScenarioFormatError(
            f"{source} is not valid JSON (corrupt or truncated?): {exc.msg} (line {exc.lineno}, "
            f"column {exc.colno})"
        ) from None
    try:
        return from_dict(data)
    except ScenarioFormatError as exc:
        raise ScenarioFormatError(f"{source}: {exc}") from None


def load(path: str | os.PathLike[str]) -> Counterexample:
    """Read a counterexample file. Raises `ScenarioFormatError` with one line naming the file."""
    try:
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
        if rid is not None and not isinstance(rid, str):
            raise ScenarioFormatError("'violation.rid' must be a string or null")
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


# --- replay -------------------------------------------------------------------------------------


@attrs.frozen
class Replay:
    """One deterministic replay of a counterexample."""

    counterexample: Counterexample
    target: str
    result: RunResult
    path: str | None = None

    @property
    def violation(self) -> Violation | None:
        return self.result.violation

    @property
    def status(self) -> ReplayStatus:
        """`same`: the saved finding again; `different`: another violation; `none`: passes."""
        if self.violation is None:
            return "none"
        saved = self.counterexample.violation
        return "same" if saved is not None and saved.same_as(self.violation) else "different"

    def summary(self) -> str:
        saved = self.counterexample.violation
        violation = self.violation
        if violation is None:
            was = f"; saved: {saved.where()}" if saved is not None else ""
            return f"NO VIOLATION  the scenario passes against {self.target}{was}"
        now = SavedViolation.from_violation(violation).where()
        if saved is None:
            return f"VIOLATION   {now}"
        if self.status == "same":
            return f"REPRODUCED  {now}: the same invariant at the same event as saved"
        same_invariant = saved.invariant == violation.invariant
        how = "the same invariant, elsewhere" if same_invariant else "a different invariant"
        return f"VIOLATION   {now}: {how} than saved ({saved.where()})"

    def failure_report(self, *, plain: bool = True) -> str:
        """Timeline, summary, file and replay command: what a failing test should show."""
        from kvcheck.reporting.render import render_plain
        from kvcheck.reporting.timeline import build_timeline

        lines = [render_plain(build_timeline(self.result, target=self.target)), self.summary()]
        if self.path is not None:
            lines.append(f"counterexample file: {self.path}")
        lines.append(f"replay with: {replay_command(self.path or '<file>', self)}")
        return "\n".join(lines)


def replay_command(path: str | os.PathLike[str], replayed: Replay | None = None) -> str:
    command = f"kvcheck replay {_shell_quote(str(path))}"
    if replayed is not None and replayed.target != replayed.counterexample.target:
        command += f" --target {_shell_quote(replayed.target)}"
    return command


def _shell_quote(text: str) -> str:
    if re.fullmatch(r"[A-Za-z0-9_./:@%+=,-]+", text):
        return text
    return "'" + text.replace("'", "'\"'\"'") + "'"


def replay(
    counterexample: Counterexample,
    target: str | Target | None = None,
    *,
    path: str | os.PathLike[str] | None = None,
) -> Replay:
    """Run the counterexample's scenario once against `target` (default: the saved target).

    Raises `KvcheckUsageError` (exit 2 material) when no target is known or it cannot be loaded.
    """
    from kvcheck.core.run import run_scenario
    from kvcheck.core.target import Target
    from kvcheck.targets.loading import load_target

    if target is None:
        if counterexample.target is None:
            raise ScenarioFormatError("the counterexample names no target; give one with --target")
        target = counterexample.target
    allow = counterexample.allow_unavailable_imports
    if isinstance(target, Target):
        loaded = target
    elif path is not None and target == counterexample.target:
        try:
            loaded = load_target(target, allow_unavailable=allow)
        except KvcheckUsageError as exc:
            raise type(exc)(f"{path}: its saved target {target!r} does not load: {exc}") from None
    else:
        loaded = load_target(target, allow_unavailable=allow)
    result = run_scenario(counterexample.scenario, loaded, record=True)
    return Replay(counterexample, loaded.spec, result, None if path is None else str(path))


def replay_file(path: str | os.PathLike[str], target: str | Target | None = None) -> Replay:
    return replay(load(path), target, path=path)


__all__ = [
    "DEFAULT_DIR",
    "FORMAT",
    "SCHEMA_VERSION",
    "SUFFIX",
    "Counterexample",
    "Replay",
    "SavedViolation",
    "from_run",
    "from_verdict",
    "load",
    "loads",
    "replay",
    "replay_command",
    "replay_file",
    "save",
]
