"""Replaying a counterexample: its scenario run once, deterministically, against the saved target
or another one, with no Hypothesis involved; and building a counterexample from a failing run.

The same file gives the same answer in a fresh process next week, or a different one once the
target is fixed (`Replay.status`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Final, Literal

import attrs

from kvcheck.core.deadline import DEFAULT_DEADLINE
from kvcheck.core.invariant import Violation
from kvcheck.core.run import RunResult, run_scenario
from kvcheck.core.scenario import Scenario
from kvcheck.core.target import Target
from kvcheck.counterexamples.fileformat import Counterexample, SavedViolation, load
from kvcheck.errors import KvcheckUsageError, ScenarioFormatError
from kvcheck.families.sglang.scenario import CONVENTIONS, Convention
from kvcheck.families.sglang.target import allocation_rules
from kvcheck.reporting.explain import explain
from kvcheck.reporting.render import escaped_timeline, printable, render_plain
from kvcheck.reporting.timeline import build_timeline
from kvcheck.targets.loading import absolute_spec, load_target

ReplayStatus = Literal["same", "different", "none"]
# Which committed-length convention a replay judges by (docs/replay.md): `auto` is the file's for
# its saved target and the target's own (its probed API shape) for another one; `file` is always
# the file's; `preclaim` or `honest` as given.
ReplayConvention = Literal["auto", "file", "preclaim", "honest"]
REPLAY_CONVENTIONS: Final[tuple[ReplayConvention, ...]] = ("auto", "file", "preclaim", "honest")


def from_run(
    result: RunResult,
    target: str,
    *,
    convention_reason: str = "",
    allow_unavailable_imports: bool = False,
) -> Counterexample:
    """The counterexample of a failing run (recorded or not). A target read from a path is
    recorded with the path made absolute, so the file replays from any directory."""
    violation = result.violation
    if violation is None:
        raise ValueError("the run has no violation")
    return Counterexample(
        scenario=result.scenario,
        target=absolute_spec(target),
        violation=SavedViolation.from_violation(violation),
        convention_reason=convention_reason,
        explanation=explain(result),
        allow_unavailable_imports=allow_unavailable_imports,
    )


@attrs.frozen
class Replay:
    """One deterministic replay of a counterexample."""

    counterexample: Counterexample
    target: str
    result: RunResult
    path: str | None = None
    # Why the replay judged by another convention than the file's, or under an allocation rule
    # outside the target's generations (None: nothing to say); the convention it judged by is
    # `result.scenario.config.convention`.
    note: str | None = None

    @property
    def convention(self) -> Convention:
        """The committed-length convention this replay judged by."""
        convention: Convention = self.result.scenario.config.convention
        return convention

    @property
    def file_convention(self) -> Convention:
        """The convention the counterexample file was judged by."""
        convention: Convention = self.counterexample.scenario.config.convention
        return convention

    @property
    def violation(self) -> Violation | None:
        """The first violation this replay hit; None when the scenario passes now."""
        return self.result.violation

    @property
    def status(self) -> ReplayStatus:
        """`same`: the saved finding again; `different`: another violation; `none`: passes."""
        if self.violation is None:
            return "none"
        saved = self.counterexample.violation
        return "same" if saved is not None and saved.same_as(self.violation) else "different"

    def summary(self) -> str:
        """One line comparing the replay with the saved finding.

        `NO VIOLATION` (fixed), `REPRODUCED` (same invariant, event and request), or `VIOLATION` and
        how it differs from what was saved.
        """
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
        timeline = escaped_timeline(build_timeline(self.result, target=self.target))
        lines = [render_plain(timeline), printable(self.summary(), keep_newlines=False)]
        if self.path is not None:
            lines.append(f"counterexample file: {self.path}")
        lines.append(f"replay with: {replay_command(self.path or '<file>', self)}")
        return "\n".join(lines)


def replay_command(path: str | os.PathLike[str], replayed: Replay | None = None) -> str:
    """The shell command that replays the file at `path`, quoted for a POSIX shell.

    It adds `--target` when `replayed` ran against another target than the file names.
    """
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
    deadline: float | None = DEFAULT_DEADLINE,
    progress: Callable[[str], None] | None = None,
    convention: ReplayConvention = "auto",
) -> Replay:
    """Run the counterexample's scenario once against `target` (default: the saved target),
    each call of the target under `deadline` seconds (None or 0: none; a loaded `Target` keeps
    its own), judged by `convention` (`ReplayConvention`: by default the file's for its saved
    target, the target's own for another; `Replay.note` says when that differs from the file).

    Raises `KvcheckUsageError` (exit 2 material) when no target is known or it cannot be loaded.
    """
    if convention not in REPLAY_CONVENTIONS:
        raise KvcheckUsageError(
            f"unknown convention {convention!r}; choose {', '.join(REPLAY_CONVENTIONS)}"
        )
    if target is None:
        if counterexample.target is None:
            raise ScenarioFormatError("the counterexample names no target; give one with --target")
        target = counterexample.target
    allow = counterexample.allow_unavailable_imports
    if isinstance(target, Target):
        loaded = target
    elif path is not None and target == counterexample.target:
        try:
            loaded = load_target(target, allow_unavailable=allow, deadline=deadline)
        except KvcheckUsageError as exc:
            raise type(exc)(f"{path}: its saved target {target!r} does not load: {exc}") from None
    else:
        loaded = load_target(target, allow_unavailable=allow, deadline=deadline)

    def on_event(index: int, total: int) -> None:
        if progress is not None:
            progress(f"replayed {index + 1} of {total} events")

    scenario, note = judged_scenario(counterexample, loaded, convention)
    result = run_scenario(scenario, loaded, record=True, on_event=on_event)
    return Replay(counterexample, loaded.spec, result, None if path is None else str(path), note)


def judged_scenario(
    counterexample: Counterexample, loaded: Target, choice: ReplayConvention
) -> tuple[Scenario, str | None]:
    """The scenario a replay of `counterexample` against `loaded` runs (the file's, under the
    convention `choice` gives) and what to tell the user about it (None: nothing). Judging
    another resolver by the file's convention would fail a correct one whose release follows
    the other (issue 23, item 4)."""
    scenario = counterexample.scenario
    config = scenario.config
    saved_target = counterexample.target is not None and loaded.spec == absolute_spec(
        counterexample.target
    )
    notes = []
    used: Convention = config.convention
    if choice in CONVENTIONS:
        used = choice
        if used != config.convention:
            notes.append(
                f"judged by the {used} convention as given; the file was judged by "
                f"{config.convention}"
            )
    elif choice == "auto" and not saved_target:
        shape = loaded.shape
        if shape.convention != config.convention:
            used = shape.convention
            notes.append(
                f"{loaded.spec} follows the {used} convention ({shape.convention_reason}); the "
                f"file was judged by {config.convention}, so this replay judges by {used} "
                "(--convention file keeps the file's)"
            )
    if not saved_target and config.allocation not in allocation_rules(loaded):
        notes.append(
            f"the file's allocation rule {config.allocation} is not one {loaded.spec} is "
            f"judged under ({loaded.shape.allocation_reason})"
        )
    if used != config.convention:
        scenario = attrs.evolve(scenario, config=attrs.evolve(config, convention=used))
    if notes and not saved_target:
        notes.append(f"global counters {config.global_counters}, as the file")
    return scenario, "; ".join(notes) or None


def replay_file(path: str | os.PathLike[str], target: str | Target | None = None) -> Replay:
    """`replay` of the counterexample file at `path`.

    Raises `ScenarioFormatError` for an unreadable or malformed file and `KvcheckUsageError` when
    the target does not load.
    """
    return replay(load(path), target, path=path)
