"""The scenario distribution through Hypothesis: a family's draws as Hypothesis strategies.

A family writes its distribution once, against the primitive choices of
`kvcheck.core.draws.Draws` (`kvcheck.core.family.Distribution`: SGLang's is
`kvcheck.families.sglang.distribution`). This module is the Hypothesis driver of those choices:
`scenarios_of(space)` is the strategy `kvcheck check` and the pytest plugin search with (its
database, shrinking and explicit examples), `scenarios(**settings)` the same for the space a
family's settings name, and every other part a family offers (SGLang's `configs()`, `admits()`,
`steps()`, `strides()`, `events()`, `event_lists()`) is a strategy of the same name here. The
other driver, a seeded `random.Random` (`kvcheck.core.draws.RandomDraws`, `random_scenario`), is
the fast search's (`kvcheck.search.sampling`), several times cheaper per scenario.

Without a `family`, the strategies draw the default family's scenarios (SGLang's).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Final, TypeVar

from hypothesis import currently_in_test_context
from hypothesis import event as hypothesis_event
from hypothesis import strategies as st

from kvcheck.core.draws import Draws, RandomDraws
from kvcheck.core.family import DEFAULT_FAMILY, distribution_of
from kvcheck.core.scenario import Scenario

__all__ = [
    "Draws",
    "RandomDraws",
    "drawn",
    "label_run",
    "random_scenario",
    "scenario_labels",
    "scenarios",
    "scenarios_of",
    "space_of",
]

T = TypeVar("T")


class _HypothesisDraws:
    """`Draws` through a Hypothesis `draw`, with the strategies built once per range."""

    __slots__ = ("_draw",)

    def __init__(self, draw: st.DrawFn) -> None:
        self._draw = draw

    def integer(self, lo: int, hi: int) -> int:
        strategy = _INTEGERS.get((lo, hi))
        if strategy is None:
            strategy = _INTEGERS[(lo, hi)] = st.integers(lo, hi)
        return self._draw(strategy)

    def boolean(self) -> bool:
        return self._draw(_BOOLEANS)

    def choice(self, options: tuple[T, ...]) -> T:
        strategy = _SAMPLED.get(options)
        if strategy is None:
            strategy = _SAMPLED[options] = st.sampled_from(options)
        return self._draw(strategy)  # type: ignore[no-any-return]

    def many(
        self, key: Hashable, element: Callable[[Draws], T], min_size: int, max_size: int
    ) -> list[T]:
        one = _ELEMENTS.get(key)
        if one is None:
            one = _ELEMENTS[key] = drawn(element)
        return self._draw(_lists(one, min_size, max_size))


# Strategies are built once: Hypothesis draws through strategies created on every call cost
# several times more, and generation is a large part of a search's time.
_INTEGERS: Final[dict[tuple[int, int], st.SearchStrategy[int]]] = {}
_BOOLEANS: Final = st.booleans()
_SAMPLED: Final[dict[tuple[Any, ...], st.SearchStrategy[Any]]] = {}
_ELEMENTS: Final[dict[Hashable, st.SearchStrategy[Any]]] = {}


@functools.lru_cache(maxsize=1024)
def _lists(
    element: st.SearchStrategy[Any], min_size: int, max_size: int
) -> st.SearchStrategy[list[Any]]:
    return st.lists(element, min_size=min_size, max_size=max_size)


def drawn(build: Callable[[Draws], T]) -> st.SearchStrategy[T]:
    """The Hypothesis strategy of a function that draws its value from `Draws`."""

    @st.composite
    def strategy(draw: st.DrawFn) -> T:
        return build(_HypothesisDraws(draw))

    return strategy()


@functools.lru_cache(maxsize=256)
def scenarios_of(space: Any, family: str = DEFAULT_FAMILY) -> st.SearchStrategy[Scenario]:
    """The Hypothesis strategy of a family's scenario `space` (built once per space)."""
    return drawn(functools.partial(distribution_of(family).draw_scenario, space=space))


def space_of(*, family: str = DEFAULT_FAMILY, **settings: Any) -> Any:
    """The scenario space a family's `settings` name (SGLang's: `convention`,
    `global_counters`, `adaptive`, `max_events`, `algorithms`, `block_cap`, `grammar`,
    `allocation`, `overlap`)."""
    return distribution_of(family).space_of(**settings)


def scenarios(*, family: str = DEFAULT_FAMILY, **settings: Any) -> st.SearchStrategy[Scenario]:
    """Whole scenarios of the space `settings` name (`space_of`)."""
    return scenarios_of(space_of(family=family, **settings), family)


def random_scenario(space: Any, rng: random.Random, family: str = DEFAULT_FAMILY) -> Scenario:
    """One scenario of a family's `space` drawn from `rng` without Hypothesis (the fast
    driver)."""
    scenario: Scenario = distribution_of(family).draw_scenario(RandomDraws(rng), space)
    return scenario


def scenario_labels(
    scenario: Scenario, reached: Iterable[str], family: str | None = None
) -> set[str]:
    """Coverage labels of one run: what the model reached, and what the family adds (SGLang:
    how many requests took part, the algorithm)."""
    return distribution_of(family or scenario.family).labels(scenario, reached)


def label_run(scenario: Scenario, reached: Iterable[str]) -> set[str]:
    """Emit the labels of one run with Hypothesis `event()`, when Hypothesis runs it (a late
    witness runs outside), and return them."""
    labels = scenario_labels(scenario, reached)
    if currently_in_test_context():
        for label in sorted(labels):
            hypothesis_event(label)
    return labels


def __getattr__(name: str) -> Any:
    """A strategy of a part of the default family's scenarios (SGLang's `configs()`,
    `admits()`, `steps()`, `strides()`, `events()`, `event_lists()`): called with that part's
    arguments, it gives the Hypothesis strategy drawing it."""
    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    part = distribution_of(DEFAULT_FAMILY).parts.get(name)
    if part is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

    @functools.wraps(part)
    def strategy(*args: Any, **kwargs: Any) -> st.SearchStrategy[Any]:
        return drawn(part(*args, **kwargs))

    return strategy
