"""The allocation the engine performs around the resolver, as SGLang's scheduler does: a row and
pages at admission, the decode reserve at each launch, release at finish and retraction.

`RuleAllocation` is kvcheck's own correct path for each allocation rule (`Config.allocation`,
docs/semantics.md §2.3 and §5), written for the engine from the release notes, independently of
the reference model; like the model it reads the rule's features (`Config.allocation_rule`,
`kvcheck.families.sglang.allocation_rules`), never its name. It is the engine's only allocation
code: the
engine calls the four entry points below and nothing else, so another path can take its place,
e.g. one that drives a release's own sizing, allocation and release functions on the same
`KvPool` (SGLang's `page_aligned_decode_alloc_lens`, `alloc_for_spec_decode`,
`release_kv_cache`; see docs/semantics.md §5.5). The resolver under test never calls these: it is
judged only on leaving `kv_allocated_len` alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from kvcheck.families.sglang.allocation_rules import EstimateAsker, decode_estimate_pages
from kvcheck.families.sglang.pool import KvPool
from kvcheck.families.sglang.scenario import Config


class AllocationPath(Protocol):
    """What the engine calls; every method works on the requests' fakes and `pool`."""

    pool: KvPool
    # Whether `retract` also resets the request as SGLang's `reset_for_retract` does (C = 0,
    # `is_retracted`, the retraction count; Al = 0 is release's): the release's own code does,
    # and the engine then leaves it to it; kvcheck's path leaves the reset to the engine.
    resets_retracted: bool
    # Whether `admit` assigns C and Al itself, as SGLang's `alloc_for_extend` does from 0.5.19:
    # the engine then leaves them to it; otherwise the engine assigns `C = Al = P + L` first.
    owns_admission_lengths: bool
    # Whether `prepare_decode` pre-claims C itself (the launch of 0.5.11-0.5.14's flat layout):
    # the engine then skips its own `C += 1` under the pre-claim convention.
    owns_preclaim: bool

    def admit(self, reqs: list[Any]) -> None:
        """Prefill of the batch `reqs`: each one's row and pages for positions [0, P + L)."""

    def prepare_decode(self, reqs: list[Any], stride: int) -> None:
        """A decode launch at `stride`: size and allocate every request's reserve, set `Al`
        (before any pre-claim of the committed length)."""

    def release(self, req: Any) -> None:
        """Finish: free the committed and the over-allocated range and the row, once."""

    def estimate_decode(
        self, reqs: list[Any], stride: int, *, asked_by: EstimateAsker = "admission"
    ) -> int:
        """The scheduler's memory check: pages a decode launch of `reqs` would allocate, or
        the rule's bound where its estimate is one (`AllocationFeatures.decode_estimate`);
        `asked_by`: admission, the check before the launch, or its retraction loop."""

    def admission_pages(self, req: Any, stride: int) -> int:
        """Pages a prefill of `req` needs to be admitted (its fill plus one decode reserve)."""

    def retract(self, req: Any) -> None:
        """Retraction: release without caching; the engine then zeroes `C` and `Al` unless
        the path `resets_retracted`."""

    def retraction_order(self, reqs: list[Any]) -> list[Any] | None:
        """The decode batch `reqs` in the order SGLang keeps them under memory pressure (most
        preferred first; retraction pops from the back), or None to leave it to the engine."""

    def decode_fits(self, reqs: list[Any], stride: int) -> bool | None:
        """SGLang's decode memory check before a launch of `reqs` at `stride`
        (`check_decode_mem`), where the path brings its own; None: the engine compares the
        estimate with the pool itself."""

    def retract_for_memory(
        self, reqs: list[Any], retract: Callable[[Any], None]
    ) -> list[Any] | None:
        """SGLang's memory-pressure retraction loop (`retract_decode`) over the decode batch
        `reqs`, where the path brings its own: it has the engine `retract` each request it
        gives up; what it aborted for want of memory. None: the engine runs its loop
        (`retraction_order`)."""


def decode_reserve(config: Config, stride: int) -> int:
    """R = 2A under `config`'s allocation rule: A is the launch's draft count (to 0.5.12) or the
    adaptive maximum (0.5.13+), plus one for UNO's extra root position."""
    drafts = stride
    if config.allocation_rule.reserve_from == "adaptive-max":
        drafts = max(drafts, config.max_stride or config.stride)
    return 2 * (drafts + 1 if config.algorithm == "uno" else drafts)


def admission_pages(pool: KvPool, req: Any, reserve: int) -> int:
    """Pages a prefill of `req` needs to be admitted: its fill plus one decode `reserve`
    (`decode_reserve`), in pages. kvcheck's for every path: SGLang's `PrefillAdder` is not
    driven (docs/release-allocation.md)."""
    fill = len(req.origin_input_ids) + len(req.output_ids)
    return pool.slots(fill + reserve)


class RuleAllocation:
    """kvcheck's correct allocation path for `config.allocation` (module docstring)."""

    resets_retracted = False
    owns_admission_lengths = False
    owns_preclaim = False

    def __init__(self, config: Config, pool: KvPool | None = None) -> None:
        self.config = config
        self.pool = pool if pool is not None else KvPool(config.page_size, config.pool_pages)
        # Only kvcheck's own path over its own pool changes the pool through KvPool's methods
        # alone; a subclass (the broken paths) or a given pool keeps the full check every event.
        self.pool.exclusive = pool is None and type(self) is RuleAllocation

    def reserve(self, stride: int) -> int:
        """See `decode_reserve`."""
        return decode_reserve(self.config, stride)

    def sized(self, req: Any, reserve: int) -> int:
        """The allocated length a decode launch gives `req` (docs/semantics.md §2.3)."""
        rule, page = self.config.allocation_rule, self.pool.page_size
        target: int = req.kv_committed_len + reserve
        if rule.page_round:
            target = (target + page - 1) // page * page
        return max(int(req.kv_allocated_len), target) if rule.clamp else target

    def overallocated_start(self, committed: int) -> int:
        """Where the over-allocated range starts: the committed length rounded up to a page
        (the page holding the last committed token went with the committed range)."""
        page = self.pool.page_size
        return (committed + page - 1) // page * page

    def estimate_decode(
        self, reqs: list[Any], stride: int, *, asked_by: EstimateAsker = "admission"
    ) -> int:
        """See `AllocationPath.estimate_decode`: per request the pages between `Al` and what
        the launch sizes it to (0.5.11+'s `new_tokens_required_next_decode`, in pages), or
        the rule's bound where its estimate is one (`decode_estimate_pages`): the memory check
        then retracts where the release does and where the launch would not fit, which a
        correct bound implies (0.5.6-0.5.8's does not always: docs/release-allocation.md)."""
        reserve, slots = self.reserve(stride), self.pool.slots
        launch = sum(
            max(0, slots(self.sized(req, reserve)) - slots(int(req.kv_allocated_len)))
            for req in reqs
        )
        return decode_estimate_pages(
            self.config.allocation_rule,
            launch,
            page_size=self.pool.page_size,
            draft_tokens=stride,
            seq_lens=(len(req.origin_input_ids) + len(req.output_ids) for req in reqs),
            asked_by=asked_by,
        )

    def admission_pages(self, req: Any, stride: int) -> int:
        """See `AllocationPath.admission_pages`."""
        return admission_pages(self.pool, req, self.reserve(stride))

    def admit(self, reqs: list[Any]) -> None:
        """See `AllocationPath.admit`."""
        for req in reqs:
            self.pool.take_row(req.rid)
            self.pool.extend(req.rid, 0, req.kv_allocated_len)

    def prepare_decode(self, reqs: list[Any], stride: int) -> None:
        """See `AllocationPath.prepare_decode`."""
        reserve = self.reserve(stride)
        self.pool.check_launch([req.rid for req in reqs])
        for req in reqs:
            cur, nxt = req.kv_allocated_len, self.sized(req, reserve)
            if nxt > cur:
                self.pool.extend(req.rid, cur, nxt)
            req.kv_allocated_len = nxt

    def release(self, req: Any) -> None:
        """See `AllocationPath.release`: [0, C) then [ceil_page(C), Al), then the row; from
        0.5.16 `Al = 0` afterwards (`mark_kv_released`; `req.kv = None` before 0.5.19)."""
        pool = self.pool
        if req.finished():
            pool.reading.discard(req.rid)  # its row in flight is stale from now on
        if not pool.has_row(req.rid):
            pool.fault("double-free", req.rid, f"{req.rid} is released again in one residency")
            return
        committed, allocated = req.kv_committed_len, req.kv_allocated_len
        pool.free_range(req.rid, 0, committed)
        start = self.overallocated_start(committed)
        if start < allocated:
            pool.free_range(req.rid, start, allocated)
        pool.free_row(req.rid)
        if self.config.allocation_rule.zero_on_release:
            req.kv_allocated_len = 0

    def retraction_order(self, reqs: list[Any]) -> list[Any] | None:
        """See `AllocationPath.retraction_order`: the engine's own."""
        return None

    def decode_fits(self, reqs: list[Any], stride: int) -> bool | None:
        """See `AllocationPath.decode_fits`: the engine's comparison."""
        return None

    def retract_for_memory(
        self, reqs: list[Any], retract: Callable[[Any], None]
    ) -> list[Any] | None:
        """See `AllocationPath.retract_for_memory`: the engine's loop."""
        return None

    def retract(self, req: Any) -> None:
        """See `AllocationPath.retract`."""
        self.pool.reading.discard(req.rid)  # its row in flight is stale from now on
        self.release(req)
