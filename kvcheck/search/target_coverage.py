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
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import attrs
import coverage

from kvcheck.core.deadline import shielded
from kvcheck.core.family import distribution_of
from kvcheck.core.target import CodeSpan, Target
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
    uncounted_branches: frozenset[Branch] = frozenset()  # the branches from those lines
    # The same of the target's other files, when its code spans several: the figures
    # (`lines_total`, ..., `below`) are over all of them; the line lists are per file.
    others: tuple[TargetCoverage, ...] = ()

    @property
    def files(self) -> tuple[TargetCoverage, ...]:
        """One measurement per file, this one's first (each without `others`)."""
        return (attrs.evolve(self, others=()), *self.others) if self.others else (self,)

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
            raise ValueError("coverage of different code cannot be merged")
        statements, branches = self._code()[1:]
        uncounted = {
            line: reason
            for line, reason in self.uncounted.items()
            if other.uncounted.get(line) == reason
        }
        executed_branches = self.executed_branches | other.executed_branches
        return attrs.evolve(
            self,
            statements=statements - uncounted.keys(),
            executed=self.executed | other.executed,
            branches=frozenset(b for b in branches if b[0] not in uncounted),
            executed_branches=frozenset(b for b in executed_branches if b[0] not in uncounted),
            uncounted=uncounted,
            uncounted_branches=frozenset(b for b in branches if b[0] in uncounted),
            others=tuple(
                mine.union(theirs) for mine, theirs in zip(self.others, other.others, strict=True)
            ),
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
        (per file, each under its name, when the code spans several)."""
        if not self.others:
            names = ", ".join(name.rpartition(".")[2] for name in self.functions)
            return [
                f"coverage    {self.summary()} in {Path(self.file).name}: {names}",
                *self._missed_lines(closing=True),
            ]
        lines = [f"coverage    {self.summary()} in {plural(len(self.files), 'file')}"]
        for part in self.files:
            names = ", ".join(name.rpartition(".")[2] for name in part.functions)
            lines.append(f"{'':<12}{part.summary()} in {Path(part.file).name}: {names}")
            lines.extend(part._missed_lines(closing=False))
        if self.missed_branches_anywhere and self.only_out_of_scope_missed():
            lines.append(f"{'':<12}every other line and branch ran")
        return lines

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
        for index, (reason, numbers) in enumerate(self._uncounted_by_reason().items()):
            label = "not counted" if index == 0 else ""
            lines.append(f"{label:<12}lines {format_lines(numbers)}: only for {reason}")
        if closing and self.missed_branches and self.only_out_of_scope_missed():
            lines.append(f"{'':<12}every other line and branch ran")
        return lines

    def _uncounted_by_reason(self) -> dict[str, list[int]]:
        grouped: dict[str, list[int]] = {}
        for line, reason in sorted(self.uncounted.items()):
            grouped.setdefault(reason, []).append(line)
        return grouped

    def out_of_scope_missed(self) -> dict[Branch, str]:
        """The never-taken branches from a line only out-of-scope inputs branch on, with those."""
        return {
            branch: self.out_of_scope[branch[0]]
            for branch in self.missed_branches
            if branch[0] in self.out_of_scope
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
        if self.others:
            data |= {
                "lines_total": self.lines_total,
                "lines_run": self.lines_run,
                "line_percent": round(self.line_percent, 1),
                "branches_total": self.branches_total,
                "branches_run": self.branches_run,
                "branch_percent": round(self.branch_percent, 1),
                "functions": [name for part in self.files for name in part.functions],
                "files": [part._file_dict() for part in self.files],
            }
        return data

    def _file_dict(self) -> dict[str, Any]:
        uncounted = (
            {
                "uncounted_lines": [
                    {"lines": numbers, "reason": reason}
                    for reason, numbers in self._uncounted_by_reason().items()
                ]
            }
            if self.uncounted
            else {}
        )
        return uncounted | {
            "file": self.file,
            "functions": list(self.functions),
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
    ) -> None:
        if not code:
            raise ValueError("coverage is measured over some code, got no spans")
        self.code = code
        # The files in the order of their first span: the resolver's file first.
        self.files = tuple(dict.fromkeys(span.file for span in code))
        self.file = self.files[0]
        self.out_of_scope = out_of_scope or {}
        self.uncounted_out_of_scope = uncounted_out_of_scope
        self._coverage = coverage.Coverage(
            data_file=None, branch=True, config_file=False, include=list(self.files)
        )
        # The target's pragmas do not hide its lines from kvcheck.
        self._coverage.set_option("report:exclude_lines", [])
        self._coverage.set_option("run:disable_warnings", list(_QUIET))
        self._depth = 0
        self._calls = 0  # measured calls of the resolver

    def instrument(self, target: Target) -> Target:
        """The target, its resolver and sibling methods measured on every call.

        coverage.py traces only while the resolver (and what it calls) runs: with its
        `sys.settrace` cores (Python 3.11) a trace function left on for the whole search slows
        every line of Hypothesis, the engine and the model as well (2.6x on a 300-scenario search
        of SGLang 0.5.23). Starting and stopping it costs microseconds a call, tracing inside the
        call about 0.2 ms. A failure of coverage.py itself is a `KvcheckInternalError` (exit 2),
        never an exception of the target's.
        """
        meter = self

        def measured(function: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(function)
            def call(*args: Any, **kwargs: Any) -> Any:
                if meter._depth:  # re-entered from inside the target: already measuring
                    return function(*args, **kwargs)
                meter._switch(on=True)
                try:
                    return function(*args, **kwargs)
                finally:
                    meter._switch(on=False)

            return call

        # The sibling methods too: the engine calls one directly where SGLang's scheduler does
        # (the grammar step on a prefill batch, 0.5.17+).
        methods = {name: measured(f) for name, f in target.self_methods.items()}
        resolver = measured(target.resolver)
        if target.code_runs_in_result:
            build = resolver

            def resolver(*args: Any, **kwargs: Any) -> Any:
                return _MeasuredCalls(build(*args, **kwargs), measured)

        return attrs.evolve(target, resolver=resolver, self_methods=methods)

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
        return attrs.evolve(found[0], others=tuple(found[1:]))

    def _file_result(self, file: str, measured: Mapping[str, Any]) -> TargetCoverage:
        spans = tuple(span for span in self.code if span.file == file)
        found = TargetCoverage(
            file=file,
            functions=tuple(span.qualname for span in spans),
            statements=_within(spans, measured["executed_lines"] + measured["missing_lines"]),
            executed=_within(spans, measured["executed_lines"]),
            branches=_branches(spans, measured["executed_branches"] + measured["missing_branches"]),
            executed_branches=_branches(spans, measured["executed_branches"]),
            out_of_scope=self._out_of_scope(file, spans),
        )
        if not self.uncounted_out_of_scope:
            return found
        uncounted = self._uncounted(found, spans)
        return attrs.evolve(
            found,
            statements=found.statements - uncounted.keys(),
            branches=frozenset(b for b in found.branches if b[0] not in uncounted),
            executed_branches=frozenset(
                b for b in found.executed_branches if b[0] not in uncounted
            ),
            uncounted=uncounted,
            uncounted_branches=frozenset(b for b in found.branches if b[0] in uncounted),
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
            if arm is not None:
                reached |= dict.fromkeys(range(arm[0], arm[1] + 1), reason)
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
    nothing), also that text joined with the next line's (`if (self.log_stats`)."""
    line = text[number - 1].strip()
    if line.endswith(("(", "[", "{")) and number < len(text):
        return line, line + text[number].strip()
    return (line,)


def _arms(file: str) -> dict[Branch, tuple[int, int]]:
    """Each branch into a block of statements in `file` (an `if`'s or a loop's body or
    `else`), with the lines the block spans; and the branch past an `if` without `else` whose
    body always leaves (`return`, `raise`, `continue`, `break`), with the rest of its block:
    only that branch reaches it."""
    try:
        tree = ast.parse(Path(file).read_text(encoding="utf-8"), filename=file)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return {}  # coverage.py analysed it just now; a vanished file only counts every line
    arms: dict[Branch, tuple[int, int]] = {}
    for node in ast.walk(tree):
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
    return arms


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
