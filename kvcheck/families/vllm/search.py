"""How vLLM's scenarios are made smaller and enumerated (`kvcheck.core.family.Moves`).

Shrinking: fewer events first, then smaller events (no accepted drafts, shorter prompts and
outputs, no end-of-sequence), then a simpler engine (fewer drafts, a shallower pipeline, the V1
runner, no long-prefill threshold), then a run of steps ended by one drain. The exhaustive
search enumerates two-request scenarios over the batch queue's depths (`depths`) with a pool
tight enough to preempt (`preemption`) or roomy enough not to.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final

import attrs

from kvcheck.arguments import non_negative_int, positive_int
from kvcheck.core.scenario import Scenario
from kvcheck.core.target import Target
from kvcheck.errors import KvcheckUsageError
from kvcheck.families.vllm.distribution import target_runners, verdict_lines
from kvcheck.families.vllm.engine import VllmEngine
from kvcheck.families.vllm.judging import VllmJudging
from kvcheck.families.vllm.model import VllmModel
from kvcheck.families.vllm.scenario import (
    NAME,
    Abort,
    Add,
    Drain,
    Reject,
    Reset,
    Step,
    Trim,
    VllmConfig,
    VllmEvent,
)
from kvcheck.wording import plural

# The engine each depth is reached with (`scenario.batch_queue_depth`).
_DEPTH_ENGINES: Final[Mapping[int, tuple[str, int]]] = {2: ("v1", 1), 3: ("v2", 2), 4: ("v2", 3)}


def _event_weight(event: VllmEvent) -> int:
    if isinstance(event, Add):
        return (
            event.prompt_len
            + event.max_tokens
            + (0 if event.eos_at is None else 1 + event.eos_at)
            + event.grammar
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
        config.defer_frees,
    )


def event_variants(event: VllmEvent) -> Iterator[VllmEvent]:
    """Simpler events in `event`'s place, most aggressive first."""
    if isinstance(event, Step | Drain) and event.accept:
        yield attrs.evolve(event, accept=0)
        if event.accept > 1:
            yield attrs.evolve(event, accept=event.accept - 1)
    elif isinstance(event, Add):
        if event.grammar:
            yield attrs.evolve(event, grammar=False)
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
    if config.defer_frees:
        yield attrs.evolve(config, defer_frees=False)
    if config.spec_tokens_per_batch_size:
        yield attrs.evolve(config, spec_tokens_per_batch_size=())


def _drained_runs(events: tuple[VllmEvent, ...]) -> Iterator[tuple[VllmEvent, ...]]:
    """`events` with the end of a run of two or more steps (or drains) replaced by one drain,
    longest first, accepting as one of the replaced steps did: a bug that shows once the engine
    has run for a while needs as many steps as it takes, which no deletion of one step
    shortens, while a drain runs them all in one event."""
    start = 0
    while start < len(events):
        end = start
        while end < len(events) and isinstance(events[end], Step | Drain):
            end += 1
        for first in range(start, end - 1):
            replaced = events[first:end]
            accepts = sorted({e.accept for e in replaced if isinstance(e, Step | Drain)})
            for accept in accepts:
                yield (*events[:first], Drain(accept), *events[end:])
        start = end + 1


def config_variants(scenario: Scenario) -> Iterator[Scenario]:
    """Simpler engines for the same events, then the same engine with a run of steps ended by
    a drain (`_drained_runs`): a move over several events, which no deletion of a run of
    events or simplification of one makes."""
    for config in _config_variants(scenario.config):
        try:
            yield Scenario(config, scenario.events, family=NAME)
        except ValueError:
            continue
    for events in _drained_runs(scenario.events):
        yield Scenario(scenario.config, events, family=NAME)


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
        attrs.evolve(e, rid=names.get(e.rid, e.rid))
        if isinstance(e, Add | Abort | Trim | Reject)
        else e
        for e in scenario.events
    )
    return Scenario(scenario.config, events, family=NAME)


# --- the exhaustive search -------------------------------------------------------------------


@attrs.frozen
class VllmBounds:
    """What `kvcheck exhaust` enumerates for vLLM: up to `requests` requests of `prompt_len`
    prompt tokens and `max_tokens` outputs, on one engine per batch-queue depth in `depths`
    (k drafts, a step budget of `budget` tokens), with a pool that preempts or one roomy
    enough not to."""

    # 8, as SGLang's: `kvcheck exhaust` shares the `--events` flag, and its default is SGLang's.
    events: int | None = 8
    requests: int = 2
    depths: tuple[int, ...] = (2, 3)
    preemption: bool = True
    num_spec_tokens: int = 3
    budget: int = 16
    prompt_len: int = 4
    max_tokens: int = 12
    # Every engine defers block frees (`VllmConfig.defer_frees`).
    defer_frees: bool = False
    # Every request has a grammar, and the search may trim its drafts to none (`Trim`) or
    # reject its next tokens (`Reject`).
    grammar: bool = False
    # A drain may accept every draft as well as none. Off, each state branches once less (the
    # kill matrix's slowest minimum, no-stale-gate's, took half as long again with it on), and
    # only stop-not-trimmed's shortest counterexample among the corpus's needs it.
    drain_accepts: bool = False
    # Every engine drafts by batch size (`VllmConfig.spec_tokens_per_batch_size`): one draft
    # for a request alone, none for two or more (`EXHAUST_DYNAMIC_SD`).
    dynamic_sd: bool = False

    def describe(self) -> str:
        """The bounds in one line."""
        return (
            f"up to {self.events} events, {plural(self.requests, 'request')} "
            f"(prompt {self.prompt_len}, "
            f"up to {self.max_tokens} outputs), depths {', '.join(map(str, self.depths))}, "
            f"k {self.num_spec_tokens}, budget {self.budget}, "
            f"{'a pool that preempts' if self.preemption else 'a roomy pool'}"
            + (", frees deferred" if self.defer_frees else "")
            + (", grammars that trim drafts and reject tokens" if self.grammar else "")
            + (", drains that accept drafts" if self.drain_accepts else "")
            + (", drafts by batch size" if self.dynamic_sd else "")
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
    problems = []
    if not made.depths or any(depth not in _DEPTH_ENGINES for depth in made.depths):
        problems.append(f"depths are 2, 3 or 4, got {made.depths}")
    if not 1 <= made.requests <= 4:
        problems.append(f"requests must be in 1..4, got {made.requests}")
    if made.events is not None and made.events < 1:
        problems.append(f"events must be at least 1, got {made.events}")
    if not 0 <= made.num_spec_tokens < made.budget:
        problems.append(
            f"k must be in 0..budget-1, got k {made.num_spec_tokens} and budget {made.budget}"
        )
    if not 1 <= made.prompt_len < _MAX_MODEL_LEN:
        problems.append(f"prompt_len must be in 1..{_MAX_MODEL_LEN - 1}, got {made.prompt_len}")
    if made.max_tokens < 1:
        problems.append(f"max_tokens must be at least 1, got {made.max_tokens}")
    if problems:
        raise KvcheckUsageError("vLLM exhaust bounds: " + "; ".join(problems))
    return made


# The engine every exhaustive search runs on: a request fills at most 4 blocks of 4 tokens, and
# a pool of 5 usable blocks makes a second request preempt the first.
_MAX_MODEL_LEN: Final = 16
_BLOCK_SIZE: Final = 4
_PREEMPTING_BLOCKS: Final = 5

# The dynamic SD table of the bound `dynamic_sd`: fewer drafts than k at every batch size, and
# a different count for one request than for more, so a step's count follows its batch.
EXHAUST_DYNAMIC_SD: Final = ((1, 1, 1), (2, 4, 0))

# The conformance suite's bounds (`Moves.conformance_bounds`): one request at depth 3, within
# which the correct built-in clears in a few hundredths of a second and most invariants'
# conformance mutants are caught; a mutant that needs more (a second request, the V1 runner
# and a starving budget) is widened by `VllmMutants.bounds_for` from its corpus entry.
CONFORMANCE_BOUNDS: Final = VllmBounds(events=6, requests=1, depths=(3,))


def runnable_depths(target: Target, depths: Sequence[int]) -> tuple[int, ...]:
    """The depths of `depths` whose engine runs behind a runner `target` can run behind
    (`distribution.target_runners`: depth 2 alone for a release before 0.23.0)."""
    runners = target_runners(target)
    return tuple(depth for depth in depths if _DEPTH_ENGINES[depth][0] in runners)


def check_bounds(target: Target, bounds: VllmBounds, options: VllmJudging) -> None:
    """`KvcheckUsageError` when the bounds name a depth the target cannot run at: its engine
    would put the release behind a runner it does not have, and a verdict there would be on
    kvcheck's engine, not on the release (the same runners `check` and `fuzz` draw from)."""
    refused = [depth for depth in bounds.depths if depth not in runnable_depths(target, (depth,))]
    if refused:
        allowed = runnable_depths(target, sorted(_DEPTH_ENGINES))
        raise KvcheckUsageError(
            f"{target.spec} runs at depth {', '.join(map(str, allowed))} only (runners "
            f"{', '.join(target_runners(target))}); depth {', '.join(map(str, refused))} "
            f"cannot be judged: pass --depths {','.join(map(str, allowed))}"
        )


def start_configs(bounds: VllmBounds, options: VllmJudging) -> list[VllmConfig]:
    """One engine per depth, with the pool the bounds ask for."""
    configs = []
    for depth in bounds.depths:
        runner, pp_size = _DEPTH_ENGINES[depth]
        configs.append(
            VllmConfig(
                num_blocks=(
                    _PREEMPTING_BLOCKS
                    if bounds.preemption
                    else -(-_MAX_MODEL_LEN // _BLOCK_SIZE) * bounds.requests
                )
                + 1,
                block_size=_BLOCK_SIZE,
                max_num_scheduled_tokens=bounds.budget,
                max_num_seqs=4,
                max_model_len=_MAX_MODEL_LEN,
                num_spec_tokens=bounds.num_spec_tokens,
                runner=runner,  # type: ignore[arg-type]
                pp_size=pp_size,
                placeholder_drafts=options.placeholder_drafts,
                spec_stats=options.spec_stats,
                defer_frees=bounds.defer_frees,
                spec_tokens_per_batch_size=EXHAUST_DYNAMIC_SD if bounds.dynamic_sd else (),
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
    """From a state: add the next request (the bounds' prompt and output lengths), a step
    rejecting or accepting every draft, an abort of each live request, a reset, or a drain
    (rejecting every draft; with `drain_accepts`, also one accepting every draft);
    with grammars, a trim of each live request's drafts to none and a rejection of its next
    tokens."""
    events: list[VllmEvent] = []
    added = len(model.outputs)
    if added < bounds.requests:
        grammar = bounds.grammar
        events.append(Add(f"r{added}", bounds.prompt_len, bounds.max_tokens, grammar=grammar))
    events.append(Step(0))
    if config.num_spec_tokens:
        events.append(Step(config.num_spec_tokens))
    live = [rid for rid in model.outputs if rid not in model.aborted]
    events.extend(Abort(rid) for rid in live)
    if bounds.grammar:
        events.extend(Trim(rid, 0) for rid in live if model.trims.get(rid) != 0)
        events.extend(Reject(rid) for rid in live if rid not in model.rejects)
    if added:
        events.append(Reset())
        events.append(Drain(0))
        if bounds.drain_accepts and config.num_spec_tokens:
            events.append(Drain(config.num_spec_tokens))
    return events


def counts_as_step(event: VllmEvent) -> bool:
    """Engine steps (and drains) count as steps."""
    return isinstance(event, Step | Drain)


def _depths(text: str) -> tuple[int, ...]:
    """A comma-separated list of batch-queue depths (2, 3, 4)."""
    try:
        depths = tuple(int(part) for part in text.split(","))
    except ValueError:
        depths = ()
    if not depths or any(depth not in _DEPTH_ENGINES for depth in depths):
        raise argparse.ArgumentTypeError(f"expected depths from 2, 3, 4 as D,D; got {text!r}")
    return depths


def add_bounds_options(parser: argparse._ActionsContainer) -> None:
    """`kvcheck exhaust`'s flags for vLLM's bounds, in its own group. `--requests` and
    `--events` are SGLang's too: shared, they parse as SGLang declares them (its defaults, 2
    requests and 8 events, are what a vLLM search gets without them)."""
    default = VllmBounds()
    parser.add_argument(
        "--requests", type=positive_int, default=default.requests, metavar="N", help="requests"
    )
    parser.add_argument(
        "--events", type=non_negative_int, default=default.events, metavar="N", help="events"
    )
    parser.add_argument(
        "--depths",
        type=_depths,
        default=None,
        metavar="D,D",
        help="batch-queue depths, one engine each: 2 (V1 runner), 3 and 4 (V2 runner, "
        f"pipeline 2 and 3) (default: {','.join(map(str, default.depths))}, those the "
        "target runs at: 2 for a release before 0.23.0)",
    )
    parser.add_argument(
        "--preemption",
        action=argparse.BooleanOptionalAction,
        default=default.preemption,
        help="a pool two requests preempt each other in, or (--no-preemption) one roomy "
        "enough for every request (default: preemption)",
    )
    parser.add_argument(
        "--spec-tokens",
        type=non_negative_int,
        default=default.num_spec_tokens,
        metavar="K",
        help=f"draft tokens per decode, k (default: {default.num_spec_tokens})",
    )
    parser.add_argument(
        "--budget",
        type=positive_int,
        default=default.budget,
        metavar="N",
        help=f"tokens scheduled per step (default: {default.budget})",
    )
    parser.add_argument(
        "--prompt-len",
        type=positive_int,
        default=default.prompt_len,
        metavar="N",
        help=f"prompt tokens of each request (default: {default.prompt_len})",
    )
    parser.add_argument(
        "--max-tokens",
        type=positive_int,
        default=default.max_tokens,
        metavar="N",
        help=f"most outputs of each request (default: {default.max_tokens})",
    )


def bounds_from_args(args: argparse.Namespace, target: Target | None) -> VllmBounds:
    """The bounds the flags ask for (`--events 0`, SGLang's "unbounded", is refused: vLLM's
    step clock makes every step a new state). Without `--depths`, the default depths `target`
    runs at (`runnable_depths`); given ones it cannot run at are refused by `check_bounds`."""
    if args.events == 0:
        raise KvcheckUsageError("--events 0 (unbounded) is SGLang's; a vLLM search needs a bound")
    depths = args.depths
    if depths is None:
        depths = VllmBounds().depths
        if target is not None:
            depths = runnable_depths(target, depths) or depths
    return bounds(
        {
            "events": args.events,
            "requests": args.requests,
            "depths": depths,
            "preemption": args.preemption,
            "num_spec_tokens": args.spec_tokens,
            "budget": args.budget,
            "prompt_len": args.prompt_len,
            "max_tokens": args.max_tokens,
        }
    )


class VllmMoves:
    """vLLM's `Moves`."""

    conformance_bounds: Final = CONFORMANCE_BOUNDS
    size = staticmethod(size)
    event_variants = staticmethod(event_variants)
    config_variants = staticmethod(config_variants)
    allowed_configs = staticmethod(allowed_configs)
    renamed = staticmethod(renamed)
    bounds = staticmethod(bounds)
    check_bounds = staticmethod(check_bounds)
    start_configs = staticmethod(start_configs)
    expand = staticmethod(expand)
    counts_as_step = staticmethod(counts_as_step)
    add_bounds_options = staticmethod(add_bounds_options)
    bounds_from_args = staticmethod(bounds_from_args)

    @staticmethod
    def search_options(requested: Mapping[str, Any], bounds: Any) -> VllmJudging:
        """See `kvcheck.core.family.Moves.search_options`."""
        return VllmJudging(
            bool(requested.get("placeholder_drafts", False)),
            requested.get("spec_stats", "excluded"),
        )

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
        given: bool | None = args.placeholder_drafts
        stats = getattr(args, "spec_stats", None)
        options: VllmJudging = entry.options if entry is not None else VllmJudging()
        if stats is not None:
            options = attrs.evolve(options, spec_stats=stats)
        if given is not None:
            return attrs.evolve(options, placeholder_drafts=given), {"placeholder_drafts": "given"}
        why = "the corpus entry's" if options.placeholder_drafts else "default"
        return options, {"placeholder_drafts": why}

    @staticmethod
    def options_to_dict(options: VllmJudging) -> dict[str, Any]:
        """See `kvcheck.core.family.Moves.options_to_dict`."""
        return options.to_dict()

    @staticmethod
    def describe_options(options: VllmJudging, reasons: Mapping[str, str]) -> list[str]:
        """The exhaust report's line on the options, as `kvcheck check` words it."""
        return verdict_lines(options, reasons.get("placeholder_drafts", "default"), None)
