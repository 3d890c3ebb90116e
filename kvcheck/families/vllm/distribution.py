"""How vLLM's scenarios are drawn (`kvcheck.core.family.Distribution`), written once against
`kvcheck.core.draws.Draws`, and what the front doors add (`FrontDoor`).

A scenario: a small engine (the runner and pipeline, hence the batch queue's depth 2, 3 or 4;
k; a block pool small enough that requests preempt each other; a step budget small enough
that they wait and chunk), then events (requests added, engine steps with accepted drafts,
aborts, resets) and a final drain that runs the engine idle.
"""

from __future__ import annotations

import argparse
import random
import zlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import attrs

from kvcheck.core.draws import Draws, RandomDraws
from kvcheck.core.scenario import Scenario
from kvcheck.core.target import Target
from kvcheck.families.vllm.coverage_scope import OUT_OF_SCOPE
from kvcheck.families.vllm.judging import VllmJudging
from kvcheck.families.vllm.scenario import (
    NAME,
    RUNNERS,
    SPEC_STATS_MODES,
    Abort,
    Add,
    Drain,
    Reject,
    Reset,
    Runner,
    Step,
    Trim,
    VllmConfig,
    VllmEvent,
)


@attrs.frozen
class VllmSpace:
    """What a search draws: its judging options and the scenario's size."""

    options: VllmJudging = attrs.field(factory=VllmJudging)
    max_events: int = 40
    # The runners the target can run behind (a release before 0.23.0 runs async scheduling at
    # depth 2 only: `SchedulerFactory.runners`); a config with another is never drawn.
    runners: tuple[Runner, ...] = RUNNERS
    # Whether requests may have a grammar (trimmed drafts, `Trim`) and their grammar may reject
    # tokens (`Reject`): only where the target's factory says its scheduler validates drafts
    # against a grammar (`structured_output`, vLLM 0.14.0 on) and finishes a request the
    # grammar rejects (`grammar_errors_finish`, 0.20.0 on).
    grammars: bool = True
    rejections: bool = True
    # Whether a config may draft by batch size (`VllmConfig.spec_tokens_per_batch_size`): only
    # where the target's factory says its scheduler has dynamic SD (`dynamic_sd`, vLLM 0.24.0
    # on and kvcheck's built-ins).
    dynamic_sd: bool = True


def space_for(target: Target, options: VllmJudging) -> VllmSpace:
    """The space a search of `target` under `options` draws from: the runners its factory
    says it can run behind (`runners`, optional: every runner when it says nothing), and
    grammars where it says its scheduler has them (optional: none when it says nothing)."""
    grammars = bool(getattr(target.resolver, "structured_output", False))
    return VllmSpace(
        options,
        runners=target_runners(target),
        grammars=grammars,
        rejections=grammars and bool(getattr(target.resolver, "grammar_errors_finish", False)),
        dynamic_sd=bool(getattr(target.resolver, "dynamic_sd", False)),
    )


def target_runners(target: Target) -> tuple[Runner, ...]:
    """The runners `target` can run behind: its factory's `runners` (a release before 0.23.0
    pipelines two batches only), every runner when it says nothing. Every search honours them:
    the drawn configs (`space_for`) and the exhaustive search's depths (`search.check_bounds`)."""
    return tuple(getattr(target.resolver, "runners", RUNNERS))


def space_of(**settings: Any) -> VllmSpace:
    """The space its keyword settings name (`placeholder_drafts`, `spec_stats`,
    `max_events`)."""
    return VllmSpace(
        VllmJudging(
            bool(settings.get("placeholder_drafts", False)),
            settings.get("spec_stats", "excluded"),
        ),
        int(settings.get("max_events", 40)),
    )


def draw_config(
    draws: Draws, options: VllmJudging, runners: tuple[Runner, ...] = RUNNERS
) -> VllmConfig:
    """A small engine: every depth `runners` allow, pressure on blocks and on the step
    budget."""
    runner: Runner = draws.choice(runners)
    pp_size = 1 if runner == "v1" else draws.integer(1, 3)
    k = draws.integer(0, 3)
    block_size = draws.choice((4, 2, 8))
    max_model_len = draws.integer(8, 40)
    blocks = -(-max_model_len // block_size) + 1 + draws.integer(0, 12)
    return VllmConfig(
        num_blocks=blocks,
        block_size=block_size,
        max_num_scheduled_tokens=draws.integer(k + 1, 32),
        max_num_seqs=draws.integer(1, 4),
        max_model_len=max_model_len,
        num_spec_tokens=k,
        runner=runner,
        pp_size=pp_size,
        long_prefill_token_threshold=draws.choice((0, 0, 4, 8)),
        placeholder_drafts=options.placeholder_drafts,
        spec_stats=options.spec_stats,
        defer_frees=draws.choice((False, False, True)),
    )


# With deferred frees, a reset draws a step instead: vLLM 0.24.0 on raise at
# `reset_prefix_cache(reset_running_requests=True)` when a preempted request's blocks wait on a
# frame in flight (the pool is not all free, scheduler.py:3211-3219 @0.33.0), a known crash
# `check` would otherwise find first every time (docs/vllm.md "Deferred block frees").
_KINDS: Final = ("step", "add", "step", "abort", "step", "add", "reset", "step")
_KINDS_DEFERRING: Final = ("step", "add", "step", "abort", "step", "add", "step", "step")


def _event_element(
    max_model_len: int, k: int, defer_frees: bool
) -> Callable[[Draws], tuple[Any, ...]]:
    kinds = _KINDS_DEFERRING if defer_frees else _KINDS

    def element(draws: Draws) -> tuple[Any, ...]:
        kind = draws.choice(kinds)
        if kind == "add":
            eos = draws.integer(0, 6) if draws.boolean() else None
            return ("add", draws.integer(1, max_model_len - 1), draws.integer(1, 12), eos)
        if kind == "step":
            return ("step", draws.integer(0, k))
        if kind == "abort":
            return ("abort", draws.integer(0, 3))
        return ("reset",)

    return element


def draw_scenario(draws: Draws, space: VllmSpace) -> Scenario:
    """One scenario of `space`: an engine and its events, then, where the space has grammars,
    a grammar plan for them (`with_grammars`)."""
    config = draw_config(draws, space.options, space.runners)
    k = config.num_spec_tokens
    first = ("add", draws.integer(1, config.max_model_len - 1), draws.integer(1, 12), None)
    raw = [
        first,
        *draws.many(
            ("vllm-event", config.max_model_len, k, config.defer_frees),
            _event_element(config.max_model_len, k, config.defer_frees),
            0,
            space.max_events,
        ),
    ]
    events: list[VllmEvent] = []
    added = 0
    for item in raw:
        if item[0] == "add":
            events.append(Add(f"r{added}", item[1], item[2], item[3]))
            added += 1
        elif item[0] == "step":
            events.append(Step(item[1]))
        elif item[0] == "abort":
            events.append(Abort(f"r{item[1] % added}"))
        else:
            events.append(Reset())
    events.append(Drain(draws.integer(0, k)))
    if space.grammars:
        events = with_grammars(events, k, space.rejections)
    if space.dynamic_sd:
        config = with_dynamic_sd(config, events)
    return Scenario(config, tuple(events), family=NAME)


def with_dynamic_sd(config: VllmConfig, events: list[VllmEvent]) -> VllmConfig:
    """`config`, about half the time (with drafts), drafting by batch size: a request alone
    drafts `0..k`, and from a drawn batch size on `0..k` again (a table of one or two ranges).

    Like the grammar plan, the table comes from a generator seeded with the scenario, not from
    the search's draws: those stay what they were before dynamic SD came, and the table is
    part of the config a scenario file replays and the shrinker drops."""
    k = config.num_spec_tokens
    plan = RandomDraws(random.Random(zlib.crc32(repr((config, events)).encode())))
    if not k or not plan.boolean():
        return config
    alone = (1, 1, plan.integer(0, k))
    if config.max_num_seqs < 2 or plan.boolean():
        table: tuple[tuple[int, int, int], ...] = ((1, config.max_num_seqs, alone[2]),)
    else:
        table = (
            alone,
            (plan.integer(2, config.max_num_seqs), config.max_num_seqs, plan.integer(0, k)),
        )
    return attrs.evolve(config, spec_tokens_per_batch_size=table)


# At most this many `trim`/`reject` events a grammar plan adds.
_GRAMMAR_EVENTS: Final = 4


def with_grammars(events: list[VllmEvent], k: int, rejections: bool) -> list[VllmEvent]:
    """`events` with a grammar plan: about half the requests added with a grammar, and up to
    `_GRAMMAR_EVENTS` trims of their drafts (to 0..k a frame) and, with `rejections`,
    rejections of their next tokens, each after the request's `add` and before the last event.

    The plan is drawn from a generator seeded with the events themselves, not from the search's
    draws: those stay what they were before grammars came (a search of the same seed meets the
    same engines and events, now some with grammars), and a plan is a pure function of its
    events, so a scenario file replays it as written and kvcheck's shrinker shrinks it as
    events."""
    plan = RandomDraws(random.Random(zlib.crc32(repr(events).encode())))
    out: list[VllmEvent] = []
    grammars: list[str] = []
    for event in events:
        if isinstance(event, Add) and plan.boolean():
            event = attrs.evolve(event, grammar=True)
            grammars.append(event.rid)
        out.append(event)
    if not grammars:
        return out
    for _ in range(plan.integer(0, _GRAMMAR_EVENTS)):
        rid = plan.choice(tuple(grammars))
        added = next(i for i, e in enumerate(out) if isinstance(e, Add) and e.rid == rid)
        at = plan.integer(added + 1, len(out) - 1)
        if rejections and plan.boolean():
            out.insert(at, Reject(rid))
        else:
            out.insert(at, Trim(rid, plan.integer(0, k)))
    return out


def _steps(count: int, accept: int = 0) -> tuple[Step, ...]:
    return (Step(accept),) * count


def late_witnesses(drawn: VllmSpace) -> tuple[Scenario, ...]:
    """None: each of the survey's sequences is short and shows one bug, so all are tried first
    (`witnesses`)."""
    return ()


def witnesses(drawn: VllmSpace) -> tuple[Scenario, ...]:
    """The survey's minimal sequences, tried before any draw: resume before the stale frame
    returns at depth 3 (vllm#48245), a reset with drafts in flight (vllm#46066, #49620), a
    chunked prompt beside a decode (vllm#57562's recipe), a request left out of a step
    (vllm#37159's class), two requests preempting each other with drafts in flight, so that a
    stale frame with rejected drafts is delivered and one request finishes by length in a stale
    frame while preempted (the roll-back's stale guard, scheduler.py:2360 @0.33.0, vllm#46066's
    fix; the preempted request's stop, :2491-2494, 2545-2548), a one-token prompt admitted
    beside a decode with too little budget left to pad it to `1 + k` (:1320-1328), a
    preempted request's stale frame of drafts delivered (what vLLM 0.27+ counts in its
    statistics), with frees deferred, a preemption refused because the victim's frame is
    still in flight (:940-942) and an abort with the request's frames in flight (at depths 2
    and 3: a deferred free that waits past a delivery, :3113-3116), and, where the
    target has grammars, a request whose grammar trims its drafts beside one whose grammar
    rejects its tokens."""

    def config(**fields: Any) -> VllmConfig:
        # Every witness is judged under the drawn options (`fits`), on pages of 4 tokens.
        return VllmConfig(
            block_size=4,
            placeholder_drafts=drawn.options.placeholder_drafts,
            spec_stats=drawn.options.spec_stats,
            **fields,
        )

    pressure = config(
        num_blocks=6,
        max_num_scheduled_tokens=16,
        max_num_seqs=4,
        max_model_len=16,
        num_spec_tokens=3,
        runner="v2",
        pp_size=2,
    )
    reset = config(
        num_blocks=32,
        max_num_scheduled_tokens=32,
        max_num_seqs=4,
        max_model_len=32,
        num_spec_tokens=3,
    )
    chunked = config(
        num_blocks=32,
        max_num_scheduled_tokens=6,
        max_num_seqs=4,
        max_model_len=32,
        num_spec_tokens=0,
    )
    gap = config(
        num_blocks=20,
        max_num_scheduled_tokens=3,
        max_num_seqs=4,
        max_model_len=32,
        num_spec_tokens=2,
    )
    # Two requests under KV pressure: one is preempted with a frame of drafts in flight, and
    # that stale frame is delivered (0.27+'s deliver mode; its drafts count, vllm-spec-stats).
    preempting = config(
        num_blocks=9,
        max_num_scheduled_tokens=32,
        max_num_seqs=2,
        max_model_len=24,
        num_spec_tokens=2,
        long_prefill_token_threshold=4,
    )
    # Room for two requests' prompts, not their outputs: one is preempted while frames with
    # drafts are in flight, and it accepts one draft of three per frame.
    stale_drafts = attrs.evolve(pressure, num_blocks=8)
    unpadded = config(
        num_blocks=20,
        max_num_scheduled_tokens=3,
        max_num_seqs=4,
        max_model_len=8,
        num_spec_tokens=1,
    )
    every = (
        Scenario(
            pressure,
            (Add("r0", 4, 12), Add("r1", 4, 12), *_steps(5), Abort("r0"), Step(0), Drain(0)),
            family=NAME,
        ),
        Scenario(
            reset, (Add("r0", 4, 10), *_steps(3, 0), Reset(), *_steps(6, 1), Drain(1)), family=NAME
        ),
        Scenario(chunked, (Add("r0", 2, 6), Add("r1", 14, 4), Drain(0)), family=NAME),
        Scenario(gap, (Add("r0", 2, 4), Add("r1", 1, 8), Drain(0)), family=NAME),
        Scenario(stale_drafts, (Add("r0", 4, 12), Add("r1", 4, 3), Drain(1)), family=NAME),
        Scenario(unpadded, (Add("r0", 1, 6), Step(0), Add("r1", 1, 4), Drain(0)), family=NAME),
        Scenario(preempting, (Add("r0", 1, 7), Add("r1", 7, 5), Drain(0)), family=NAME),
        # Frees deferred under KV pressure: the request to preempt has its frame in flight, so
        # preempting it would free nothing now and the scheduler stops instead (:940-942).
        Scenario(
            attrs.evolve(pressure, defer_frees=True),
            (Add("r0", 4, 12), Add("r1", 4, 12), Drain(0)),
            family=NAME,
        ),
        # Frees deferred, room to spare: r0 is aborted with its frame in flight and r1 admitted
        # while r0's blocks wait for that frame.
        Scenario(
            attrs.evolve(reset, defer_frees=True),
            (Add("r0", 4, 8), *_steps(2, 0), Abort("r0"), Add("r1", 12, 2), Drain(0)),
            family=NAME,
        ),
        # Frees deferred at depth 3, two requests on alternate steps of the pipeline's cadence:
        # r0 is aborted with two non-empty frames in flight, so its deferred free still waits
        # after the older one returns (the fence test, scheduler.py:3113-3116 @0.33.0).
        Scenario(
            attrs.evolve(reset, runner="v2", pp_size=2, defer_frees=True),
            (Add("r0", 4, 8), Step(0), Add("r1", 4, 8), Step(0), Abort("r0"), Drain(0)),
            family=NAME,
        ),
    )
    dynamic: tuple[Scenario, ...] = ()
    if drawn.dynamic_sd:
        # Drafts by batch size, fewer than k: one for r0 alone, two once r1 joins (the step
        # asks the runner for the table's entry, scheduler.py:1709-1713 @0.33.0, and each
        # launch's placeholders follow it, async_scheduler.py:28-30).
        dynamic = (
            Scenario(
                attrs.evolve(reset, spec_tokens_per_batch_size=((1, 1, 1), (2, 4, 2))),
                (Add("r0", 4, 8), *_steps(3, 1), Add("r1", 4, 6), Drain(1)),
                family=NAME,
            ),
        )
    grammar: tuple[Scenario, ...] = ()
    if drawn.grammars:
        # Two requests with a grammar. r0's accepts one draft of three: each of its steps waits
        # for its frame in flight, the scheduler pads the invalidated drafts
        # (scheduler.py:2883-2918 @0.33.0) and the statistics leave them out (:3317-3318).
        # Where the target finishes a request its grammar rejects, r1's grammar rejects its
        # first tokens, with its next frame in flight (:2432-2443).
        rejection = (Reject("r1"),) if drawn.rejections else ()
        events = (
            Add("r0", 4, 10, grammar=True),
            Add("r1", 4, 10, grammar=True),
            Trim("r0", 1),
            *rejection,
            Drain(2),
        )
        grammar = (Scenario(reset, events, family=NAME),)
    return tuple(s for s in every + grammar + dynamic if s.config.runner in drawn.runners)


def fits(drawn: VllmSpace, scenario: Scenario) -> bool:
    """Whether a saved scenario belongs to `drawn`."""
    return (
        scenario.family == NAME
        and isinstance(scenario.config, VllmConfig)
        and scenario.config.placeholder_drafts == drawn.options.placeholder_drafts
        and scenario.config.spec_stats == drawn.options.spec_stats
        and scenario.config.runner in drawn.runners
    )


def pinned(drawn: VllmSpace, scenario: Scenario) -> Scenario:
    """A saved scenario as `drawn` would have drawn it."""
    config = attrs.evolve(
        scenario.config,
        placeholder_drafts=drawn.options.placeholder_drafts,
        spec_stats=drawn.options.spec_stats,
    )
    return Scenario(config, scenario.events, family=NAME)


def labels(scenario: Scenario, reached: Iterable[str]) -> set[str]:
    """Coverage labels: what the model reached, and the engine's shape."""
    config: VllmConfig = scenario.config
    return {
        *reached,
        f"depth {config.depth}",
        f"runner {config.runner}",
        "drafts" if config.num_spec_tokens else "no drafts",
    }


def label(options: VllmJudging) -> str:
    """The options in a word."""
    words = ["placeholder-drafts"] if options.placeholder_drafts else []
    if options.spec_stats != "excluded":
        words.append(f"spec-stats-{options.spec_stats}")
    return "+".join(words) or "default"


# --- front doors ---------------------------------------------------------------------------


def add_options(parser: argparse._ActionsContainer, **wording: Any) -> None:
    """`--placeholder-drafts` / `--no-placeholder-drafts`: whether the V1 runner's reading of
    `-1` drafts is judged (`vllm-placeholder-drafts`); neither: the target decides (a corpus
    entry's own choice, else not judged)."""
    parser.add_argument(
        "--placeholder-drafts",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="judge `-1` draft placeholders scheduled after a gap, under the V1 runner "
        "(vllm-placeholder-drafts; docs/vllm.md) (default: a vllm-mutant:NAME entry's own, "
        "else not judged)",
    )
    parser.add_argument(
        "--spec-stats",
        choices=SPEC_STATS_MODES,
        default=None,
        help="vLLM targets: judge the speculative statistics with a dropped stale frame "
        "excluded (default), included, or not at all (vllm-spec-stats; docs/vllm.md)",
    )


def requested(args: argparse.Namespace) -> dict[str, Any]:
    """The options the flags ask for; one left to the target (None) is left out."""
    asked: dict[str, Any] = {}
    if args.placeholder_drafts is not None:
        asked["placeholder_drafts"] = args.placeholder_drafts
    if getattr(args, "spec_stats", None) is not None:
        asked["spec_stats"] = args.spec_stats
    return asked


def add_plugin_options(group: Any) -> None:
    """`--kvcheck-placeholder-drafts`."""
    group.addoption(
        "--kvcheck-placeholder-drafts",
        dest="kvcheck_placeholder_drafts",
        choices=("auto", "on", "off"),
        default="auto",
        help="vLLM targets: judge `-1` draft placeholders scheduled after a gap under the V1 "
        "runner: auto (default: a corpus entry's own choice, else not), on or off",
    )
    group.addoption(
        "--kvcheck-spec-stats",
        dest="kvcheck_spec_stats",
        choices=SPEC_STATS_MODES,
        default="excluded",
        help="vLLM targets: judge the speculative statistics with a dropped stale frame "
        "excluded (default), included, or off",
    )


def plugin_items(option: Callable[[str], Any]) -> list[tuple[str, dict[str, Any]]]:
    """One item: the search `kvcheck check` runs with the same flag."""
    chosen = option("kvcheck_placeholder_drafts")
    stats = option("kvcheck_spec_stats") or "excluded"
    asked: dict[str, Any] = {} if stats == "excluded" else {"spec_stats": stats}
    suffix = "" if stats == "excluded" else f"-spec-stats-{stats}"
    if chosen == "auto":
        return [(f"auto{suffix}", asked)]
    return [
        (
            f"placeholder-drafts-{chosen}{suffix}",
            {"placeholder_drafts": chosen == "on", **asked},
        )
    ]


def describe(options: VllmJudging, reason: str) -> str:
    """Whether placeholder drafts were judged, and why; the statistics mode when not the
    default."""
    stats = "" if options.spec_stats == "excluded" else f", spec stats {options.spec_stats}"
    return (
        f"placeholder drafts {'judged' if options.placeholder_drafts else 'not judged'} "
        f"({reason}){stats}"
    )


def verdict_lines(options: VllmJudging, reason: str, shape: Any) -> list[str]:
    """`kvcheck check`'s line on how a vLLM target was judged (vLLM targets are not probed:
    `shape` is None)."""
    return [f"options     {describe(options, reason)}"]


class VllmFrontDoor:
    """vLLM's flags and pytest options (no spellings table; its releases come with the
    release-target code, `kvcheck.families.vllm.real`)."""

    add_options = staticmethod(add_options)
    requested = staticmethod(requested)
    add_plugin_options = staticmethod(add_plugin_options)
    plugin_items = staticmethod(plugin_items)
    describe = staticmethod(describe)
    verdict_lines = staticmethod(verdict_lines)

    @staticmethod
    def campaign_lines(options: VllmJudging, reason: str) -> list[str]:
        """`kvcheck fuzz`'s line on how every worker judges a vLLM target."""
        return [f"options     {describe(options, reason)}"]

    @staticmethod
    def report_fields(options: VllmJudging, reason: str) -> dict[str, Any]:
        """None of its own: the generic `family` and `options` say everything."""
        return {}

    @staticmethod
    def spellings_table() -> str | None:
        """None: vLLM has no spellings table."""
        return None

    @property
    def releases(self) -> Any:
        """vLLM's releases, when the release-target code is present."""
        from kvcheck.families.vllm.loading import real_targets

        real = real_targets()
        return None if real is None else getattr(real, "RELEASES", None)


def _scenarios_part(**settings: Any) -> Callable[[Draws], Scenario]:
    drawn = space_of(**settings)
    return lambda draws: draw_scenario(draws, drawn)


class VllmDistribution:
    """vLLM's `Distribution`."""

    parts: Final[Mapping[str, Callable[..., Callable[[Draws], Any]]]] = {
        "vllm_scenarios": _scenarios_part
    }
    out_of_scope: Final[Mapping[str, str]] = OUT_OF_SCOPE
    # A release's scheduler holds the code of every feature vLLM serves; kvcheck drives the
    # KV-cache accounting of text generation only (docs/vllm.md, "Coverage").
    uncounted_out_of_scope: Final = True
    front: Final = VllmFrontDoor()
    space = staticmethod(space_for)
    space_of = staticmethod(space_of)
    draw_scenario = staticmethod(draw_scenario)
    witnesses = staticmethod(witnesses)
    late_witnesses = staticmethod(late_witnesses)
    fits = staticmethod(fits)
    pinned = staticmethod(pinned)
    labels = staticmethod(labels)
    label = staticmethod(label)
