"""Replaying a counterexample: its scenario run once, deterministically, against the saved target
or another one, with no Hypothesis involved; and building a counterexample from a failing run.

The same file gives the same answer in a fresh process next week, or a different one once the
target is fixed (`Replay.status`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal

import attrs

from kvcheck.core.deadline import DEFAULT_DEADLINE
from kvcheck.core.family import DEFAULT_FAMILY, JudgingOptions, family
from kvcheck.core.invariant import Violation
from kvcheck.core.run import RunResult, run_scenario
from kvcheck.core.scenario import Scenario
from kvcheck.core.target import Target
from kvcheck.counterexamples.fileformat import Counterexample, SavedViolation, load
from kvcheck.errors import KvcheckUsageError, ScenarioFormatError
from kvcheck.reporting.explain import explain
from kvcheck.reporting.render import escaped_timeline, printable, render_plain
from kvcheck.reporting.timeline import build_timeline
from kvcheck.targets.loading import absolute_spec, load_target

ReplayStatus = Literal["same", "different", "none"]
# How a replay is judged (docs/replay.md), per option its family lets it choose
# (`Judge.replay_choices`, SGLang's: the convention): `auto`, the default, as the family decides
# (SGLang: the file's for its saved target, the target's own for another one); `file`, always the
# file's; or a value the family lists.
AUTO: Final = "auto"
FILE: Final = "file"


def replay_choices(family_name: str = DEFAULT_FAMILY) -> dict[str, tuple[str, ...]]:
    """What a replay of a scenario of `family_name` may choose, by option, `auto` (the default)
    first: the values its `--NAME` option takes."""
    choices = family(family_name).judge.replay_choices
    return {name: (AUTO, FILE, *values) for name, values in choices.items()}


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
    # Why the replay was judged otherwise than the file (SGLang: by another convention, or under
    # an allocation rule outside the target's generations); None: nothing to say.
    note: str | None = None

    @property
    def judging(self) -> JudgingOptions:
        """The options this replay judged by."""
        return judging_of(self.result.scenario)

    @property
    def file_judging(self) -> JudgingOptions:
        """The options the counterexample file was judged by."""
        return judging_of(self.counterexample.scenario)

    def chosen(self) -> list[tuple[str, Any, Any]]:
        """Per option a replay chooses (`replay_choices`): its name, the value this replay
        judged by and the file's."""
        used, saved = self.judging.to_dict(), self.file_judging.to_dict()
        names = family(self.result.scenario.family).judge.replay_choices
        return [(name, used[name], saved[name]) for name in names]

    def __getattr__(self, name: str) -> Any:
        """`NAME` and `file_NAME` for each option a replay chooses (SGLang's `convention` and
        `file_convention`, docs/replay.md): the value this replay judged by, and the file's."""
        if not name.startswith("_"):
            for option, used, saved in self.chosen():
                if name == option:
                    return used
                if name == f"file_{option}":
                    return saved
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

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
    **requested: str,
) -> Replay:
    """Run the counterexample's scenario once against `target` (default: the saved target),
    each call of the target under `deadline` seconds (None or 0: none; a loaded `Target` keeps
    its own), judged as `requested` asks, per option its family lets a replay choose
    (`replay_choices`; SGLang's `convention=`: by default the file's for its saved target, the
    target's own for another). `Replay.note` says when that differs from the file.

    Raises `KvcheckUsageError` (exit 2 material) for a choice the family does not offer, when no
    target is known or it cannot be loaded, or when it is not of the scenario's family.
    """
    asked = _requests(counterexample.scenario.family, requested)
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

    scenario, note = judged_scenario(counterexample, loaded, asked)
    result = run_scenario(scenario, loaded, record=True, on_event=on_event)
    return Replay(counterexample, loaded.spec, result, None if path is None else str(path), note)


def judged_scenario(
    counterexample: Counterexample, loaded: Target, requested: Mapping[str, str] | None = None
) -> tuple[Scenario, str | None]:
    """The scenario a replay of `counterexample` against `loaded` runs (the file's, judged as
    `requested` asks: `replay`) and what to tell the user about it (None: nothing), both the
    family's to decide (`Judge.rejudged`). `KvcheckUsageError` when `loaded` is not a target of
    the scenario's family."""
    scenario = counterexample.scenario
    if loaded.family != scenario.family:
        raise KvcheckUsageError(
            f"the counterexample is a {scenario.family} scenario and {loaded.spec} a "
            f"{loaded.family} target; replay it against a {scenario.family} target"
        )
    asked = _requests(scenario.family, requested or {})
    saved_target = counterexample.target is not None and loaded.spec == absolute_spec(
        counterexample.target
    )
    judge = family(scenario.family).judge
    config, note = judge.rejudged(scenario.config, asked, loaded, saved_target)
    if config is not scenario.config:
        scenario = attrs.evolve(scenario, config=config)
    return scenario, note


def judging_of(scenario: Scenario) -> JudgingOptions:
    """The options `scenario` is judged by (its family reads them off its config)."""
    return family(scenario.family).judge.judging_of(scenario.config)


def _requests(family_name: str, requested: Mapping[str, str]) -> dict[str, str]:
    """`requested` checked against what a replay of `family_name` may choose, with `auto` for
    every option not given; `KvcheckUsageError` for a name or value it does not offer."""
    choices = replay_choices(family_name)
    for name, value in requested.items():
        if name not in choices:
            offered = ", ".join(choices) or "none"
            raise KvcheckUsageError(
                f"a {family_name} replay has no judging option {name!r} (it has: {offered})"
            )
        if value not in choices[name]:
            raise KvcheckUsageError(f"unknown {name} {value!r}; choose {', '.join(choices[name])}")
    return {name: requested.get(name, AUTO) for name in choices}


def replay_file(path: str | os.PathLike[str], target: str | Target | None = None) -> Replay:
    """`replay` of the counterexample file at `path`.

    Raises `ScenarioFormatError` for an unreadable or malformed file and `KvcheckUsageError` when
    the target does not load.
    """
    return replay(load(path), target, path=path)
