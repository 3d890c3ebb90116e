"""The corpus entry type and its registration decorators (`kvcheck.families.sglang.mutants.corpus`
uses them)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Literal

import attrs

from kvcheck.core.target import Target
from kvcheck.families.sglang.invariants import INVARIANTS
from kvcheck.families.sglang.judging import SglangJudging
from kvcheck.families.sglang.mutants.generations import Generation, resolver_call
from kvcheck.families.sglang.probe import probe_target
from kvcheck.families.sglang.scenario import (
    CONVENTIONS,
    FAMILY_NAME,
    GLOBAL_COUNTER_MODES,
    Convention,
    GlobalCounterMode,
)

Kind = Literal["mutant", "rewrite"]
# A corpus function: a resolver body written against a `Generation`'s spellings.
CorpusFunction = Callable[[Generation, Any, Any, Any], Any]
Resolver = Callable[[Any, Any, Any], Any]

SPEC_PREFIX = "mutant:"
# Entries are importable as `kvcheck.mutants:<python name>`, the form saved in counterexample
# files, so `kvcheck replay` and `kvcheck check` load them like any other importable target.
IMPORT_MODULE = "kvcheck.mutants"


def python_name(name: str) -> str:
    """An entry name as a Python identifier: `loop-0.5.10` -> `loop_0_5_10`."""
    return name.replace("-", "_").replace(".", "_")


@attrs.frozen
class Entry:
    """One resolver of the corpus: a plausible bug (`mutant`) or a correct rewrite (`rewrite`).

    It is judged under `convention` (the scheduler it is meant to run in), `global_counters`
    and `adaptive`; a mutant names the invariant `expect`ed to catch it, which must be among
    those its shortest counterexamples break (tests/quality/test_mutants.py checks this
    exhaustively).
    """

    name: str
    kind: Kind
    generation: Generation
    convention: Convention
    expect: str | None
    global_counters: GlobalCounterMode
    adaptive: bool
    origin: str  # where the bug class comes from: "semantics §4.2", "new", ...
    summary: str
    resolver: Resolver = attrs.field(eq=False, repr=False)
    # Why Hypothesis's shrunk counterexample may be longer than the exhaustive minimum.
    shrink_note: str = ""

    @property
    def family(self) -> str:
        """The family whose corpus holds it."""
        return FAMILY_NAME

    @property
    def options(self) -> SglangJudging:
        """The options it is judged under (overlap: both drawn)."""
        return SglangJudging(self.convention, self.global_counters, self.adaptive)

    @property
    def short_spec(self) -> str:
        """`mutant:NAME`, accepted by `kvcheck exhaust` and `kvcheck mutants --only`."""
        return SPEC_PREFIX + self.name

    @property
    def spec(self) -> str:
        """The importable target spec, e.g. `kvcheck.mutants:worker_stride`."""
        return f"{IMPORT_MODULE}:{python_name(self.name)}"

    def target(self) -> Target:
        """The entry as a target, its API shape probed like any loaded target's."""
        return probe_target(self.spec, self.resolver, f"{self.kind} {self.name!r}: {self.summary}")


def bind(function: CorpusFunction, generation: Generation, allocation: Any = None) -> Resolver:
    """`function` as a resolver with SGLang's signature, speaking `generation`; `allocation`
    (a broken allocation path class) rides on it as `kvcheck_allocation`, which `probe_target`
    turns into the target's allocation path wherever the resolver is loaded."""

    @functools.wraps(function)
    def resolver(self: Any, result: Any, batch: Any) -> Any:
        with resolver_call(result, batch):
            return function(generation, self, result, batch)

    # functools.wraps copies __wrapped__, which inspect.signature would follow to the
    # four-argument function; a resolver must look like (self, result, batch).
    del resolver.__wrapped__
    if allocation is not None:
        resolver.kvcheck_allocation = allocation  # type: ignore[attr-defined]
    return resolver


class Corpus:
    """Collects entries in definition order."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []

    def _add(
        self,
        kind: Kind,
        name: str,
        generation: Generation,
        *,
        expect: str | None,
        convention: Convention | None,
        global_counters: GlobalCounterMode,
        adaptive: bool,
        origin: str,
        shrink_note: str,
        allocation: Any = None,
    ) -> Callable[[CorpusFunction], CorpusFunction]:
        def register(function: CorpusFunction) -> CorpusFunction:
            if any(e.name == name for e in self.entries):
                raise ValueError(f"duplicate corpus entry {name!r}")
            if expect is not None and expect not in INVARIANTS:
                raise ValueError(f"{name}: unknown invariant {expect!r}")
            judged = convention or generation.convention
            if judged not in CONVENTIONS or global_counters not in GLOBAL_COUNTER_MODES:
                raise ValueError(f"{name}: bad convention or global-counter mode")
            doc = (function.__doc__ or "").strip()
            summary = " ".join(doc.split("\n\n", 1)[0].split())
            if not summary:
                raise ValueError(f"{name}: a corpus function needs a docstring")
            self.entries.append(
                Entry(
                    name=name,
                    kind=kind,
                    generation=generation,
                    convention=judged,
                    expect=expect,
                    global_counters=global_counters,
                    adaptive=adaptive,
                    origin=origin,
                    summary=summary,
                    resolver=bind(function, generation, allocation),
                    shrink_note=shrink_note,
                )
            )
            return function

        return register

    def mutant(
        self,
        name: str,
        generation: Generation,
        *,
        expect: str,
        origin: str,
        convention: Convention | None = None,
        global_counters: GlobalCounterMode = "ideal",
        adaptive: bool = False,
        shrink_note: str = "",
        allocation: Any = None,
    ) -> Callable[[CorpusFunction], CorpusFunction]:
        """Register a buggy resolver; `convention` defaults to the generation's. With
        `allocation` (a broken allocation path, `kvcheck.families.sglang.mutants.allocation`) the
        bug is there
        and the resolver is a correct one."""
        return self._add(
            "mutant",
            name,
            generation,
            expect=expect,
            convention=convention,
            global_counters=global_counters,
            adaptive=adaptive,
            origin=origin,
            shrink_note=shrink_note,
            allocation=allocation,
        )

    def rewrite(
        self,
        name: str,
        generation: Generation,
        *,
        convention: Convention | None = None,
        global_counters: GlobalCounterMode = "ideal",
        adaptive: bool = True,
    ) -> Callable[[CorpusFunction], CorpusFunction]:
        """Register a correct resolver that must pass."""
        return self._add(
            "rewrite",
            name,
            generation,
            expect=None,
            convention=convention,
            global_counters=global_counters,
            adaptive=adaptive,
            origin="correct rewrite",
            shrink_note="",
        )
