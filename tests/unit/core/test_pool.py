"""`KvPool` on random calls: a pool on which no call has faulted passes `check()` (which is why
kvcheck's own pool skips it until a first fault), its bulk paths leave what the page-by-page
ones leave, and a fault brings the check back."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kvcheck.families.sglang.pool import KvPool

_RIDS = ("a", "b", "c")


class _PageByPage(KvPool):
    """KvPool with nothing changed but its class: `free_range` then frees page by page."""


def _draw_call(data: st.DataObject, pool: KvPool) -> tuple[Any, ...]:
    """A call as the allocation path makes them (a row taken once, ranges extended past what
    the row covers and freed within it, an emptied row given back), or now and then any call
    at all: those fault."""
    rid = data.draw(st.sampled_from(_RIDS))
    row = pool.rows.get(rid)
    covered = (max(row) + 1) * pool.page_size if row else 0
    if data.draw(st.integers(0, 9)) == 0:
        kind = data.draw(st.sampled_from(("take_row", "free_row", "extend", "free_range")))
        if kind in ("take_row", "free_row"):
            return (kind, rid)
        return (kind, rid, data.draw(st.integers(0, 12)), data.draw(st.integers(0, 12)))
    if row is None:
        return ("take_row", rid)
    choice = data.draw(st.integers(0, 3))
    if choice == 0:
        return ("extend", rid, covered, covered + data.draw(st.integers(0, 6)))
    if choice == 1 and row:
        low = min(row) * pool.page_size
        start = data.draw(st.integers(low, covered))
        return ("free_range", rid, start, data.draw(st.integers(start, covered)))
    if choice == 2:
        return ("reading", data.draw(st.sets(st.sampled_from(_RIDS))))
    if row:
        return ("free_range", rid, min(row) * pool.page_size, covered)
    return ("free_row", rid)


def _call(pool: KvPool, call: tuple[Any, ...]) -> None:
    if call[0] == "reading":
        pool.reading = set(call[1])
    else:
        getattr(pool, call[0])(*call[1:])


def _state(pool: KvPool) -> tuple[Any, ...]:
    return (pool.free_pages, pool.owner, pool.rows, pool.total, pool.handed_out, pool.faults)


@settings(max_examples=300, deadline=None)
@given(
    page_size=st.integers(1, 3),
    total_pages=st.sampled_from((0, 6, 12)),
    data=st.data(),
)
def test_no_fault_means_check_passes_and_bulk_paths_match(
    page_size: int, total_pages: int, data: st.DataObject
) -> None:
    pool = KvPool(page_size, total_pages)
    slow = _PageByPage(page_size, total_pages)
    faulted = False
    for _ in range(data.draw(st.integers(0, 30))):
        call = _draw_call(data, pool)
        _call(pool, call)
        _call(slow, call)
        assert _state(pool) == _state(slow), call
        faulted = faulted or bool(pool.faults)
        assert pool.faultless == (not faulted)
        if not faulted:
            pool.check()
            assert pool.faults == [], (call, pool.faults)
        pool.faults.clear()
        slow.faults.clear()


def test_a_fault_brings_the_check_back() -> None:
    pool = KvPool(1)
    pool.exclusive = True
    pool.take_row("a")
    pool.extend("a", 0, 3)
    pool.check_changed()
    assert pool.faultless and pool.faults == []
    pool.take_row("a")  # a second row: its three pages are owned outside any row
    pool.check_changed()
    assert [fault.kind for fault in pool.faults] == ["double-owner", "pool"]
