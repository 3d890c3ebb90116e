"""What every family's invariants share: the record of one invariant, a checker's finding,
and the violation reported (part of the public contract: `--json`, counterexample files).

A family's checkers, and the order it checks them in, are its own
(`kvcheck.families.sglang.invariants` for SGLang)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal, TypeAlias

import attrs


@attrs.frozen
class Violation:
    """A broken invariant as reported: part of the public contract (`--json`, counterexample files).

    `invariant` is its id, `event_index` the 0-based event at which it broke, `rid` the request
    concerned (None for batch-level invariants), then the expected and observed values and one
    sentence.
    """

    invariant: str
    event_index: int
    rid: str | None
    expected: Any
    observed: Any
    message: str

    def to_dict(self) -> dict[str, Any]:
        """The violation field by field, the `violation` object of `--json` reports."""
        return attrs.asdict(self)


@attrs.frozen
class Finding:
    """One difference a checker saw: whose, expected and observed values, and a sentence.

    `aspect` names the part of the engine's API the finding is about (SGLang's `ASPECTS`)
    when only some API generations maintain it; a finding on an aspect the target is not held
    to is dropped.
    """

    rid: str | None
    expected: Any
    observed: Any
    message: str
    aspect: str | None = None
    # Which of an invariant's quantities differs, where it judges several (`global-counters`:
    # the draft total, the per-row list, the controller's samples or batch_size, the block/cap
    # totals); the explanation names it.
    quantity: str | None = None


# What an invariant judges: the resolver (the target's code), or the scheduler's allocation and
# pool. The scheduler is kvcheck's own unless the target brings its own allocation path, and
# then a scheduler invariant that breaks alone is kvcheck's fault, not the target's
# (`kvcheck.core.run`).
Judges: TypeAlias = Literal["resolver", "scheduler"]


@attrs.frozen
class Invariant:
    """One invariant: its public id, what it means, what it looks at, and its check (a checker
    lifted to the whole event by `on_event`, `on_delivery` or `on_request`).

    `scope` and the checker's arguments are the family's (SGLang's: the whole event, each
    delivery or each request). `holds` is its quick test on the scope's own pair; None: the
    checker runs at every event. An event-scope invariant that also
    looks at every request has the request part of its test in `each_request`.

    `judges` says whose fault a violation is (`Judges`). `needs_allocation`: it judges
    allocation and the pool only, so its quick test holds on every event without a pool and on
    every request without an allocation rule, and it is not run there. `aspects` are the parts
    of the engine's API (SGLang's `ASPECTS`) its findings may belong to; on a target not held
    to one, those findings are dropped. `explain` names the function that tells how a
    violation of it came about, as "module:function", taking the run's facts and the violation
    (`kvcheck.reporting.explain`); it is a name, not the function, because the reporting layer
    sits above the core. None: the report gives the checker's own sentence.

    `mutant` names the mutant of the family's built-in corpus that the conformance suite
    (tests/unit/families/test_conformance.py) shows breaking it, found by the exhaustive search
    within the family's small conformance bounds. Where no plausible edit of a target breaks
    it, `no_mutant` says why instead, and the family's own firing tests show it. Exactly one of
    the two is set, so a new invariant is shown firing from its record."""

    id: str
    meaning: str
    scope: str
    check: Callable[..., Iterator[Finding]]
    holds: Callable[..., bool] | None = None
    each_request: Callable[..., bool] | None = None
    judges: Judges = "resolver"
    needs_allocation: bool = False
    aspects: tuple[str, ...] = ()
    explain: str | None = None
    mutant: str | None = None
    no_mutant: str | None = None


def invariants_table(invariants: Mapping[str, Invariant], aspects: Mapping[str, str]) -> str:
    """The invariants as a Markdown table, in the order they are checked (docs/invariants.md,
    "Invariants"; tests/unit/test_docs_invariants.py holds the doc to it). `aspects` gives the
    words for each aspect key."""
    lines = [
        "| id | what must hold after every event, for every request | judges | "
        "with allocation only | only where the target maintains |",
        "|---|---|---|---|---|",
    ]
    for v in invariants.values():
        allocation = "yes" if v.needs_allocation else ""
        described = ", ".join(aspects[aspect] for aspect in v.aspects)
        lines.append(f"| `{v.id}` | {v.meaning} | {v.judges} | {allocation} | {described} |")
    return "\n".join(lines)
