"""The mutant corpus: plausible buggy resolvers kvcheck must catch, and correct rewrites it must
pass (`kvcheck mutants` runs the kill matrix, `kvcheck.mutants.matrix`).

Entries are addressed as `mutant:NAME` by `kvcheck mutants --only` and `kvcheck exhaust`, and
each entry's resolver is importable as `kvcheck.mutants:<name with - and . as _>` (for example
`kvcheck check kvcheck.mutants:worker_stride`), which is the spec saved in counterexample files.
"""

from __future__ import annotations

from typing import Any, Final

from kvcheck.errors import TargetLoadError
from kvcheck.families.sglang.mutants.corpus import corpus
from kvcheck.families.sglang.mutants.generations import GENERATIONS, Generation
from kvcheck.families.sglang.mutants.registry import SPEC_PREFIX, Entry, python_name

ENTRIES: Final[tuple[Entry, ...]] = tuple(corpus.entries)
MUTANTS: Final[tuple[Entry, ...]] = tuple(e for e in ENTRIES if e.kind == "mutant")
REWRITES: Final[tuple[Entry, ...]] = tuple(e for e in ENTRIES if e.kind == "rewrite")
BY_NAME: Final[dict[str, Entry]] = {e.name: e for e in ENTRIES}
_BY_PYTHON_NAME: Final[dict[str, Entry]] = {python_name(e.name): e for e in ENTRIES}


def __getattr__(name: str) -> Any:
    """`kvcheck.mutants.<python name>` is that entry's resolver."""
    entry = _BY_PYTHON_NAME.get(name)
    if entry is None:
        raise AttributeError(f"module 'kvcheck.mutants' has no attribute {name!r}")
    return entry.resolver


def get(name: str) -> Entry:
    """The entry called `name` (with or without the `mutant:` prefix)."""
    entry = BY_NAME.get(name.removeprefix(SPEC_PREFIX))
    if entry is None:
        import difflib

        close = difflib.get_close_matches(name.removeprefix(SPEC_PREFIX), list(BY_NAME), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise TargetLoadError(f"no corpus entry {name!r}{hint} (kvcheck mutants lists them)")
    return entry


__all__ = [
    "BY_NAME",
    "ENTRIES",
    "GENERATIONS",
    "MUTANTS",
    "REWRITES",
    "SPEC_PREFIX",
    "Entry",
    "Generation",
    "get",
]
