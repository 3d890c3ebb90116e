"""The scenario distribution is written once (`kvcheck.families.sglang.distribution`, against
`kvcheck.core.draws.Draws`) and has two drivers (`kvcheck.strategies`, `RandomDraws`): the
random driver draws the same kind of scenarios as Hypothesis (the situations they reach, and how
often, are compared in tests/quality/test_coverage.py)."""

from __future__ import annotations

import random
import statistics

from kvcheck.core.draws import RandomDraws, p_continue
from kvcheck.families.sglang.distribution import MAX_REQUESTS
from kvcheck.families.sglang.scenario import Admit, Retract, Step, SwitchStride
from kvcheck.strategies import random_scenario, space_of


def test_random_scenarios_stay_in_their_space() -> None:
    space = space_of(adaptive=True, max_events=12, algorithms=("eagle", "ngram"), allocation=True)
    rng = random.Random(0)
    for _ in range(500):
        drawn = random_scenario(space, rng)
        config = drawn.config
        assert config.adaptive and config.algorithm in ("eagle", "ngram")
        assert 2 <= config.stride <= 8 and not config.block_cap
        rids = {e.rid for e in drawn.events if isinstance(e, Admit | Retract)}
        assert rids <= {f"r{i}" for i in range(MAX_REQUESTS)}
        assert len(drawn.events) <= 12 + MAX_REQUESTS
        for event in drawn.events:
            if isinstance(event, Step):
                assert all(1 <= a <= 8 for a in event.accepts) and len(event.accepts) <= 6
            if isinstance(event, SwitchStride):
                assert 2 <= event.stride <= 8


def test_the_random_drivers_integers_stay_in_range_and_favour_the_lowest() -> None:
    draws = RandomDraws(random.Random(1))
    for lo, hi in ((0, 0), (1, 6), (-5, 24), (0, 8**6 - 1)):
        values = [draws.integer(lo, hi) for _ in range(4000)]
        assert min(values) == lo and max(values) <= hi
        assert values.count(lo) > 4000 / (hi - lo + 1) if hi > lo else True
    # A wide range: small values often, as Hypothesis draws them (a third below 256).
    wide = [draws.integer(0, 8**6 - 1) for _ in range(4000)]
    assert 0.2 < sum(v < 256 for v in wide) / 4000 < 0.45
    assert 0.5 < sum(v < 4096 for v in wide) / 4000 < 0.75


def test_list_lengths_average_what_hypothesis_lists_average() -> None:
    draws = RandomDraws(random.Random(2))
    for low, high, average in ((0, 32, 5), (3, 20, 8), (10, 12, 11), (4, 4, 4)):
        sizes = [len(draws.many("n", lambda d: 0, low, high)) for _ in range(4000)]
        assert low <= min(sizes) and max(sizes) <= high
        assert abs(statistics.mean(sizes) - average) < 0.35, (low, high, statistics.mean(sizes))
    assert p_continue(0, 1) < 1.0 and p_continue(5, 5) == 1.0
