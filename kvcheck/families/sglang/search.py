"""How SGLang's scenarios are made smaller (`kvcheck.core.family.Moves`): the shrinker's moves.

Shrinking (`kvcheck.search.shrink` runs the loop and deletes runs of events): each event is
simplified (accept lengths towards 1, prompts and generations towards 1, no EOS, lower strides),
then the config (EAGLE, no block/cap lengths, no allocation, pages of 1, overlap on, a lower
stride), and a scenario under overlap is tried without it (a launch is then delivered in its own
step, so the same bug often shows one step sooner). The recorded result names requests r0, r1,
... in order of appearance (`renamed`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Final

import attrs

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

# --- shrinking ------------------------------------------------------------------------------

# A stride below 2 leaves no room for a draft token; the generators never produce one either.
SMALLEST_STRIDE: Final = 2


def size(scenario: Scenario) -> tuple[int, int]:
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


def event_variants(event: Event) -> Iterator[Event]:
    """Simpler events to put in `event`'s place, most aggressive first."""
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


def config_variants(scenario: Scenario) -> Iterator[Scenario]:
    """Simpler scenarios by their config (`_config_changes`), then the overlap flip."""
    config, events = scenario.config, scenario.events
    for changes in _config_changes(config):
        candidate = _valid(config, changes, events)
        if candidate is not None:
            yield candidate
    if config.overlap:
        # Without overlap a launch is delivered in its own step, so the same bug (when it does
        # not need a stale row) often shows one step sooner: flip and drop an event together.
        # A request that finished on its prefill result decodes only once it may emit a second
        # token, so the flip is also tried with such requests allowed two.
        sequential = attrs.evolve(config, overlap=False)
        decoding = tuple(
            attrs.evolve(e, max_new_tokens=2)
            if isinstance(e, Admit) and e.max_new_tokens == 1 and e.eos_at is None
            else e
            for e in events
        )
        for flipped in dict.fromkeys((events, decoding)):
            for index in range(len(events) - 1, -1, -1):
                yield Scenario(sequential, flipped[:index] + flipped[index + 1 :])


def allowed_configs(target: Target) -> Callable[[Config], bool]:
    """A simpler scenario stays under the target's allocation rules: dropping the rule ("off")
    only where the target never touches `kv_allocated_len`."""
    rules = allocation_rules(target)
    return lambda config: config.allocation in rules


def renamed(scenario: Scenario) -> Scenario:
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


class SglangMoves:
    """SGLang's shrinking moves (`kvcheck.core.family.Moves`)."""

    size = staticmethod(size)
    event_variants = staticmethod(event_variants)
    config_variants = staticmethod(config_variants)
    allowed_configs = staticmethod(allowed_configs)
    renamed = staticmethod(renamed)
