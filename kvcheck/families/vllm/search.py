"""How vLLM's scenarios are made smaller and enumerated (`kvcheck.core.family.Moves`).

Shrinking: fewer events first, then smaller events (no accepted drafts, shorter prompts and
outputs, no end-of-sequence), then a simpler engine (fewer drafts, a shallower pipeline, the V1
runner, no long-prefill threshold). The exhaustive search enumerates two-request scenarios
over the batch queue's depths (`depths`) with a pool tight enough to preempt (`preemption`) or
roomy enough not to.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final

import attrs

from kvcheck.core.scenario import Scenario
from kvcheck.core.target import Target
from kvcheck.errors import KvcheckUsageError
from kvcheck.families.vllm.engine import VllmEngine
from kvcheck.families.vllm.judging import VllmJudging
from kvcheck.families.vllm.model import VllmModel
from kvcheck.families.vllm.scenario import (
    NAME,
    Abort,
    Add,
    Drain,
    Reset,
    Step,
    VllmConfig,
    VllmEvent,
)

# The engine each depth is reached with (`scenario.batch_queue_depth`).
_DEPTH_ENGINES: Final[Mapping[int, tuple[str, int]]] = {2: ("v1", 1), 3: ("v2", 2), 4: ("v2", 3)}


def _event_weight(event: VllmEvent) -> int:
    if isinstance(event, Add):
        return (
            event.prompt_len + event.max_tokens + (0 if event.eos_at is None else 1 + event.eos_at)
        )
    if isinstance(event, Step | Drain):
        return event.accept
    return 1


def size(scenario: Scenario) -> tuple[int, ...]:
    """Fewer events first, then smaller events, then a simpler engine."""
    config: VllmConfig = scenario.config
    return (
        len(scenario.events),
        sum(_event_weight(e) for e in scenario.events),
        config.depth,
        config.num_spec_tokens,
        config.long_prefill_token_threshold,
    )


def event_variants(event: VllmEvent) -> Iterator[VllmEvent]:
    """Simpler events in `event`'s place, most aggressive first."""
    if isinstance(event, Step | Drain) and event.accept:
        yield attrs.evolve(event, accept=0)
        if event.accept > 1:
            yield attrs.evolve(event, accept=event.accept - 1)
    elif isinstance(event, Add):
        if event.eos_at is not None:
            yield attrs.evolve(event, eos_at=None)
            if event.eos_at > 0:
                yield attrs.evolve(event, eos_at=event.eos_at - 1)
        for smaller in _smaller(event.prompt_len):
            yield attrs.evolve(event, prompt_len=smaller)
        for smaller in _smaller(event.max_tokens):
            yield attrs.evolve(event, max_tokens=smaller)


def _smaller(value: int) -> tuple[int, ...]:
    return tuple(dict.fromkeys(v for v in (1, value // 2, value - 1) if 1 <= v < value))


def _config_variants(config: VllmConfig) -> Iterator[VllmConfig]:
    if config.num_spec_tokens:
        yield attrs.evolve(config, num_spec_tokens=0)
        yield attrs.evolve(config, num_spec_tokens=config.num_spec_tokens - 1)
    if config.runner == "v2" and config.pp_size > 1:
        yield attrs.evolve(config, pp_size=config.pp_size - 1)
    if config.runner == "v2" and config.pp_size == 1:
        yield attrs.evolve(config, runner="v1")
    if config.long_prefill_token_threshold:
        yield attrs.evolve(config, long_prefill_token_threshold=0)


def config_variants(scenario: Scenario) -> Iterator[Scenario]:
    """Simpler engines for the same events."""
    for config in _config_variants(scenario.config):
        try:
            yield Scenario(config, scenario.events, family=NAME)
        except ValueError:
            continue


def allowed_configs(target: Target) -> Callable[[Any], bool]:
    """Every config is allowed to every vLLM target."""
    return lambda config: True


def renamed(scenario: Scenario) -> Scenario:
    """Requests renamed r0, r1, ... in the order they are added."""
    names: dict[str, str] = {}
    for event in scenario.events:
        if isinstance(event, Add) and event.rid not in names:
            names[event.rid] = f"r{len(names)}"
    events = tuple(
        attrs.evolve(e, rid=names.get(e.rid, e.rid)) if isinstance(e, Add | Abort) else e
        for e in scenario.events
    )
    return Scenario(scenario.config, events, family=NAME)


# --- the exhaustive search -------------------------------------------------------------------


@attrs.frozen
class VllmBounds:
    """What `kvcheck exhaust` enumerates for vLLM."""

    events: int | None = 10
    requests: int = 2
    depths: tuple[int, ...] = (2, 3)
    preemption: bool = True
    num_spec_tokens: int = 2

    def describe(self) -> str:
        """The bounds in one line."""
        return (
            f"up to {self.events} events, {self.requests} requests, depths "
            f"{', '.join(map(str, self.depths))}, k {self.num_spec_tokens}, "
            f"{'a pool that preempts' if self.preemption else 'a roomy pool'}"
        )

    def to_dict(self) -> dict[str, Any]:
        """The bounds as JSON."""
        return attrs.asdict(self)


def bounds(values: Mapping[str, Any]) -> VllmBounds:
    """Bounds from keyword values; `KvcheckUsageError` for invalid ones."""
    known = {f.name for f in attrs.fields(VllmBounds)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise KvcheckUsageError(f"unknown vLLM exhaust bound(s): {', '.join(unknown)}")
    made = VllmBounds(**values)
    if any(depth not in _DEPTH_ENGINES for depth in made.depths):
        raise KvcheckUsageError("vLLM depths are 2, 3 or 4")
    if not 1 <= made.requests <= 4:
        raise KvcheckUsageError("vLLM exhaust takes 1 to 4 requests")
    return made


def start_configs(bounds: VllmBounds, options: VllmJudging) -> list[VllmConfig]:
    """One engine per depth, with the pool the bounds ask for."""
    configs = []
    for depth in bounds.depths:
        runner, pp_size = _DEPTH_ENGINES[depth]
        configs.append(
            VllmConfig(
                num_blocks=(4 if bounds.preemption else 4 * bounds.requests) + 1,
                block_size=4,
                max_num_scheduled_tokens=16,
                max_num_seqs=4,
                max_model_len=16,
                num_spec_tokens=bounds.num_spec_tokens,
                runner=runner,  # type: ignore[arg-type]
                pp_size=pp_size,
                placeholder_drafts=options.placeholder_drafts,
            )
        )
    return configs


def expand(
    model: VllmModel,
    config: VllmConfig,
    bounds: VllmBounds,
    steps: int,
    child: Callable[[Any], Any],
) -> Sequence[VllmEvent]:
    """From a state: add the next request (prompt 6, 6 outputs), a step rejecting or accepting
    every draft, an abort of each live request, a reset, or a drain."""
    events: list[VllmEvent] = []
    added = len(model.outputs)
    if added < bounds.requests:
        events.append(Add(f"r{added}", 6, 6))
    events.append(Step(0))
    if config.num_spec_tokens:
        events.append(Step(config.num_spec_tokens))
    events.extend(Abort(rid) for rid in model.outputs if rid not in model.aborted)
    if added:
        events.append(Reset())
        events.append(Drain(0))
    return events


def counts_as_step(event: VllmEvent) -> bool:
    """Engine steps (and drains) count as steps."""
    return isinstance(event, Step | Drain)


def add_bounds_options(parser: argparse._ActionsContainer) -> None:
    """vLLM's bounds flags for `kvcheck exhaust`."""
    parser.add_argument("--vllm-depths", default="2,3", help="vLLM: batch queue depths (2,3,4)")
    parser.add_argument("--vllm-requests", type=int, default=2, help="vLLM: requests (1-4)")
    parser.add_argument(
        "--vllm-no-preemption", action="store_true", help="vLLM: a pool roomy enough not to preempt"
    )


def bounds_from_args(args: argparse.Namespace, target: Target | None) -> VllmBounds:
    """The bounds the flags ask for."""
    try:
        depths = tuple(int(d) for d in str(getattr(args, "vllm_depths", "2,3")).split(","))
    except ValueError:
        raise KvcheckUsageError("--vllm-depths takes a comma-separated list of 2, 3, 4") from None
    values: dict[str, Any] = {
        "depths": depths,
        "requests": getattr(args, "vllm_requests", 2),
        "preemption": not getattr(args, "vllm_no_preemption", False),
    }
    events = getattr(args, "events", None)
    if isinstance(events, int):
        values["events"] = events
    return bounds(values)


class VllmMoves:
    """vLLM's `Moves`."""

    size = staticmethod(size)
    event_variants = staticmethod(event_variants)
    config_variants = staticmethod(config_variants)
    allowed_configs = staticmethod(allowed_configs)
    renamed = staticmethod(renamed)
    bounds = staticmethod(bounds)
    start_configs = staticmethod(start_configs)
    expand = staticmethod(expand)
    counts_as_step = staticmethod(counts_as_step)
    add_bounds_options = staticmethod(add_bounds_options)
    bounds_from_args = staticmethod(bounds_from_args)

    @staticmethod
    def search_options(requested: Mapping[str, Any], bounds: Any) -> VllmJudging:
        """See `kvcheck.core.family.Moves.search_options`."""
        return VllmJudging(bool(requested.get("placeholder_drafts", False)))

    @staticmethod
    def check_bounds(target: Target, bounds: Any, options: Any) -> None:
        """See `kvcheck.core.family.Moves.check_bounds`."""
        return None

    @staticmethod
    def not_run(bounds: Any, options: Any) -> tuple[tuple[dict[str, Any], str], ...]:
        """See `kvcheck.core.family.Moves.not_run`."""
        return ()

    @staticmethod
    def inert(engine: Any, model: Any) -> frozenset[str]:
        """See `kvcheck.core.family.Moves.inert`."""
        return frozenset()

    @staticmethod
    def release(engine: Any, model: Any) -> None:
        """See `kvcheck.core.family.Moves.release`."""
        return None

    @staticmethod
    def pickle_state(engine: Any, model: Any, target: Target) -> bytes | None:
        """See `kvcheck.core.family.Moves.pickle_state`."""
        return None  # states are searched in one process

    @staticmethod
    def unpickle_state(data: bytes, target: Target) -> tuple[VllmEngine, VllmModel]:
        """See `kvcheck.core.family.Moves.unpickle_state`."""
        raise KvcheckUsageError(
            "vLLM states are not handed to workers; run exhaust without --workers"
        )

    @staticmethod
    def prepare_worker() -> None:
        """See `kvcheck.core.family.Moves.prepare_worker`."""
        return None

    @staticmethod
    def search_judging(
        args: argparse.Namespace, target: Target, bounds: Any, entry: Any
    ) -> tuple[VllmJudging, dict[str, str]]:
        """See `kvcheck.core.family.Moves.search_judging`."""
        given = bool(getattr(args, "placeholder_drafts", False))
        from_entry = bool(getattr(getattr(entry, "options", None), "placeholder_drafts", False))
        drafts = given or from_entry
        why = "given" if given else ("the entry's" if from_entry else "default")
        return VllmJudging(drafts), {"placeholder_drafts": why}

    @staticmethod
    def options_to_dict(options: VllmJudging) -> dict[str, Any]:
        """See `kvcheck.core.family.Moves.options_to_dict`."""
        return options.to_dict()

    @staticmethod
    def describe_options(options: VllmJudging, reasons: Mapping[str, str]) -> list[str]:
        """See `kvcheck.core.family.Moves.describe_options`."""
        return [
            f"placeholder drafts: {'judged' if options.placeholder_drafts else 'not judged'} "
            f"({reasons.get('placeholder_drafts', 'default')})"
        ]
