"""Shrinking counterexamples on the scenario itself, not on Hypothesis's choice sequence.

Because a scenario is data, it can be made smaller directly: cut everything after the violating
event, delete runs of events, simplify each event and the config (the family's moves,
`kvcheck.core.family.Moves`; SGLang's: accept lengths towards 1, prompts and generations towards
1, no EOS, lower strides), then make its names canonical (SGLang: requests r0, r1, ... in order
of appearance). Each candidate is replayed with `run_scenario` (well under a millisecond) and
kept when it still breaks the same invariant. This is an order of magnitude faster than
Hypothesis's shrinker over the draws that generated the scenario, works on any scenario (one
read from a file, or found by the exhaustive search), and keeps the invariant that was found.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import attrs

from kvcheck.core.deadline import TimeLimitReached, check_time_limit, time_limit
from kvcheck.core.family import Moves, family
from kvcheck.core.run import RunResult, run_scenario
from kvcheck.core.scenario import Scenario
from kvcheck.core.target import Target

DEFAULT_MAX_RUNS = 4000


@attrs.frozen
class ShrinkResult:
    """The shrinker's outcome: the smallest failing run reached, recorded (its names made
    canonical, `Moves.renamed`, when that keeps it failing), and the candidate replays it cost.
    """

    result: RunResult
    runs: int
    # `time limit` or `interrupted` when shrinking was cut short (the result is the smallest
    # failing run reached by then); None when it reached a local minimum.
    stopped: str | None = None


def _candidates(scenario: Scenario, moves: Moves) -> Iterator[Scenario]:
    """Smaller scenarios to try, in order: runs of events deleted (halves first), each event
    simplified (`Moves.event_variants`), then the config (`Moves.config_variants`)."""
    config, events, name = scenario.config, scenario.events, scenario.family
    count = len(events)
    chunk = count // 2
    while chunk >= 1:
        for start in range(count - chunk, -1, -1):
            yield Scenario(config, events[:start] + events[start + chunk :], name)
        chunk //= 2
    for index, event in enumerate(events):
        for variant in moves.event_variants(event):
            yield Scenario(config, (*events[:index], variant, *events[index + 1 :]), name)
    yield from moves.config_variants(scenario)


def shrink(
    failing: RunResult,
    target: Target,
    *,
    keep: Callable[[RunResult], bool] | None = None,
    max_runs: int = DEFAULT_MAX_RUNS,
) -> ShrinkResult:
    """Greedy shrink of a failing run to a local minimum; `keep` says what must still hold
    (default: the same invariant is violated)."""
    assert failing.violation is not None, "shrink needs a failing run"
    invariant = failing.violation.invariant

    def still_fails(result: RunResult) -> bool:
        if keep is not None:
            return keep(result)
        return result.violation is not None and result.violation.invariant == invariant

    best = failing
    runs = 0
    moves = family(failing.scenario.family).moves
    size = moves.size
    # A simpler scenario stays one the target may be judged under (SGLang: its allocation rules).
    allowed = moves.allowed_configs(target)

    def attempt(candidate: Scenario) -> bool:
        nonlocal best, runs
        if size(candidate) >= size(best.scenario) or runs >= max_runs:
            return False
        if not allowed(candidate.config):
            return False
        runs += 1
        result = run_scenario(candidate, target)
        if not still_fails(result):
            return False
        assert result.violation is not None
        # Events after the violating one cannot matter: the run stops there.
        cut = result.violation.event_index + 1
        best = attrs.evolve(result, scenario=attrs.evolve(candidate, events=candidate.events[:cut]))
        return True

    violation = failing.violation
    best = attrs.evolve(
        failing,
        scenario=attrs.evolve(
            failing.scenario, events=failing.scenario.events[: violation.event_index + 1]
        ),
    )
    improved = True
    stopped: str | None = None
    try:
        while improved and runs < max_runs:
            improved = False
            for candidate in _candidates(best.scenario, moves):
                check_time_limit()
                if attempt(candidate):
                    improved = True
                    break
    except (KeyboardInterrupt, TimeLimitReached) as exc:
        stopped = "interrupted" if isinstance(exc, KeyboardInterrupt) else "time limit"
    # The recorded run of what was reached, outside the time limit: a finding is never dropped.
    with time_limit(None, replace=True):
        renamed = moves.renamed(best.scenario)
        final = run_scenario(renamed, target, record=True)
        if not still_fails(final):  # renaming can only reorder dict entries; keep the safe one
            final = run_scenario(best.scenario, target, record=True)
        if not still_fails(final):  # a deadline met only under a stall: the original stands
            final = run_scenario(failing.scenario, target, record=True)
    return ShrinkResult(final, runs, stopped)
