"""Shrinking counterexamples on the scenario itself, not on Hypothesis's choice sequence.

Because a scenario is data, it can be made smaller directly: cut everything after the violating
event, delete runs of events, simplify each event (accept lengths towards 1, prompts and
generations towards 1, no EOS, lower strides) and the config, then name requests r0, r1, ... in
order of appearance. Each candidate is replayed with `run_scenario` (well under a millisecond) and
kept when it still breaks the same invariant. This is an order of magnitude faster than
Hypothesis's shrinker over the draws that generated the scenario, works on any scenario (one
read from a file, or found by the exhaustive search), and keeps the invariant that was found.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import attrs

from kvcheck.core.deadline import TimeLimitReached, check_time_limit, time_limit
from kvcheck.core.run import RunResult, run_scenario
from kvcheck.core.scenario import Scenario
from kvcheck.core.target import Target
from kvcheck.families.sglang.scenario import (
    Abort,
    Admit,
    Config,
    Event,
    Grammar,
    Retract,
    Step,
    SwitchStride,
)
from kvcheck.families.sglang.target import allocation_rules

DEFAULT_MAX_RUNS = 4000
# A stride below 2 leaves no room for a draft token; the generators never produce one either.
SMALLEST_STRIDE = 2


@attrs.frozen
class ShrinkResult:
    """The shrinker's outcome: the smallest failing run reached, recorded (requests renamed `r0`,
    `r1`, ... when that keeps it failing), and the candidate replays it cost.
    """

    result: RunResult
    runs: int
    # `time limit` or `interrupted` when shrinking was cut short (the result is the smallest
    # failing run reached by then); None when it reached a local minimum.
    stopped: str | None = None


def _size(scenario: Scenario) -> tuple[int, int]:
    """Order on scenarios: fewer events first, then smaller numbers."""
    config = scenario.config
    total = config.stride + (0 if config.overlap else 1)
    # EAGLE and no block/cap lengths are the simplest: another algorithm or lengths cost one.
    total += (config.algorithm != "eagle") + config.block_cap
    # No allocation, pages of 1 and no adaptive maximum are simpler still.
    total += config.allocation_rule.allocates + (config.page_size != 1) + (config.pool_pages != 0)
    total += config.max_stride is not None
    for event in scenario.events:
        match event:
            case Step(accepts=accepts, blocks=blocks, caps=caps):
                total += sum(accepts) + len(accepts) + sum(blocks) + len(blocks)
                total += sum(caps) + len(caps)
            case Admit(prompt_len=p, max_new_tokens=m, eos_at=e, grammar=g):
                total += p + m + (e or 0)
                if g is not None:  # a grammar costs one, plus its position
                    total += 1 + (g.at or 0)
            case SwitchStride(stride=s):
                total += s
    return len(scenario.events), total


def _smaller_ints(value: int, floor: int) -> Iterator[int]:
    """Candidates below `value`, most aggressive first."""
    seen: set[int] = set()
    for candidate in (floor, floor + 1, value // 2, value - 1):
        if floor <= candidate < value and candidate not in seen:
            seen.add(candidate)
            yield candidate


def _event_variants(event: Event) -> Iterator[Event]:
    match event:
        case Step(accepts=accepts, blocks=blocks, caps=caps):
            if accepts or blocks or caps:
                yield Step()
            for field, values in (("blocks", blocks), ("caps", caps)):
                for length in range(len(values) - 1, -1, -1):  # missing rows mean 0
                    yield attrs.evolve(event, **{field: values[:length]})
                for row, value in enumerate(values):
                    for smaller in _smaller_ints(value, 0):
                        shrunk = (*values[:row], smaller, *values[row + 1 :])
                        yield attrs.evolve(event, **{field: shrunk})
            for length in range(len(accepts) - 1, 0, -1):
                yield attrs.evolve(event, accepts=accepts[:length])
            for row, value in enumerate(accepts):
                for smaller in _smaller_ints(value, 1):
                    yield attrs.evolve(
                        event, accepts=(*accepts[:row], smaller, *accepts[row + 1 :])
                    )
        case Admit(prompt_len=p, max_new_tokens=m, eos_at=e, grammar=g):
            if g is not None:
                yield attrs.evolve(event, grammar=None)
                if g.kind != "accept":
                    yield attrs.evolve(event, grammar=Grammar("accept"))
                    floor = 2 if g.kind == "terminate" else 1
                    for smaller in _smaller_ints(g.at or floor, floor):
                        yield attrs.evolve(event, grammar=Grammar(g.kind, smaller))
            if e is not None:
                yield attrs.evolve(event, eos_at=None)
                for smaller in _smaller_ints(e, 1):
                    yield attrs.evolve(event, eos_at=smaller)
            for smaller in _smaller_ints(m, 1):
                yield attrs.evolve(event, max_new_tokens=smaller)
            for smaller in _smaller_ints(p, 1):
                yield attrs.evolve(event, prompt_len=smaller)
        case SwitchStride(stride=s):
            for smaller in _smaller_ints(s, SMALLEST_STRIDE):
                yield SwitchStride(smaller)
        case Retract() | Abort():
            yield Step()


def _config_changes(config: Config) -> Iterator[dict[str, Any]]:
    """Simpler configs than `config`, as the fields each one changes."""
    if config.algorithm != "eagle":
        yield {"algorithm": "eagle"}
    if config.block_cap:
        yield {"block_cap": False}
    if config.allocation_rule.allocates:
        yield {"allocation": "off", "page_size": 1, "max_stride": None, "pool_pages": 0}
    if config.pool_pages:
        yield {"pool_pages": 0}
    if config.page_size != 1:
        yield {"page_size": 1, "pool_pages": config.pool_pages * config.page_size}
    if config.max_stride is not None:
        yield {"max_stride": None}
    if not config.overlap:
        yield {"overlap": True}
    for smaller in _smaller_ints(config.stride, SMALLEST_STRIDE):
        yield {"stride": smaller}


def _valid(config: Config, changes: dict[str, Any], events: tuple[Event, ...]) -> Scenario | None:
    """`config` with `changes` over `events`, or None when that is no scenario kvcheck runs
    (e.g. overlap turned on under a rule that needs it off with adaptive switching)."""
    try:
        return Scenario(attrs.evolve(config, **changes), events)
    except ValueError:
        return None


def _renamed(scenario: Scenario) -> Scenario:
    """Requests named r0, r1, ... in order of first appearance."""
    names: dict[str, str] = {}
    for event in scenario.events:
        if isinstance(event, Admit | Retract | Abort) and event.rid not in names:
            names[event.rid] = f"r{len(names)}"
    events = tuple(
        attrs.evolve(e, rid=names[e.rid]) if isinstance(e, Admit | Retract | Abort) else e
        for e in scenario.events
    )
    return Scenario(scenario.config, events)


def _candidates(scenario: Scenario) -> Iterator[Scenario]:
    events = scenario.events
    count = len(events)
    chunk = count // 2
    while chunk >= 1:
        for start in range(count - chunk, -1, -1):
            yield Scenario(scenario.config, events[:start] + events[start + chunk :])
        chunk //= 2
    for index, event in enumerate(events):
        for variant in _event_variants(event):
            yield Scenario(scenario.config, (*events[:index], variant, *events[index + 1 :]))
    for changes in _config_changes(scenario.config):
        candidate = _valid(scenario.config, changes, events)
        if candidate is not None:
            yield candidate
    if scenario.config.overlap:
        # Without overlap a launch is delivered in its own step, so the same bug (when it does
        # not need a stale row) often shows one step sooner: flip and drop an event together.
        # A request that finished on its prefill result decodes only once it may emit a second
        # token, so the flip is also tried with such requests allowed two.
        sequential = attrs.evolve(scenario.config, overlap=False)
        decoding = tuple(
            attrs.evolve(e, max_new_tokens=2)
            if isinstance(e, Admit) and e.max_new_tokens == 1 and e.eos_at is None
            else e
            for e in events
        )
        for flipped in dict.fromkeys((events, decoding)):
            for index in range(count - 1, -1, -1):
                yield Scenario(sequential, flipped[:index] + flipped[index + 1 :])


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
    # A simpler scenario stays under the target's allocation rules: dropping the rule ("off")
    # only where the target never touches `kv_allocated_len`.
    rules = allocation_rules(target)

    def attempt(candidate: Scenario) -> bool:
        nonlocal best, runs
        if _size(candidate) >= _size(best.scenario) or runs >= max_runs:
            return False
        if candidate.config.allocation not in rules:
            return False
        runs += 1
        result = run_scenario(candidate, target)
        if not still_fails(result):
            return False
        assert result.violation is not None
        # Events after the violating one cannot matter: the run stops there.
        cut = result.violation.event_index + 1
        best = attrs.evolve(result, scenario=Scenario(candidate.config, candidate.events[:cut]))
        return True

    violation = failing.violation
    best = attrs.evolve(
        failing,
        scenario=Scenario(
            failing.scenario.config, failing.scenario.events[: violation.event_index + 1]
        ),
    )
    improved = True
    stopped: str | None = None
    try:
        while improved and runs < max_runs:
            improved = False
            for candidate in _candidates(best.scenario):
                check_time_limit()
                if attempt(candidate):
                    improved = True
                    break
    except (KeyboardInterrupt, TimeLimitReached) as exc:
        stopped = "interrupted" if isinstance(exc, KeyboardInterrupt) else "time limit"
    # The recorded run of what was reached, outside the time limit: a finding is never dropped.
    with time_limit(None, replace=True):
        renamed = _renamed(best.scenario)
        final = run_scenario(renamed, target, record=True)
        if not still_fails(final):  # renaming can only reorder dict entries; keep the safe one
            final = run_scenario(best.scenario, target, record=True)
        if not still_fails(final):  # a deadline met only under a stall: the original stands
            final = run_scenario(failing.scenario, target, record=True)
    return ShrinkResult(final, runs, stopped)
