"""Fake SGLang objects the target resolver is called with: `Req`, `ScheduleBatch`, the batch
result and the scheduler (`self`), plus the collaborators newer resolvers call.

They speak every attribute spelling SGLang's resolver has used across releases (semantics.md
§1.1, §1.2): every spelling of one quantity is an alias of one stored value, so a resolver from
any generation reads and writes the same ledger, and the engine observes it in one place.
`SPELLINGS` is the single list of what is modelled; `spellings_table()` renders it for the
README (`kvcheck spellings` prints it), and error messages name its entries.

Reading, writing or calling an attribute that is not modelled raises `UnmodeledAttributeError`:
kvcheck cannot judge such a target, so it is reported as unsupported (exit 2), never as a
violation. `UnmodeledAttributeError` is an `AttributeError`, so `getattr(x, name, default)` and
`hasattr` version sniffing in a target keep working.

`traced()` wraps the fakes in recording proxies for a probe run (`kvcheck.targets.api_shape`): which
spellings a target touches tells which SGLang API generation it was written for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Final

import attrs

if TYPE_CHECKING:
    import torch


@attrs.frozen
class Spelling:
    """One attribute, method or collaborator a resolver may use, as kvcheck models it."""

    path: str  # "req.kv.kv_committed_len"; a call is written "name()"
    meaning: str
    first: str | None  # first SGLang version whose resolver uses it (None: every version)
    last: str | None  # last such version (None: still current)
    kvcheck: str  # what the fake provides or records
    # What `traced()` records for it, when that is not the path without its parentheses.
    record: str | None = None

    @property
    def key(self) -> str:
        """The path without the call parentheses, as `traced()` records it."""
        return self.record or self.path.split("(", 1)[0]

    @property
    def owner(self) -> str:
        return self.key.rsplit(".", 1)[0]

    @property
    def name(self) -> str:
        return self.key.rsplit(".", 1)[1]

    @property
    def versions(self) -> str:
        return version_range(self.first, self.last)


def version_range(first: str | None, last: str | None) -> str:
    if first is None and last is None:
        return "all"
    if last is None:
        return f"{first}+"
    if first is None:
        return f"up to {last}"
    return first if first == last else f"{first}-{last}"


# Quantities kvcheck judges, and every name SGLang has given them (semantics.md §1.1, §1.2).
REQ_COMMITTED_NAMES: Final = ("kv_committed_len",)  # on req (<= 0.5.18) and req.kv (>= 0.5.19)
REQ_DRAFT_COUNTER_NAMES: Final = (
    "spec_accepted_tokens",  # <= 0.5.10
    "spec_accepted_drafts",  # 0.5.11
    "spec_num_correct_drafts",  # >= 0.5.12
)
REQ_HISTOGRAM_METHODS: Final = (
    "update_spec_acceptance_histogram",  # 0.5.9 - 0.5.11
    "update_spec_correct_drafts_histogram",  # >= 0.5.12
)
RESULT_DRAFT_TOTAL_NAMES: Final = (
    "num_accepted_tokens",  # <= 0.5.10
    "num_accepted_drafts",  # 0.5.11
    "num_correct_drafts",  # >= 0.5.12
)
RESULT_DRAFT_PER_REQ_NAMES: Final = (
    "accept_length_per_req_cpu",  # 0.5.8 - 0.5.10
    "num_accepted_drafts_per_req_cpu",  # 0.5.11
    "num_correct_drafts_per_req_cpu",  # >= 0.5.12
)
RESULT_BLOCK_CAP_TOTAL_NAMES: Final = ("num_block_accept_tokens", "num_cap_tokens")  # >= 0.5.16
CONTROLLER_CALL: Final = "self.model_worker.on_verify_complete_cpu"
CONTROLLER_CALL_WITH_BATCH_SIZE: Final = CONTROLLER_CALL + "(batch_size=)"

_DRAFTS = "accepted drafts per request (one stored value)"
_HISTOGRAM = "acceptance histogram, bucket = accepted drafts"
_TOTAL = "batch total of accepted drafts (one stored value)"
_PER_ROW = "accepted drafts per row, stale rows included (one stored value)"

SPELLINGS: Final[tuple[Spelling, ...]] = (
    # --- the request -------------------------------------------------------------------------
    Spelling("req.rid", "request id", None, None, "r0, r1, ..."),
    Spelling("req.origin_input_ids", "prompt tokens (P)", None, None, "list of P ints"),
    Spelling("req.output_ids", "output tokens (L)", None, None, "list; the engine appends runs"),
    Spelling("req.sampling_params.max_new_tokens", "length cap", None, None, "from the scenario"),
    Spelling("req.kv_committed_len", "committed KV length C", None, "0.5.18", "judged"),
    Spelling("req.kv.kv_committed_len", "committed KV length C", "0.5.19", None, "same value"),
    Spelling("req.kv_allocated_len", "allocated KV length", None, "0.5.15", "set at prefill"),
    Spelling("req.kv.kv_allocated_len", "allocated KV length", "0.5.16", None, "same value"),
    Spelling("req.is_retracted", "retracted, read at delivery", None, None, "live flag"),
    Spelling("req.retraction_count", "retractions so far", None, None, "live counter"),
    Spelling("req.finished()", "finished, read at delivery", None, None, "live flag"),
    Spelling("req.finished_reason", "finish reason", None, None, "None until finished"),
    Spelling("req.finished_len", "output length at the stop", None, None, "None until finished"),
    Spelling("req.to_finish", "pending abort", None, None, "set by an Abort event"),
    Spelling("req.grammar", "grammar FSM", "0.5.14", None, "None: no grammar requests"),
    Spelling("req.spec_verify_ct", "verify count", None, None, "judged"),
    Spelling("req.spec_accepted_tokens", _DRAFTS, None, "0.5.10", "judged"),
    Spelling("req.spec_accepted_drafts", _DRAFTS, "0.5.11", "0.5.11", "judged"),
    Spelling("req.spec_num_correct_drafts", _DRAFTS, "0.5.12", None, "judged"),
    Spelling(
        "req.update_spec_acceptance_histogram(d)",
        _HISTOGRAM,
        "0.5.9",
        "0.5.11",
        "judged once the target updates a histogram or its spellings are 0.5.9+",
    ),
    Spelling(
        "req.update_spec_correct_drafts_histogram(d)",
        _HISTOGRAM,
        "0.5.12",
        None,
        "same histogram",
    ),
    Spelling("req.spec_num_block_accept_tokens", "block-accept tokens", "0.5.16", None, "0"),
    Spelling("req.spec_num_cap_tokens", "cap tokens", "0.5.16", None, "0"),
    Spelling(
        "req.update_spec_cap_lens_histogram(n)", "cap-length histogram", "0.5.16", None, "recorded"
    ),
    # --- the batch snapshot ------------------------------------------------------------------
    Spelling("batch.reqs", "rows, in launch order", None, None, "fresh list per launch"),
    Spelling("batch.batch_size()", "row count, stale rows included", None, None, "len(reqs)"),
    Spelling("batch.enable_overlap", "overlap scheduling", None, None, "from the scenario"),
    Spelling("batch.has_grammar", "any grammar request", None, None, "False"),
    Spelling(
        "batch.spec_algorithm",
        "speculative algorithm",
        None,
        None,
        "EAGLE: is_eagle() True; is_none(), is_eagle3(), is_dflash(), is_uno(), is_ngram() False",
    ),
    # --- the result --------------------------------------------------------------------------
    Spelling("result.next_token_ids", "padded verify output", None, None, "CPU int64 [rows*S]"),
    Spelling("result.accept_lens", "accept length a per row", None, None, "CPU int32 [rows]"),
    Spelling(
        "result.speculative_num_draft_tokens",
        "row width S recorded at launch",
        "0.5.12",
        None,
        "the launch stride",
    ),
    Spelling(
        "result.speculative_output_stride",
        "row width when it differs from S (UNO)",
        "0.5.20",
        None,
        "None (EAGLE): read S from speculative_num_draft_tokens",
    ),
    Spelling(
        "result.num_non_draft_tokens_per_req", "k (non-draft tokens per row)", "0.5.20", None, "1"
    ),
    Spelling("result.block_accept_lens", "block-accept lengths", "0.5.16", None, "None"),
    Spelling("result.cap_lens", "cap lengths", "0.5.16", None, "None"),
    Spelling("result.grammar_advanced", "grammar already advanced", "0.5.18", None, "False"),
    Spelling(
        "result.grammar_retained_tokens",
        "tokens each row kept after grammar",
        "0.5.18",
        None,
        "None until set",
    ),
    Spelling(
        "result.num_accepted_tokens", _TOTAL, None, "0.5.10", "judged if the target writes it"
    ),
    Spelling("result.num_accepted_drafts", _TOTAL, "0.5.11", "0.5.11", "judged if written"),
    Spelling("result.num_correct_drafts", _TOTAL, "0.5.12", None, "judged if written"),
    Spelling("result.accept_length_per_req_cpu", _PER_ROW, "0.5.8", "0.5.10", "judged if written"),
    Spelling(
        "result.num_accepted_drafts_per_req_cpu", _PER_ROW, "0.5.11", "0.5.11", "judged if written"
    ),
    Spelling(
        "result.num_correct_drafts_per_req_cpu", _PER_ROW, "0.5.12", None, "judged if written"
    ),
    Spelling(
        "result.num_block_accept_tokens", "batch block-accept total", "0.5.16", None, "must be 0"
    ),
    Spelling("result.num_cap_tokens", "batch cap total", "0.5.16", None, "must be 0"),
    # --- the scheduler (self) and its collaborators ------------------------------------------
    Spelling("self.enable_overlap", "overlap scheduling", None, None, "from the scenario"),
    Spelling(
        "self.draft_worker.speculative_num_draft_tokens",
        "the worker's current S",
        None,
        "0.5.11",
        "changed by SwitchStride",
    ),
    Spelling(
        "self.model_worker.on_verify_complete_cpu(per_req)",
        "adaptive controller feed",
        "0.5.12",
        None,
        "recorded; judged if called (ideal: live rows only)",
    ),
    Spelling(
        "self.model_worker.on_verify_complete_cpu(per_req, batch_size=n)",
        "adaptive controller feed",
        "0.5.13",
        None,
        "batch_size must equal len(per_req)",
        record=CONTROLLER_CALL_WITH_BATCH_SIZE,
    ),
    Spelling(
        "self.metrics_reporter.snapshot_spec_decode_metrics()",
        "metrics snapshot (read-only)",
        "0.5.23",
        None,
        "recorded; returns an empty snapshot",
    ),
    Spelling(
        "self.advance_grammar_fsm(result, batch, runs)",
        "advance grammars once per result",
        "0.5.18",
        None,
        "sets grammar_advanced; every token retained",
    ),
    Spelling(
        "self.<method>()",
        "other methods of the resolver's class",
        None,
        None,
        "read from the same source file and bound to the fake",
    ),
)

SPELLINGS_BY_KEY: Final[dict[str, Spelling]] = {s.key: s for s in SPELLINGS}


def _modelled_names(owner: str) -> tuple[str, ...]:
    prefix = owner + "."
    names = {
        s.key[len(prefix) :].split(".", 1)[0].split("(", 1)[0]
        for s in SPELLINGS
        if s.key.startswith(prefix)
    }
    names.discard("<method>")
    return tuple(sorted(names))


def spellings_table() -> str:
    """The supported spellings as a Markdown table (README "Check your SGLang checkout")."""
    lines = [
        "| spelling | meaning | SGLang resolvers using it | kvcheck |",
        "|---|---|---|---|",
    ]
    for s in SPELLINGS:
        lines.append(f"| `{s.path}` | {s.meaning} | {s.versions} | {s.kvcheck} |")
    return "\n".join(lines)


class UnmodeledAttributeError(AttributeError):
    """The target touched an attribute of a fake that kvcheck does not model."""

    def __init__(self, owner: str, name: str, action: str = "reads", detail: str = "") -> None:
        self.owner = owner
        self.attribute = name
        self.supported = _modelled_names(owner)
        listed = ", ".join(self.supported) or "nothing"
        super().__init__(
            f"target {action} `{owner}.{name}`{detail}, which kvcheck does not model; "
            f"supported on {owner}: {listed} (see `kvcheck spellings`)"
        )


class _Strict:
    """Base for fakes: reads and writes of unmodelled attributes raise `UnmodeledAttributeError`.

    `_fields` lists the plain attributes a fake holds; properties (aliases) and methods of the
    class are modelled too. Private names (leading underscore) are the engine's own.
    """

    _owner: ClassVar[str] = "object"
    _fields: ClassVar[frozenset[str]] = frozenset()

    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup failed.
        if name.startswith("__"):
            raise AttributeError(name)
        raise UnmodeledAttributeError(self._owner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if (
            name.startswith("_")
            or name in self._fields
            or isinstance(getattr(type(self), name, None), property)
        ):
            object.__setattr__(self, name, value)
            return
        raise UnmodeledAttributeError(self._owner, name, "writes")


def _alias(field: str) -> property:
    def get(self: Any) -> Any:
        return getattr(self, field)

    def set_(self: Any, value: Any) -> None:
        setattr(self, field, value)

    return property(get, set_)


class FakeKvInfo(_Strict):
    """`req.kv` (0.5.16+): the committed and allocated lengths live on the request object."""

    _owner = "req.kv"

    def __init__(self, req: FakeReq) -> None:
        self._req = req

    kv_committed_len = property(
        lambda self: self._req.kv_committed_len,
        lambda self, value: setattr(self._req, "kv_committed_len", value),
    )
    kv_allocated_len = property(
        lambda self: self._req.kv_allocated_len,
        lambda self, value: setattr(self._req, "kv_allocated_len", value),
    )


class FakeSamplingParams(_Strict):
    _owner = "req.sampling_params"
    _fields = frozenset({"max_new_tokens"})

    def __init__(self, max_new_tokens: int) -> None:
        self.max_new_tokens = max_new_tokens


class FakeReq(_Strict):
    """A request as the resolver sees it. Staleness flags are live: read at delivery time."""

    _owner = "req"
    _fields = frozenset(
        {
            "rid",
            "origin_input_ids",
            "output_ids",
            "sampling_params",
            "kv_committed_len",
            "kv_allocated_len",
            "is_retracted",
            "retraction_count",
            "finished_reason",
            "finished_len",
            "to_finish",
            "grammar",
            "spec_verify_ct",
            "spec_num_block_accept_tokens",
            "spec_num_cap_tokens",
            "kv",
        }
    )

    def __init__(self, rid: str, prompt_len: int, max_new_tokens: int) -> None:
        self.rid = rid
        self.origin_input_ids = list(range(1, prompt_len + 1))
        self.output_ids: list[int] = []
        self.sampling_params = FakeSamplingParams(max_new_tokens)
        self.kv_committed_len = 0
        self.kv_allocated_len = 0
        self.is_retracted = False
        self.retraction_count = 0
        self.finished_reason: str | None = None
        self.finished_len: int | None = None
        self.to_finish: str | None = None
        self.grammar = None
        self.spec_verify_ct = 0
        self.spec_num_block_accept_tokens = 0
        self.spec_num_cap_tokens = 0
        self._spec_drafts = 0
        self._histogram: dict[int, int] = {}
        self._cap_histogram: dict[int, int] = {}
        self.kv = FakeKvInfo(self)

    def finished(self) -> bool:
        return self.finished_reason is not None

    def _record_histogram(self, drafts: int) -> None:
        # A dict, not SGLang's growing list: a negative or non-int bucket stays visible.
        key = int(drafts)
        self._histogram[key] = self._histogram.get(key, 0) + 1

    def update_spec_cap_lens_histogram(self, cap_len: int) -> None:
        key = int(cap_len)
        self._cap_histogram[key] = self._cap_histogram.get(key, 0) + 1

    def histogram(self) -> tuple[tuple[int, int], ...]:
        """The acceptance histogram as sorted (accepted drafts, count) pairs (engine helper)."""
        return tuple(sorted(self._histogram.items()))


for _name in REQ_DRAFT_COUNTER_NAMES:
    setattr(FakeReq, _name, _alias("_spec_drafts"))
for _name in REQ_HISTOGRAM_METHODS:
    setattr(FakeReq, _name, FakeReq._record_histogram)


class FakeSpecAlgorithm(_Strict):
    """`batch.spec_algorithm`: kvcheck models the EAGLE family (one bonus token per row)."""

    _owner = "batch.spec_algorithm"

    def is_none(self) -> bool:
        return False

    def is_eagle(self) -> bool:
        return True

    def is_eagle3(self) -> bool:
        return False

    def is_dflash(self) -> bool:
        return False

    def is_uno(self) -> bool:
        return False

    def is_ngram(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "EAGLE"

    def __deepcopy__(self, memo: dict[int, Any]) -> FakeSpecAlgorithm:
        return self  # stateless


EAGLE: Final = FakeSpecAlgorithm()


class FakeBatch(_Strict):
    """The launch-time snapshot of a decode batch (SGLang's `batch.copy()`): a fresh list of the
    shared request objects, so row order is fixed at launch and flags are read at delivery."""

    _owner = "batch"
    _fields = frozenset({"reqs", "spec_algorithm", "has_grammar", "enable_overlap"})

    def __init__(self, reqs: list[FakeReq]) -> None:
        self.reqs = reqs
        self.spec_algorithm = EAGLE
        self.has_grammar = False
        self.enable_overlap = True

    def batch_size(self) -> int:
        return len(self.reqs)


class FakeResult(_Strict):
    """The decode result: padded `next_token_ids` (int64) and `accept_lens` (int32) on the CPU,
    the stride recorded at launch, the optional inputs newer versions read (all absent), and
    the counters the resolver writes (None until written)."""

    _owner = "result"
    _fields = frozenset(
        {
            "next_token_ids",
            "accept_lens",
            "speculative_num_draft_tokens",
            "speculative_output_stride",
            "num_non_draft_tokens_per_req",
            "block_accept_lens",
            "cap_lens",
            "grammar_advanced",
            "grammar_retained_tokens",
            "num_block_accept_tokens",
            "num_cap_tokens",
        }
    )

    def __init__(
        self, next_token_ids: torch.Tensor, accept_lens: torch.Tensor, launch_stride: int
    ) -> None:
        self.next_token_ids = next_token_ids
        self.accept_lens = accept_lens
        # EAGLE: the row width is the draft-token count recorded at launch; an UNO-style result
        # would set `speculative_output_stride` (one more non-draft token per row).
        self.speculative_num_draft_tokens = launch_stride
        self.speculative_output_stride: int | None = None
        self.num_non_draft_tokens_per_req = 1
        self.block_accept_lens = None
        self.cap_lens = None
        self.grammar_advanced = False
        self.grammar_retained_tokens: list[int] | None = None
        self.num_block_accept_tokens: Any = None
        self.num_cap_tokens: Any = None
        self._draft_total: Any = None
        self._draft_per_req: Any = None


for _name in RESULT_DRAFT_TOTAL_NAMES:
    setattr(FakeResult, _name, _alias("_draft_total"))
for _name in RESULT_DRAFT_PER_REQ_NAMES:
    setattr(FakeResult, _name, _alias("_draft_per_req"))


class FakeDraftWorker(_Strict):
    """`self.draft_worker`: its stride is the scheduler's *current* one, which an adaptive
    switch may have changed since the batch being delivered was launched."""

    _owner = "self.draft_worker"
    _fields = frozenset({"speculative_num_draft_tokens"})

    def __init__(self, stride: int) -> None:
        self.speculative_num_draft_tokens = stride


def _as_ints(values: Any) -> tuple[int, ...] | str:
    """A per-row list as ints, or its repr when it is not one (kept visible, never raised)."""
    try:
        items = values.tolist() if hasattr(values, "tolist") else values
        return tuple(int(x) for x in items)
    except (TypeError, ValueError):
        return repr(values)


@attrs.frozen
class ControllerFeed:
    """One call of the adaptive controller: the per-row list and the `batch_size=` given."""

    per_req: tuple[int, ...] | str
    batch_size: Any = None


class FakeModelWorker(_Strict):
    """`self.model_worker`: records what the resolver feeds the adaptive controller."""

    _owner = "self.model_worker"
    _fields = frozenset({"verify_feeds"})

    def __init__(self) -> None:
        self.verify_feeds: list[ControllerFeed] = []

    def on_verify_complete_cpu(self, *args: Any, **kwargs: Any) -> None:
        unknown = set(kwargs) - {"batch_size", "per_req"}
        if len(args) + ("per_req" in kwargs) != 1 or unknown or len(args) > 1:
            raise UnmodeledAttributeError(
                self._owner,
                "on_verify_complete_cpu",
                "calls",
                f" with {len(args)} positional and keywords {sorted(kwargs)}"
                " (modelled: (per_req, batch_size=n))",
            )
        per_req = args[0] if args else kwargs["per_req"]
        self.verify_feeds.append(ControllerFeed(_as_ints(per_req), kwargs.get("batch_size")))


class FakeMetricsSnapshot(_Strict):
    """What `snapshot_spec_decode_metrics()` returns: nothing kvcheck models may be read."""

    _owner = "snapshot"


class FakeMetricsReporter(_Strict):
    """`self.metrics_reporter` (0.5.23 resolvers take a read-only snapshot first)."""

    _owner = "self.metrics_reporter"
    _fields = frozenset({"snapshots"})

    def __init__(self) -> None:
        self.snapshots = 0

    def snapshot_spec_decode_metrics(self) -> FakeMetricsSnapshot:
        self.snapshots += 1
        return FakeMetricsSnapshot()


class FakeScheduler(_Strict):
    """The resolver's `self`. Extra methods of a source-loaded class are bound onto it."""

    _owner = "self"
    _fields = frozenset({"draft_worker", "model_worker", "metrics_reporter", "enable_overlap"})

    def __init__(self, stride: int, overlap: bool) -> None:
        self.draft_worker = FakeDraftWorker(stride)
        self.model_worker = FakeModelWorker()
        self.metrics_reporter = FakeMetricsReporter()
        self.enable_overlap = overlap

    def bind_methods(self, methods: dict[str, Callable[..., Any]]) -> None:
        for name, function in methods.items():
            object.__setattr__(self, name, function.__get__(self, type(self)))

    def advance_grammar_fsm(self, *args: Any, **kwargs: Any) -> list[int]:
        """Advance every grammar once for a result: no request has a grammar, so every token
        of every row is retained. Memoised on the result as 0.5.18+ does."""
        result = next((a for a in (*args, *kwargs.values()) if isinstance(a, FakeResult)), None)
        if result is None:
            raise UnmodeledAttributeError(
                self._owner, "advance_grammar_fsm", "calls", " without the result"
            )
        if not result.grammar_advanced:
            result.grammar_retained_tokens = [int(a) for a in result.accept_lens.tolist()]
            result.grammar_advanced = True
        retained = result.grammar_retained_tokens
        return list(retained) if retained is not None else []


# --------------------------------------------------------------------------------------------
# Recording proxies for probe runs.


@attrs.define
class AccessLog:
    """What a target touched on the fakes, by spelling key (`req.kv.kv_committed_len`)."""

    reads: set[str] = attrs.field(factory=set)
    writes: set[str] = attrs.field(factory=set)
    calls: set[str] = attrs.field(factory=set)
    # One proxy per fake, so identity comparisons inside the target keep working.
    _proxies: dict[int, Any] = attrs.field(factory=dict)

    @property
    def touched(self) -> set[str]:
        return self.reads | self.writes | self.calls

    def wrap(self, value: Any) -> Any:
        if isinstance(value, _Strict):
            proxy = self._proxies.get(id(value))
            if proxy is None:
                proxy = self._proxies[id(value)] = _Traced(value, self)
            return proxy
        if isinstance(value, list) and value and all(isinstance(v, _Strict) for v in value):
            return [self.wrap(v) for v in value]
        return value


class _Traced:
    """Forwards to one fake and records each read, write and call in an `AccessLog`."""

    __slots__ = ("_kvcheck_log", "_kvcheck_obj")

    def __init__(self, obj: _Strict, log: AccessLog) -> None:
        object.__setattr__(self, "_kvcheck_obj", obj)
        object.__setattr__(self, "_kvcheck_log", log)

    def __getattr__(self, name: str) -> Any:
        obj: _Strict = object.__getattribute__(self, "_kvcheck_obj")
        log: AccessLog = object.__getattribute__(self, "_kvcheck_log")
        value = getattr(obj, name)
        key = f"{obj._owner}.{name}"
        if callable(value) and hasattr(value, "__self__") and value.__self__ is obj:
            function = value.__func__
            if name in obj.__dict__:  # a source-loaded method: run it on the proxy
                return _record_call(log, key, function.__get__(self, type(obj)), unwrap=False)
            return _record_call(log, key, value, unwrap=True)
        log.reads.add(key)
        return log.wrap(value)

    def __setattr__(self, name: str, value: Any) -> None:
        obj: _Strict = object.__getattribute__(self, "_kvcheck_obj")
        log: AccessLog = object.__getattribute__(self, "_kvcheck_log")
        setattr(obj, name, value)
        log.writes.add(f"{obj._owner}.{name}")

    def __repr__(self) -> str:
        return repr(object.__getattribute__(self, "_kvcheck_obj"))


def _unwrap(value: Any) -> Any:
    if isinstance(value, _Traced):
        return object.__getattribute__(value, "_kvcheck_obj")
    if isinstance(value, list) and any(isinstance(v, _Traced) for v in value):
        return [_unwrap(v) for v in value]
    return value


def _record_call(
    log: AccessLog, key: str, function: Callable[..., Any], *, unwrap: bool
) -> Callable[..., Any]:
    """`function`, recording each call; a fake's own method gets the fakes, not the proxies."""

    def call(*args: Any, **kwargs: Any) -> Any:
        log.calls.add(key)
        if kwargs:
            log.calls.add(f"{key}({', '.join(f'{k}=' for k in sorted(kwargs))})")
        if unwrap:
            args = tuple(_unwrap(a) for a in args)
            kwargs = {k: _unwrap(v) for k, v in kwargs.items()}
        return log.wrap(function(*args, **kwargs))

    return call


def traced(log: AccessLog, *objects: Any) -> list[Any]:
    """Recording proxies for `objects` (the resolver's self, result and batch)."""
    return [log.wrap(obj) for obj in objects]
