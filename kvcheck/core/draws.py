"""The primitive choices a scenario is drawn from (`Draws`), and the seeded-Random driver.

A family writes its scenario distribution once, against `Draws`: an integer in a range, a
boolean, one of a few options, and a list of elements. Two drivers make those choices:
Hypothesis (`kvcheck.strategies`: its database, shrinking and explicit examples, as `kvcheck
check` and the pytest plugin use them) and a seeded `random.Random` (`RandomDraws`: several times
cheaper per scenario, for campaigns, `kvcheck.search.sampling`). This module is the standard
library only, so a family's distribution loads no Hypothesis on the replay and exhaust paths.

The random driver imitates Hypothesis's choices where they shape the scenarios: the lowest value
of a range more often than the others (Hypothesis's simplest-first bias), small values of a wide
range more often, and lists of Hypothesis's average length.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Hashable
from typing import Final, Protocol, TypeVar

T = TypeVar("T")


class Draws(Protocol):
    """The primitive choices a scenario is built from; each driver makes them its own way."""

    def integer(self, lo: int, hi: int) -> int:
        """An integer in [lo, hi]; `lo` is the simplest."""

    def boolean(self) -> bool:
        """True or False; False is the simplest."""

    def choice(self, options: tuple[T, ...]) -> T:
        """One of `options`; the first is the simplest."""

    def many(
        self, key: Hashable, element: Callable[[Draws], T], min_size: int, max_size: int
    ) -> list[T]:
        """A list of `min_size` to `max_size` elements drawn by `element` (`key` names `element`
        for a driver that builds something per kind of element once)."""


# The random driver's imitation of Hypothesis (measured on Hypothesis 6.170 generating SGLang's
# scenarios; `tests/unit/search/test_strategies.py` and tests/quality/test_coverage.py compare
# the two drivers): the lowest value of any range comes about one draw in ten; a range wider than
# 256 draws a value of 1-8 bits about a third of the time and otherwise 9 bits or more, each bit
# length alike (Hypothesis: a third of `integers(0, 8**6 - 1)` below 256, two thirds below 4096).
_P_LOWEST: Final = 0.05
_NARROW: Final = 256
_P_NARROW_BITS: Final = 0.3 / (1 - _P_LOWEST)
_UNIFORM_SCALE: Final = 1 / (1 - _P_LOWEST)


class RandomDraws:
    """`Draws` from a seeded `random.Random`: the fast driver (no Hypothesis)."""

    __slots__ = ("_random",)

    def __init__(self, rng: random.Random) -> None:
        self._random = rng.random

    def integer(self, lo: int, hi: int) -> int:
        """See `Draws.integer`."""
        rand = self._random
        r = rand()
        if r < _P_LOWEST or hi <= lo:
            return lo
        span = hi - lo + 1
        if span <= _NARROW:  # one random number: above _P_LOWEST it is uniform as well
            return min(hi, lo + int((r - _P_LOWEST) * _UNIFORM_SCALE * span))
        top = (span - 1).bit_length()
        bits = 1 + int(rand() * 8) if rand() < _P_NARROW_BITS else 9 + int(rand() * (top - 8))
        value = (1 << (bits - 1)) + int(rand() * (1 << (bits - 1)))
        return lo + min(value, span - 1)

    def boolean(self) -> bool:
        """See `Draws.boolean`."""
        return self._random() < 0.5

    def choice(self, options: tuple[T, ...]) -> T:
        """See `Draws.choice`."""
        return options[self.integer(0, len(options) - 1)]

    def many(
        self, key: Hashable, element: Callable[[Draws], T], min_size: int, max_size: int
    ) -> list[T]:
        """See `Draws.many`."""
        size = min_size
        if max_size > min_size:
            more = p_continue(min_size, max_size)
            rand = self._random
            while size < max_size and rand() < more:
                size += 1
        return [element(self) for _ in range(size)]


@functools.lru_cache(maxsize=4096)
def p_continue(min_size: int, max_size: int) -> float:
    """The chance of one more element that gives a list Hypothesis's average size for these
    bounds (`st.lists`: twice `min_size` or 5 more, at most the middle of the bounds)."""
    average = min(max(min_size * 2, min_size + 5), 0.5 * (min_size + max_size))
    wanted, room = average - min_size, max_size - min_size
    if wanted >= room:
        return 1.0

    def expected(p: float) -> float:  # extra elements when each more comes with chance p
        return p * (1 - p**room) / (1 - p)

    low, high = 0.0, 1.0 - 1e-12
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if expected(middle) < wanted else (low, middle)
    return low
