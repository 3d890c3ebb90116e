"""The KV pool as the engine's scheduler uses it: pages with one owner each, and per-request rows
(SGLang's `req_to_token`) that map a request's positions to pages.

It stands in for SGLang's token-to-KV allocator and request-to-token pool, at page granularity:
position `p` of a request lives in page slot `p // page_size` of its row. Every page has at most
one owner; the allocator hands out free pages (lowest first) and takes back the pages an owner
frees. Whatever breaks ownership is recorded as a `PoolFault` at the call where it happens, not
only when totals stop adding up (docs/semantics.md §5.3: the pool equation "stays balanced while a
page is double-owned"):

- `double-owner`: a page handed to an owner while another holds it, or a row slot pointing at a
  page its request does not own;
- `double-free`: a page freed that is already free, or a position freed that was never
  allocated;
- `use-after-free`: a page freed by a request that does not own it, or still referenced by the
  live row of a launch in flight; a launch referencing a row or page its request no longer holds;
- `leak`: a release that leaves pages in the request's row;
- `out-of-memory`: a fixed pool could not cover an allocation;
- `pool`: the equation `available + held == total` does not hold.

`check()` verifies the pool equation after every event (`available + held == total`, no page
both free and owned). A pool whose every change goes through these methods (`exclusive`: kvcheck's
own path over kvcheck's own pool) is checked again only once one of them changed it, and its state
is rebuilt only then: an unchanged pool that passed passes again. Such a pool that is KvPool
itself is not even checked after a change until a call first faulted: every method that raises
no fault keeps the free list and the rows a partition of the pages, each row's pages owned by its
request (what `check()` tests), so only a fault can break it (tests/unit/core/test_pool.py checks
this on random calls). The pool is unbounded unless given `total_pages`: pages are then created
on demand and `total` counts them.
"""

from __future__ import annotations

from itertools import filterfalse

import attrs

from kvcheck.wording import plural


@attrs.frozen
class PoolFault:
    """One ownership error at the call where it happened: its kind, the request, a sentence."""

    kind: str
    rid: str | None
    message: str


@attrs.frozen
class PoolState:
    """The pool after an event: free pages, pages held per request, total, and the faults the
    event caused (in order)."""

    available: int
    held: tuple[tuple[str, int], ...]
    total: int
    faults: tuple[PoolFault, ...]


class KvPool:
    """Pages, their owners, and every request's row of page slots."""

    def __init__(self, page_size: int, total_pages: int = 0) -> None:
        self.page_size = page_size
        self.bounded = total_pages > 0
        self.total = total_pages
        self.free_pages: list[int] = list(range(total_pages))
        self.owner: dict[int, str] = {}
        self.rows: dict[str, dict[int, int]] = {}
        self.faults: list[PoolFault] = []
        # Pages handed out so far (what an allocation step allocated is the difference).
        self.handed_out = 0
        # Requests whose rows the launch in flight reads for a live row: their pages must not
        # be freed until it is delivered (a request that finishes or is retracted leaves this
        # set first, its row being stale from then on).
        self.reading: set[str] = set()
        # Set by whoever builds the pool when nothing but KvPool's own methods changes `owner`,
        # `rows`, `free_pages` or `total` (kvcheck's own allocation path, not a subclass): only
        # then may `check_changed` and `state` trust `changed`.
        self.exclusive = False
        # Whether a method changed the pool since the last fault-free `state()`.
        self.changed = True
        self._state: PoolState | None = None
        # Whether this is KvPool itself, no subclass: `free_range` may then free in bulk what
        # `free_page` would free one page at a time.
        self._plain = type(self) is KvPool
        # Whether no call has faulted yet: an exclusive plain pool then needs no `check()` (the
        # module docstring says why). `alloc_pages` and `free_page` keep it so only as called
        # by `extend`, `free_range` and `free_row`, which is how kvcheck's own path calls them.
        self.faultless = True

    # -- SGLang's allocator, at page granularity ------------------------------------------------

    def available_size(self) -> int:
        """Free tokens (whole free pages); unbounded pools report a very large number."""
        return len(self.free_pages) * self.page_size if self.bounded else 1 << 40

    def alloc_pages(self, rid: str, count: int) -> list[int] | None:
        """`count` free pages now owned by `rid`, or None (an `out-of-memory` fault) when a
        fixed pool cannot cover them."""
        if count <= 0:
            return []
        missing = count - len(self.free_pages)
        if not self.bounded and missing > 0:  # an unbounded pool creates the pages it lacks
            self.changed = True
            self.free_pages.extend(range(self.total, self.total + missing))
            self.total += missing
        if len(self.free_pages) < count:
            self.fault(
                "out-of-memory",
                rid,
                f"{plural(count, 'page')} for {rid}, {len(self.free_pages)} free",
            )
            return None
        self.changed = True
        taken, self.free_pages = self.free_pages[:count], self.free_pages[count:]
        self.handed_out += count
        if len(set(taken)) == count and self.owner.keys().isdisjoint(taken):
            # Distinct pages nobody owns (always, unless something already broke): no fault,
            # owned in one step.
            self.owner.update(dict.fromkeys(taken, rid))
            return taken
        for page in taken:
            holder = self.owner.get(page)
            if holder is not None:
                self.fault(
                    "double-owner", rid, f"page {page} handed to {rid} while {holder} owns it"
                )
            self.owner[page] = rid
        return taken

    def free_page(self, rid: str, page: int) -> None:
        """`rid` gives `page` back."""
        holder = self.owner.get(page)
        if holder is None:
            self.fault("double-free", rid, f"{rid} frees page {page}, which is already free")
            return
        if holder != rid:
            self.fault("use-after-free", rid, f"{rid} frees page {page}, which {holder} still owns")
            return
        if holder in self.reading:
            self.fault(
                "use-after-free",
                rid,
                f"{rid} frees page {page} while the launch in flight reads it for a live row",
            )
        self.changed = True
        del self.owner[page]
        self.free_pages.append(page)

    # -- SGLang's req_to_token rows --------------------------------------------------------------

    def slots(self, length: int) -> int:
        """Page slots covering positions [0, length)."""
        return -(-length // self.page_size) if length > 0 else 0

    def take_row(self, rid: str) -> None:
        """`rid` takes a row (admission); taking one while holding one is a `double-owner`."""
        if rid in self.rows:
            self.fault("double-owner", rid, f"{rid} takes a second row")
        self.changed = True
        self.rows[rid] = {}

    def has_row(self, rid: str) -> bool:
        """Whether `rid` holds a row."""
        return rid in self.rows

    def extend(self, rid: str, start: int, end: int) -> bool:
        """Allocate positions [start, end) of `rid`'s row: pages for the slots not yet covered.
        False when the pool could not cover them."""
        row = self.rows.get(rid)
        if row is None:
            self.fault("use-after-free", rid, f"{rid} allocates into a row it does not hold")
            return False
        # The slots of [start, end) the row does not cover yet (filtered in C: this runs for
        # every admission and decode launch).
        wanted = list(filterfalse(row.__contains__, range(self.slots(start), self.slots(end))))
        pages = self.alloc_pages(rid, len(wanted))
        if pages is None:
            return False
        self.changed = True
        row.update(zip(wanted, pages, strict=True))
        return True

    def free_range(self, rid: str, start: int, end: int) -> None:
        """Free the pages of positions [start, end) of `rid`'s row (SGLang frees whole pages)."""
        row = self.rows.get(rid)
        if row is None:
            self.fault("use-after-free", rid, f"{rid} frees positions of a row it does not hold")
            return
        self.changed = True
        slots = range(start // self.page_size, self.slots(end))
        if self._plain and rid not in self.reading:
            # `free_page` is KvPool's own: when every slot holds a distinct page `rid` owns,
            # nothing faults and the pages go back in one step (what the loop below does page
            # by page, in the same order).
            pages = list(map(row.get, slots))
            claimed = dict.fromkeys(pages, rid)
            owner = self.owner
            if (
                len(claimed) == len(pages)
                and None not in claimed
                and claimed.items() <= owner.items()
            ):
                for slot in slots:
                    del row[slot]
                for page in pages:
                    del owner[page]  # type: ignore[arg-type]
                self.free_pages.extend(pages)  # type: ignore[arg-type]
                return
        for slot in slots:
            page = row.pop(slot, None)
            if page is None:
                self.fault(
                    "double-free",
                    rid,
                    f"{rid} frees positions {slot * self.page_size}.. (slot {slot}), which hold "
                    "no page (never allocated, or freed before)",
                )
            else:
                self.free_page(rid, page)

    def free_row(self, rid: str) -> None:
        """Give the row back; pages still in it are a `leak` (they are reclaimed, so one leak
        is reported once)."""
        row = self.rows.pop(rid, None)
        if row is None:
            self.fault("double-free", rid, f"{rid} frees a row it does not hold")
            return
        self.changed = True
        if row:
            self.fault(
                "leak",
                rid,
                f"{rid}'s release leaves {len(row)} page(s) in its row (slots {sorted(row)})",
            )
            for page in row.values():
                self.free_page(rid, page)

    def held(self, rid: str) -> int:
        """Pages in `rid`'s row."""
        return len(self.rows.get(rid, ()))

    def referenced(self, rid: str) -> tuple[int, ...]:
        """The pages `rid`'s row points at, for a launch to record."""
        return tuple(self.rows.get(rid, {}).values())

    # -- checks --------------------------------------------------------------------------------

    def check_launch(self, rids: list[str]) -> None:
        """A decode launch reads every row it names: each must be held and own its pages."""
        for rid in rids:
            if rid not in self.rows:
                self.fault("use-after-free", rid, f"a launch reads {rid}'s row after its release")

    def check_changed(self) -> None:
        """`check()`, unless the pool is `exclusive` and unchanged since it last passed, or
        exclusive, KvPool itself and no call has faulted yet (the module docstring)."""
        if not self.exclusive or (self.changed and not (self._plain and self.faultless)):
            self.check()

    def check(self) -> None:
        """The pool equation and row ownership, after an event."""
        held = sum(map(len, self.rows.values()))
        free = set(self.free_pages)
        if len(free) != len(self.free_pages):
            self.fault("double-free", None, "a page is in the free list twice")
        both = free.intersection(self.owner)
        if both:
            self.fault("double-owner", None, f"pages {sorted(both)} are free and owned at once")
        if not self._rows_owned(held):
            self._check_rows()
        if len(self.free_pages) + held != self.total:
            self.fault(
                "pool",
                None,
                f"available {len(self.free_pages)} + held {held} != total {self.total} pages",
            )

    def _rows_owned(self, held: int) -> bool:
        """Whether every row slot points at a page its request owns, tested in bulk: each page
        in one row only, and each (page, rid) of the rows one of `owner`'s."""
        claimed: dict[int, str] = {}
        for rid, row in self.rows.items():
            claimed.update(dict.fromkeys(row.values(), rid))
        return len(claimed) == held and claimed.items() <= self.owner.items()

    def _check_rows(self) -> None:
        """Each row slot that points at a page its request does not own, as a fault."""
        for rid, row in self.rows.items():
            for slot, page in row.items():
                if self.owner.get(page) != rid:
                    holder = self.owner.get(page)
                    kind = "use-after-free" if holder is None else "double-owner"
                    self.fault(
                        kind,
                        rid,
                        f"{rid}'s row slot {slot} points at page {page}, owned by {holder}",
                    )

    def summary(self) -> tuple[object, ...]:
        """What later events depend on, for exhaustive search's state key (page identities are
        abstracted: free count, total, pages per row and slot)."""
        rows = tuple(sorted((rid, tuple(sorted(row))) for rid, row in self.rows.items()))
        return (len(self.free_pages), self.total, rows, tuple(sorted(self.reading)))

    def state(self) -> PoolState:
        """The pool now, with the faults since the last call (which it clears)."""
        if not self.faults and not self.changed and self.exclusive and self._state is not None:
            return self._state
        faults, self.faults = tuple(self.faults), []
        state = PoolState(
            available=len(self.free_pages),
            held=tuple((rid, len(row)) for rid, row in self.rows.items()),
            total=self.total,
            faults=faults,
        )
        # A fault keeps the pool changed: the next event checks it again.
        self._state, self.changed = state, bool(faults)
        return state

    def fault(self, kind: str, rid: str | None, message: str) -> None:
        """Record an ownership error (module docstring) at the call where it happens."""
        self.faultless = False
        self.faults.append(PoolFault(kind, rid, message))
