"""The objects SGLang's allocation functions run over, faked on kvcheck's `KvPool` (issue 21,
survey §2.6).

SGLang allocates token *indices* first, from an allocator that knows nothing of requests, and
binds them to a request's `req_to_token` row later (`assign_req_to_token_pool`,
`req_to_token_pool.write`). The fakes keep that order on kvcheck's page ledger:

- `TokenAllocator` (`token_to_kv_pool_allocator`): `alloc(n)` / `alloc_extend(...)` take pages
  from the `KvPool` and hold them *unbound* (owned by `UNBOUND`); `free(indices)` gives back the
  whole pages the indices fall in, on behalf of the request being released (`acting`). Page `p`
  of the `KvPool` is allocator page `p + 1`, token indices `(p + 1) * page_size + k`: index 0 is
  SGLang's padding slot, so a zero in `req_to_token` never names a real page.
- `ReqToTokenPool`: a real CPU `req_to_token` tensor (int32 `[rows, width]`), the row of each
  request, and `bind(writes)`, which moves the pages a kernel or `write` put in a row from
  `UNBOUND` to the row's request in `KvPool.rows`. Whatever breaks ownership on the way (a slot
  written over, a page bound twice, a freed page bound) is a `PoolFault` at that call.
- `DisabledTreeCache`: the chunk cache / the disabled radix cache (0.5.22+: a disabled
  `UnifiedRadixCache`), whose release entry points do nothing but what full-attention KV needs.
- `RuntimeSettings`: what `get_spec()`, `get_global_server_args()` and their kin answer.

Every fake is strict (`Strict`): a read or write of a name it does not model raises
`UnmodeledAttributeError`, which the path turns into "kvcheck cannot judge this" (exit 2), never
a verdict. `hasattr` probes the release code makes on purpose (`PROBED_ABSENT`) get a plain
`AttributeError`, i.e. False. Real code of the release (the base allocator's segment methods, the
request's `owned_kv_len`) is mixed in by the path, never rewritten here.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, Final

from kvcheck.families.sglang.allocation_rules import draft_steps
from kvcheck.families.sglang.fakes import UnmodeledAttributeError, sglang_method
from kvcheck.families.sglang.pool import KvPool
from kvcheck.families.sglang.real.kernels import RowWrite

# Who owns a page the allocator handed out and no row holds yet.
UNBOUND: Final = "<unbound>"

# Attributes SGLang's allocation code probes with `hasattr`/`getattr(..., default)`, expecting
# them absent on a plain full-attention setup (0.5.23 mem_cache/allocation.py:199,
# schedule_batch.py `skip_radix_cache_insert` probes before 0.5.21).
PROBED_ABSENT: Final = frozenset(
    {"c4_attn_allocator", "c128_attn_allocator", "mamba_allocator", "hisparse_coordinator"}
)


class Strict:
    """A fake whose unmodelled names raise `UnmodeledAttributeError` (reads and writes).

    `_fields` are the names it holds; its class attributes, methods and properties are modelled
    too; names starting with `_` are kvcheck's own."""

    _owner: ClassVar[str] = "object"
    _fields: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # A call the fake's signature refuses is kvcheck's reading of SGLang's method failing,
        # not the release's `TypeError` (`FakeCallError`, exit 2). Only kvcheck's own methods
        # are wrapped: a class the path builds with the release's members mixed in defines
        # none of its own, and the release's members run unwrapped.
        super().__init_subclass__(**kwargs)
        for name, value in list(vars(cls).items()):
            if not name.startswith("_") and inspect.isfunction(value):
                setattr(cls, name, sglang_method(value))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in PROBED_ABSENT:
            raise AttributeError(name)
        raise UnmodeledAttributeError(self._owner, name, supported=self._modelled())

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_") or name in self._fields or hasattr(type(self), name):
            object.__setattr__(self, name, value)
            return
        raise UnmodeledAttributeError(self._owner, name, "writes", supported=self._modelled())

    @classmethod
    def _modelled(cls) -> tuple[str, ...]:
        names = set(cls._fields)
        for klass in cls.__mro__:
            names.update(n for n in vars(klass) if not n.startswith("_"))
        return tuple(sorted(names))


class Bag(Strict):
    """A settings object (`get_spec()`, `server_args`): fixed named values, strict otherwise."""

    def __init__(self, owner: str, **values: Any) -> None:
        object.__setattr__(self, "_owner", owner)
        object.__setattr__(self, "_fields", frozenset(values))
        self.__dict__.update(values)

    def _modelled(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(sorted(self._fields))


# -- the allocator ------------------------------------------------------------------------------


class TokenAllocator(Strict):
    """`token_to_kv_pool_allocator` over `pool` (module docstring). The release's own base-class
    methods (`free_segments`, `check_decode_capacity`, ...) are mixed in by the path."""

    _owner = "token_to_kv_pool_allocator"
    _fields = frozenset({"free_group", "page_size", "device", "debug_mode"})

    def __init__(self, pool: KvPool) -> None:
        self._pool = pool
        self.page_size = pool.page_size
        self.device = "cpu"
        self.debug_mode = False
        self.free_group: list[Any] | None = None
        # The request whose release frees pages now (None: the allocator cannot tell whose).
        self._acting: str | None = None

    # What the allocator holds is the pool's; SGLang reports tokens.
    def available_size(self) -> int:
        """Free tokens (whole free pages)."""
        return self._pool.available_size()

    def _index(self, page: int, offset: int = 0) -> int:
        return (page + 1) * self.page_size + offset

    def page_of(self, index: int) -> int:
        """The `KvPool` page of a token index (-1 for the padding page)."""
        return index // self.page_size - 1

    def _take(self, count: int) -> list[int] | None:
        return self._pool.alloc_pages(UNBOUND, count)

    def alloc(self, need_size: int) -> Any:
        """`need_size` token indices on fresh pages (page size 1: one page each); None when the
        pool cannot cover them (the pool records `out-of-memory`)."""
        import torch

        pages = self._take(-(-need_size // self.page_size))
        if pages is None:
            return None
        indices = [self._index(p, k) for p in pages for k in range(self.page_size)]
        return torch.tensor(indices[:need_size], dtype=torch.int64)

    def alloc_extend(
        self,
        prefix_lens: Any,
        prefix_lens_cpu: Any,
        seq_lens: Any,
        seq_lens_cpu: Any,
        last_loc: Any,
        extend_num_tokens: int,
        num_new_pages: int | None = None,
    ) -> Any:
        """Per request, indices for positions `[prefix, seq)`: the rest of the page holding
        position `prefix - 1` continues from `last_loc + 1`, then whole fresh pages (what
        SGLang's paged allocator hands out). None when the pool cannot cover the fresh pages."""
        import torch

        page = self.page_size
        spans = list(zip(prefix_lens_cpu.tolist(), seq_lens_cpu.tolist(), strict=True))
        fresh = sum(max(0, -(-end // page) - -(-start // page)) for start, end in spans)
        pages = self._take(fresh)
        if pages is None:
            return None
        handed = iter(pages)
        out: list[int] = []
        for (start, end), last in zip(spans, last_loc.tolist(), strict=True):
            previous = int(last)
            for position in range(start, end):
                # Mid-page positions continue the page the previous position is in.
                index = previous + 1 if position % page else self._index(next(handed))
                out.append(index)
                previous = index
        if len(out) != extend_num_tokens:
            self._pool.fault(
                "pool",
                None,
                f"alloc_extend was asked for {extend_num_tokens} tokens for positions that "
                f"need {len(out)}",
            )
        return torch.tensor(out, dtype=torch.int64)

    def free(self, free_index: Any) -> None:
        """Give back every page one of `free_index` falls in (SGLang frees whole pages), on
        behalf of the request being released; in a free group, at `free_group_end`."""
        if self.free_group is not None:
            self.free_group.append(free_index.clone())
            return
        self.free_pages(self.page_of(int(i)) for i in free_index.reshape(-1).tolist())

    def free_full(self, free_index: Any) -> None:
        """Full-attention KV has one side: `free`."""
        self.free(free_index)

    def free_pages(self, pages: Iterable[int]) -> None:
        """Free `pages` (each once, in first-seen order) from whoever holds them."""
        pool, acting = self._pool, self._acting
        for page in dict.fromkeys(pages):
            if page < 0:
                pool.fault("double-free", acting, "frees the padding slot 0, never allocated")
                continue
            holder = pool.owner.get(page)
            for rid, row in pool.rows.items():
                if holder == rid:
                    for slot in [s for s, p in row.items() if p == page]:
                        del row[slot]
            pool.free_page(acting if acting is not None else holder or UNBOUND, page)


# -- the request-to-token pool ------------------------------------------------------------------


class ReqToTokenPool(Strict):
    """`req_to_token_pool`: rows of a real `req_to_token` tensor, and which request holds
    each (module docstring)."""

    _owner = "req_to_token_pool"
    _fields = frozenset({"req_to_token", "free_slots", "size", "device", "max_context_len"})

    def __init__(self, pool: KvPool, allocator: TokenAllocator, rows: int, width: int) -> None:
        import torch

        self._pool = pool
        self._allocator = allocator
        self.size = rows
        self.max_context_len = width
        self.device = "cpu"
        self.req_to_token = torch.zeros((rows + 1, width), dtype=torch.int32)
        self.free_slots = list(range(1, rows + 1))
        self._holder: dict[int, str] = {}
        # Rows freed by index whose pages the release is still freeing (`free`).
        self._freed_unsettled: dict[int, str] = {}

    def __deepcopy__(self, memo: dict[int, Any]) -> ReqToTokenPool:
        """A copy (an engine the exhaustive search branches) whose table is a `clone()`: a
        `copy.deepcopy` of a tensor costs some hundred times more, and no view of the table
        outlives a call into the release's code, so no storage is shared that a clone would
        split."""
        copied = object.__new__(type(self))
        memo[id(self)] = copied
        for name, value in self.__dict__.items():
            kept = value.clone() if name == "req_to_token" else copy.deepcopy(value, memo)
            object.__setattr__(copied, name, kept)
        return copied

    def take(self, rid: str) -> int:
        """A free row for `rid` (kvcheck's admission; grows the table when none is free)."""
        import torch

        if not self.free_slots:
            rows, width = self.req_to_token.shape
            self.req_to_token = torch.cat(
                [self.req_to_token, torch.zeros((rows, width), dtype=torch.int32)]
            )
            self.free_slots = list(range(rows, 2 * rows))
        row = self.free_slots.pop(0)
        if row in self._freed_unsettled:
            self._pool.free_row(self._freed_unsettled.pop(row))
        self._holder[row] = rid
        self._pool.take_row(rid)
        return row

    def alloc(self, reqs: Sequence[Any]) -> list[int]:
        """SGLang's `req_to_token_pool.alloc(reqs)` (0.5.19+, what `alloc_for_extend`'s
        `alloc_req_slots` calls): a request already holding a row keeps it, every other one
        takes a free row into `req.kv.req_pool_idx`; the rows, in batch order."""
        for req in reqs:
            if not req.kv.holds_kv:
                req.kv.req_pool_idx = self.take(req.rid)
        return [req.kv.req_pool_idx for req in reqs]

    def available_size(self) -> int:
        """Free rows (the table grows when none is left, so never 0 for long)."""
        return len(self.free_slots)

    def alloc_aux_to_lengths(self, **lengths: Any) -> None:
        """No auxiliary per-row cache on a full-attention pool."""

    def holder(self, row: int) -> str | None:
        """The request holding `row`, if any."""
        return self._holder.get(row)

    def free(self, req_or_row: Any) -> None:
        """SGLang's `req_to_token_pool.free(req)` (0.5.9+: the row back, `req_pool_idx =
        None`) or `free(row)` (0.5.6-0.5.8: the row back, the request keeps its index). The
        row's contents stay readable until the row is taken again, as on the device, so a
        read of a freed row sees its request's own indices until then and another request's
        after, which the allocator then refuses to free on the reader's behalf."""
        by_index = isinstance(req_or_row, int)
        row = req_or_row if by_index else req_or_row._row_index()
        rid = self._holder.pop(row, None)
        if rid is None:
            self._pool.fault("double-free", None, f"row {row} is freed while no request holds it")
        elif by_index:
            # 0.5.6-0.5.8 free the row before the pages in it (chunk_cache.py:52, then
            # common.py:485-487): what the row still holds is judged once the release's call
            # is over (`settle_freed_rows`), or when the row is taken again, whichever is first.
            self._freed_unsettled[row] = rid
            self.free_slots.append(row)
        else:
            self._pool.free_row(rid)
            self.free_slots.append(row)
        if not by_index:
            req_or_row._set_row_index(None)

    def settle_freed_rows(self) -> None:
        """Give the pool the rows freed by index (`free(row)`): pages still in one are its
        request's leak."""
        while self._freed_unsettled:
            _, rid = self._freed_unsettled.popitem()
            self._pool.free_row(rid)

    def write(self, indices: Any, values: Any) -> None:
        """`req_to_token[indices] = values` for `(row, slice)` indices, bound like a kernel's."""
        row, positions = indices
        self.req_to_token[indices] = values
        start = positions.start or 0
        written = self.req_to_token[row, positions].tolist()
        self.bind([RowWrite(int(row), start, tuple(int(v) for v in written))])

    def bind(self, writes: Sequence[RowWrite]) -> None:
        """Bind the pages `writes` put in rows to the rows' requests (module docstring)."""
        width = int(self.req_to_token.shape[1])
        page_size, pool = self._allocator.page_size, self._pool
        for write in writes:
            for flat, index in zip(write.flat_positions(width), write.values, strict=True):
                row, position = divmod(flat, width)
                rid = self._holder.get(row)
                page = self._allocator.page_of(index)
                if rid is None:
                    pool.fault(
                        "use-after-free", None, f"a write into row {row}, which no request holds"
                    )
                    continue
                if page < 0:
                    pool.fault(
                        "double-owner",
                        rid,
                        f"{rid}'s position {position} is bound to the padding slot",
                    )
                    continue
                self._bind_one(rid, position // page_size, page)

    def _bind_one(self, rid: str, slot: int, page: int) -> None:
        pool = self._pool
        row = pool.rows[rid]
        holder = pool.owner.get(page)
        current = row.get(slot)
        if current == page and holder == rid:
            return
        pool.changed = True
        if current is not None and current != page:
            pool.fault(
                "double-owner",
                rid,
                f"{rid}'s row slot {slot} is written over: page {current} replaced by {page}",
            )
        if holder == UNBOUND:
            pool.owner[page] = rid
        elif holder is None:
            pool.fault(
                "use-after-free", rid, f"{rid}'s row slot {slot} is bound to free page {page}"
            )
        elif holder != rid:
            pool.fault(
                "double-owner",
                rid,
                f"{rid}'s row slot {slot} is bound to page {page}, which {holder} owns",
            )
        row[slot] = page


# -- the tree cache -----------------------------------------------------------------------------


class DisabledTreeCache(Strict):
    """The chunk cache / a disabled radix cache (`tree_cache`): no prefix sharing, no
    eviction; its release entry points do nothing beyond what full-attention KV needs. The
    release's own `free_kv_row` (0.5.19+) and `cache_finished_req` (chunk cache, up to
    0.5.20) are mixed in by the path."""

    _owner = "tree_cache"
    _fields = frozenset(
        {
            "token_to_kv_pool_allocator",
            "req_to_token_pool",
            "page_size",
            "disable",
            "protected_size_",
        }
    )

    def __init__(self, allocator: TokenAllocator, req_to_token_pool: ReqToTokenPool) -> None:
        self.token_to_kv_pool_allocator = allocator
        self.req_to_token_pool = req_to_token_pool
        self.page_size = allocator.page_size
        self.disable = True
        # The chunk cache's count of protected prefix tokens (0.5.6 chunk_cache.py:27, :54):
        # no prefix is ever matched, so it stays 0.
        self.protected_size_ = 0

    def supports_prefix_sharing(self) -> bool:
        """No prefix is shared."""
        return False

    def supports_mamba(self) -> bool:
        """Full attention only."""
        return False

    def is_chunk_cache(self) -> bool:
        """The chunk cache (up to 0.5.21) or what replaced it."""
        return True

    def claim_kv_row(self, req: Any) -> bool:
        """No streaming session keeps the row."""
        return False

    def maybe_hand_to_session(self, req: Any) -> None:
        """No streaming session takes the row at admission."""

    def checkpoint(self, req: Any, up_to: int) -> None:
        """A disabled cache keys nothing."""

    def insert_req(self, req: Any, up_to: int | None = None) -> None:
        """A disabled cache keys nothing."""

    def unlock(self, lock: Any) -> None:
        """Nothing is locked in a disabled cache."""

    def unpin(self, req: Any) -> None:
        """Nothing is pinned in a disabled cache."""

    def on_release(self, req: Any, **flags: Any) -> None:
        """Nothing to note."""

    def pretty_print(self) -> None:
        """Nothing to show."""

    def evictable_size(self) -> int:
        """Nothing is evictable."""
        return 0

    def evict(self, *request: Any) -> None:
        """Nothing to evict, as the chunk cache's own `evict` (0.5.6 chunk_cache.py:67)."""

    def available_and_evictable_str(self) -> str:
        """What an out-of-memory message of the release's code says of the pool."""
        return (
            f"Available tokens: {self.token_to_kv_pool_allocator.available_size()}, "
            "evictable tokens: 0"
        )

    def protected_size(self) -> int:
        """Nothing is protected."""
        return 0


# -- runtime settings ---------------------------------------------------------------------------

# The runtime context's namespace accessors kvcheck gives nothing for (0.5.17+
# runtime_context.py): unpublished, the release's own would raise as if it were misconfigured.
UNMODELLED_NAMESPACES: Final = (
    "get_context",
    "get_flags",
    "get_resources",
    "get_forward",
    "get_device",
    "get_model",
    "get_memory",
    "get_lora",
    "get_mm",
    "get_observability",
)


def _refuse(name: str) -> Any:
    def accessor(*args: Any, **kwargs: Any) -> Any:
        raise UnmodeledAttributeError("runtime settings", f"{name}()", supported=())

    return accessor


class RuntimeSettings:
    """The runtime context a launch runs under: what SGLang's settings accessors answer.

    `draft_tokens` and `steps` follow adaptive switching; `max_draft_tokens` stays fixed (survey
    §7). The accessors are plain functions over this object, installed as the release's
    module-level names by the path."""

    ALGORITHM_NAMES: Final = {
        "eagle": "EAGLE",
        "eagle3": "EAGLE3",
        "ngram": "NGRAM",
        "dflash": "DFLASH",
        "uno": "UNO",
    }

    def __init__(
        self, *, algorithm: str, page_size: int, draft_tokens: int, max_draft_tokens: int
    ) -> None:
        self.algorithm = algorithm
        self.page_size = page_size
        self.draft_tokens = draft_tokens
        self.max_draft_tokens = max_draft_tokens

    @property
    def steps(self) -> int:
        """Chain drafting with topk 1 (`draft_steps`)."""
        return draft_steps(self.draft_tokens)

    def spec(self) -> Bag:
        """`get_spec()` (0.5.17+)."""
        return Bag(
            "get_spec()",
            speculative_algorithm=self.ALGORITHM_NAMES[self.algorithm],
            speculative_num_steps=self.steps,
            speculative_eagle_topk=1,
            speculative_num_draft_tokens=self.draft_tokens,
            max_speculative_num_draft_tokens=self.max_draft_tokens,
        )

    def server_args(self) -> Bag:
        """`get_global_server_args()` / `get_server_args()` (before 0.5.17)."""
        return Bag(
            "server_args",
            speculative_algorithm=self.ALGORITHM_NAMES[self.algorithm],
            speculative_num_steps=self.steps,
            speculative_eagle_topk=1,
            speculative_num_draft_tokens=self.draft_tokens,
            max_speculative_num_draft_tokens=self.max_draft_tokens,
            page_size=self.page_size,
            attention_backend="triton",
            strip_thinking_cache=False,
            disaggregation_mode="null",
            enable_dp_attention=False,
            retraction_policy="length",
        )

    def accessors(self) -> dict[str, Any]:
        """The release's module-level settings names and what kvcheck gives for them; the
        runtime context's other namespaces are refused (`UNMODELLED_NAMESPACES`), so a
        release reading one is kvcheck's gap, never the release's fault."""
        refused = {name: _refuse(name) for name in UNMODELLED_NAMESPACES}
        return refused | {
            "get_spec": self.spec,
            "get_global_server_args": self.server_args,
            "get_server_args": self.server_args,
            # `length` is the default retraction policy (0.5.17 server_args.py:863-876).
            "get_schedule": lambda: Bag(
                "get_schedule()", page_size=self.page_size, retraction_policy="length"
            ),
            "get_parallel": lambda: Bag(
                "get_parallel()", attn_dcp_size=1, attn_cp_size=1, dcp_enabled=False
            ),
            "get_exec": lambda: Bag(
                "get_exec()",
                kernel=Bag("get_exec().kernel", attention_backend="triton"),
                mamba=Bag(
                    "get_exec().mamba",
                    enable_mamba_extra_buffer=False,
                    enable_mamba_extra_buffer_lazy=False,
                ),
                features=Bag("get_exec().features", enable_memory_saver=False),
            ),
            "get_serving": lambda: Bag("get_serving()", strip_thinking_cache=False),
            "get_disagg": lambda: Bag(
                "get_disagg()",
                disaggregation_mode="null",
                disaggregation_decode_retraction_backup=False,
            ),
            "max_speculative_num_draft_tokens": lambda: self.max_draft_tokens,
            "attention_backends": lambda: ("triton", "triton"),
            "is_cpu": lambda: False,
            "is_cuda": lambda: True,
            "is_hip": lambda: False,
            "is_npu": lambda: False,
            "is_xpu": lambda: False,
            "support_triton": lambda backend: True,
            "next_power_of_2": lambda n: 1 << max(0, int(n) - 1).bit_length(),
            "ceil_align": lambda n, a: -(-int(n) // int(a)) * int(a),
        }
