"""Scenarios as data: a small `Config` plus a list of events, with a versioned JSON form.

Everything kvcheck does is a function of a `Scenario`: Hypothesis generates them, the engine
replays them against a target, the reference model computes what must hold after each event, and
counterexample files store them. The JSON form round-trips exactly (`from_json(to_json(s)) == s`).

Event semantics (one scheduler iteration per `Step`, as SGLang's overlap loop runs it):

- `Admit(rid, prompt_len, max_new_tokens, eos_at)`: the request joins the waiting queue. The next
  `Step` runs a prefill batch of every waiting request (prefill has priority over decode).
  `eos_at=k` means output position k (1-based) holds the EOS token, so a run that reaches it
  finishes the request with `finished_len == k`; tokens accepted past it stay (over-shoot).
- `Step(accepts)`: build the next batch (prefill if anything waits, else decode of the running
  requests), launch it, then deliver the previous launch (overlap) or this one (no overlap).
  `accepts[i]` is the accept length the GPU reports for row i of the batch launched now; missing
  entries mean 1 and values are clamped to `[1, stride at launch]`.
- `Retract(rid)`: marks a running request for retraction at the next decode build.
- `Abort(rid)`: a waiting request leaves the queue; a running one gets `to_finish`, which takes
  effect at its next applied (non-stale) row.
- `SwitchStride(stride)`: the adaptive controller changes the worker's stride; later launches use
  it. A no-op unless `Config.adaptive` is on.

Events that make no sense at their point (retract an unknown rid, admit a rid twice) are no-ops,
never errors: that keeps every prefix and every shrink of a scenario valid.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal, TypeAlias

import attrs

from kvcheck.core.scenario import MAX_EVENTS as MAX_EVENTS
from kvcheck.core.scenario import MAX_ID_CHARS as MAX_ID_CHARS
from kvcheck.core.scenario import SCHEMA_VERSION as SCHEMA_VERSION
from kvcheck.core.scenario import Scenario as Scenario
from kvcheck.core.scenario import from_json as from_json
from kvcheck.core.scenario import to_json as to_json
from kvcheck.core.scenario import to_json_line as to_json_line
from kvcheck.errors import ScenarioFormatError

# `AllocationRule` and `ALLOCATION_RULES` are re-exported: the vocabulary of a scenario.
from kvcheck.families.sglang.allocation_rules import ALLOCATION_RULES as ALLOCATION_RULES
from kvcheck.families.sglang.allocation_rules import (
    AllocationFeatures,
    allocation_features,
    first_rule_with,
)
from kvcheck.families.sglang.allocation_rules import AllocationRule as AllocationRule

Convention: TypeAlias = Literal["preclaim", "honest"]
# The speculative algorithms SGLang's resolvers branch on or are fed by (docs/semantics.md §1.4):
# the EAGLE family and n-gram share EAGLE's result layout; DFLASH (0.5.14+) never pre-claims;
# UNO (0.5.20+) has two non-draft tokens per row and rows one token wider than the draft count.
Algorithm: TypeAlias = Literal["eagle", "eagle3", "ngram", "dflash", "uno"]
# The name SGLang's family is registered under (`kvcheck.core.family.FAMILIES`), which its
# targets and corpus entries carry.
FAMILY_NAME: Final = "sglang"
ALGORITHMS: Final[tuple[Algorithm, ...]] = ("eagle", "eagle3", "ngram", "dflash", "uno")
GlobalCounterMode: TypeAlias = Literal["ideal", "sglang", "off"]
# Whose code allocates and releases under an allocation rule: kvcheck's own `RuleAllocation`
# (`model`) or the release tree's own functions (`release`, `kvcheck.families.sglang.real`).
AllocationPathKind: TypeAlias = Literal["model", "release"]
ALLOCATION_PATHS: Final[tuple[AllocationPathKind, ...]] = ("model", "release")
CONVENTIONS: Final[tuple[Convention, ...]] = ("preclaim", "honest")
GLOBAL_COUNTER_MODES: Final[tuple[GlobalCounterMode, ...]] = ("ideal", "sglang", "off")
MIN_STRIDE: Final = 1
MAX_STRIDE: Final = 16
# The smallest fixed pool, in tokens: one generated request alone always fits (prompt <= 64,
# outputs <= 24 plus a run's over-shoot, reserve <= 2 * 9), so memory pressure never has to
# abort the last request, which kvcheck does not model.
MIN_POOL_TOKENS: Final = 128


def _positive(_: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 1:
        raise ValueError(f"{attribute.name} must be >= 1, got {value}")


def _stride(_: object, attribute: attrs.Attribute[int], value: int) -> None:
    if not MIN_STRIDE <= value <= MAX_STRIDE:
        raise ValueError(f"{attribute.name} must be in [{MIN_STRIDE}, {MAX_STRIDE}], got {value}")


@attrs.frozen
class Config:
    """How the scheduler around the resolver behaves, and how strictly counters are judged."""

    # Immutable all the way down: copies share it (kvcheck.core.copying.SHARED_IN_COPIES).
    kvcheck_shared_in_copies = True

    convention: Convention = attrs.field(
        default="preclaim", validator=attrs.validators.in_(CONVENTIONS)
    )
    overlap: bool = True
    stride: int = attrs.field(default=4, validator=_stride)
    adaptive: bool = False
    page_size: int = attrs.field(default=1, validator=_positive)
    global_counters: GlobalCounterMode = attrs.field(
        default="ideal", validator=attrs.validators.in_(GLOBAL_COUNTER_MODES)
    )
    algorithm: Algorithm = attrs.field(default="eagle", validator=attrs.validators.in_(ALGORITHMS))
    # Results carry per-row block-accept and cap lengths (`Step.blocks`, `Step.caps`; 0.5.16+).
    block_cap: bool = False
    # The scheduler allocates, page by page, and releases KV by this rule (schema version 3),
    # named here and in files; what it does is its row of
    # `kvcheck.families.sglang.allocation_rules.RULES`
    # (`allocation_rule`).
    allocation: AllocationRule = attrs.field(
        default="off", validator=attrs.validators.in_(ALLOCATION_RULES)
    )
    # The adaptive candidates' largest draft count, which the rules reserving from the adaptive
    # maximum reserve for (None: the initial stride); a switch above it raises the reserve.
    max_stride: int | None = attrs.field(default=None, validator=attrs.validators.optional(_stride))

    # A fixed pool of this many pages (0: unbounded). The scheduler then checks memory before a
    # decode launch, retracts when the launch does not fit, and admits only what fits.
    pool_pages: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    # Whose code allocates under the rule (`AllocationPathKind`): what a counterexample file
    # records, so its replay runs the same path.
    allocation_path: AllocationPathKind = attrs.field(
        default="model", validator=attrs.validators.in_(ALLOCATION_PATHS)
    )

    def __attrs_post_init__(self) -> None:
        rule = self.allocation_rule
        if self.pool_pages and (
            not rule.allocates or self.pool_pages * self.page_size < MIN_POOL_TOKENS
        ):
            raise ValueError(
                f"a fixed pool needs an allocation rule and at least {MIN_POOL_TOKENS} tokens "
                f"(one request alone must fit), got {self.pool_pages} pages of "
                f"{self.page_size} with allocation {self.allocation}"
            )
        if rule.allocates and not rule.page_round and self.page_size != 1:
            raise ValueError(
                f"allocation rule {self.allocation} is modelled at page size 1 only "
                f"(page rounding starts with {first_rule_with(page_round=True).name}), "
                f"got page_size {self.page_size}"
            )
        unsafe = adaptive_allocation_problem(
            self.allocation, adaptive=self.adaptive, overlap=self.overlap
        )
        if unsafe:
            raise ValueError(unsafe)

    @property
    def allocation_rule(self) -> AllocationFeatures:
        """What the allocation rule does (`allocation` is its name)."""
        return allocation_features(self.allocation)

    @property
    def preclaims(self) -> bool:
        """Whether a decode launch pre-claims one slot: the pre-claim convention, except for
        DFLASH, which never does (0.5.14)."""
        return self.convention == "preclaim" and self.algorithm != "dflash"

    @property
    def non_draft_tokens(self) -> int:
        """k: tokens of a row that are not drafts (the bonus; UNO's two)."""
        return 2 if self.algorithm == "uno" else 1

    def output_width(self, stride: int) -> int:
        """Row width of `next_token_ids` for a launch at `stride` draft tokens (UNO: one more)."""
        return stride + 1 if self.algorithm == "uno" else stride


# Adaptive switching and the allocation rules (docs/semantics.md §5.6, "Adaptive switching the
# scheduler cannot run safely"). Under overlap a decode launch must reserve room for the run of
# the launch still in flight plus its own: `2A` does that only while `A` is at least both
# strides. A rule reserving from the launched stride (0.5.6, 0.5.12) lets the launch in flight
# (old, larger count) and the new one write past `Al` after a down-switch (SGLang 0.5.12's own
# under-reservation, fixed in 0.5.13 by reserving for the adaptive maximum; sglang#23336/#24055).
# That is a fault of the scheduler, which kvcheck plays itself, and judging a resolver there
# would blame it for kvcheck's scheduler (a false verdict found by CI on 0.5.23). So those
# combinations are refused, by the rule's features:
# - without the clamp (0.5.6, which never met adaptive switching: it starts with 0.5.12) a
#   down-switch shrinks `Al`: refused with adaptive switching at all;
# - with the clamp but reserving from the launched stride (0.5.12), adaptive switching is judged
#   without overlap only (the clamp, the reason to keep the rule, shows there);
# - reserving from the adaptive maximum (0.5.13, 0.5.16), which bounds every switch in SGLang:
#   a scenario switching above it under overlap is refused (`Scenario`).


def adaptive_allocation_problem(
    allocation: AllocationRule, *, adaptive: bool, overlap: bool
) -> str | None:
    """Why `allocation` cannot run with adaptive switching under `overlap` (None: it can, or
    there is no switching)."""
    rule = allocation_features(allocation)
    if not (adaptive and rule.allocates):
        return None
    if not rule.clamp:
        return (
            f"allocation rule {rule.name} with adaptive switching shrinks Al on a down-switch "
            "(no clamp; adaptive speculation starts with 0.5.12): a scheduler fault kvcheck does "
            f"not judge a resolver under; use rule {first_rule_with(clamp=True).name} or later"
        )
    if rule.reserve_from == "launched-stride" and overlap:
        fixed = first_rule_with(allocates=True, reserve_from="adaptive-max").name
        return (
            f"allocation rule {rule.name} with adaptive switching under overlap reserves for the "
            "current draft count, so after a down-switch the launch in flight and the next one "
            f"can write past Al (SGLang {rule.name}'s own under-reservation, fixed in {fixed}): "
            "a scheduler fault kvcheck does not judge a resolver under; use rule "
            f"{fixed} or later, or overlap off"
        )
    return None


def switch_above_maximum(config: Config, events: Iterable[Event]) -> str | None:
    """Why `events` cannot run under `config`: a stride switch above the adaptive maximum that
    the rule reserves for (0.5.13+), under overlap (None: nothing wrong)."""
    rule = config.allocation_rule
    if not (config.adaptive and config.overlap and rule.reserve_from == "adaptive-max"):
        return None
    maximum = config.max_stride or config.stride
    for index, event in enumerate(events):
        if isinstance(event, SwitchStride) and event.stride > maximum:
            return (
                f"event {index} switches the stride to {event.stride}, above the adaptive "
                f"maximum {maximum} that allocation rule {config.allocation} reserves for "
                "(max_stride, else the initial stride); in SGLang that maximum bounds every "
                "switch, and above it a launch in flight and the next one can write past Al"
            )
    return None


# Fields schema version 1 cannot say, with their defaults: written only when they differ.
_V2_CONFIG_DEFAULTS: Final[dict[str, object]] = {"algorithm": "eagle", "block_cap": False}
_V3_CONFIG_DEFAULTS: Final[dict[str, object]] = {
    "allocation": "off",
    "max_stride": None,
    "pool_pages": 0,
    # Written only for the release's own allocation path (no kvcheck before it reads it).
    "allocation_path": "model",
}


GrammarKind: TypeAlias = Literal["accept", "terminate", "reject"]
GRAMMAR_KINDS: Final[tuple[GrammarKind, ...]] = ("accept", "terminate", "reject")


@attrs.frozen
class Grammar:
    """A request's grammar (docs/semantics.md §1.4): `accept` takes every token; `terminate`
    is satisfied by the token at output position `at` (1-based; later tokens of that run are
    not retained, and the request then finishes); `reject` refuses the token at output position
    `at` (the request is aborted there). `at` is None exactly for `accept`; a grammar cannot
    terminate on the prefill token (`at >= 2` for `terminate`)."""

    # Immutable all the way down: copies share it (kvcheck.core.copying.SHARED_IN_COPIES).
    kvcheck_shared_in_copies = True

    kind: GrammarKind = attrs.field(validator=attrs.validators.in_(GRAMMAR_KINDS))
    at: int | None = attrs.field(default=None)

    @at.validator
    def _check_at(self, _: attrs.Attribute[int | None], value: int | None) -> None:
        if self.kind == "accept":
            if value is not None:
                raise ValueError(f"an accept grammar has no position, got at={value}")
            return
        lowest = 2 if self.kind == "terminate" else 1
        if value is None or value < lowest:
            raise ValueError(f"a {self.kind} grammar needs at >= {lowest}, got {value}")


def _grammar(value: Any) -> Grammar | None:
    """`Admit.grammar` from a `Grammar`, its JSON object, or None."""
    if value is None or isinstance(value, Grammar):
        return value
    if isinstance(value, Mapping):
        return Grammar(**value)
    raise ValueError(f"grammar must be an object or null, got {value!r}")


@attrs.frozen
class Admit:
    """Event: request `rid` joins the waiting queue with a prompt of `prompt_len` tokens (P).

    It may emit up to `max_new_tokens` outputs before a length finish. `eos_at` (1-based output
    position, or None) is where its EOS lands: a run reaching it finishes the request with
    `finished_len == eos_at` and keeps the over-shoot. Admitting a known rid again is a no-op.
    """

    rid: str
    prompt_len: int = attrs.field(validator=_positive)
    max_new_tokens: int = attrs.field(validator=_positive)
    eos_at: int | None = attrs.field(default=None, validator=attrs.validators.optional(_positive))
    # A grammar constraining its output (0.5.14+ resolvers truncate and abort by it); schema
    # version 2, written only when set.
    grammar: Grammar | None = attrs.field(default=None, converter=_grammar)


def _int_tuple(values: Iterable[int]) -> tuple[int, ...]:
    return tuple(values)


@attrs.frozen
class Step:
    """Event: one pass of the overlap loop: build the next batch, launch it, deliver a launch.

    `accepts[i]` is the accept length the fake GPU reports for row i of the decode batch launched
    now: missing rows mean 1, values are clamped to [1, stride at launch], and a prefill launch
    ignores them.
    """

    accepts: tuple[int, ...] = attrs.field(default=(), converter=_int_tuple)
    # Per-row block-accept and cap lengths, used when `Config.block_cap` is on: missing rows
    # mean 0, values are clamped to [0, row width at launch].
    blocks: tuple[int, ...] = attrs.field(default=(), converter=_int_tuple)
    caps: tuple[int, ...] = attrs.field(default=(), converter=_int_tuple)

    @accepts.validator
    def _check_accepts(self, _: attrs.Attribute[tuple[int, ...]], value: tuple[int, ...]) -> None:
        if any(a < 1 for a in value):
            raise ValueError(f"accept lengths must be >= 1, got {value}")

    @blocks.validator
    @caps.validator
    def _check_lengths(
        self, attribute: attrs.Attribute[tuple[int, ...]], value: tuple[int, ...]
    ) -> None:
        if any(v < 0 for v in value):
            raise ValueError(f"{attribute.name} must be >= 0, got {value}")


@attrs.frozen
class Retract:
    """Event: retract running request `rid` at the next decode build (SGLang's `retract_decode`).

    Its KV is released (C = 0), outputs and statistics are kept, and it is requeued for
    re-admission; its row already in flight is then delivered stale. No-op unless it is running.
    """

    rid: str


@attrs.frozen
class Abort:
    """Event: abort `rid`. A waiting request finishes at once; a running one gets `to_finish`,
    honoured at its next applied row. No-op when it is finished or unknown.
    """

    rid: str


@attrs.frozen
class SwitchStride:
    """Event: the adaptive controller sets the worker's stride for later launches.

    Batches already launched keep the stride recorded at their launch, which is what a resolver
    must slice them with (docs/semantics.md §3.4). No-op unless `Config.adaptive` is on.
    """

    stride: int = attrs.field(validator=_stride)


Event: TypeAlias = Admit | Step | Retract | Abort | SwitchStride
EVENT_TYPES: Final[dict[str, type[Event]]] = {
    "admit": Admit,
    "step": Step,
    "retract": Retract,
    "abort": Abort,
    "switch_stride": SwitchStride,
}
_KIND_OF: Final[dict[type[Event], str]] = {cls: kind for kind, cls in EVENT_TYPES.items()}
# The one spelling of each event kind: in JSON, in `kvcheck exhaust --kinds`, in the strategies.
EVENT_KINDS: Final[tuple[str, ...]] = tuple(EVENT_TYPES)


def accept_for_row(step: Step, row: int, width: int, non_draft: int = 1) -> int:
    """The accept length row `row` of a batch launched by `step` reports, clamped to
    [k, row width] (k = `non_draft`, the tokens of a row that are always accepted)."""
    raw = step.accepts[row] if row < len(step.accepts) else 1
    return max(non_draft, min(raw, width))


def block_cap_for_row(step: Step, row: int, width: int) -> tuple[int, int]:
    """The (block-accept, cap) lengths row `row` of a batch launched by `step` reports."""
    block = step.blocks[row] if row < len(step.blocks) else 0
    cap = step.caps[row] if row < len(step.caps) else 0
    return min(block, width), min(cap, width)


def token_id(launch_no: int, row: int, column: int) -> int:
    """The token id the fake GPU writes at `column` of `row` in launch `launch_no`.

    Every position of every result gets a distinct, readable id (launch 3, row 1, column 2 is
    30102), padding included, so a slice taken with the wrong stride or offset returns tokens that
    visibly belong to another row.
    """
    return launch_no * 10_000 + row * 100 + column


def describe_event(event: Event) -> str:
    """A short human name for an event, as used in timelines and counterexamples."""
    match event:
        case Admit(rid=rid, prompt_len=p, max_new_tokens=m, eos_at=e):
            eos = f", eos_at={e}" if e is not None else ""
            grammar = event.grammar
            if grammar is not None:
                eos += f", grammar {grammar.kind}" + (
                    f" at {grammar.at}" if grammar.at is not None else ""
                )
            return f"admit {rid} (prompt={p}, max_new={m}{eos})"
        case Step(accepts=accepts, blocks=blocks, caps=caps):
            parts = ["step"]
            if accepts:
                parts.append(f"accepts={list(accepts)}")
            if blocks:
                parts.append(f"blocks={list(blocks)}")
            if caps:
                parts.append(f"caps={list(caps)}")
            return " ".join(parts)
        case Retract(rid=rid):
            return f"retract {rid}"
        case Abort(rid=rid):
            return f"abort {rid}"
        case SwitchStride(stride=s):
            return f"switch stride to {s}"
    raise AssertionError(f"unknown event {event!r}")


def describe_config(config: Config) -> str:
    """A short human description of a config, as used in reports and timelines."""
    parts = [
        f"{config.convention} convention",
        f"overlap {'on' if config.overlap else 'off'}",
        f"stride {config.stride}",
    ]
    if config.adaptive:
        parts.append("adaptive stride")
    if config.page_size != 1:
        parts.append(f"page size {config.page_size}")
    parts.append(f"global counters {config.global_counters}")
    if config.algorithm != "eagle":
        parts.append(f"algorithm {config.algorithm}")
    if config.block_cap:
        parts.append("block/cap lengths")
    if config.allocation_rule.allocates:
        parts.append(f"allocation as {config.allocation}+")
        if config.max_stride is not None:
            parts.append(f"max stride {config.max_stride}")
        if config.pool_pages:
            parts.append(f"pool of {config.pool_pages} pages")
        if config.allocation_path == "release":
            parts.append("the release's own allocation code")
    return ", ".join(parts)


# --- JSON -------------------------------------------------------------------------------------


def event_to_dict(event: Event) -> dict[str, Any]:
    """The JSON object of one event, `{"kind": ..., **fields}` (`EVENT_KINDS` names the kinds)."""
    # Lists, not tuples: the dict is the JSON form, and compares equal to json.loads output.
    data = attrs.asdict(event, value_serializer=_tuples_as_lists)
    if isinstance(event, Step):  # version 2 fields, written only when used
        for name in ("blocks", "caps"):
            if not data[name]:
                del data[name]
    if isinstance(event, Admit):
        if data["grammar"] is None:
            del data["grammar"]
        elif data["grammar"]["at"] is None:
            del data["grammar"]["at"]
    return {"kind": _KIND_OF[type(event)], **data}


def _tuples_as_lists(_: object, __: object, value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


# The JSON type each field must have. Exact types: JSON's `true` is not the integer 1 and `2.0` is
# not 2, so a damaged or hand-edited file is refused instead of being read as something else.
_FieldType: TypeAlias = Literal["int", "int?", "ints", "bool", "str", "grammar?"]
_CONFIG_FIELD_TYPES: Final[dict[str, _FieldType]] = {
    "convention": "str",
    "overlap": "bool",
    "stride": "int",
    "adaptive": "bool",
    "page_size": "int",
    "global_counters": "str",
    "algorithm": "str",
    "block_cap": "bool",
    "allocation": "str",
    "max_stride": "int?",
    "pool_pages": "int",
    "allocation_path": "str",
}
_EVENT_FIELD_TYPES: Final[dict[str, dict[str, _FieldType]]] = {
    "admit": {
        "rid": "str",
        "prompt_len": "int",
        "max_new_tokens": "int",
        "eos_at": "int?",
        "grammar": "grammar?",
    },
    "step": {"accepts": "ints", "blocks": "ints", "caps": "ints"},
    "retract": {"rid": "str"},
    "abort": {"rid": "str"},
    "switch_stride": {"stride": "int"},
}
_GRAMMAR_FIELD_TYPES: Final[dict[str, _FieldType]] = {"kind": "str", "at": "int?"}

# The largest value each numeric field of a document may hold, and the longest list or string
# (docs/file-bounds.md). A file is read by `replay`, `regress` and the pytest plugin, which
# collects every `*.kvcheck.json` under the test paths: one file asking for a prompt of 1e9
# tokens must not take a CI runner's memory. The bounds are far above anything the generators
# (prompts <= 64, outputs <= 24, 32 events, strides <= 8, pools <= 192 tokens) or a practical
# `exhaust` produce, and `exhaust` refuses bounds past them, so every file kvcheck writes is read
# back; a scenario at every bound replays in well under a second.
MAX_REQUEST_TOKENS: Final = 65_536
MAX_ROW_VALUE: Final = 1_024
MAX_ROWS: Final = 256
MAX_PAGE_SIZE: Final = 1_024
MAX_POOL_PAGES: Final = 1 << 20
_FIELD_BOUNDS: Final[dict[str, int]] = {
    "prompt_len": MAX_REQUEST_TOKENS,
    "max_new_tokens": MAX_REQUEST_TOKENS,
    "eos_at": MAX_REQUEST_TOKENS,
    "at": MAX_REQUEST_TOKENS,
    "accepts": MAX_ROW_VALUE,
    "blocks": MAX_ROW_VALUE,
    "caps": MAX_ROW_VALUE,
    "page_size": MAX_PAGE_SIZE,
    "pool_pages": MAX_POOL_PAGES,
    "stride": MAX_STRIDE,
    "max_stride": MAX_STRIDE,
    "rid": MAX_ID_CHARS,
}

_TYPE_NAMES: Final[dict[_FieldType, str]] = {
    "int": "an integer",
    "int?": "an integer or null",
    "ints": "a list of integers",
    "bool": "true or false",
    "str": "a string",
    "grammar?": "an object or null",
}


def _has_type(value: Any, expected: _FieldType) -> bool:
    match expected:
        case "int":
            return type(value) is int
        case "int?":
            return value is None or type(value) is int
        case "ints":
            return isinstance(value, list | tuple) and all(type(v) is int for v in value)
        case "bool":
            return type(value) is bool
        case "str":
            return type(value) is str
        case "grammar?":
            return value is None or isinstance(value, Grammar | Mapping)


def _check_types(
    where: str, data: Mapping[str, Any], types: Mapping[str, _FieldType], required: Sequence[str]
) -> None:
    """Refuse an unknown or missing field, a field whose JSON type is wrong, and a value past its
    bound (`ScenarioFormatError` naming the field, and the value, type or bound)."""
    unknown = [name for name in data if name not in types]
    if unknown:
        raise ScenarioFormatError(
            f"invalid {where}: unknown field(s) {', '.join(map(repr, unknown))}; known fields: "
            f"{', '.join(types)}"
        )
    missing = [name for name in required if name not in data]
    if missing:
        raise ScenarioFormatError(
            f"invalid {where}: missing field(s) {', '.join(map(repr, missing))}"
        )
    for name, value in data.items():
        expected = types[name]
        if not _has_type(value, expected):
            raise ScenarioFormatError(
                f"invalid {where}: {name!r} must be {_TYPE_NAMES[expected]}, got {value!r} "
                f"({type(value).__name__})"
            )
        _check_bound(where, name, value)
    if where == "admit event" and isinstance(data.get("grammar"), Mapping):
        _check_types("admit event grammar", data["grammar"], _GRAMMAR_FIELD_TYPES, ("kind",))


def _check_bound(where: str, name: str, value: Any) -> None:
    """Refuse a value of a well-typed field past `_FIELD_BOUNDS` (or a list longer than
    `MAX_ROWS`), naming the field and the bound."""
    bound = _FIELD_BOUNDS.get(name)
    if isinstance(value, list | tuple):
        if len(value) > MAX_ROWS:
            raise ScenarioFormatError(
                f"invalid {where}: {name!r} has {len(value)} entries, more than the bound "
                f"{MAX_ROWS}"
            )
        largest = max((v for v in value if type(v) is int), default=None)
        if bound is not None and largest is not None and largest > bound:
            raise ScenarioFormatError(
                f"invalid {where}: {name!r} holds {largest}, above the bound {bound}"
            )
    elif bound is not None and type(value) is int and value > bound:
        raise ScenarioFormatError(f"invalid {where}: {name!r} is {value}, above the bound {bound}")
    elif bound is not None and type(value) is str and len(value) > bound:
        raise ScenarioFormatError(
            f"invalid {where}: {name!r} is {len(value)} characters long, more than the bound "
            f"{bound}"
        )


def _required_fields(cls: type[Any]) -> tuple[str, ...]:
    """The fields of an attrs class that have no default."""
    return tuple(f.name for f in attrs.fields(cls) if f.default is attrs.NOTHING)


def event_from_dict(data: Mapping[str, Any]) -> Event:
    """Parse one event object by its `kind`.

    Raises `ScenarioFormatError` naming the event for a missing or unknown kind, unknown or missing
    fields, or values the event's validators reject.
    """
    if not isinstance(data, Mapping) or "kind" not in data:
        raise ScenarioFormatError(f"event must be an object with a 'kind', got {data!r}")
    fields = dict(data)
    kind = fields.pop("kind")
    cls = EVENT_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ScenarioFormatError(
            f"unknown event kind {kind!r}; known kinds: {', '.join(EVENT_TYPES)}"
        )
    _check_types(f"{kind} event", fields, _EVENT_FIELD_TYPES[kind], _required_fields(cls))
    try:
        return cls(**fields)
    except (TypeError, ValueError) as exc:
        raise ScenarioFormatError(f"invalid {kind} event {dict(data)!r}: {exc}") from None


def config_to_dict(config: Config) -> dict[str, Any]:
    """The JSON object of a config: every field, defaults included, except the version 2 fields
    at their defaults (so such a scenario stays readable as version 1)."""
    data = attrs.asdict(config)
    for name, default in {**_V2_CONFIG_DEFAULTS, **_V3_CONFIG_DEFAULTS}.items():
        if data[name] == default:
            del data[name]
    return data


def config_from_dict(data: Mapping[str, Any]) -> Config:
    """Parse a config object; missing fields take their defaults.

    Raises `ScenarioFormatError` for unknown fields or rejected values (a stride outside
    `MIN_STRIDE`..`MAX_STRIDE`, an unknown convention or global-counter mode).
    """
    _check_types("config", data, _CONFIG_FIELD_TYPES, ())
    try:
        return Config(**data)
    except (TypeError, ValueError) as exc:
        raise ScenarioFormatError(f"invalid config {dict(data)!r}: {exc}") from None


def legacy_scenario_dict(config: Config, events: Iterable[Event]) -> dict[str, Any]:
    """The scenario as kvcheck wrote it before schema version 4: no `family`, and the lowest of
    versions 1-3 that can say it (1 when it uses nothing of versions 2 and 3).

    What identifies a finding (`Counterexample.digest`, and so its file name) is computed on
    this form, so a finding saved before version 4 keeps its name when it is found again; and
    a corpus in this form is read by kvcheck trees from before version 4 (the benchmarks).
    Every SGLang scenario has this form: versions 1-3 are SGLang's documents.
    """
    config_data = config_to_dict(config)
    event_data = [event_to_dict(e) for e in events]
    uses_v2 = any(name in config_data for name in _V2_CONFIG_DEFAULTS) or any(
        "blocks" in e or "caps" in e or "grammar" in e for e in event_data
    )
    version = 3 if any(name in config_data for name in _V3_CONFIG_DEFAULTS) else 2 if uses_v2 else 1
    return {"schema_version": version, "config": config_data, "events": event_data}


class SglangScenarios:
    """SGLang's scenario vocabulary as the generic envelope reads and writes it
    (`kvcheck.core.family.ScenarioCodec`)."""

    event_kinds: Final = EVENT_KINDS
    config_to_dict = staticmethod(config_to_dict)
    config_from_dict = staticmethod(config_from_dict)
    event_to_dict = staticmethod(event_to_dict)
    event_from_dict = staticmethod(event_from_dict)
    legacy_dict = staticmethod(legacy_scenario_dict)
    validate = staticmethod(switch_above_maximum)
    describe_config = staticmethod(describe_config)
    describe_event = staticmethod(describe_event)
