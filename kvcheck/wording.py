"""How kvcheck words what it prints: one place for the small rules every report follows."""

from __future__ import annotations


def plural(count: int, noun: str, plural_noun: str | None = None) -> str:
    """`1 failure`, `2 failures`, `0 failures`: the count with its noun in the right number.

    `plural_noun` is for nouns whose plural is not the noun plus `s` (`1 child`, `2 children`).
    """
    if count == 1:
        return f"{count} {noun}"
    return f"{count} {plural_noun if plural_noun is not None else noun + 's'}"
