"""The mutant corpora: plausible buggy resolvers kvcheck must catch, and correct rewrites it must
pass, each family's own (`Family.mutants`, reached through the registry); `kvcheck mutants` runs
the kill matrix over them (`kvcheck.mutants.matrix`). A family may have corpora run only when
named (`Mutants.named_corpora`, `kvcheck mutants --corpus NAME`: SGLang's `release-trees`).

Entries are addressed as `mutant:NAME` (their family's spec prefix) by `kvcheck mutants --only`
and `kvcheck exhaust`, and each entry's resolver is importable as
`kvcheck.mutants:<name with - and . as _>` (for example
`kvcheck check kvcheck.mutants:worker_stride`), which is the spec saved in counterexample files.

`ENTRIES`, `MUTANTS`, `REWRITES`, `BY_NAME` and `SPEC_PREFIX` are read through the registry when
asked for (module `__getattr__`), so importing this package loads no family.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from typing import Any

from kvcheck.core.family import (
    DEFAULT_FAMILY,
    MutantEntry,
    Mutants,
    NamedCorpus,
    family,
    family_names,
)
from kvcheck.errors import KvcheckUsageError, TargetLoadError

# The package's own modules: `from kvcheck.mutants import matrix` asks `__getattr__` first, which
# must not load every family to learn that no entry is called so.
_SUBMODULES = frozenset({"matrix", "report"})


def corpora() -> Iterator[Mutants]:
    """Every registered family's corpus, in registration order (a family without one is
    skipped)."""
    for name in family_names():
        mutants = family(name).mutants
        if mutants is not None:
            yield mutants


def corpus_of(name: str) -> Mutants:
    """The corpus of the family called `name`; `TargetLoadError` when it has none."""
    mutants = family(name).mutants
    if mutants is None:
        raise TargetLoadError(f"the {name} family has no mutant corpus")
    return mutants


def named_corpus(name: str, family_name: str | None = None) -> NamedCorpus:
    """Every family's (or `family_name`'s) corpus called `name`, as one
    (`Mutants.named_corpora`, `kvcheck mutants --corpus NAME`; the reasons against the
    exhaustive minimum joined); `KvcheckUsageError` when none has one."""
    chosen = corpora() if family_name is None else iter((corpus_of(family_name),))
    found = [mutants.named_corpora[name] for mutants in chosen if name in mutants.named_corpora]
    if not found:
        known = sorted({n for mutants in corpora() for n in mutants.named_corpora})
        where = "any family" if family_name is None else f"the {family_name} family"
        raise KvcheckUsageError(
            f"no corpus {name!r} in {where}; named corpora: {', '.join(known) or 'none'}"
        )
    return NamedCorpus(
        tuple(entry for named in found for entry in named.entries),
        "; ".join(dict.fromkeys(n.no_exhaustive for n in found if n.no_exhaustive)),
    )


def entries() -> tuple[MutantEntry, ...]:
    """Every corpus entry, family by family, each corpus in its definition order."""
    return tuple(entry for mutants in corpora() for entry in mutants.entries)


def is_entry_spec(spec: str) -> bool:
    """Whether `spec` names a corpus entry by its family's prefix (`mutant:NAME`)."""
    return any(spec.strip().startswith(mutants.spec_prefix) for mutants in corpora())


def get(name: str) -> MutantEntry:
    """The entry called `name` (with or without its family's prefix, `mutant:`)."""
    for mutants in corpora():
        entry = mutants.get(name.removeprefix(mutants.spec_prefix))
        if entry is not None:
            return entry
    bare = name
    for mutants in corpora():
        bare = bare.removeprefix(mutants.spec_prefix)
    close = difflib.get_close_matches(bare, [e.name for e in entries()], n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise TargetLoadError(f"no corpus entry {name!r}{hint} (kvcheck mutants lists them)")


def __getattr__(name: str) -> Any:
    """The corpus read through the registry (module docstring), and
    `kvcheck.mutants.<python name>`, that entry's resolver."""
    if name == "ENTRIES":
        return entries()
    if name == "MUTANTS":
        return tuple(e for e in entries() if e.kind == "mutant")
    if name == "REWRITES":
        return tuple(e for e in entries() if e.kind == "rewrite")
    if name == "BY_NAME":
        return {e.name: e for e in entries()}
    if name == "SPEC_PREFIX":
        return corpus_of(DEFAULT_FAMILY).spec_prefix
    if not name.startswith("_") and name not in _SUBMODULES:
        for mutants in corpora():
            resolver = mutants.resolver(name)
            if resolver is not None:
                return resolver
    raise AttributeError(f"module 'kvcheck.mutants' has no attribute {name!r}")


__all__ = [
    "BY_NAME",
    "ENTRIES",
    "MUTANTS",
    "REWRITES",
    "SPEC_PREFIX",
    "corpora",
    "corpus_of",
    "entries",
    "get",
    "is_entry_spec",
    "named_corpus",
]
