"""`exhaust --workers N --max-memory` counts what the search grows, not each worker's start-up
(issue 23 item 18): a small search under a limit that leaves no room for two more start-ups
completes, and the limit still stops a search that passes it. (Workers' stdout and killed
workers: tests/quality/test_exhaust_workers_faults.py.)"""

from __future__ import annotations

import pytest

from kvcheck.families.sglang.search import Bounds
from kvcheck.search.exhaust import ExhaustResult, exhaust
from kvcheck.search.exhaust_parallel import peak_memory_mb
from kvcheck.targets.loading import load_target

SMALL = Bounds(events=4, kinds=("admit", "step", "abort"), strides=(2,))


@pytest.fixture(scope="module")
def two_workers_under_a_tight_limit() -> tuple[ExhaustResult, float]:
    """One search on two workers (starting two costs seconds) under a limit that leaves room
    for the search but not for two more start-ups (each a few hundred MB: torch, the target);
    the limit. The limit changes what stops a search, never how its memory is measured, so the
    measurement below is that of a search without one."""
    target = load_target("builtin:reference")
    limit = peak_memory_mb() + 150
    return exhaust(target, SMALL, workers=2, max_memory_mb=limit), limit


def test_workers_start_up_memory_is_not_counted_against_max_memory(
    two_workers_under_a_tight_limit: tuple[ExhaustResult, float],
) -> None:
    result, limit = two_workers_under_a_tight_limit
    assert result.complete and result.stopped is None, result.stopped
    assert result.peak_memory_mb < limit


def test_max_memory_still_stops_a_search_on_workers() -> None:
    result = exhaust(load_target("builtin:reference"), SMALL, workers=2, max_memory_mb=1)
    assert not result.complete and result.stopped == "memory limit"


@pytest.mark.parametrize("workers", [1, 2])
def test_one_and_two_workers_measure_memory_alike(
    workers: int, request: pytest.FixtureRequest
) -> None:
    """The parent's start-up counts once, as a single process counts its own."""
    if workers == 1:
        result = exhaust(load_target("builtin:reference"), SMALL, workers=1)
    else:
        result, _ = request.getfixturevalue("two_workers_under_a_tight_limit")
    assert result.workers == workers
    assert result.peak_memory_mb < peak_memory_mb() + 100
