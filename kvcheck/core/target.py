"""The thing under test: a resolver, how it was found, and what a probe run showed of it.

A `Target` is built once, when a spec is loaded (`kvcheck.targets`), and carries its family's
`shape`, so what a target is held to is decided in one place and every run of it (search,
replay, exhaustive mode, the pytest plugin) judges it the same way. The engine never runs the
target outside the scenario it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, Self, runtime_checkable

import attrs

from kvcheck.core.deadline import DEFAULT_DEADLINE


@attrs.frozen
class CodeSpan:
    """Where one function of a target's own code lives: its file, and the lines of its body.

    `first` is the line of the first statement of the body (a docstring included) and `last` the
    function's last line, so the `def` line and decorators (which run when the code is loaded,
    not when the target is called) are outside it. Coverage is measured on these lines only
    (`kvcheck.search.target_coverage`).
    """

    file: str  # absolute path, as the target's code objects were compiled with it
    qualname: str  # `Class.method` or `function`
    def_line: int
    first: int
    last: int

    def __contains__(self, line: object) -> bool:
        return isinstance(line, int) and self.first <= line <= self.last


# Wraps a callable so that each of its calls is measured (`CoverageMeter`).
CallWrapper = Callable[[Callable[..., Any]], Callable[..., Any]]


@attrs.frozen
class SideCode:
    """Code a target brings beside its resolver, which the engine calls on its own rather than
    from inside a call of the resolver (SGLang: a release's own allocation path), as compiled
    so far. Its coverage is measured beside the resolver's (`TargetCoverage.beside`).

    `out_of_scope` names what only inputs outside kvcheck's scenarios reach, as
    `Distribution.out_of_scope` does for the resolver: a function's qualname or a stripped
    source line, each with those inputs; what they leave unrun is listed with the reason and
    not counted (a side code reaches many helpers of features kvcheck does not model).
    """

    label: str  # what it is, in a word or two: `allocation`
    include: str  # a coverage.py glob for its files (`/path/to/tree/*`: compiled as they run)
    code: tuple[CodeSpan, ...]
    out_of_scope: Mapping[str, str] = attrs.field(factory=dict)


@runtime_checkable
class MeasurableSideCode(Protocol):
    """What `Target.allocation` is when it brings code of the target's own (a release's), for
    the coverage meter: a copy whose every call into that code is wrapped by `wrap`, and where
    that code lives (None: none of it was compiled, as when the model's path is judged)."""

    def measured_with(self, wrap: CallWrapper) -> Self:
        """A copy whose calls into the target's code go through `wrap`."""
        ...

    def side_code(self) -> SideCode | None:
        """The code compiled so far; None when nothing was."""
        ...


@attrs.frozen
class Target:
    """A resolver under test. `self_methods` are other methods of the resolver's class that it
    calls as `self.X(...)`, bound onto the fake scheduler (empty for plain functions).

    `code` is where the target's own code lives (the resolver, the siblings and the module-level
    helper functions it reaches), known for targets read from source and empty otherwise.

    `allocation` builds the allocation path the engine runs for a scenario's config when it
    names an allocation rule (None: kvcheck's own `RuleAllocation`); a target that brings its
    own allocation code (a release's, or a broken variant) is judged on it by the `alloc-*` and
    `kv-*` invariants.

    `deadline` is how long each call of it may take, in seconds (None: no limit); a call still
    running then is interrupted and is a `target-deadline` violation (`kvcheck.core.deadline`).
    """

    spec: str
    resolver: Callable[..., Any]
    description: str
    self_methods: Mapping[str, Callable[..., Any]]
    # What a probe run showed about it, in its family's terms (SGLang's `ApiShape`).
    shape: Any
    code: tuple[CodeSpan, ...] = ()
    # Whether its code runs in the methods of what the resolver returns (a vLLM release's
    # factory builds a scheduler the engine then drives) rather than in the resolver's own
    # call: the coverage meter then measures every call of those methods too.
    code_runs_in_result: bool = False
    # Its family's: builds the allocation path the engine runs for a config (SGLang's). When
    # it brings the target's own code (`MeasurableSideCode`), that code's coverage is measured
    # beside the resolver's.
    allocation: Callable[[Any], Any] | None = None
    deadline: float | None = DEFAULT_DEADLINE
    # The name of the engine family it belongs to (`kvcheck.core.family`): required, so that a
    # family's loader that forgets to name itself fails where it builds the target, never
    # judging it silently as another family's.
    family: str = attrs.field(kw_only=True)
