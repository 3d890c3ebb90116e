"""Per-event snapshots of per-request records, remade only for the requests an event changed.

After every event the reference model and the engine each hand the checkers one frozen record per
request (`RequestExpectation`, `ObservedRequest`). Most events change one request or none, and a
`Step` leaves finished requests alone unless the target ran, so the records of the others are
handed on as they were: the same objects, which the checkers then need not test again (SGLang's
family does so). tests/unit/core/test_snapshots.py checks, event by event, that the records
handed on equal the ones made afresh.

What this rests on: a target's code runs only within a `Step` (its calls), so between them a
request's fake changes only by kvcheck's own hand. A value a target planted in a fake whose
reading has side effects (a `__len__` that counts) is read again only when its request is.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Protocol, TypeVar


class _Record(Protocol):
    @property
    def rid(self) -> str: ...


R = TypeVar("R", bound=_Record)
S = TypeVar("S")


def refreshed(
    last: tuple[R, ...] | None,
    items: Mapping[str, S],
    changed: Collection[str] | None,
    make: Callable[[S], R],
) -> tuple[R, ...]:
    """The records of `items`, in their order: those of `last` (the previous snapshot) handed on,
    and made anew with `make` for the rids in `changed` and for items `last` does not hold.
    `last` or `changed` None: every record made anew."""
    if last is None or changed is None:
        return tuple(map(make, items.values()))
    held = len(last)
    if not changed and held == len(items):
        return last
    return tuple(
        [
            last[i] if i < held and rid not in changed and last[i].rid == rid else make(item)
            for i, (rid, item) in enumerate(items.items())
        ]
    )
