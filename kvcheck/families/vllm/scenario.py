"""vLLM's scenario vocabulary: the config, the events, their JSON form (schema version 4,
`"family": "vllm"`), and the token function every run shares.

Tokens are a pure function of position (`token_at`): the prompt of every request is positions
0..P0-1 and its true continuation the positions after, with the end-of-sequence token at the
output index the request's `eos_at` names. Whatever the scheduler does, a request's correct
output is therefore known from its `add` event alone, and a duplicated or skipped position shows
in the delivered tokens (`kvcheck.families.vllm.model`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal, TypeAlias

import attrs

from kvcheck.errors import ScenarioFormatError
from kvcheck.families.vllm.target import DynamicSdTable, dynamic_sd_table_error
from kvcheck.wording import plural

NAME: Final = "vllm"
# A token's value is its position plus this; the end-of-sequence token lies below it.
TOKEN_BASE: Final = 1000
EOS_TOKEN: Final = 2
# Tokens each sampling frame returns besides its accepted drafts (vLLM's
# `num_sampled_tokens_per_step`: 1 for generation).
SAMPLED_PER_STEP: Final = 1

Runner: TypeAlias = Literal["v1", "v2"]
RUNNERS: Final[tuple[Runner, ...]] = ("v1", "v2")


def token_at(position: int, eos_position: int | None) -> int:
    """The true token at `position` of a request whose end-of-sequence token sits at
    `eos_position` (None: it has none)."""
    return EOS_TOKEN if position == eos_position else TOKEN_BASE + position


def batch_queue_depth(runner: Runner, pp_size: int) -> int:
    """The engine core's batch queue size with async scheduling: vLLM's
    `VllmConfig.max_concurrent_batches` (config/vllm.py:588-598 @0.33.0): the V2 runner keeps
    `pp + 1` frames in flight, the V1 runner 2 without pipeline parallelism and `pp` with it."""
    if runner == "v2":
        return pp_size + 1
    return 2 if pp_size <= 1 else pp_size


SpecStatsMode: TypeAlias = Literal["excluded", "included", "off"]
SPEC_STATS_MODES: Final[tuple[SpecStatsMode, ...]] = ("excluded", "included", "off")


def _table_of(rows: Iterable[Iterable[int]]) -> DynamicSdTable:
    """A dynamic SD table as tuples (a scenario file's lists, a caller's lists)."""
    return tuple(_range_of(tuple(row)) for row in rows)


def _range_of(row: tuple[int, ...]) -> tuple[int, int, int]:
    first, last, drafts = row
    return first, last, drafts


@attrs.frozen
class VllmConfig:
    """One scenario's engine: the scheduler's settings, the runner and the pipeline, and one
    judging option (`placeholder_drafts`, docs/vllm.md "Placeholder drafts")."""

    num_blocks: int = 17  # the null block included, as vLLM counts them
    block_size: int = 4
    max_num_scheduled_tokens: int = 64
    max_num_seqs: int = 8
    max_model_len: int = 64
    num_spec_tokens: int = 2  # k: drafts scheduled per decode
    runner: Runner = "v1"
    pp_size: int = 1
    long_prefill_token_threshold: int = 0  # 0: prompts are chunked by the budget only
    # Judge the V1 runner's reading of `-1` draft placeholders (an aspect the user opts into).
    placeholder_drafts: bool = False
    # How the speculative statistics are judged (`vllm-spec-stats`, docs/vllm.md "Speculative
    # statistics"): "excluded", a stale frame whose output is dropped adds nothing; "included",
    # it adds its drafts like any other; "off", not judged.
    spec_stats: SpecStatsMode = "excluded"
    # Deferred block frees (`defer_block_free`, 0.24.0 on): a finished, aborted or preempted
    # request's blocks go back to the pool only once every frame launched with it has returned
    # (the release turns this on for a KV-consumer connector with overlapping batches; kvcheck
    # sets the flag itself, docs/vllm.md "Deferred block frees").
    defer_frees: bool = False
    # Dynamic speculative decoding (vLLM 0.24.0 on, `num_speculative_tokens_per_batch_size`):
    # per range of batch sizes `(first, last, drafts)`, the drafts a step of that many requests
    # proposes for the next; () off, and off without drafts (k 0) as in vLLM (docs/vllm.md
    # "Dynamic speculative decoding").
    spec_tokens_per_batch_size: DynamicSdTable = attrs.field(default=(), converter=_table_of)

    @property
    def dynamic_sd(self) -> bool:
        """Whether the engine drafts per step by batch size."""
        return bool(self.spec_tokens_per_batch_size) and self.num_spec_tokens > 0

    @property
    def depth(self) -> int:
        """The batch queue's depth D."""
        return batch_queue_depth(self.runner, self.pp_size)


@attrs.frozen
class Add:
    """A new request: `prompt_len` prompt tokens, at most `max_tokens` outputs, and the output
    index whose true token is end-of-sequence (None: it runs to its length)."""

    rid: str
    prompt_len: int
    max_tokens: int
    eos_at: int | None = None
    # Its output is constrained by a grammar (vLLM's structured output): kvcheck's grammar
    # validates its drafts and accepts its delivered tokens (`Trim`, `Reject`).
    grammar: bool = False

    def expected_output(self, max_model_len: int) -> tuple[int, ...]:
        """The whole output a correct engine delivers, and nothing else."""
        count = min(self.max_tokens, max_model_len - self.prompt_len)
        if self.eos_at is not None:
            count = min(count, self.eos_at + 1)
        eos = None if self.eos_at is None else self.prompt_len + self.eos_at
        return tuple(token_at(self.prompt_len + j, eos) for j in range(count))

    def finish_reason(self, max_model_len: int) -> str:
        """ "stop" when it ends on its end-of-sequence token, else "length"."""
        output = self.expected_output(max_model_len)
        return "stop" if output and output[-1] == EOS_TOKEN else "length"


@attrs.frozen
class Step:
    """One iteration of the engine core's loop (`step_with_batch_queue`): schedule and launch a
    frame when the queue has room, else deliver the oldest; a delivered frame accepts `accept`
    drafts per request (at most the request's k)."""

    accept: int = 0


@attrs.frozen
class Abort:
    """`finish_requests([rid], aborted)` between two steps, frames in flight or not."""

    rid: str


@attrs.frozen
class Trim:
    """From now on `rid`'s grammar accepts only the first `valid` drafts the runner proposes
    for a frame: vLLM's `update_draft_token_ids_in_output` trims the rest and pads them with
    `-1` (scheduler.py:2883-2918 @0.33.0). Nothing for a request without a grammar."""

    rid: str
    valid: int = 0


@attrs.frozen
class Reject:
    """`rid`'s grammar rejects the next tokens delivered for it: vLLM finishes the request with
    an error (`accept_tokens` False, scheduler.py:2432-2443 @0.33.0). Nothing for a request
    without a grammar."""

    rid: str


@attrs.frozen
class Reset:
    """`reset_prefix_cache(reset_running_requests=True)` between two steps (the RLHF path)."""


@attrs.frozen
class Drain:
    """Steps until the engine is idle (no request, no frame in flight), each delivery
    accepting `accept` drafts; at most `VllmEngine.drain_limit()` steps (a scheduler that never
    gets there
    breaks `vllm-quiescence`)."""

    accept: int = 0


VllmEvent: TypeAlias = Add | Step | Abort | Reset | Drain | Trim | Reject
EVENT_KINDS: Final = ("add", "step", "abort", "reset", "drain", "trim", "reject")
# The finish reason of a request whose grammar rejected its tokens (vLLM's `FINISHED_ERROR`).
GRAMMAR_ERROR: Final = "error"

_CONFIG_LIMITS: Final[dict[str, tuple[int, int]]] = {
    "num_blocks": (2, 4096),
    "block_size": (1, 256),
    "max_num_scheduled_tokens": (1, 8192),
    "max_num_seqs": (1, 256),
    "max_model_len": (2, 8192),
    "num_spec_tokens": (0, 8),
    "pp_size": (1, 4),
    "long_prefill_token_threshold": (0, 8192),
}


def _int(data: Mapping[str, Any], name: str, lo: int, hi: int, default: int | None) -> int:
    value = data.get(name, default)
    if type(value) is not int or not lo <= value <= hi:
        raise ScenarioFormatError(f"vllm: {name!r} must be an integer in {lo}..{hi}, got {value!r}")
    return value


def _rid(data: Mapping[str, Any]) -> str:
    rid = data.get("rid")
    if not isinstance(rid, str) or not 0 < len(rid) <= 64:
        raise ScenarioFormatError(f"vllm: 'rid' must be a short string, got {rid!r}")
    return rid


def _only(data: Mapping[str, Any], allowed: set[str], what: str) -> None:
    unknown = set(data) - allowed
    if unknown:
        raise ScenarioFormatError(f"vllm: unknown {what} fields {sorted(unknown)}")


def _dynamic_sd_table(rows: Any) -> DynamicSdTable:
    """A config's `spec_tokens_per_batch_size`, checked as vLLM checks its schedule."""
    shape = "a list of [first, last, drafts] integer triples"
    if not isinstance(rows, list | tuple) or not all(
        isinstance(row, list | tuple)
        and len(row) == 3
        and all(type(value) is int and 0 <= value <= 256 for value in row)
        for row in rows
    ):
        raise ScenarioFormatError(f"vllm: 'spec_tokens_per_batch_size' must be {shape}")
    table: DynamicSdTable = tuple((row[0], row[1], row[2]) for row in rows)
    error = dynamic_sd_table_error(table)
    if error is not None:
        raise ScenarioFormatError(f"vllm: 'spec_tokens_per_batch_size': {error}")
    return table


class VllmScenarios:
    """vLLM's `ScenarioCodec`."""

    event_kinds: Final = EVENT_KINDS

    @staticmethod
    def config_to_dict(config: VllmConfig) -> dict[str, Any]:
        """See `kvcheck.core.family.ScenarioCodec.config_to_dict`. A config without dynamic SD
        writes no table (its files are those written before the option came)."""
        out = attrs.asdict(config)
        if not config.spec_tokens_per_batch_size:
            del out["spec_tokens_per_batch_size"]
        return out

    @staticmethod
    def config_from_dict(data: Mapping[str, Any]) -> VllmConfig:
        """See `kvcheck.core.family.ScenarioCodec.config_from_dict`."""
        if not isinstance(data, Mapping):
            raise ScenarioFormatError(f"vllm: the config must be an object, got {data!r}")
        fields = {f.name for f in attrs.fields(VllmConfig)}
        _only(data, fields, "config")
        defaults = VllmConfig()
        values: dict[str, Any] = {
            name: _int(data, name, lo, hi, getattr(defaults, name))
            for name, (lo, hi) in _CONFIG_LIMITS.items()
        }
        runner = data.get("runner", defaults.runner)
        if runner not in RUNNERS:
            raise ScenarioFormatError(f"vllm: 'runner' must be v1 or v2, got {runner!r}")
        drafts = data.get("placeholder_drafts", defaults.placeholder_drafts)
        if type(drafts) is not bool:
            raise ScenarioFormatError(
                f"vllm: 'placeholder_drafts' must be a boolean, got {drafts!r}"
            )
        defer_frees = data.get("defer_frees", defaults.defer_frees)
        if type(defer_frees) is not bool:
            raise ScenarioFormatError(f"vllm: 'defer_frees' must be a boolean, got {defer_frees!r}")
        spec_stats = data.get("spec_stats", defaults.spec_stats)
        if spec_stats not in SPEC_STATS_MODES:
            raise ScenarioFormatError(
                f"vllm: 'spec_stats' must be excluded, included or off, got {spec_stats!r}"
            )
        table = _dynamic_sd_table(data.get("spec_tokens_per_batch_size", ()))
        return VllmConfig(
            **values,
            spec_tokens_per_batch_size=table,
            runner=runner,
            placeholder_drafts=drafts,
            spec_stats=spec_stats,
            defer_frees=defer_frees,
        )

    @staticmethod
    def event_to_dict(event: VllmEvent) -> dict[str, Any]:
        """See `kvcheck.core.family.ScenarioCodec.event_to_dict`."""
        if isinstance(event, Add):
            out: dict[str, Any] = {"kind": "add", "rid": event.rid, "prompt_len": event.prompt_len}
            out["max_tokens"] = event.max_tokens
            if event.eos_at is not None:
                out["eos_at"] = event.eos_at
            if event.grammar:
                out["grammar"] = True
            return out
        if isinstance(event, Step):
            return {"kind": "step", "accept": event.accept}
        if isinstance(event, Abort):
            return {"kind": "abort", "rid": event.rid}
        if isinstance(event, Reset):
            return {"kind": "reset"}
        if isinstance(event, Trim):
            return {"kind": "trim", "rid": event.rid, "valid": event.valid}
        if isinstance(event, Reject):
            return {"kind": "reject", "rid": event.rid}
        return {"kind": "drain", "accept": event.accept}

    @staticmethod
    def event_from_dict(data: Any) -> VllmEvent:
        """See `kvcheck.core.family.ScenarioCodec.event_from_dict`."""
        if not isinstance(data, Mapping) or data.get("kind") not in EVENT_KINDS:
            raise ScenarioFormatError(f"vllm: not an event: {data!r}")
        kind = data["kind"]
        if kind == "add":
            _only(data, {"kind", "rid", "prompt_len", "max_tokens", "eos_at", "grammar"}, "add")
            eos_at = data.get("eos_at")
            grammar = data.get("grammar", False)
            if type(grammar) is not bool:
                raise ScenarioFormatError(f"vllm: 'grammar' must be a boolean, got {grammar!r}")
            return Add(
                _rid(data),
                _int(data, "prompt_len", 1, 8192, None),
                _int(data, "max_tokens", 1, 8192, None),
                None if eos_at is None else _int(data, "eos_at", 0, 8192, None),
                grammar,
            )
        if kind == "trim":
            _only(data, {"kind", "rid", "valid"}, "trim")
            return Trim(_rid(data), _int(data, "valid", 0, 8, None))
        if kind == "reject":
            _only(data, {"kind", "rid"}, "reject")
            return Reject(_rid(data))
        if kind == "abort":
            _only(data, {"kind", "rid"}, "abort")
            return Abort(_rid(data))
        if kind == "reset":
            _only(data, {"kind"}, "reset")
            return Reset()
        _only(data, {"kind", "accept"}, kind)
        accept = _int(data, "accept", 0, 8, 0)
        return Step(accept) if kind == "step" else Drain(accept)

    @staticmethod
    def legacy_dict(config: VllmConfig, events: tuple[VllmEvent, ...]) -> None:
        """See `kvcheck.core.family.ScenarioCodec.legacy_dict`."""
        return None  # born after schema version 4

    @staticmethod
    def validate(config: VllmConfig, events: tuple[VllmEvent, ...]) -> str | None:
        """See `kvcheck.core.family.ScenarioCodec.validate`."""
        return validate(config, events)

    @staticmethod
    def describe_config(config: VllmConfig) -> str:
        """See `kvcheck.core.family.ScenarioCodec.describe_config`."""
        return describe_config(config)

    @staticmethod
    def describe_event(event: VllmEvent) -> str:
        """See `kvcheck.core.family.ScenarioCodec.describe_event`."""
        return describe_event(event)


def validate(config: VllmConfig, events: tuple[VllmEvent, ...]) -> str | None:
    """Why the pair makes no scenario (None: it does)."""
    if config.runner == "v1" and config.pp_size > 1:
        return "vllm: the V1 runner runs async scheduling without pipeline parallelism"
    if config.max_num_seqs < 1 or config.max_num_scheduled_tokens < 1:
        return "vllm: the step budget and max_num_seqs must be at least 1"
    if config.max_num_scheduled_tokens <= config.num_spec_tokens:
        return "vllm: the step budget must exceed k, or no decode with drafts fits a step"
    blocks_needed = -(-config.max_model_len // config.block_size)
    if blocks_needed > config.num_blocks - 1:
        return (
            f"vllm: {config.num_blocks - 1} usable blocks of {config.block_size} cannot hold one "
            f"request of max_model_len {config.max_model_len}"
        )
    added: set[str] = set()
    for event in events:
        if isinstance(event, Add):
            if event.rid in added:
                return f"vllm: request {event.rid} is added twice"
            if event.prompt_len >= config.max_model_len:
                return f"vllm: request {event.rid}'s prompt does not fit max_model_len"
            added.add(event.rid)
    # An abort of a request not (yet) added is allowed: vLLM's `finish_requests` skips unknown
    # ids, and deleting an `add` while shrinking must leave a scenario.
    return None


def describe_config(config: VllmConfig) -> str:
    """The config in a few words."""
    return (
        f"{config.runner} runner, pp {config.pp_size} (depth {config.depth}), k "
        f"{config.num_spec_tokens}, {config.num_blocks} blocks of {config.block_size}, budget "
        f"{config.max_num_scheduled_tokens}, max_model_len {config.max_model_len}"
        + (", placeholder drafts judged" if config.placeholder_drafts else "")
        + (", frees deferred" if config.defer_frees else "")
        + (
            f", drafts per batch size {[list(row) for row in config.spec_tokens_per_batch_size]}"
            if config.dynamic_sd
            else ""
        )
        + ("" if config.spec_stats == "excluded" else f", spec stats {config.spec_stats}")
    )


def describe_event(event: VllmEvent) -> str:
    """The event in a few words."""
    if isinstance(event, Add):
        eos = "" if event.eos_at is None else f", eos at output {event.eos_at}"
        grammar = ", grammar" if event.grammar else ""
        return (
            f"add {event.rid} (prompt {event.prompt_len}, max_tokens {event.max_tokens}{eos}"
            f"{grammar})"
        )
    if isinstance(event, Step):
        return f"step (accept {event.accept})"
    if isinstance(event, Abort):
        return f"abort {event.rid}"
    if isinstance(event, Reset):
        return "reset_prefix_cache(reset_running_requests=True)"
    if isinstance(event, Trim):
        return f"{event.rid}'s grammar accepts {plural(event.valid, 'draft')} a frame"
    if isinstance(event, Reject):
        return f"{event.rid}'s grammar rejects its next tokens"
    return f"drain (accept {event.accept})"
