"""SGLang's mutant corpus: plausible buggy resolvers kvcheck must catch, and correct rewrites it
must pass, per API generation (`kvcheck.core.family.Mutants`; the generic kill matrix over it is
`kvcheck.mutants.matrix`).

Entries are addressed as `mutant:NAME`, and each entry's resolver is importable as
`kvcheck.mutants:<name with - and . as _>` (`registry.python_name`), the spec saved in
counterexample files. The corpus module is imported on first use, not with the family.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from kvcheck.core.family import NamedCorpus
from kvcheck.core.target import Target
from kvcheck.families.sglang.allocation_rules import allocation_features
from kvcheck.families.sglang.mutants import trees
from kvcheck.families.sglang.mutants.registry import SPEC_PREFIX, Entry, python_name
from kvcheck.families.sglang.scenario import Grammar
from kvcheck.families.sglang.target import allocation_rules


@functools.cache
def entries() -> tuple[Entry, ...]:
    """The corpus in definition order (`corpus.py`, imported here on first use)."""
    from kvcheck.families.sglang.mutants.corpus import corpus

    return tuple(corpus.entries)


@functools.cache
def _by_name() -> dict[str, Entry]:
    return {e.name: e for e in entries()}


@functools.cache
def _by_python_name() -> dict[str, Entry]:
    return {python_name(e.name): e for e in entries()}


def get(name: str) -> Entry | trees.TreeEntry | None:
    """The entry called `name` (no `mutant:` prefix), of the resolver corpus or the release-tree
    corpus (`trees`); None when neither has it."""
    return _by_name().get(name) or trees.get(name)


def named_corpora() -> Mapping[str, NamedCorpus]:
    """The corpora run only when asked for by name: the release trees (`trees`)."""
    return {trees.CORPUS_NAME: NamedCorpus(trees.entries(), trees.NO_EXHAUSTIVE)}


def check_flags(entry: Entry | trees.TreeEntry) -> list[str]:
    """The `kvcheck check` options that judge `entry` as the kill matrix does (its options)."""
    options = entry.options
    flags = [
        "--convention",
        options.convention,
        "--global-counters",
        options.global_counters,
        "--adaptive" if options.adaptive else "--no-adaptive",
    ]
    if options.allocation_path != "model":
        flags += ["--allocation-path", options.allocation_path]
    return flags


def resolver(python_name: str) -> Any | None:
    """The resolver importable as `kvcheck.mutants:<python_name>`; None for no entry."""
    entry = _by_python_name().get(python_name)
    return None if entry is None else entry.resolver


def row_columns(entry: Entry | trees.TreeEntry) -> dict[str, Any]:
    """An entry's kill-matrix columns after its name and kind: its generation and the options
    it is judged under (a release-tree entry's: `trees.row_columns`)."""
    if isinstance(entry, trees.TreeEntry):
        return trees.row_columns(entry)
    return {
        "generation": entry.generation.name,
        "convention": entry.convention,
        "global_counters": entry.global_counters,
        "adaptive": entry.adaptive,
    }


def list_columns(entry: Entry | trees.TreeEntry) -> dict[str, Any]:
    """An entry's `kvcheck mutants --list --json` columns after its name and kind."""
    if isinstance(entry, trees.TreeEntry):
        return trees.list_columns(entry)
    return {
        "generation": entry.generation.versions,
        "convention": entry.convention,
        "global_counters": entry.global_counters,
        "adaptive": entry.adaptive,
        "expect": entry.expect,
        "origin": entry.origin,
        "spec": entry.spec,
        "summary": entry.summary,
    }


def list_line(entry: Entry | trees.TreeEntry) -> str:
    """An entry as a line of `kvcheck mutants --list`."""
    if isinstance(entry, trees.TreeEntry):
        return trees.list_line(entry)
    expect = entry.expect or "must pass"
    return (
        f"{entry.kind:<8} {entry.name:<32} SGLang {entry.generation.versions:<14} "
        f"{entry.convention:<9} {expect:<26} {entry.summary}"
    )


def minimum_bounds(defaults: Any) -> Any:
    """Where each mutant's shortest counterexample is looked for: the default exhaustive bounds
    plus a length cap of 2, so over-shoot by length is reachable in one decode row."""
    return attrs.evolve(defaults, events=8, max_new=(1, 2, 4))


def bounds_for(target: Target, bounds: Any) -> Any:
    """`bounds` widened to what the target's scenarios may draw: its algorithms whose results
    the model treats differently (EAGLE's family and n-gram are one; DFLASH and UNO are not),
    and block/cap lengths of 1 on every row when it reads them (a stale row then carries some),
    and, when it consults the grammar, grammars that terminate or refuse at output position 2
    (the first decode token); allocation on when it touches `kv_allocated_len`."""
    distinct = tuple(a for a in target.shape.algorithms if a in ("eagle", "dflash", "uno"))
    lengths = (1,) if target.shape.block_cap else ()
    grammars = (
        (None, Grammar("terminate", 2), Grammar("reject", 2)) if target.shape.grammar else (None,)
    )
    # A target that touches kv_allocated_len is enumerated with the scheduler's allocation on,
    # under the rules of its generations (`allocation_rules`): of those, the ones reserving for
    # the adaptive maximum (0.5.13, keeping Al after release, and 0.5.16, rounding to a page and
    # zeroing Al at release), else the older ones it has.
    touches_al = any("kv_allocated_len" in s for s in target.shape.spellings)
    allocations = bounds.allocations
    if touches_al:
        allowed = [r for r in allocation_rules(target) if allocation_features(r).allocates]
        allocations = tuple(
            r for r in allowed if allocation_features(r).reserve_from == "adaptive-max"
        ) or tuple(allowed)
    if target.allocation is not None:  # a broken allocation path: the rules it shows under
        allocations = allocation_rules(target)
    return attrs.evolve(
        bounds,
        algorithms=distinct,
        block_cap_lengths=lengths,
        grammars=grammars,
        allocations=allocations,
    )


def shrink_gap(
    shrunk_config: Mapping[str, Any],
    shrunk_events: Sequence[Mapping[str, Any]],
    shortest_config: Mapping[str, Any],
    shortest_events: Sequence[Mapping[str, Any]],
) -> str | None:
    """Why shrinking stopped above the minimum when the two scenarios differ in overlap or in
    their number of requests (None otherwise)."""
    if shrunk_config.get("overlap") != shortest_config.get("overlap"):
        on = "on" if shortest_config.get("overlap") else "off"
        return (
            f"a local minimum of the shrinker: the shortest form runs with overlap {on} and "
            "needs other admission parameters, a change no single shrink step makes"
        )

    def requests(events: Sequence[Mapping[str, Any]]) -> int:
        return len({e["rid"] for e in events if e["kind"] == "admit"})

    if requests(shrunk_events) != requests(shortest_events):
        return (
            f"a local minimum of the shrinker: the shortest form uses "
            f"{requests(shortest_events)} request(s), the shrunk one "
            f"{requests(shrunk_events)}"
        )
    return None


class SglangMutants:
    """SGLang's corpus as the kill matrix reads it (`kvcheck.core.family.Mutants`)."""

    spec_prefix: Final = SPEC_PREFIX
    get = staticmethod(get)
    resolver = staticmethod(resolver)
    row_columns = staticmethod(row_columns)
    list_columns = staticmethod(list_columns)
    list_line = staticmethod(list_line)
    minimum_bounds = staticmethod(minimum_bounds)
    bounds_for = staticmethod(bounds_for)
    shrink_gap = staticmethod(shrink_gap)
    check_flags = staticmethod(check_flags)

    @property
    def named_corpora(self) -> Mapping[str, NamedCorpus]:
        """The corpora run only when asked for by name (`named_corpora`)."""
        return named_corpora()

    @property
    def entries(self) -> Sequence[Entry]:
        """The corpus in definition order."""
        return entries()
