"""The target's own coverage: which lines and branches of its code the scenarios ran.

A target read from source (`file.py::Qualname`, an SGLang checkout, `sglang==VERSION`) is
compiled with its file's name and line numbers, and `Target.code` records the line spans of the
compiled code that can run per call: the resolver, the sibling methods it reaches through `self`,
the module-level functions and the methods of the module-level helper classes those reach (not
what only runs when the code is loaded: a class body, a decorator's own body). `CoverageMeter`
measures them with coverage.py in the search, exhaustive or replay scenarios, by wrapping the
resolver the engine calls (the probe at load time ran the unwrapped one, so it never counts),
restricted to those files and, within them, to those spans; `TargetCoverage` is what it found.
A target whose code spans several files (a vLLM release's scheduler: scheduler.py,
async_scheduler.py, utils.py) gets one `TargetCoverage` per file, the first carrying the others
(`others`) and the figures over all; a target whose code runs in the methods of what its
resolver returns (`Target.code_runs_in_result`: a vLLM release's factory) is measured in every
call of those methods.

Code a target brings beside its resolver, which the engine calls on its own (a release's
allocation path: `Target.allocation` as a `MeasurableSideCode`), is measured by a meter of its
own, started on the first call into it (the code is compiled when first used) and over every
file of its tree (its function-local imports compile as they run); its `TargetCoverage` comes
beside the resolver's (`TargetCoverage.beside`), named by its label, under the same rules and
`--min-coverage`.

Lines are coverage.py's statements (a docstring, a comment or the `def` line is not one; a
statement over several lines is its first line), and branches its arcs from a line with more than
one way on (an `if`, a loop, a conditional expression, ...). Nothing is excluded: a target's
`# pragma: no cover` does not hide a line from kvcheck. Builtin and imported targets have no
`code`, hence no coverage (None).

Measuring is kvcheck's own doing: if coverage.py cannot analyse the file (it was deleted or
changed underneath), that is a `KvcheckInternalError` (exit 2) naming the file, never a finding
against the target.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs
import coverage

from kvcheck.core.deadline import shielded
from kvcheck.core.family import distribution_of
from kvcheck.core.target import CodeSpan, MeasurableSideCode, Target
from kvcheck.errors import KvcheckInternalError
from kvcheck.wording import plural

__all__ = ["CoverageMeter", "TargetCoverage", "format_lines", "meter_for"]

# coverage.py warns (on stderr) about a run that reached nothing or a file it did not import;
# kvcheck reports those as coverage figures instead.
_QUIET: Final = (
    "no-data-collected",
    "module-not-imported",
    "module-not-measured",
    "include-ignored",
    "already-imported",
    "couldnt-parse",
    "no-ctracer",
)

Branch = tuple[int, int | None]  # (from line, to line); None: the branch leaves the function


@attrs.frozen
class TargetCoverage:
    """The lines and branches of a target's own code that ran, within its `CodeSpan`s.

    `statements` and `branches` are what could run, `executed` and `executed_branches` what did;
    a branch `(line, None)` leaves the function (a loop that ends it, an `if` with nothing after).
    """

    file: str
    functions: tuple[str, ...]  # qualnames measured, the resolver first
    statements: frozenset[int]
    executed: frozenset[int]
    branches: frozenset[Branch]
    executed_branches: frozenset[Branch]
    # Lines whose branches only inputs outside the family's scenarios take (line -> those
    # inputs), from its `Distribution.out_of_scope` (SGLang's: outside spec-v2 decode).
    out_of_scope: Mapping[int, str] = attrs.field(factory=dict)
    # Never-run statements left out of `statements` (and their branches out of `branches`)
    # because only out-of-scope inputs reach them, each with those inputs (a family whose
    # `Distribution.uncounted_out_of_scope`); listed in the reports, never hidden.
    uncounted: Mapping[int, str] = attrs.field(factory=dict)
    # The branches from those lines, and the never-taken branches only out-of-scope inputs
    # take (into those lines): listed with their reason, never counted.
    uncounted_branches: frozenset[Branch] = frozenset()
    # The same of the target's other files, when its code spans several: the figures
    # (`lines_total`, ..., `below`) are over all of them; the line lists are per file.
    others: tuple[TargetCoverage, ...] = ()
    # The functions of `functions` of which at least one line ran, in that order.
    functions_run: tuple[str, ...] = ()
    # What it is when it is not the resolver's code: the label of the code it measures beside
    # the resolver's (`allocation`); empty for the resolver's own.
    label: str = ""
    # The coverage of code the target brings beside its resolver (`SideCode`), each with its
    # label; the resolver's figures above do not include them.
    beside: tuple[TargetCoverage, ...] = ()

    @property
    def files(self) -> tuple[TargetCoverage, ...]:
        """One measurement per file, this one's first (each without `others` and `beside`)."""
        if not self.others:
            return (attrs.evolve(self, beside=()),) if self.beside else (self,)
        return (attrs.evolve(self, others=(), beside=()), *self.others)

    @property
    def parts(self) -> tuple[TargetCoverage, ...]:
        """The resolver's coverage (without `beside`), then each code's beside it."""
        return (attrs.evolve(self, beside=()), *self.beside)

    def parts_below(self, minimum: float) -> tuple[TargetCoverage, ...]:
        """The parts (`parts`) whose line coverage is under `minimum` percent: `--min-coverage`
        holds the code beside the resolver to the same minimum."""
        return tuple(part for part in self.parts if part.below(minimum))

    @property
    def lines_total(self) -> int:
        """How many statements the measured functions have."""
        return len(self.statements) + sum(other.lines_total for other in self.others)

    @property
    def lines_run(self) -> int:
        """How many of them ran at least once."""
        return len(self.executed) + sum(other.lines_run for other in self.others)

    @property
    def branches_total(self) -> int:
        """How many branch arcs the measured functions have."""
        return len(self.branches) + sum(other.branches_total for other in self.others)

    @property
    def branches_run(self) -> int:
        """How many of them were taken at least once."""
        return len(self.executed_branches) + sum(other.branches_run for other in self.others)

    @property
    def missed_lines(self) -> tuple[int, ...]:
        """The statements of this file that never ran, by line number."""
        return tuple(sorted(self.statements - self.executed))

    @property
    def missed_branches(self) -> tuple[Branch, ...]:
        """The branches of this file never taken, by line number (a function exit last among
        its line's)."""
        return tuple(sorted(self.branches - self.executed_branches, key=_branch_order))

    @property
    def line_percent(self) -> float:
        """Line coverage in percent (100.0 for code without statements)."""
        return 100.0 * self.lines_run / self.lines_total if self.lines_total else 100.0

    @property
    def branch_percent(self) -> float:
        """Branch coverage in percent (100.0 for code without branches)."""
        return 100.0 * self.branches_run / self.branches_total if self.branches_total else 100.0

    def below(self, minimum: float) -> bool:
        """Whether line coverage is under `minimum` percent (compared exactly, not rounded)."""
        return self.lines_run * 100 < minimum * self.lines_total

    def union(self, other: TargetCoverage) -> TargetCoverage:
        """What ran in either measurement of the same code (e.g. two counter modes, two fuzz
        workers). A line stays uncounted only where neither ran it nor took the branch into
        it."""
        if len(self.others) != len(other.others) or self._code() != other._code():
            if self.label and self.label == other.label:
                return self._union_grown(other)
            raise ValueError("coverage of different code cannot be merged")
        theirs = {side.label: side for side in other.beside}
        mine = {side.label: side for side in self.beside}
        # A code beside the resolver one measurement never ran (the model's path judged
        # there) is taken as the other found it.
        beside = tuple(
            side.union(theirs[label]) if label in theirs else side for label, side in mine.items()
        ) + tuple(side for label, side in theirs.items() if label not in mine)
        statements, branches = self._code()[1:]
        uncounted = {
            line: reason
            for line, reason in self.uncounted.items()
            if other.uncounted.get(line) == reason
        }
        # Uncounted in both: neither took it (a branch either took is counted, and taken).
        uncounted_branches = self.uncounted_branches & other.uncounted_branches
        executed_branches = self.executed_branches | other.executed_branches
        return attrs.evolve(
            self,
            statements=statements - uncounted.keys(),
            executed=self.executed | other.executed,
            branches=branches - uncounted_branches,
            executed_branches=executed_branches - uncounted_branches,
            uncounted=uncounted,
            uncounted_branches=uncounted_branches,
            functions_run=tuple(
                name
                for name in self.functions
                if name in self.functions_run or name in other.functions_run
            ),
            others=tuple(
                mine.union(theirs) for mine, theirs in zip(self.others, other.others, strict=True)
            ),
            beside=beside,
        )

    def _union_grown(self, other: TargetCoverage) -> TargetCoverage:
        """The union of two measurements of a code beside the resolver that compiled
        different parts of it (each compiles what its scenarios reached: two fuzz workers),
        file by file, every function either measured."""
        theirs = {part.file: part for part in other.files}
        mine = [
            part._union_file(theirs[part.file]) if part.file in theirs else part
            for part in self.files
        ]
        known = {part.file for part in mine}
        merged = mine + [part for part in other.files if part.file not in known]
        return attrs.evolve(merged[0], others=tuple(merged[1:]))

    def _union_file(self, other: TargetCoverage) -> TargetCoverage:
        """One file's two measurements over possibly different functions."""
        _, mine, my_branches = self._code()
        _, theirs, their_branches = other._code()
        executed = self.executed | other.executed
        executed_branches = self.executed_branches | other.executed_branches
        # Uncounted where neither ran it and each that measured it left it uncounted.
        uncounted = {
            line: reason
            for first, second, seen in ((self, other, theirs), (other, self, mine))
            for line, reason in first.uncounted.items()
            if line not in executed and (line not in seen or second.uncounted.get(line) == reason)
        }
        uncounted_branches = frozenset(
            branch
            for first, second, seen in (
                (self, other, their_branches),
                (other, self, my_branches),
            )
            for branch in first.uncounted_branches
            if branch not in executed_branches
            and (branch not in seen or branch in second.uncounted_branches)
        )
        functions = self.functions + tuple(f for f in other.functions if f not in self.functions)
        return attrs.evolve(
            self,
            functions=functions,
            statements=(mine | theirs) - uncounted.keys(),
            executed=executed,
            branches=(my_branches | their_branches) - uncounted_branches,
            executed_branches=executed_branches - uncounted_branches,
            uncounted=uncounted,
            uncounted_branches=uncounted_branches,
            out_of_scope={**self.out_of_scope, **other.out_of_scope},
            functions_run=tuple(
                name
                for name in functions
                if name in self.functions_run or name in other.functions_run
            ),
            others=(),
        )

    def _code(self) -> tuple[str, frozenset[int], frozenset[Branch]]:
        """The file, its statements and branches, the uncounted ones included."""
        return (
            self.file,
            self.statements | self.uncounted.keys(),
            self.branches | self.uncounted_branches,
        )

    def summary(self) -> str:
        """`61/68 lines (90%), 22/30 branches (73%)`."""
        return (
            f"{self.lines_run}/{self.lines_total} lines ({self.line_percent:.0f}%), "
            f"{self.branches_run}/{self.branches_total} branches ({self.branch_percent:.0f}%)"
        )

    def report_lines(self) -> list[str]:
        """The text report's lines: the figures and what was measured, then what never ran
        (per file, each under its name, when the code spans several); then the same of each
        code beside the resolver's, its label first."""
        lines = self._own_report_lines()
        for side in self.beside:
            lines.extend(side._own_report_lines())
        return lines

    def _own_report_lines(self) -> list[str]:
        what = f"{self.label}: " if self.label else ""
        if not self.others:
            names = ", ".join(name.rpartition(".")[2] for name in self.functions)
            return [
                f"coverage    {what}{self.summary()} in {Path(self.file).name}: {names}",
                *self._missed_lines(closing=True),
            ]
        lines = [f"coverage    {what}{self.summary()} in {plural(len(self.files), 'file')}"]
        for part in self.files:
            names = ", ".join(name.rpartition(".")[2] for name in part.functions)
            lines.append(f"{'':<12}{part.summary()} in {Path(part.file).name}: {names}")
            lines.extend(part._missed_lines(closing=False))
        explained = self.missed_branches_anywhere or any(part.uncounted for part in self.files)
        if explained and self.only_out_of_scope_missed():
            lines.append(f"{'':<12}every other line and branch ran")
        return lines

    @property
    def every_function_run(self) -> tuple[str, ...]:
        """The functions that ran, in every file."""
        return tuple(name for part in self.files for name in part.functions_run)

    @property
    def missed_branches_anywhere(self) -> bool:
        """Whether a branch of any of the files was never taken."""
        return any(part.missed_branches for part in self.files)

    def _missed_lines(self, *, closing: bool) -> list[str]:
        lines: list[str] = []
        missed: list[str] = []
        if self.missed_lines:
            missed.append(f"lines {format_lines(self.missed_lines)}")
        if self.missed_branches:
            missed.append("branches " + ", ".join(_format_branch(b) for b in self.missed_branches))
        for label, text in zip(("never run", ""), missed, strict=False):
            lines.append(f"{label:<12}{text}")
        # One line per reason (its branches in order): SGLang's each have their own.
        by_reason: dict[str, list[Branch]] = {}
        for branch, reason in self.out_of_scope_missed().items():
            by_reason.setdefault(reason, []).append(branch)
        for reason, branches in by_reason.items():
            named = ", ".join(_format_branch(branch) for branch in branches)
            lines.append(f"{'':<12}{named}: only for {reason}")
        branches_by_reason = self._uncounted_branches_by_reason()
        for index, (reason, numbers) in enumerate(self._uncounted_by_reason().items()):
            label = "not counted" if index == 0 else ""
            skipped = branches_by_reason.get(reason, [])
            into = f"branches {', '.join(map(_format_branch, skipped))}, " if skipped else ""
            lines.append(f"{label:<12}{into}lines {format_lines(numbers)}: only for {reason}")
        if closing and (self.missed_branches or self.uncounted) and self.only_out_of_scope_missed():
            lines.append(f"{'':<12}every other line and branch ran")
        return lines

    def _uncounted_by_reason(self) -> dict[str, list[int]]:
        grouped: dict[str, list[int]] = {}
        for line, reason in sorted(self.uncounted.items()):
            grouped.setdefault(reason, []).append(line)
        return grouped

    def _uncounted_branches_by_reason(self) -> dict[str, list[Branch]]:
        """The uncounted branches from counted lines (the ways into an uncounted arm), by
        their reason (those from uncounted lines go with their lines)."""
        grouped: dict[str, list[Branch]] = {}
        for branch in sorted(self.uncounted_branches, key=_branch_order):
            if branch[0] not in self.uncounted and branch[0] in self.out_of_scope:
                grouped.setdefault(self.out_of_scope[branch[0]], []).append(branch)
        return grouped

    def out_of_scope_missed(self) -> dict[Branch, str]:
        """The never-taken branches from a line only out-of-scope inputs branch on, with those.
        Only from a line that ran: one never reached took neither way, the in-scope one too."""
        return {
            branch: self.out_of_scope[branch[0]]
            for branch in self.missed_branches
            if branch[0] in self.out_of_scope and branch[0] in self.executed
        }

    def only_out_of_scope_missed(self) -> bool:
        """Whether everything that never ran (in every file) is where only out-of-scope
        inputs lead."""
        explained = self.out_of_scope_missed()
        ends = {end for _, end in explained}
        return (
            len(explained) == len(self.missed_branches)
            and set(self.missed_lines) <= ends
            and all(other.only_out_of_scope_missed() for other in self.others)
        )

    def to_dict(self) -> dict[str, Any]:
        """The `coverage` object of `--json` reports. Code in several files: the figures over
        all, and `files`, one object per file (the first file's also at the top, as for one)."""
        data = self._file_dict()
        for side in self.beside:  # each under its label: `coverage.allocation`
            data[side.label] = side.to_dict()
        if self.others:
            data |= {
                "lines_total": self.lines_total,
                "lines_run": self.lines_run,
                "line_percent": round(self.line_percent, 1),
                "branches_total": self.branches_total,
                "branches_run": self.branches_run,
                "branch_percent": round(self.branch_percent, 1),
                "functions": [name for part in self.files for name in part.functions],
                "functions_run": list(self.every_function_run),
                "files": [part._file_dict() for part in self.files],
            }
        return data

    def _file_dict(self) -> dict[str, Any]:
        uncounted = (
            {
                "uncounted_lines": [
                    {"lines": numbers, "reason": reason}
                    for reason, numbers in self._uncounted_by_reason().items()
                ],
                "uncounted_branches": [
                    {"branches": [list(branch) for branch in branches], "reason": reason}
                    for reason, branches in self._uncounted_branches_by_reason().items()
                ],
            }
            if self.uncounted
            else {}
        )
        return uncounted | {
            "file": self.file,
            "functions": list(self.functions),
            "functions_run": list(self.functions_run),
            "lines_total": self.lines_total,
            "lines_run": self.lines_run,
            "line_percent": round(self.line_percent, 1),
            "branches_total": self.branches_total,
            "branches_run": self.branches_run,
            "branch_percent": round(self.branch_percent, 1),
            "missed_lines": list(self.missed_lines),
            "missed_branches": [list(b) for b in self.missed_branches],
            "out_of_scope_missed": [
                {"branch": list(branch), "reason": reason}
                for branch, reason in self.out_of_scope_missed().items()
            ],
        }


def _branch_order(branch: Branch) -> tuple[int, int]:
    start, end = branch
    return start, end if end is not None else 1 << 30


def _format_branch(branch: Branch) -> str:
    start, end = branch
    return f"{start}->{'exit' if end is None else end}"


def format_lines(lines: Iterable[int]) -> str:
    """Line numbers as runs: `12, 15-17, 30`."""
    runs: list[list[int]] = []
    for line in sorted(lines):
        if runs and line == runs[-1][1] + 1:
            runs[-1][1] = line
        else:
            runs.append([line, line])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


class CoverageMeter:
    """Measures which lines and branches of `code` (spans of one or more files) run in the
    calls of targets it has instrumented (`instrument`).

    Measurements accumulate: several searches of one instrumented target give one union.
    """

    def __init__(
        self,
        code: tuple[CodeSpan, ...],
        out_of_scope: Mapping[str, str] | None = None,
        *,
        uncounted_out_of_scope: bool = False,
        include: Sequence[str] | None = None,
        label: str = "",
    ) -> None:
        """`include`: coverage.py's globs of the files to record (default: the spans' files),
        for code whose spans grow as it runs (`grow`). `label`: what the code is, when it is
        not the resolver's (`TargetCoverage.label`)."""
        if not code:
            raise ValueError("coverage is measured over some code, got no spans")
        self.label = label
        self.grow(code)
        self.out_of_scope = out_of_scope or {}
        self.uncounted_out_of_scope = uncounted_out_of_scope
        self._coverage = coverage.Coverage(
            data_file=None,
            branch=True,
            config_file=False,
            include=list(include) if include is not None else list(self.files),
        )
        # The target's pragmas do not hide its lines from kvcheck.
        self._coverage.set_option("report:exclude_lines", [])
        self._coverage.set_option("run:disable_warnings", list(_QUIET))
        self._depth = 0
        self._calls = 0  # measured calls of the resolver
        self._side: _SideMeter | None = None

    def grow(self, code: tuple[CodeSpan, ...]) -> None:
        """Measure over `code` from now on (what a side code compiled since, included)."""
        self.code = code
        # The files in the order of their first span: the resolver's file first.
        self.files = tuple(dict.fromkeys(span.file for span in code))
        self.file = self.files[0]

    def instrument(self, target: Target) -> Target:
        """The target, its resolver and sibling methods measured on every call.

        coverage.py traces only while the resolver (and what it calls) runs: with its
        `sys.settrace` cores (Python 3.11) a trace function left on for the whole search slows
        every line of Hypothesis, the engine and the model as well (2.6x on a 300-scenario search
        of SGLang 0.5.23). Starting and stopping it costs microseconds a call, tracing inside the
        call about 0.2 ms. A failure of coverage.py itself is a `KvcheckInternalError` (exit 2),
        never an exception of the target's.
        """

        def measured(function: Callable[..., Any]) -> Callable[..., Any]:
            # A plain function: copies of what it wraps (the exhaustive search copies its
            # states) share it, as they share the meter.
            return self.measured(function)

        # The sibling methods too: the engine calls one directly where SGLang's scheduler does
        # (the grammar step on a prefill batch, 0.5.17+).
        methods = {name: measured(f) for name, f in target.self_methods.items()}
        resolver = measured(target.resolver)
        if target.code_runs_in_result:
            build = resolver

            # Keeps what the resolver says of itself (a vLLM factory's `runners`, read when the
            # search draws its scenarios from the measured target).
            @functools.wraps(build)
            def resolver(*args: Any, **kwargs: Any) -> Any:
                return _MeasuredCalls(build(*args, **kwargs), measured)

        allocation = target.allocation
        if isinstance(allocation, MeasurableSideCode):
            # Its calls run outside the resolver's: a meter of its own, beside this one.
            self._side = _SideMeter()
            allocation = self._side.instrument(allocation)
        return attrs.evolve(target, resolver=resolver, self_methods=methods, allocation=allocation)

    def measured(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """`function`, each of its calls measured (`instrument`)."""

        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> Any:
            if self._depth:  # re-entered from inside the target: already measuring
                return function(*args, **kwargs)
            self._switch(on=True)
            try:
                return function(*args, **kwargs)
            finally:
                self._switch(on=False)

        return call

    def _switch(self, *, on: bool) -> None:
        # Never interrupted by the call's deadline midway, nor counted against it.
        with shielded():
            self._switch_coverage(on=on)

    def _switch_coverage(self, *, on: bool) -> None:
        try:
            if on:
                self._coverage.start()
                self._depth += 1
                self._calls += 1
            else:
                self._depth -= 1
                self._coverage.stop()
        except Exception as exc:
            raise KvcheckInternalError(
                f"measuring the coverage of {self._named()} failed: {type(exc).__name__}: {exc}; "
                "--no-coverage skips it"
            ) from None

    def _named(self) -> str:
        return ", ".join(self.files)

    def result(self) -> TargetCoverage:
        """What ran so far, restricted to the spans. Raises `KvcheckInternalError` when coverage.py
        cannot analyse a file."""
        try:
            # Branch data even when nothing ran yet (coverage.py decides from the first data).
            self._coverage.get_data().add_arcs({})
            with tempfile.TemporaryDirectory(prefix="kvcheck-coverage-") as tmp:
                out = Path(tmp) / "coverage.json"
                self._coverage.json_report(morfs=list(self.files), outfile=str(out))
                report = json.loads(out.read_text())
        except coverage.CoverageException as exc:
            raise KvcheckInternalError(
                f"cannot measure the coverage of {self._named()}: {exc}; --no-coverage skips it"
            ) from None
        # coverage.py keys its report by the file's name relative to the current directory
        # when it is under it.
        by_path = {os.path.abspath(name): measured for name, measured in report["files"].items()}
        found = [self._file_result(file, by_path[os.path.abspath(file)]) for file in self.files]
        if (
            self._calls
            and any(part.statements for part in found)
            and not any(part.executed for part in found)
        ):
            # Every call runs some of the target's statements: nothing recorded means coverage.py
            # did not see the code under these file names; reporting 0% would blame the target.
            raise KvcheckInternalError(
                f"coverage.py recorded nothing of {self._named()} although the resolver ran "
                f"{plural(self._calls, 'time')}; --no-coverage skips measuring"
            )
        beside = self._side.result() if self._side is not None else None
        return attrs.evolve(
            found[0], others=tuple(found[1:]), beside=() if beside is None else (beside,)
        )

    def _file_result(self, file: str, measured: Mapping[str, Any]) -> TargetCoverage:
        spans = tuple(span for span in self.code if span.file == file)
        executed = _within(spans, measured["executed_lines"])
        found = TargetCoverage(
            file=file,
            functions=tuple(span.qualname for span in spans),
            statements=_within(spans, measured["executed_lines"] + measured["missing_lines"]),
            executed=executed,
            branches=_branches(spans, measured["executed_branches"] + measured["missing_branches"]),
            executed_branches=_branches(spans, measured["executed_branches"]),
            out_of_scope=self._out_of_scope(file, spans),
            label=self.label,
            functions_run=tuple(
                span.qualname for span in spans if any(line in span for line in executed)
            ),
        )
        if not self.uncounted_out_of_scope:
            return found
        uncounted = self._uncounted(found, spans)
        # The branches from those lines, and those only out-of-scope inputs take (never taken).
        skipped = frozenset(b for b in found.branches if b[0] in uncounted) | frozenset(
            found.out_of_scope_missed()
        )
        return attrs.evolve(
            found,
            statements=found.statements - uncounted.keys(),
            branches=found.branches - skipped,
            executed_branches=found.executed_branches - skipped,
            uncounted=uncounted,
            uncounted_branches=skipped,
        )

    def _uncounted(self, found: TargetCoverage, spans: tuple[CodeSpan, ...]) -> dict[int, str]:
        """The never-run statements only out-of-scope inputs reach: those of the functions
        `out_of_scope` names, and those of each arm a never-taken branch from an out-of-scope
        line leads into (the whole arm: an `elif` chain with it)."""
        reached: dict[int, str] = {}
        for span in spans:
            reason = self.out_of_scope.get(span.qualname)
            if reason is not None:
                reached |= dict.fromkeys(range(span.first, span.last + 1), reason)
        arms = _arms(found.file)
        for branch, reason in found.out_of_scope_missed().items():
            arm = arms.get(branch)
            if arm is not None:  # inside a function only out-of-scope inputs call: its reason
                for line in range(arm[0], arm[1] + 1):
                    reached.setdefault(line, reason)
        # An exception handler is entered by no branch coverage.py records: a named `except`
        # line that never ran names its whole handler.
        for first, last in _handlers(found.file):
            reason = found.out_of_scope.get(first)
            if reason is not None and first not in found.executed:
                for line in range(first, last + 1):
                    reached.setdefault(line, reason)
        never = found.statements - found.executed
        return {line: reason for line, reason in sorted(reached.items()) if line in never}

    def _out_of_scope(self, file: str, spans: tuple[CodeSpan, ...]) -> dict[int, str]:
        try:
            text = Path(file).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            return {}  # coverage.py analysed it just now; a vanished file only loses the reasons
        found: dict[int, str] = {}
        for number in range(1, len(text) + 1):
            if not _inside(spans, number):
                continue
            for key in _line_keys(text, number):
                if key in self.out_of_scope:
                    found[number] = self.out_of_scope[key]
                    break
        return found


def _line_keys(text: list[str], number: int) -> tuple[str, ...]:
    """What names line `number` (1-based) of `text` in an `out_of_scope` table: its stripped
    text, and for a line that ends in an opening bracket (`if (`, whose text alone names
    nothing) or an `except` line (`except Exception:` names no handler in particular), also
    that text joined with the next line's (`if (self.log_stats`)."""
    line = text[number - 1].strip()
    if (line.endswith(("(", "[", "{")) or line.startswith("except")) and number < len(text):
        return line, line + text[number].strip()
    return (line,)


def _handlers(file: str) -> tuple[tuple[int, int], ...]:
    """The lines each `except` handler of `file` spans, from its `except` line."""
    return _structure(file)[1]


def _arms(file: str) -> Mapping[Branch, tuple[int, int]]:
    """Each branch into a block of statements in `file` (an `if`'s or a loop's body or
    `else`), with the lines the block spans; and the branch past an `if` without `else` whose
    body always leaves (`return`, `raise`, `continue`, `break`), with the rest of its block:
    only that branch reaches it."""
    return _structure(file)[0]


# How many files' structures a process keeps (`_parsed_structure`): a release's resolver and
# allocation files are about a dozen.
_STRUCTURES_KEPT: Final = 64


def _structure(file: str) -> tuple[Mapping[Branch, tuple[int, int]], tuple[tuple[int, int], ...]]:
    """`file`'s arms (`_arms`) and handlers (`_handlers`), as its text is now."""
    try:
        text = Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}, ()  # coverage.py analysed it just now; a vanished file only counts every line
    return _parsed_structure(file, text)


@functools.lru_cache(maxsize=_STRUCTURES_KEPT)
def _parsed_structure(
    file: str, text: str
) -> tuple[Mapping[Branch, tuple[int, int]], tuple[tuple[int, int], ...]]:
    """`_structure` of one text of a file, parsed once per process: every search of the same
    release (each mode of `kvcheck releases`, each check of a test session) reports on the same
    files, and parsing them took a quarter of a report's time. Keyed by the text, so a file
    changed since is parsed anew."""
    try:
        tree = ast.parse(text, filename=file)
    except (SyntaxError, ValueError):
        return {}, ()
    arms: dict[Branch, tuple[int, int]] = {}
    handlers: list[tuple[int, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler):
            handlers.append((node.lineno, _end(node.body[-1])))
        if isinstance(node, ast.If | ast.For | ast.AsyncFor | ast.While):
            for block in (node.body, node.orelse):
                if block:
                    arms[(node.lineno, block[0].lineno)] = (block[0].lineno, _end(block[-1]))
        for block in _blocks(node):
            for at, statement in enumerate(block[:-1]):
                if (
                    isinstance(statement, ast.If)
                    and not statement.orelse
                    and isinstance(statement.body[-1], _LEAVES)
                ):
                    rest = block[at + 1]
                    arms[(statement.lineno, rest.lineno)] = (rest.lineno, _end(block[-1]))
    return arms, tuple(handlers)


_LEAVES: Final = (ast.Return, ast.Raise, ast.Continue, ast.Break)


def _blocks(node: ast.AST) -> list[list[ast.stmt]]:
    return [
        value
        for field in ("body", "orelse", "finalbody")
        if isinstance(value := getattr(node, field, None), list)
        and value
        and isinstance(value[0], ast.stmt)
    ]


def _end(statement: ast.stmt) -> int:
    return statement.end_lineno or statement.lineno


class _SideMeter:
    """The meter of a code beside the resolver (`SideCode`), made on the first call into it:
    the code is compiled when first used, and its spans grow with what it compiles later."""

    def __init__(self) -> None:
        self._code: MeasurableSideCode | None = None
        self._meter: CoverageMeter | None = None

    def instrument(self, code: MeasurableSideCode) -> MeasurableSideCode:
        """The copy of `code` whose calls are measured."""
        side = self

        def measured(function: Callable[..., Any]) -> Callable[..., Any]:
            # Plain functions: the paths that keep them are copied (exhaustive search), the
            # meter shared.
            def call(*args: Any, **kwargs: Any) -> Any:
                meter = side._meter or side._start()
                if meter is None:
                    return function(*args, **kwargs)
                return meter.measured(function)(*args, **kwargs)

            return call

        self._code = code.measured_with(measured)
        return self._code

    def _start(self) -> CoverageMeter | None:
        side = self._code.side_code() if self._code is not None else None
        if side is None or not side.code:
            return None
        self._meter = CoverageMeter(
            side.code,
            side.out_of_scope,
            uncounted_out_of_scope=True,
            include=[side.include],
            label=side.label,
        )
        return self._meter

    def result(self) -> TargetCoverage | None:
        """What ran of it so far; None when it never ran."""
        if self._meter is None or self._code is None:
            return None
        side = self._code.side_code()
        if side is not None:  # what it compiled since, and reasons that depend on the run
            self._meter.grow(side.code)
            self._meter.out_of_scope = side.out_of_scope
        return self._meter.result()


class _MeasuredCalls:
    """What a target's resolver built, every method call of it measured (the target's code
    runs in them: `Target.code_runs_in_result`); attributes that are not callables pass as
    they are."""

    def __init__(self, built: Any, measured: Callable[[Callable[..., Any]], Callable[..., Any]]):
        self._built = built
        self._measured = measured

    def __getattr__(self, name: str) -> Any:
        if name in {"_built", "_measured"}:  # a copy made without `__init__` (deepcopy)
            raise AttributeError(name)
        value = getattr(self._built, name)
        return self._measured(value) if callable(value) else value


def _inside(spans: tuple[CodeSpan, ...], line: int) -> bool:
    return any(line in span for span in spans)


def _within(spans: tuple[CodeSpan, ...], lines: list[int]) -> frozenset[int]:
    return frozenset(line for line in lines if _inside(spans, line))


def _branches(spans: tuple[CodeSpan, ...], arcs: list[list[int]]) -> frozenset[Branch]:
    # coverage.py writes a function exit as a negative line (minus the `def` line).
    return frozenset(
        (start, end if end > 0 else None) for start, end in arcs if _inside(spans, start)
    )


def meter_for(target: Target, *, enabled: bool = True) -> CoverageMeter | None:
    """A meter for the target's own code; None when disabled or the target has no source spans
    (builtin and imported targets). Its report names the inputs that take the branches no
    scenario of the target's family takes (`Distribution.out_of_scope`)."""
    if not enabled or not target.code:
        return None
    distribution = distribution_of(target.family)
    return CoverageMeter(
        target.code,
        distribution.out_of_scope,
        uncounted_out_of_scope=distribution.uncounted_out_of_scope,
    )
