"""The fakes SGLang's allocation code runs over (kvcheck.families.sglang.real.objects)."""

from __future__ import annotations

import pytest
import torch

from kvcheck.families.sglang.fakes import UnmodeledAttributeError
from kvcheck.families.sglang.pool import KvPool
from kvcheck.families.sglang.real.kernels import assign_req_to_token_pool
from kvcheck.families.sglang.real.objects import (
    UNBOUND,
    DisabledTreeCache,
    ReqToTokenPool,
    RuntimeSettings,
    TokenAllocator,
)


class _Kv:
    def __init__(self, row: int | None) -> None:
        self.req_pool_idx: int | None = row

    @property
    def holds_kv(self) -> bool:
        return self.req_pool_idx is not None


class _Req:
    def __init__(self, row: int | None, rid: str = "a") -> None:
        self.rid = rid
        self.kv = _Kv(row)

    def _row_index(self) -> int | None:
        return self.kv.req_pool_idx

    def _set_row_index(self, row: int | None) -> None:
        self.kv.req_pool_idx = row


def _setup(page_size: int, pages: int = 0) -> tuple[KvPool, TokenAllocator, ReqToTokenPool]:
    pool = KvPool(page_size, pages)
    allocator = TokenAllocator(pool)
    return pool, allocator, ReqToTokenPool(pool, allocator, rows=4, width=32)


def _kinds(pool: KvPool) -> list[str]:
    return [fault.kind for fault in pool.state().faults]


def test_alloc_hands_out_unbound_indices_past_the_padding_page() -> None:
    pool, allocator, _ = _setup(1)
    out = allocator.alloc(3)
    assert out.tolist() == [1, 2, 3]
    assert set(pool.owner.values()) == {UNBOUND}


def test_alloc_extend_continues_the_partial_page_then_takes_fresh_pages() -> None:
    pool, allocator, table = _setup(4)
    row = table.take("a")
    first = allocator.alloc_extend(
        *(torch.tensor([0]),) * 2, *(torch.tensor([6]),) * 2, torch.tensor([-1]), 6
    )
    assert first.tolist() == [4, 5, 6, 7, 8, 9]
    table.bind(
        assign_req_to_token_pool(
            torch.tensor([row]), table.req_to_token, torch.tensor([0]), torch.tensor([6]), first, 1
        )
    )
    assert pool.rows["a"] == {0: 0, 1: 1}
    last = torch.tensor([int(table.req_to_token[row, 5])])
    more = allocator.alloc_extend(*(torch.tensor([6]),) * 2, *(torch.tensor([10]),) * 2, last, 4)
    assert more.tolist() == [10, 11, 12, 13]  # 10, 11 finish page 1; page 2 is fresh
    assert _kinds(pool) == []


def test_alloc_beyond_a_bounded_pool_is_out_of_memory() -> None:
    pool, allocator, _ = _setup(2, pages=1)
    assert allocator.alloc(4) is None
    assert _kinds(pool) == ["out-of-memory"]


def test_release_of_a_bound_row_frees_whole_pages_and_the_row() -> None:
    pool, allocator, table = _setup(2)
    row = table.take("a")
    out = allocator.alloc(4)
    table.write((row, slice(0, 4)), out)
    allocator._acting = "a"
    allocator.free(table.req_to_token[row, :3])  # position 2 frees all of page 1
    table.free(_Req(row))
    assert not pool.rows and not pool.owner and _kinds(pool) == []


def test_leaving_pages_in_a_freed_row_is_a_leak() -> None:
    pool, allocator, table = _setup(1)
    row = table.take("a")
    table.write((row, slice(0, 2)), allocator.alloc(2))
    table.free(_Req(row))
    assert _kinds(pool) == ["leak"]


def test_a_row_freed_by_index_stays_readable_until_it_is_taken_again() -> None:
    # 0.5.6-0.5.8 free the row by index, then read the tail from it and free that (0.5.6
    # mem_cache/chunk_cache.py:52, common.py:485-487): no fault while nothing takes the row.
    pool, allocator, table = _setup(1)
    row = table.take("a")
    table.write((row, slice(0, 3)), allocator.alloc(3))
    table.free(row)
    allocator._acting = "a"
    allocator.free(table.req_to_token[row, :3])
    table.settle_freed_rows()
    assert not pool.rows and not pool.owner and _kinds(pool) == []
    # Taken again before its pages are freed: they are the first request's leak, and the
    # later read sees the new holder's indices, which are not the reader's to free.
    pool, allocator, table = _setup(1)
    row = table.take("a")
    table.write((row, slice(0, 2)), allocator.alloc(2))
    table.free(row)
    for other in "bcde":  # every free row, the freed one last
        taken = table.take(other)
    assert taken == row and _kinds(pool) == ["leak"]
    table.write((row, slice(0, 2)), allocator.alloc(2))
    allocator._acting = "a"
    allocator.free(table.req_to_token[row, :2])
    assert _kinds(pool) == ["use-after-free", "use-after-free"]


def test_freeing_a_page_twice_is_a_double_free() -> None:
    pool, allocator, table = _setup(1)
    row = table.take("a")
    table.write((row, slice(0, 2)), allocator.alloc(2))
    allocator._acting = "a"
    allocator.free(table.req_to_token[row, :2])
    allocator.free(table.req_to_token[row, :1])
    assert _kinds(pool) == ["double-free"]


def test_a_slot_written_over_or_bound_twice_is_a_double_owner() -> None:
    pool, allocator, table = _setup(1)
    a, b = table.take("a"), table.take("b")
    out = allocator.alloc(2)
    table.write((a, slice(0, 2)), out)
    table.write((b, slice(0, 1)), out[:1])  # b's row points at a's page
    assert _kinds(pool) == ["double-owner"]
    table.write((a, slice(0, 1)), allocator.alloc(1))  # a's slot 0 replaced
    assert _kinds(pool) == ["double-owner"]


def test_binding_into_a_row_nobody_holds_is_a_use_after_free() -> None:
    pool, allocator, table = _setup(1)
    table.write((3, slice(0, 1)), allocator.alloc(1))
    assert _kinds(pool) == ["use-after-free"]


def test_freeing_the_padding_slot_is_a_double_free() -> None:
    pool, allocator, _ = _setup(1)
    allocator.free(torch.tensor([0]))
    assert _kinds(pool) == ["double-free"]


def test_free_group_frees_at_its_end() -> None:
    pool, allocator, table = _setup(1)
    row = table.take("a")
    table.write((row, slice(0, 1)), allocator.alloc(1))
    allocator.free_group = []
    allocator._acting = "a"
    allocator.free(table.req_to_token[row, :1])
    assert pool.owner  # not yet
    pending, allocator.free_group = allocator.free_group, None
    allocator.free(torch.cat(pending))
    assert not pool.owner


def test_fakes_are_strict_but_answer_probes_with_absence() -> None:
    _, allocator, table = _setup(1)
    cache = DisabledTreeCache(allocator, table)
    with pytest.raises(UnmodeledAttributeError):
        _ = allocator.swa_attn_allocator
    with pytest.raises(UnmodeledAttributeError):
        cache.something = 1
    assert not hasattr(allocator, "c128_attn_allocator")
    assert cache.token_to_kv_pool_allocator is allocator


def test_runtime_settings_follow_the_stride_and_keep_the_maximum() -> None:
    settings = RuntimeSettings(algorithm="eagle", page_size=4, draft_tokens=3, max_draft_tokens=5)
    accessors = settings.accessors()
    assert accessors["get_spec"]().speculative_num_draft_tokens == 3
    settings.draft_tokens = 2
    assert accessors["get_spec"]().speculative_num_steps == 1
    assert accessors["max_speculative_num_draft_tokens"]() == 5
    assert accessors["ceil_align"](5, 4) == 8
    with pytest.raises(UnmodeledAttributeError):
        _ = accessors["get_spec"]().speculative_token_map


def test_row_alloc_keeps_a_held_row_and_gives_the_others_free_rows() -> None:
    pool, _, table = _setup(1)
    held = table.take("a")
    reqs = [_Req(None, "b"), _Req(held, "a"), _Req(None, "c")]
    rows = table.alloc(reqs)
    assert rows[1] == held and len(set(rows)) == 3
    assert [req.kv.req_pool_idx for req in reqs] == rows
    assert {table.holder(row) for row in rows} == {"a", "b", "c"}
    assert set(pool.rows) == {"a", "b", "c"}
