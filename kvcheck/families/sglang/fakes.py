"""Fake SGLang objects the target resolver is called with: `Req`, `ScheduleBatch`, the batch
result and the scheduler (`self`), plus the collaborators newer resolvers call.

They speak every spelling in the catalogue (`kvcheck.families.sglang.spellings`): every spelling of
one
quantity is an alias of one stored value, so a resolver from any generation reads and writes the
same ledger, and the engine observes it in one place.

Reading, writing or calling an attribute that is not modelled raises `UnmodeledAttributeError`:
kvcheck cannot judge such a target, so it is reported as unsupported (exit 2), never as a
violation. `UnmodeledAttributeError` is an `AttributeError`, so `getattr(x, name, default)` and
`hasattr` version sniffing in a target keep working; every such access is recorded all the same
(`UNMODELLED_ACCESSES`), and a run in which the target caught one gives no violation (exit 2).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Final

import attrs

from kvcheck.errors import KvcheckUsageError
from kvcheck.families.sglang.spellings import (
    REQ_DRAFT_COUNTER_NAMES,
    REQ_HISTOGRAM_METHODS,
    RESULT_DRAFT_PER_REQ_NAMES,
    RESULT_DRAFT_TOTAL_NAMES,
    modelled_names,
)

if TYPE_CHECKING:
    import torch


# Every unmodelled access, in order, as "reads `self.server_args`": recorded when the error is
# made, so an access the target catches (`try: ... except Exception:`, `getattr(x, name, None)`)
# is still known. The engine empties it before each call of the target and takes it after.
UNMODELLED_ACCESSES: Final[list[str]] = []


class UnmodeledAttributeError(AttributeError):
    """The target touched an attribute of a fake that kvcheck does not model."""

    def __init__(
        self,
        owner: str,
        name: str,
        action: str = "reads",
        detail: str = "",
        supported: tuple[str, ...] | None = None,
    ) -> None:
        self.owner = owner
        self.attribute = name
        # The spellings catalogue lists what is modelled, except on a finish reason, whose
        # members are listed by its class (`FinishReason`).
        self.supported = modelled_names(owner) if supported is None else supported
        listed = ", ".join(self.supported) or "nothing"
        UNMODELLED_ACCESSES.append(f"{action} `{owner}.{name}`{detail}")
        super().__init__(
            f"target {action} `{owner}.{name}`{detail}, which kvcheck does not model; "
            f"supported on {owner}: {listed} (see `kvcheck spellings`)"
        )


class AllocationNotModelledError(KvcheckUsageError):
    """The target touched `kv_allocated_len` in a scenario without an allocation rule, where
    no decode launch sizes it: refused (exit 2) rather than shown stale.

    Not an `AttributeError` (as `FakeCallError`): raised from a property, one would send Python
    on to `__getattr__`, whose generic "not modelled" would hide why; and the attribute exists
    in every release, so `hasattr` has no true False to give."""

    def __init__(self, owner: str, action: str) -> None:
        self.owner = owner
        self.attribute = "kv_allocated_len"
        UNMODELLED_ACCESSES.append(
            f"{action} `{owner}.kv_allocated_len` without an allocation rule"
        )
        super().__init__(
            f"target {action} `{owner}.kv_allocated_len` in a scenario without an allocation "
            "rule, where kvcheck does not model the allocation (no decode launch sizes it); "
            "judge it under an allocation rule of its SGLang generation (searches take them "
            "from its API shape; a scenario or exhaust bounds name one)"
        )


class GrammarRefusal(ValueError):
    """A grammar matcher refusing a token, as SGLang's grammar backends do (a `ValueError`).

    Raised by a fake on purpose, modelling the real object: when it escapes the target it is the
    target's doing (`target-raised`), never a fault in kvcheck's own code."""


class FakeCallError(KvcheckUsageError):
    """A call into one of kvcheck's fakes that its model of SGLang's method does not accept.

    The fake's signature is kvcheck's reading of SGLang's, so a mismatch is kvcheck's fault or a
    limit of its model, never a violation by the target (exit 2).
    """

    def __init__(self, owner: str, name: str, function: Callable[..., Any], why: str) -> None:
        self.owner = owner
        self.attribute = name
        parameters = list(inspect.signature(function).parameters.values())[1:]  # not self
        shown = "(" + ", ".join(str(p.replace(annotation=p.empty)) for p in parameters) + ")"
        UNMODELLED_ACCESSES.append(f"calls `{owner}.{name}` in a way kvcheck's model refuses")
        super().__init__(
            f"kvcheck's model of `{owner}.{name}{shown}` does not accept the target's call "
            f"({why}); this is a limit of kvcheck's fakes, not a verdict on the target"
        )


def sglang_method(function: Callable[..., Any], name: str | None = None) -> Callable[..., Any]:
    """Wrap a fake's method so that a call its signature does not accept is a `FakeCallError`.

    Free on the happy path: a `TypeError` whose traceback ends in this wrapper was raised while
    binding the arguments (the method itself never ran); one raised inside the method is left
    alone.
    """
    if getattr(function, "_kvcheck_checked", False):
        return function
    called = name or function.__name__

    @functools.wraps(function)
    def call(self: StrictFake, *args: Any, **kwargs: Any) -> Any:
        try:
            return function(self, *args, **kwargs)
        except TypeError as exc:
            if exc.__traceback__ is not None and exc.__traceback__.tb_next is None:
                raise FakeCallError(self._owner, called, function, str(exc)) from None
            raise

    call._kvcheck_checked = True  # type: ignore[attr-defined]
    return call


class StrictFake:
    """Base for fakes: reads and writes of unmodelled attributes raise `UnmodeledAttributeError`.

    `_fields` lists the plain attributes a fake holds; properties (aliases) and methods of the
    class are modelled too. Private names (leading underscore) are the engine's own. Public
    methods are wrapped by `sglang_method`, so a call they do not accept is a `FakeCallError`.
    """

    _owner: ClassVar[str] = "object"
    _fields: ClassVar[frozenset[str]] = frozenset()
    # The names `__setattr__` found writable on this very class, so it tests each name once (a
    # class's fields and properties are never taken away).
    _writable: ClassVar[set[str]] = set()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._writable = set()
        for name, value in list(vars(cls).items()):
            if not name.startswith("_") and inspect.isfunction(value):
                setattr(cls, name, sglang_method(value))

    def _set_fields(self, **values: Any) -> None:
        """Set the fake's own attributes at construction, in one step (a checked write each
        costs more than the rest of a result's making): kvcheck's code, so every name is one of
        its `_fields` or private (tests/unit/core/test_fakes.py checks each fake)."""
        self.__dict__.update(values)

    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup failed.
        if name.startswith("__"):
            raise AttributeError(name)
        raise UnmodeledAttributeError(self._owner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._writable:
            object.__setattr__(self, name, value)
            return
        cls = type(self)
        if (
            name.startswith("_")
            or name in self._fields
            or isinstance(getattr(cls, name, None), property)
        ):
            object.__setattr__(self, name, value)
            if "_writable" in vars(cls):
                cls._writable.add(name)
            return
        raise UnmodeledAttributeError(self._owner, name, "writes")


def _alias(field: str) -> property:
    def get(self: Any) -> Any:
        return getattr(self, field)

    def set_(self: Any, value: Any) -> None:
        setattr(self, field, value)

    return property(get, set_)


class FinishReason:
    """kvcheck's stand-in for SGLang's `BaseFinishReason` (`managers/schedule_batch.py`): the
    object `req.finished_reason` and `req.to_finish` hold, one subclass per kind of finish.

    A plain object, as SGLang's are (no equality but identity, attributes writable), built with
    the constructor arguments the release's class takes and answering `to_json()` as it does
    (docs/fakes.md has the table and the evidence). It is not a `StrictFake`: the probe's
    recording proxies would break a target's `isinstance(reason, FINISH_ABORT)`. Reading a name
    the class does not have raises `UnmodeledAttributeError`: `is_error`, for one, exists only in
    0.5.6-0.5.12.post1, and kvcheck does not know which release the target was written for.
    """

    # The class's SGLang name, for repr and for messages.
    sglang_name: ClassVar[str] = "BaseFinishReason"
    # Its data attributes, in constructor order; with `to_json` what a target may read.
    members: ClassVar[tuple[str, ...]] = ()

    def to_json(self) -> dict[str, Any]:
        """The finish reason as SGLang reports it to clients; the base class has none."""
        raise NotImplementedError

    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup failed.
        if name.startswith("__"):
            raise AttributeError(name)
        raise UnmodeledAttributeError(
            "req.finished_reason", name, supported=(*self.members, "to_json")
        )

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={vars(self).get(name)!r}" for name in self.members)
        return f"{self.sglang_name}({shown})"


class FinishMatchedToken(FinishReason):
    """`FINISH_MATCHED_TOKEN(matched)`: a stop token (EOS) was emitted, or a grammar terminated
    (`matched` is then the last output token). Reported as an OpenAI `stop`."""

    sglang_name = "FINISH_MATCHED_TOKEN"
    members = ("matched",)

    def __init__(self, matched: int | list[int]) -> None:
        self.matched = matched

    def to_json(self) -> dict[str, Any]:
        """`{"type": "stop", "matched": matched}`."""
        return {"type": "stop", "matched": self.matched}


class FinishMatchedStr(FinishReason):
    """`FINISH_MATCHED_STR(matched)`: a stop string matched (never set by kvcheck, which models
    no stop strings; here for a target that imports or tests for it)."""

    sglang_name = "FINISH_MATCHED_STR"
    members = ("matched",)

    def __init__(self, matched: str) -> None:
        self.matched = matched

    def to_json(self) -> dict[str, Any]:
        """`{"type": "stop", "matched": matched}`."""
        return {"type": "stop", "matched": self.matched}


class FinishedMatchedRegex(FinishReason):
    """`FINISHED_MATCHED_REGEX(matched)` (SGLang's spelling): a stop regex matched (never set by
    kvcheck, as `FinishMatchedStr`)."""

    sglang_name = "FINISHED_MATCHED_REGEX"
    members = ("matched",)

    def __init__(self, matched: str) -> None:
        self.matched = matched

    def to_json(self) -> dict[str, Any]:
        """`{"type": "stop", "matched": matched}`."""
        return {"type": "stop", "matched": self.matched}


class FinishLength(FinishReason):
    """`FINISH_LENGTH(length)`: the request reached `max_new_tokens` (`length`)."""

    sglang_name = "FINISH_LENGTH"
    members = ("length",)

    def __init__(self, length: int) -> None:
        self.length = length

    def to_json(self) -> dict[str, Any]:
        """`{"type": "length", "length": length}`."""
        return {"type": "length", "length": self.length}


class FinishAbort(FinishReason):
    """`FINISH_ABORT(message=None, status_code=None, err_type=None)`: an aborted request. As in
    SGLang, a missing message is stored as "Aborted" at construction."""

    sglang_name = "FINISH_ABORT"
    members = ("message", "status_code", "err_type")

    def __init__(
        self, message: str | None = None, status_code: Any = None, err_type: str | None = None
    ) -> None:
        self.message = message or "Aborted"
        self.status_code = status_code
        self.err_type = err_type

    def to_json(self) -> dict[str, Any]:
        """`{"type": "abort", "message": ..., "status_code": ..., "err_type": ...}`."""
        return {
            "type": "abort",
            "message": self.message,
            "status_code": self.status_code,
            "err_type": self.err_type,
        }


class FakeKvInfo(StrictFake):
    """`req.kv` (0.5.16+): the committed and allocated lengths live on the request object."""

    _owner = "req.kv"

    def __init__(self, req: FakeReq) -> None:
        self._req = req

    kv_committed_len = property(
        lambda self: self._req.kv_committed_len,
        lambda self, value: setattr(self._req, "kv_committed_len", value),
    )
    kv_allocated_len = property(
        lambda self: self._req._allocated_len("req.kv", "reads"),
        lambda self, value: self._req._set_allocated_len(value, "req.kv"),
    )


class FakeSamplingParams(StrictFake):
    """`req.sampling_params`: only `max_new_tokens`, the length cap from the scenario's `Admit`."""

    _owner = "req.sampling_params"
    _fields = frozenset({"max_new_tokens"})

    def __init__(self, max_new_tokens: int) -> None:
        self.max_new_tokens = max_new_tokens


class FakeGrammar(StrictFake):
    """`req.grammar`: the request's grammar matcher, as SGLang's resolvers and result processor
    call it (`accept_token(token_id)`, `is_terminated()`, the `finished` flag the scheduler syncs).

    It decides by output position: the n-th token offered is output position n (a rejected
    token still uses up its position). `accept` takes everything; `terminate` is satisfied by
    the token at position `at`; `reject` raises `ValueError` for the token at `at`. Offering a
    token after termination raises `ValueError` too (a terminated matcher takes nothing). Every
    offered token is logged, for the engine to observe.
    """

    _owner = "req.grammar"
    _fields = frozenset({"finished"})

    def __init__(self, kind: str, at: int | None) -> None:
        self._kind = kind
        self._at = at
        self._offered: list[int] = []
        self._terminated = False
        self.finished = False

    def accept_token(self, token_id: int) -> None:
        """Advance the matcher by one token; `ValueError` when the grammar refuses it."""
        self._offered.append(int(token_id))
        position = len(self._offered)
        if self._terminated:
            raise GrammarRefusal(f"grammar already terminated; token {token_id} refused")
        if self._kind == "reject" and position == self._at:
            raise GrammarRefusal(f"token {token_id} refused at output position {position}")
        if self._kind == "terminate" and position == self._at:
            self._terminated = True

    def is_terminated(self) -> bool:
        """Whether the grammar has been satisfied (no further token is accepted)."""
        return self._terminated


class FakeReq(StrictFake):
    """A request as the resolver sees it. Staleness flags are live: read at delivery time."""

    _owner = "req"
    _fields = frozenset(
        {
            "rid",
            "origin_input_ids",
            "output_ids",
            "sampling_params",
            "kv_committed_len",
            "is_retracted",
            "retraction_count",
            "finished_reason",
            "finished_len",
            "to_finish",
            "grammar",
            "inflight_middle_chunks",
            "spec_verify_ct",
            "spec_num_block_accept_tokens",
            "spec_num_cap_tokens",
            "kv",
        }
    )

    rid: str
    origin_input_ids: list[int]
    output_ids: list[int]
    sampling_params: FakeSamplingParams
    kv_committed_len: int
    # `kv_allocated_len` (a property below): None when the scenario has no allocation rule.
    _allocated: int | None
    is_retracted: bool
    retraction_count: int
    # A `FinishReason` once finished (or whatever a target stored in `to_finish`); None before.
    finished_reason: Any
    # Set by a length or stop-token finish only; None for an abort or a grammar finish.
    finished_len: int | None
    to_finish: Any
    grammar: FakeGrammar | None
    inflight_middle_chunks: int
    spec_verify_ct: int
    spec_num_block_accept_tokens: int
    spec_num_cap_tokens: int
    _spec_drafts: int
    _histogram: dict[int, int]
    _cap_histogram: dict[int, int]
    kv: FakeKvInfo
    # Aborted while waiting: SGLang pops it from the queue and sets no finish reason (outside
    # disaggregated decode), so only kvcheck's own code knows the scheduler is done with it.
    _aborted_waiting: bool

    def __init__(
        self, rid: str, prompt_len: int, max_new_tokens: int, *, allocation_modelled: bool = True
    ) -> None:
        """`allocation_modelled`: the scenario names an allocation rule, so decode launches size
        `kv_allocated_len`; without one it is refused (`AllocationNotModelledError`)."""
        self._set_fields(
            rid=rid,
            origin_input_ids=list(range(1, prompt_len + 1)),
            output_ids=[],
            sampling_params=FakeSamplingParams(max_new_tokens),
            kv_committed_len=0,
            _allocated=0 if allocation_modelled else None,
            is_retracted=False,
            retraction_count=0,
            finished_reason=None,
            finished_len=None,
            to_finish=None,
            grammar=None,
            inflight_middle_chunks=0,  # no chunked prefill is modelled
            spec_verify_ct=0,
            spec_num_block_accept_tokens=0,
            spec_num_cap_tokens=0,
            _spec_drafts=0,
            _histogram={},
            _cap_histogram={},
            kv=FakeKvInfo(self),
            _aborted_waiting=False,
        )

    # The allocated length is a property so that a scenario without an allocation rule can
    # refuse it: there no decode launch sizes it, so any value would be one no release has
    # (stuck at the prompt length while the committed length grows past it).
    def _allocated_len(self, owner: str, action: str) -> int:
        allocated = self._allocated
        if allocated is None:
            raise AllocationNotModelledError(owner, action)
        return allocated

    def _set_allocated_len(self, value: Any, owner: str) -> None:
        if self._allocated is None:
            raise AllocationNotModelledError(owner, "writes")
        self._allocated = value

    kv_allocated_len = property(
        lambda self: self._allocated_len("req", "reads"),
        lambda self, value: self._set_allocated_len(value, "req"),
    )

    def finished(self) -> bool:
        """SGLang's `req.finished()`: a finish reason is set.

        Read at delivery time, so the row of a request that finished after its launch is stale.
        False for a request aborted while waiting: SGLang drops it from the queue without one.
        """
        return self.finished_reason is not None

    def _record_histogram(self, drafts: int) -> None:
        # A dict, not SGLang's growing list: a negative or non-int bucket stays visible.
        key = int(drafts)
        self._histogram[key] = self._histogram.get(key, 0) + 1

    def update_spec_cap_lens_histogram(self, cap_len: int) -> None:
        """The 0.5.16+ cap-length histogram: recorded, never judged (no cap lengths here)."""
        key = int(cap_len)
        self._cap_histogram[key] = self._cap_histogram.get(key, 0) + 1

    def histogram(self) -> tuple[tuple[int, int], ...]:
        """The acceptance histogram as sorted (accepted drafts, count) pairs (engine helper)."""
        return histogram_of(self)


def is_finished(req: FakeReq) -> bool:
    """Whether the scheduler is done with `req`, for kvcheck's own code: `req.finished()`
    (without the guard that makes a target's call its signature refuses a `FakeCallError`,
    `sglang_method`), or aborted while waiting, which SGLang drops without a finish reason."""
    return req.finished_reason is not None or req._aborted_waiting


def histogram_of(req: FakeReq) -> tuple[tuple[int, int], ...]:
    """`req.histogram()` for kvcheck's own code (see `is_finished`)."""
    histogram = req._histogram
    return tuple(sorted(histogram.items())) if len(histogram) > 1 else tuple(histogram.items())


for _name in REQ_DRAFT_COUNTER_NAMES:
    setattr(FakeReq, _name, _alias("_spec_drafts"))
for _name in REQ_HISTOGRAM_METHODS:
    setattr(FakeReq, _name, sglang_method(FakeReq._record_histogram, _name))


class FakeSpecAlgorithm(StrictFake):
    """`batch.spec_algorithm`: the scenario's speculative algorithm (`Config.algorithm`), asked
    through SGLang's predicates. The EAGLE family includes EAGLE3, as SGLang's `is_eagle()`
    does."""

    _owner = "batch.spec_algorithm"
    _fields = frozenset({"name"})

    def __init__(self, name: str = "eagle") -> None:
        self.name = name

    def is_none(self) -> bool:
        """Speculative decoding is on: never the `none` algorithm."""
        return False

    def is_eagle(self) -> bool:
        """EAGLE or EAGLE3 (k = 1, row width = draft-token count)."""
        return self.name in ("eagle", "eagle3")

    def is_eagle3(self) -> bool:
        """EAGLE3 only."""
        return self.name == "eagle3"

    def is_dflash(self) -> bool:
        """DFLASH (0.5.14+), whose decode launch never pre-claims a slot."""
        return self.name == "dflash"

    def is_uno(self) -> bool:
        """UNO (0.5.20+): k = 2, rows of `speculative_output_stride` = F + 1."""
        return self.name == "uno"

    def is_ngram(self) -> bool:
        """The n-gram speculator (EAGLE's result layout)."""
        return self.name == "ngram"

    def __repr__(self) -> str:
        return self.name.upper()

    def __deepcopy__(self, memo: dict[int, Any]) -> FakeSpecAlgorithm:
        return self  # never changed after construction


ALGORITHM_FAKES: Final = {
    name: FakeSpecAlgorithm(name) for name in ("eagle", "eagle3", "ngram", "dflash", "uno")
}
EAGLE: Final = ALGORITHM_FAKES["eagle"]


class FakeForwardMode(StrictFake):
    """`batch.forward_mode`: a prefill (extend) or a decode batch, asked through SGLang's
    predicates."""

    _owner = "batch.forward_mode"
    _fields = frozenset({"name"})

    def __init__(self, name: str = "decode") -> None:
        self.name = name

    def is_decode(self) -> bool:
        """A decode (verify) batch."""
        return self.name == "decode"

    def is_extend(self) -> bool:
        """A prefill (extend) batch."""
        return self.name == "extend"

    def __deepcopy__(self, memo: dict[int, Any]) -> FakeForwardMode:
        return self  # never changed after construction


FORWARD_MODES: Final = {name: FakeForwardMode(name) for name in ("decode", "extend")}


class FakeCopyDone(StrictFake):
    """`result.copy_done`: the event of the device-to-host copy; the fake's tensors are already
    on the CPU, so waiting returns at once."""

    _owner = "result.copy_done"

    def synchronize(self) -> None:
        """Wait for the copy (already done)."""

    def __deepcopy__(self, memo: dict[int, Any]) -> FakeCopyDone:
        return self


COPY_DONE: Final = FakeCopyDone()


class FakeBatch(StrictFake):
    """The launch-time snapshot of a decode batch (SGLang's `batch.copy()`): a fresh list of the
    shared request objects, so row order is fixed at launch and flags are read at delivery."""

    _owner = "batch"
    _fields = frozenset({"reqs", "spec_algorithm", "has_grammar", "enable_overlap", "forward_mode"})

    reqs: list[FakeReq]
    spec_algorithm: FakeSpecAlgorithm
    has_grammar: bool
    enable_overlap: bool
    forward_mode: FakeForwardMode

    def __init__(self, reqs: list[FakeReq], forward_mode: str = "decode") -> None:
        self._set_fields(
            reqs=reqs,
            spec_algorithm=EAGLE,
            # As SGLang's batch constructor sets it, carried by `batch.copy()` from 0.5.17 (before,
            # the snapshot keeps the default False; only 0.5.17+ code reads it: docs/fakes.md).
            has_grammar=any(req.grammar is not None for req in reqs),
            enable_overlap=True,
            forward_mode=FORWARD_MODES[forward_mode],
        )

    def batch_size(self) -> int:
        """SGLang's `batch.batch_size()`: every row of the snapshot, stale rows included."""
        return len(self.reqs)


class FakeResult(StrictFake):
    """The decode result: padded `next_token_ids` (int64) and `accept_lens` (int32) on the CPU,
    the stride recorded at launch, the optional inputs newer versions read (all absent), and
    the counters the resolver writes, holding `GenerationBatchResult`'s defaults until written:
    0 for the totals (a resolver may add to them), None for the per-row list (docs/fakes.md)."""

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
            "copy_done",
        }
    )
    next_token_ids: torch.Tensor
    accept_lens: torch.Tensor
    speculative_num_draft_tokens: int
    speculative_output_stride: int | None
    num_non_draft_tokens_per_req: int
    block_accept_lens: torch.Tensor | None
    cap_lens: torch.Tensor | None
    grammar_advanced: bool
    grammar_retained_tokens: list[Any] | None
    copy_done: FakeCopyDone | None
    num_block_accept_tokens: Any
    num_cap_tokens: Any
    _draft_total: Any
    _draft_per_req: Any

    def __init__(
        self,
        next_token_ids: torch.Tensor,
        accept_lens: torch.Tensor,
        launch_stride: int,
        *,
        output_stride: int | None = None,
        non_draft_tokens: int = 1,
        block_accept_lens: torch.Tensor | None = None,
        cap_lens: torch.Tensor | None = None,
        copy_done: FakeCopyDone | None = COPY_DONE,
    ) -> None:
        self._set_fields(
            next_token_ids=next_token_ids,
            accept_lens=accept_lens,
            # The draft-token count recorded at launch; EAGLE's rows are that wide, UNO's rows
            # are `speculative_output_stride` = one more (its second non-draft token), else None.
            speculative_num_draft_tokens=launch_stride,
            speculative_output_stride=output_stride,
            num_non_draft_tokens_per_req=non_draft_tokens,
            block_accept_lens=block_accept_lens,
            cap_lens=cap_lens,
            grammar_advanced=False,
            grammar_retained_tokens=None,
            # SGLang records the copy event only on the overlap path; a synchronous result has
            # none.
            copy_done=copy_done,
            # SGLang's defaults: 0 (0.5.6.x had None for `num_accepted_tokens`, 0.5.7+ has 0;
            # kvcheck, not knowing the release, takes 0), and None for the per-row list.
            num_block_accept_tokens=0,
            num_cap_tokens=0,
            _draft_total=0,
            _draft_per_req=None,
        )


for _name in RESULT_DRAFT_TOTAL_NAMES:
    setattr(FakeResult, _name, _alias("_draft_total"))
for _name in RESULT_DRAFT_PER_REQ_NAMES:
    setattr(FakeResult, _name, _alias("_draft_per_req"))


class FakeDraftWorker(StrictFake):
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
    """One call of the adaptive controller: the per-row list and the `batch_size=` given (None
    when the call left it out, where SGLang 0.5.13+'s callee defaults it to 0)."""

    per_req: tuple[int, ...] | str
    batch_size: Any = None


class FakeModelWorker(StrictFake):
    """`self.model_worker`: records what the resolver feeds the adaptive controller."""

    _owner = "self.model_worker"
    _fields = frozenset({"verify_feeds"})

    def __init__(self) -> None:
        self.verify_feeds: list[ControllerFeed] = []

    def on_verify_complete_cpu(
        self, num_correct_drafts_per_req: Any, batch_size: Any = None
    ) -> None:
        """The adaptive controller's feed (0.5.12+), recorded as a `ControllerFeed`.

        The release's own signature (0.5.12 `BaseSpecWorker.on_verify_complete_cpu`; 0.5.13+
        adds `batch_size: int = 0`, 0.5.23 base_spec_worker.py line 379), so a call SGLang
        would reject (an unknown keyword such as `per_req=`) raises `TypeError` in the target, as
        it would there. A per-row list that is not ints is kept as its repr, for the checker.
        """
        self.verify_feeds.append(ControllerFeed(_as_ints(num_correct_drafts_per_req), batch_size))


class FakeMetricsReporter(StrictFake):
    """`self.metrics_reporter` (0.5.23 resolvers take a read-only snapshot first)."""

    _owner = "self.metrics_reporter"
    _fields = frozenset({"snapshots"})

    def __init__(self) -> None:
        self.snapshots = 0

    def snapshot_spec_decode_metrics(self, batch: Any, result: Any) -> None:
        """The 0.5.23 metrics snapshot of a batch and its result: counted, no KV effect, returns
        nothing (as SGLang's does)."""
        self.snapshots += 1


class FakeScheduler(StrictFake):
    """The resolver's `self`. Extra methods of a source-loaded class are bound onto it."""

    _owner = "self"
    _fields = frozenset({"draft_worker", "model_worker", "metrics_reporter", "enable_overlap"})

    def __init__(self, stride: int, overlap: bool) -> None:
        self.draft_worker = FakeDraftWorker(stride)
        self.model_worker = FakeModelWorker()
        self.metrics_reporter = FakeMetricsReporter()
        self.enable_overlap = overlap
        # `AbortReq` messages given to `abort_request` during the call, for the engine to apply.
        self._abort_requests: list[Any] = []

    def abort_request(self, recv_req: Any) -> None:
        """SGLang's `Scheduler.abort_request(AbortReq(rid=...))` (0.5.14-0.5.15 resolvers call it
        when a grammar refuses a token). Recorded; the engine applies it as SGLang's scheduler
        does, before the result's rows are processed: every unfinished running request whose
        rid starts with `rid` gets `to_finish`, a waiting one leaves the queue. `abort_all` is
        not modelled."""
        if getattr(recv_req, "abort_all", False) or not isinstance(
            getattr(recv_req, "rid", None), str
        ):
            raise UnmodeledAttributeError(
                self._owner, "abort_request", "calls", " with abort_all or without a rid"
            )
        self._abort_requests.append(recv_req)

    def bind_methods(self, methods: dict[str, Callable[..., Any]]) -> None:
        """Bind a source-loaded class's other methods onto this fake, `self` being the fake.

        The resolver's `self.X(...)` calls then run that code on the same fakes.
        """
        for name, function in methods.items():
            object.__setattr__(self, name, function.__get__(self, type(self)))

    def advance_grammar_fsm(self, result: FakeResult, batch: FakeBatch) -> None:
        """Advance the grammars of a decode result's rows once (0.5.17+), for a target whose own
        file does not define this method (docs/semantics.md §1.4): nothing when already advanced
        or no request has a grammar; else each live grammar row's run is offered token by token
        until the grammar terminates or refuses one (refusal: `to_finish` abort), the kept
        tokens are memoised per row in `grammar_retained_tokens` (None for other rows) and
        `grammar_advanced` is set."""
        if result.grammar_advanced or not batch.has_grammar:
            return
        tokens = result.next_token_ids.tolist()
        accepts = result.accept_lens.tolist()
        stride = result.speculative_output_stride or result.speculative_num_draft_tokens
        retained: list[Any] = [None] * len(batch.reqs)
        for i, req in enumerate(batch.reqs):
            grammar = req.grammar
            if grammar is None or req.is_retracted or req.finished():
                continue
            kept: list[int] = []
            for token in tokens[i * stride : i * stride + accepts[i]]:
                try:
                    grammar.accept_token(token)
                except ValueError:
                    req.to_finish = FinishAbort()  # 0.5.16-0.5.22; 0.5.23 adds a message
                    break
                kept.append(token)
                if grammar.is_terminated():
                    break
            retained[i] = kept
        result.grammar_retained_tokens = retained
        result.grammar_advanced = True
