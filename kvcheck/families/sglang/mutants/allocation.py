"""Broken allocation paths and allocators: the allocation half of the mutant corpus.

Each differs from kvcheck's own correct path (`kvcheck.families.sglang.allocation.RuleAllocation`)
or pool
(`kvcheck.families.sglang.pool.KvPool`) in one place, written from the bug's description (semantics
§4.16-
§4.31, the upstream bugs of docs/semantics.md §5.4), never from SGLang's code. A corpus entry
carries one as its resolver's `kvcheck_allocation` (the target's allocation path,
`Target.allocation`); `rules` are the allocation rules under which the bug shows, which the kill
matrix's exhaustive search enumerates.
"""

from __future__ import annotations

from typing import Any, ClassVar

from kvcheck.families.sglang.allocation import RuleAllocation
from kvcheck.families.sglang.allocation_rules import EstimateAsker
from kvcheck.families.sglang.pool import KvPool
from kvcheck.families.sglang.scenario import AllocationRule, Config


class BrokenAllocation(RuleAllocation):
    """Base of the broken paths: the rules under which each bug shows."""

    rules: ClassVar[tuple[AllocationRule, ...]] = ("0.5.13",)


class HalfReserve(BrokenAllocation):
    """Reserves A instead of 2A: the overlap lag is not covered."""

    def reserve(self, stride: int) -> int:
        """Where the bug is (the class docstring says which)."""
        return super().reserve(stride) // 2


class NoClamp(BrokenAllocation):
    """0.5.12+ without the `max(Al, .)` clamp (semantics §4.16, sglang#23336/#24055): an
    adaptive down-switch shrinks `Al`."""

    rules = ("0.5.12",)

    def sized(self, req: Any, reserve: int) -> int:
        """Where the bug is (the class docstring says which)."""
        target = int(req.kv_committed_len) + reserve
        if self.config.allocation_rule.page_round:
            page = self.pool.page_size
            target = (target + page - 1) // page * page
        return target


class NoPageRounding(BrokenAllocation):
    """0.5.16+ without rounding `nxt` up to a page (semantics §4.18, sglang#31616)."""

    rules = ("0.5.16",)

    def sized(self, req: Any, reserve: int) -> int:
        """Where the bug is (the class docstring says which)."""
        return max(int(req.kv_allocated_len), int(req.kv_committed_len) + reserve)


class OverReserve(BrokenAllocation):
    """Reserves 3A: more than the rule gives."""

    def reserve(self, stride: int) -> int:
        """Where the bug is (the class docstring says which)."""
        return super().reserve(stride) * 3 // 2


class FreeFromCommitted(BrokenAllocation):
    """Frees the over-allocated range from C instead of ceil_page(C) (semantics §4.21): the
    partly committed page is freed twice."""

    rules = ("0.5.16",)

    def overallocated_start(self, committed: int) -> int:
        """Where the bug is (the class docstring says which)."""
        return committed


class ForgetsOverallocated(BrokenAllocation):
    """Frees only the committed range (sglang#13741: release freed nothing past it)."""

    def overallocated_start(self, committed: int) -> int:
        """Where the bug is (the class docstring says which)."""
        return 1 << 30


class RetractKeepsRow(BrokenAllocation):
    """Retraction resets the lengths but never releases (sglang#11970)."""

    def retract(self, req: Any) -> None:
        """Where the bug is (the class docstring says which)."""
        pass


class RetractsFromTheBack(BrokenAllocation):
    """Under memory pressure retracts from the back of a speculative batch, as releases before
    0.5.17 do, under a rule that sorts it (fewest outputs, then longest prompt first)."""

    rules = ("0.5.17",)

    def retraction_order(self, reqs: list[Any]) -> list[Any] | None:
        """Where the bug is (the class docstring says which)."""
        return list(reqs)


class ReleasesAbortAtBuild(BrokenAllocation):
    """Releases an aborted request at the next build, before its next row finishes it, while
    the launch in flight still reads its row (semantics §4.25, sglang#18744)."""

    def prepare_decode(self, reqs: list[Any], stride: int) -> None:
        """Where the bug is (the class docstring says which)."""
        for req in reqs:
            if req.to_finish is not None and self.pool.has_row(req.rid):
                self.release(req)
        super().prepare_decode(reqs, stride)


class EstimateIgnoresAllocated(BrokenAllocation):
    """The memory check counts every request's whole target, not what it still lacks
    (sglang#14972, #19881: estimate and allocation disagree)."""

    def estimate_decode(
        self, reqs: list[Any], stride: int, *, asked_by: EstimateAsker = "admission"
    ) -> int:
        """Where the bug is (the class docstring says which)."""
        reserve = self.reserve(stride)
        return sum(self.pool.slots(self.sized(req, reserve)) for req in reqs)


class LeakyPool(KvPool):
    """Forgets to put a freed page back on the free list."""

    def free_page(self, rid: str, page: int) -> None:
        """Where the bug is (the class docstring says which)."""
        self.owner.pop(page, None)


class SharingPool(KvPool):
    """Hands out pages without taking them off the free list."""

    def alloc_pages(self, rid: str, count: int) -> list[int] | None:
        """Where the bug is (the class docstring says which)."""
        while len(self.free_pages) < count:
            self.free_pages.append(self.total)
            self.total += 1
        taken = self.free_pages[:count]
        self.handed_out += count
        for page in taken:
            if page in self.owner:
                self.fault("double-owner", rid, f"page {page} handed to {rid} twice")
            self.owner[page] = rid
        return taken


class SharingPoolPath(BrokenAllocation):
    """kvcheck's path over a pool that hands out pages without taking them off the free list
    (sglang#27731: a page owned twice keeps the pool equation balanced)."""

    def __init__(self, config: Config, pool: KvPool | None = None) -> None:
        super().__init__(config, pool or SharingPool(config.page_size, config.pool_pages))


class LeakyPoolPath(BrokenAllocation):
    """kvcheck's path over a pool that loses freed pages (sglang#11970-like leak)."""

    def __init__(self, config: Config, pool: KvPool | None = None) -> None:
        super().__init__(config, pool or LeakyPool(config.page_size, config.pool_pages))
