"""Strict fakes for the objects vLLM's scheduler code works on, where kvcheck does not run the
release's own class: the sampling parameters, the KV cache manager and its block pool, the
structured-output manager, the event publisher, the engine's output records.

A fake models only what the accounting path uses. Any other attribute, read or written, raises
`UnmodelledAccess`: kvcheck's fault (exit 2), never a verdict on the target, and recorded in
`UNMODELLED` even when the target's code catches it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, ClassVar, Final

from kvcheck.errors import KvcheckInternalError

# Every unmodelled access, in order ("reads SamplingParams.logprobs"); the adapter empties it
# before each call into the release's code and looks at it after.
UNMODELLED: Final[list[str]] = []


class UnmodelledAccess(KvcheckInternalError, AttributeError):
    """The release's code touched something of a fake that kvcheck does not model."""


class Strict:
    """A fake whose attributes are `_fields` (set at construction) and its class's own."""

    _owner: ClassVar[str] = "object"
    _fields: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, **values: Any) -> None:
        unknown = set(values) - self._fields
        if unknown:
            UNMODELLED.append(f"builds {self._owner} with {sorted(unknown)}")
            raise UnmodelledAccess(
                f"vLLM's code built {self._owner} with fields {sorted(unknown)}, which "
                "kvcheck's fake does not model"
            )
        self.__dict__.update(values)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        UNMODELLED.append(f"reads {self._owner}.{name}")
        raise UnmodelledAccess(
            f"vLLM's code read {self._owner}.{name}, which kvcheck's fake does not model"
        )

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._fields or name.startswith("_") or hasattr(type(self), name):
            object.__setattr__(self, name, value)
            return
        UNMODELLED.append(f"writes {self._owner}.{name}")
        raise UnmodelledAccess(
            f"vLLM's code wrote {self._owner}.{name}, which kvcheck's fake does not model"
        )


class SamplingParams(Strict):
    """What `Request.__init__` and `check_stop` read of a request's sampling parameters."""

    # Built with keywords; a field not given is None.
    def __init__(self, **values: Any) -> None:
        super().__init__(**{**dict.fromkeys(self._fields), **values})

    _owner = "SamplingParams"
    _fields = frozenset(
        {
            "max_tokens",
            "min_tokens",
            "eos_token_id",
            "stop_token_ids",
            "ignore_eos",
            "extra_args",
            "repetition_detection",
            "logprobs",
            "prompt_logprobs",
            # 0.34.0 (`R:374`): scoring the prompt against given ids; None, as a request
            # without prompt logprobs has it.
            "prompt_logprob_token_ids",
            "structured_outputs",
            "all_stop_token_ids",
            "skip_reading_prefix_cache",
            "num_logprobs",
            "output_kind",
            "n",
        }
    )


class ReadOnlyList(Sequence[int]):
    """vLLM's `ConstantList`: a view of a list the request keeps appending to."""

    def __init__(self, items: list[int]) -> None:
        self._items = items

    def __getitem__(self, index: Any) -> Any:
        return self._items[index]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[int]:
        return iter(self._items)

    def __repr__(self) -> str:
        return f"ReadOnlyList({self._items!r})"

    def copy(self) -> list[int]:
        """A list of the items as they are now."""
        return list(self._items)

    def __getattr__(self, name: str) -> Any:
        # Reached only for what the class lacks: the rest of `ConstantList` refuses to
        # mutate, and anything else is not modelled.
        if name.startswith("__"):
            raise AttributeError(name)
        UNMODELLED.append(f"reads ConstantList.{name}")
        raise UnmodelledAccess(
            f"vLLM's code read ConstantList.{name}, which kvcheck's fake does not model"
        )


class Record(Strict):
    """An output record of the engine (`EngineCoreOutput`, `SpecDecodingStats`, ...): built with
    keywords, each of its `_fields`."""

    def __init__(self, *args: Any, **values: Any) -> None:
        if args:
            UNMODELLED.append(f"calls {self._owner} with positional arguments")
            raise UnmodelledAccess(f"vLLM's code built {self._owner} positionally")
        defaults = {name: None for name in self._fields}
        defaults.update(values)
        super().__init__(**defaults)


def record_type(owner: str, fields: Sequence[str]) -> type[Record]:
    """A `Record` class named `owner` with these fields."""
    return type(owner, (Record,), {"_owner": owner, "_fields": frozenset(fields)})


class Blocks(Strict):
    """vLLM's `KVCacheBlocks` for one KV cache group: the block ids of an allocation."""

    _owner = "KVCacheBlocks"
    _fields = frozenset({"ids"})

    def get_block_ids(self, allow_none: bool = False) -> tuple[list[int], ...] | None:
        """The block ids per KV cache group (one group)."""
        if allow_none and not self.ids:
            return None
        return (list(self.ids),)

    def get_unhashed_block_ids(self) -> list[int]:
        """Every block id (prefix caching is off: none is hashed)."""
        return list(self.ids)

    def __add__(self, other: Blocks) -> Blocks:
        return Blocks(ids=(*self.ids, *other.ids))


class BlockPool(Strict):
    """A finite pool of `num_blocks` KV blocks, block 0 the null block vLLM never hands out,
    with a ref count per block and the blocks each request holds."""

    _owner = "KVCacheManager"
    _fields = frozenset(
        {
            "num_blocks",
            "block_size",
            "max_model_len",
            "computed_blocks_arity",
            "free_ids",
            "ref",
            "owned",
            "empty_kv_cache_blocks",
        }
    )

    @classmethod
    def create(
        cls, num_blocks: int, block_size: int, max_model_len: int, computed_blocks_arity: int = 3
    ) -> BlockPool:
        """A pool of `num_blocks` blocks, all free but the null block."""
        return cls(
            num_blocks=num_blocks,
            block_size=block_size,
            max_model_len=max_model_len,
            computed_blocks_arity=computed_blocks_arity,
            free_ids=list(range(1, num_blocks)),
            ref={},
            owned={},
            empty_kv_cache_blocks=Blocks(ids=()),
        )

    # --- what the scheduler calls (KVCacheManager's spellings) ---

    def get_computed_blocks(
        self, request: Any, max_cache_hit_length: int | None = None
    ) -> tuple[Any, ...]:
        """No prefix cache hit: no blocks, no tokens, no shared prefix."""
        # Prefix caching is off: nothing is ever a hit (blocks, tokens, and from 0.26 the
        # shared prefix: as many values as the release's scheduler unpacks).
        return (Blocks(ids=()), 0, 0)[: self.computed_blocks_arity]

    def allocate_slots(
        self,
        request: Any,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: Blocks | None = None,
        num_lookahead_tokens: int = 0,
        num_external_computed_tokens: int = 0,
        delay_cache_blocks: bool = False,
        num_encoder_tokens: int = 0,
        full_sequence_must_fit: bool = False,
        reserved_blocks: int = 0,
        has_scheduled_reqs: bool = True,
        skip_zeroing_group_ids: tuple[int, ...] = (),
    ) -> Blocks | None:
        """Blocks for the request's slots up to `C + new tokens + lookahead`, capped at
        `max_model_len` as vLLM's `KVCacheManager.allocate_slots` caps them (and, asked to,
        only if the whole sequence fits); None when the pool cannot give them, which makes the
        scheduler preempt. Prefix caching, the watermark and external KV are absent."""
        held = self.owned.get(request.request_id, [])
        computed = min(
            request.num_computed_tokens + num_new_computed_tokens + num_external_computed_tokens,
            self.max_model_len,
        )
        available = len(self.free_ids) - reserved_blocks
        if full_sequence_must_fit:
            whole = min(request.num_tokens, self.max_model_len)
            if self._blocks_for(whole) - len(held) > available:
                return None
        total = min(computed + num_new_tokens + num_lookahead_tokens, self.max_model_len)
        needed = self._blocks_for(total) - len(held)
        if needed > available:
            return None
        new = [self.free_ids.pop(0) for _ in range(max(needed, 0))]
        for block in new:
            self.ref[block] = self.ref.get(block, 0) + 1
        self.owned[request.request_id] = [*held, *new]
        return Blocks(ids=tuple(new))

    def _blocks_for(self, tokens: int) -> int:
        block_size: int = self.block_size
        return -(-tokens // block_size)

    def free(self, request: Any) -> None:
        """Drop the request's blocks, last first; a block whose count reaches 0 is free again."""
        self.free_blocks(reversed(self.owned.pop(request.request_id, [])))

    def pop_blocks_for_free(self, request: Any) -> list[int]:
        """Take the request's blocks away from it without freeing them (a deferred free):
        the scheduler hands them to `block_pool.free_blocks` later."""
        blocks: list[int] = self.owned.pop(request.request_id, [])
        return blocks

    @property
    def block_pool(self) -> BlockPool:
        """The pool itself: kvcheck's fake is the manager and its block pool in one."""
        return self

    def free_blocks(self, blocks: Iterable[int]) -> None:
        """Drop one reference to each block, in the order given (the block pool's call)."""
        for block in blocks:
            self.ref[block] = self.ref.get(block, 0) - 1
            if self.ref[block] == 0:
                del self.ref[block]
                self.free_ids.insert(0, block)

    def record_prefix_cache_stats(self, request: Any, num_hits: int) -> None:
        """Nothing to record: statistics are off."""

    def take_boundary_state_offloads(self) -> dict[str, list[tuple[int, int, int]]]:
        """No Mamba boundary states: nothing to hand off."""
        return {}

    def cache_blocks(self, request: Any, num_computed_tokens: int) -> None:
        """Nothing to cache: prefix caching is off."""
        return None  # prefix caching is off

    def get_block_ids(self, request_id: str) -> tuple[list[int], ...]:
        """The request's block ids per KV cache group."""
        return (list(self.owned.get(request_id, [])),)

    def get_blocks(self, request_id: str) -> Blocks:
        """The request's blocks."""
        return Blocks(ids=tuple(self.owned.get(request_id, [])))

    def get_num_common_prefix_blocks(self, running_request_id: str) -> list[int]:
        """No common prefix (prefix caching is off), per group."""
        return [0]

    def take_events(self) -> list[Any]:
        """No KV cache events."""
        return []

    def take_new_block_ids(self) -> list[int]:
        """No newly allocated blocks need zeroing."""
        return []

    def take_kv_cache_block_copies(self) -> tuple[list[Any], list[Any]]:
        """No copy-on-write: no copies, no retained blocks."""
        return [], []  # no copy-on-write: (copies, retained blocks)

    def new_step_starts(self) -> None:
        """Nothing to do at a step's start."""
        return None

    def remove_skipped_blocks(self, request_id: str, total_computed_tokens: int) -> None:
        """No sliding window: nothing to skip."""
        return None

    def reset_prefix_cache(self) -> bool:
        """Whether every block is free (vLLM resets only then)."""
        return bool(len(self.free_ids) == self.num_blocks - 1)

    def estimate_cached_tokens(self, request: Any) -> int:
        """No tokens cached: prefix caching is off."""
        return 0  # prefix caching is off

    def make_prefix_cache_stats(self) -> PrefixCacheStats:
        """Empty prefix cache statistics: prefix caching is off."""
        return PrefixCacheStats()

    @property
    def usage(self) -> float:
        """The fraction of the pool in use, the null block aside."""
        return float(1 - len(self.free_ids) / max(self.num_blocks - 1, 1))


class SchedulerBase(Strict):
    """What `Scheduler` inherits from vLLM's `SchedulerInterface`: the two questions written
    there in terms of the scheduler's own counts."""

    _owner = "Scheduler"

    def has_unfinished_requests(self) -> bool:
        """Whether any request is unfinished."""
        return bool(self.get_num_unfinished_requests() > 0)

    def has_requests(self) -> bool:
        """Whether there is anything to schedule or report (the interface's own, through
        0.25; the release's `Scheduler` overrides it where it defines one)."""
        return self.has_unfinished_requests() or self.has_finished_requests()

    def has_finished_requests(self) -> bool:
        """Whether any request finished since the last step."""
        return bool(self.finished_req_ids)


class PrefillStats(Strict):
    """A request's prefill statistics: recorded by vLLM, never read by the accounting."""

    _owner = "PrefillStats"

    def set(self, *args: Any, **kwargs: Any) -> None:
        """Record nothing."""
        return None

    def finalize(self, *args: Any, **kwargs: Any) -> None:
        """Record nothing."""
        return None


# The range of one of `TokenBuffer`'s items (a C int: vLLM keeps token ids as int32).
_INT32: Final = range(-(2**31), 2**31)


def _token(value: Any) -> int:
    """`value` as a token `TokenBuffer` can hold; anything else is the release doing something
    kvcheck's requests never ask of it (a float, a tensor, an id out of int32's range)."""
    if type(value) is not int or value not in _INT32:
        UNMODELLED.append(f"stores {value!r} in a TokenBuffer")
        raise UnmodelledAccess(
            f"vLLM's code stored {value!r} in a TokenBuffer, which holds int32 token ids only"
        )
    return value


class TokenBuffer(list[int]):
    """vLLM's `TokenBuffer` (0.34.0, `v1/token_buffer.py`): a request's token ids, which the
    release keeps in a C int array and reads like a list (slices are lists, it compares equal
    to a list of the same ids, `copy()` and `+` give lists). kvcheck's is that list, refusing
    what the array would refuse: anything but an int32 id."""

    def __init__(self, tokens: Iterable[int] = ()) -> None:
        super().__init__(_token(t) for t in tokens)

    def append(self, value: int) -> None:
        """Add one token id."""
        super().append(_token(value))

    def extend(self, values: Iterable[int]) -> None:
        """Add token ids in order."""
        super().extend(_token(v) for v in values)

    def __iadd__(self, values: Iterable[int]) -> TokenBuffer:  # type: ignore[override,misc]
        self.extend(values)
        return self

    def insert(self, index: Any, value: int) -> None:
        """Insert one token id."""
        super().insert(index, _token(value))

    def __setitem__(self, index: Any, value: Any) -> None:
        if isinstance(index, slice):
            super().__setitem__(index, [_token(v) for v in value])
        else:
            super().__setitem__(index, _token(value))

    def copy(self) -> list[int]:
        """A plain list of the ids (the release's gives one too)."""
        return list(self)


def extend_from_slice(dst: list[int], src: Sequence[int], start: int, stop: int) -> None:
    """vLLM's `extend_from_slice` (0.34.0): append `src[start:stop]` to `dst`."""
    dst.extend(src[start:stop])


class PrefixCacheStats(Strict):
    """The prefix cache's statistics of a step: prefix caching is off, so there are none; the
    scheduler only passes the record on into its `SchedulerStats`."""

    _owner = "PrefixCacheStats"


class EngineCoreEvent(Strict):
    """A request's timestamped engine event (queued, scheduled, preempted): recorded by the
    release's `Request.record_event` when statistics are on, never read by the accounting."""

    _owner = "EngineCoreEvent"
    _fields = frozenset({"type", "timestamp"})

    @classmethod
    def new_event(cls, event_type: Any, timestamp: float | None = None) -> EngineCoreEvent:
        """The event, at time 0 when the code gives no time (kvcheck's runs have no clock)."""
        return cls(type=event_type, timestamp=0.0 if timestamp is None else timestamp)


class SpecDecodingStats(Strict):
    """vLLM's per-step speculative statistics (`v1/spec_decode/metrics.py`), which the
    scheduler builds with `new(k)` and feeds one `observe_draft` per counted frame of a request.
    The fake records every call, in order: what the release's scheduler chose to count is what
    kvcheck judges; the sums over the calls are kvcheck's (`SpecStats` in the seam)."""

    _owner = "SpecDecodingStats"
    _fields = frozenset({"num_spec_tokens", "observed"})

    @classmethod
    def new(cls, num_spec_tokens: int) -> SpecDecodingStats:
        """Empty statistics for `num_spec_tokens` draft positions."""
        return cls(num_spec_tokens=num_spec_tokens, observed=[])

    def observe_draft(self, num_draft_tokens: int, num_accepted_tokens: int) -> None:
        """Record one counted frame of one request: its drafts and how many were accepted."""
        self.observed.append((num_draft_tokens, num_accepted_tokens))


class RequestGrammar(Strict):
    """One request's compiled grammar (vLLM's `StructuredOutputGrammar`, the calls the
    scheduler makes through 0.29: `validate_tokens(drafts)`, `accept_tokens(req_id, tokens)`),
    answering from kvcheck's grammar (`target.Grammar`)."""

    _owner = "StructuredOutputGrammar"
    _fields = frozenset({"grammar", "request_id"})

    def validate_tokens(self, tokens: list[int]) -> list[int]:
        """The prefix of `tokens` kvcheck's grammar accepts for this request."""
        return list(self.grammar.validate_tokens(self.request_id, tokens))

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        """Whether kvcheck's grammar accepts the delivered `tokens`."""
        return bool(self.grammar.accept_tokens(request_id, tokens))
