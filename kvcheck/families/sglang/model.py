"""The reference model: what a correct scheduler + resolver must leave behind after each event.

A pure ledger written from the semantics (docs/semantics.md §2), independent of any resolver and of
the engine's fakes: it never calls the target, never touches torch, and the engine never asks it
what to do. The invariant checkers are the only place where the two meet.

Per request it keeps the prompt length P, the output length L, the lifecycle phase, the committed
KV length C, and the speculative statistics (verify count, accepted drafts, histogram). Per
delivered decode result it predicts the runs the resolver must return (row i's first a_i tokens
under the stride recorded at launch) and the batch-global accepted-draft counter.

Conventions (docs/semantics.md §1.2): with `preclaim` (H=1) each decode launch bumps C by one, a
live row then adds a-1 and a finished row gives the one back; with `honest` (H=0) nothing happens at
launch and a live row adds a. Either way a live request satisfies
C == P + L - 1 + n_prefill_in_flight + H * n_decode_in_flight (§2.9 invariant 1).

Allocation (when `Config.allocation` names a rule that allocates, docs/semantics.md §2.3 and §5;
the model reads the rule's features, `Config.allocation_rule`, never its name): a prefill assigns
the allocated length Al = C; a decode launch sizes each request before its pre-claim, to C + R
with R = 2A (A the stride launched, or the adaptive maximum with `reserve_from="adaptive-max"`,
0.5.13+; UNO F + 1), rounded up to a page with `page_round` (0.5.16+), and with `clamp` (0.5.12+)
never below the Al it had. A request holds ceil(Al / page) pages from admission to its release
(finish or retraction, exactly once per residency); release leaves Al as it was, or sets it to 0
with `zero_on_release` (0.5.16+); retraction leaves C = Al = 0 until re-admission.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Literal, TypeAlias

import attrs

from kvcheck.core.copying import Checkpoint, checkpoint, deep_copy
from kvcheck.core.snapshots import refreshed
from kvcheck.families.sglang.allocation_rules import EstimateAsker, decode_estimate_pages
from kvcheck.families.sglang.scenario import (
    Abort,
    Admit,
    Config,
    Event,
    Grammar,
    Retract,
    Step,
    SwitchStride,
    accept_for_row,
    block_cap_for_row,
    token_id,
)

Phase: TypeAlias = Literal["waiting", "running", "finished", "retracted"]
LaunchKind: TypeAlias = Literal["prefill", "decode"]


@attrs.define
class RequestLedger:
    """The model's ledger of one request: what a correct scheduler and resolver leave on it.

    `committed` is C and `outputs` is L; `verify_ct`, `drafts` and `histogram` count applied rows
    only; `decode_in_flight` is n_dec. `abort_pending` waits for the next applied row and
    `retract_pending` for the next decode build.
    """

    rid: str
    prompt_len: int
    max_new_tokens: int
    eos_at: int | None
    phase: Phase = "waiting"
    outputs: int = 0
    committed: int = 0
    verify_ct: int = 0
    drafts: int = 0
    histogram: dict[int, int] = attrs.field(factory=dict)
    # Block/cap statistics of applied rows (0.5.16+): totals and the cap-length histogram.
    block_tokens: int = 0
    cap_tokens: int = 0
    cap_histogram: dict[int, int] = attrs.field(factory=dict)
    abort_pending: bool = False
    retract_pending: bool = False
    admissions: int = 0
    retractions: int = 0
    decode_in_flight: int = 0
    finished_len: int | None = None
    finish_reason: str | None = None
    # Where the request's KV is: admitted requests that are not retracted hold a row.
    holds_kv: bool = False
    # Its grammar (§1.4), whether it has terminated, and how many tokens it has been offered
    # (its output positions so far; a refused token uses up its position).
    grammar: Grammar | None = None
    grammar_terminated: bool = False
    grammar_offered: int = 0
    # Allocation (when a rule is configured): Al, its least value after the last decode launch
    # (C + R at sizing), its highest value this residency, and whether a decode
    # launch sized it since admission (from 0.5.16 it is then page-aligned).
    allocated: int = 0
    alloc_floor: int = 0
    alloc_peak: int = 0
    decoded: bool = False

    @property
    def stale(self) -> bool:
        """A row of this request delivered now is stale (docs/semantics.md notation)."""
        return self.phase in ("finished", "retracted")


@attrs.frozen
class Launch:
    """A batch as the model saw it launched.

    `number` is the launch count (token ids encode it), `rids` the rows in launch order, `stride`
    the one recorded at launch (the draft count; UNO rows are one wider), `accepts` the clamped
    accept length per row (empty for a prefill), and `block_caps` each row's (block-accept, cap)
    lengths when results carry them.
    """

    # Immutable all the way down: copies share it (kvcheck.core.copying.SHARED_IN_COPIES).
    kvcheck_shared_in_copies = True

    number: int
    kind: LaunchKind
    rids: tuple[str, ...]
    stride: int
    accepts: tuple[int, ...]
    block_caps: tuple[tuple[int, int], ...] = ()


@attrs.frozen
class ExpectedDelivery:
    """What the resolver must produce for one delivered decode result."""

    # Immutable all the way down: copies share it (kvcheck.core.copying.SHARED_IN_COPIES).
    kvcheck_shared_in_copies = True

    launch: Launch
    stale: tuple[bool, ...]
    runs: tuple[tuple[int, ...], ...]
    # The batch-global accepted-draft counter the resolver writes, or None when not judged.
    global_drafts: int | None
    # accept_len - 1 for every row, stale rows included (the per-row list a resolver writes on
    # the result), and what the adaptive controller must be fed (ideal: live rows only;
    # sglang: every row; None when global counters are off).
    per_row_drafts: tuple[int, ...] = ()
    controller_feed: tuple[int, ...] | None = None
    # The batch block-accept and cap totals on the result: 0 without block/cap lengths, else
    # summed under the counter mode (sglang: every row; ideal: live rows).
    block_cap_totals: tuple[int, int] | None = (0, 0)
    # Per row, the tokens the row's grammar must be offered during the call: None without a
    # grammar, () for a stale row, else the retained run plus a refused token.
    grammar_offered: tuple[tuple[int, ...] | None, ...] = ()
    # The `batch_size=` the controller must be given with its feed: the launched batch's row
    # count, stale rows included, in every mode. SGLang routes the samples by it to the slot of
    # that batch size (the slot the launch read its step count from); it is no sample count.
    # None when global counters are off.
    controller_batch_size: int | None = None
    # Per row, how many tokens the row's grammar had been offered before the call (its prefill
    # token and earlier rows): None without a grammar. Only read to say which step went wrong.
    grammar_offered_before: tuple[int | None, ...] = ()


@attrs.frozen
class RequestExpectation:
    """What must hold for one request after an event; checked against an `ObservedRequest`."""

    # Immutable all the way down: copies share it (kvcheck.core.copying.SHARED_IN_COPIES).
    kvcheck_shared_in_copies = True

    rid: str
    phase: Phase
    committed: int
    verify_ct: int
    drafts: int
    histogram: tuple[tuple[int, int], ...]
    outputs: int
    decode_in_flight: int
    block_tokens: int = 0
    cap_tokens: int = 0
    cap_histogram: tuple[tuple[int, int], ...] = ()
    # Allocation, None when no rule is configured: Al, the reserve it must cover after a decode
    # launch, the highest Al of this residency (it never shrinks while live), whether Al must be
    # page-aligned, the page size, and the pages the request holds.
    allocated: int | None = None
    alloc_floor: int = 0
    alloc_peak: int = 0
    alloc_aligned: bool = False
    page_size: int = 1
    pages: int = 0


@attrs.frozen
class Expectation:
    """The model's view after one event: every known request, plus the delivery if any."""

    # Immutable all the way down: copies share it (kvcheck.core.copying.SHARED_IN_COPIES).
    kvcheck_shared_in_copies = True

    requests: tuple[RequestExpectation, ...]
    delivery: ExpectedDelivery | None
    in_flight: tuple[Launch, ...]
    # The requests the event's decode memory check retracted, in the order it took them.
    pressure_retracted: tuple[str, ...] = ()


class ReferenceModel:
    """Applies events one at a time; `apply` returns the expected state after the event."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.requests: dict[str, RequestLedger] = {}
        self.pressure_retracted: list[str] = []  # `Expectation.pressure_retracted`, per event
        self.waiting: list[str] = []
        self.running: list[str] = []
        self.merge_next: list[str] = []  # last prefill batch, merged into running at next build
        self.in_flight: list[Launch] = []
        self.worker_stride = config.stride
        self.launches = 0
        # Labels of situations reached, for coverage reporting (Hypothesis `event()`).
        self.reached: set[str] = set()
        # The last expectation `apply` returned: its requests are handed on where the next
        # event leaves them unchanged (`kvcheck.core.snapshots`), and all of it where the
        # event changed nothing.
        self._last: Expectation | None = None

    # -- public -------------------------------------------------------------------------------

    def clone(self) -> ReferenceModel:
        """An independent copy (exhaustive search branches the model together with the engine)."""
        copied: ReferenceModel = deep_copy(self)
        return copied

    def checkpoint(self) -> Checkpoint | None:
        """What `clone` copies, to put back after events applied in place."""
        return checkpoint(self)

    def state_key(self, inert: frozenset[str] = frozenset()) -> tuple[object, ...]:
        """A hashable summary of the ledger for exhaustive mode: everything later expectations
        depend on, without launch numbers (they only name token ids), admission and retraction
        counts and coverage labels. Requests in `inert` are keyed by their id alone."""
        requests = tuple(
            (r.rid, "inert")
            if r.rid in inert
            else (
                r.rid,
                r.prompt_len,
                r.max_new_tokens,
                r.eos_at,
                r.phase,
                r.outputs,
                r.committed,
                r.verify_ct,
                r.drafts,
                tuple(sorted(r.histogram.items())),
                r.block_tokens,
                r.cap_tokens,
                tuple(sorted(r.cap_histogram.items())),
                r.abort_pending,
                r.retract_pending,
                r.decode_in_flight,
                r.finished_len,
                r.finish_reason,
                r.holds_kv,
                r.grammar,
                r.grammar_terminated,
                r.grammar_offered,
                r.allocated,
                r.alloc_floor,
                r.alloc_peak,
                r.decoded,
            )
            for r in self.requests.values()
        )
        return (
            self.worker_stride,
            requests,
            tuple(self.waiting),
            tuple(self.running),
            tuple(self.merge_next),
            tuple((f.kind, f.rids, f.stride, f.accepts, f.block_caps) for f in self.in_flight),
        )

    def apply(self, event: Event) -> Expectation:
        """Apply one event and return what must hold afterwards.

        A `Step` that delivers a decode launch also says what the resolver must produce for it
        (`Expectation.delivery`). An event that makes no sense at this point is a no-op, never an
        error.
        """
        delivery: ExpectedDelivery | None = None
        self.pressure_retracted = []
        # The requests the event may change (None: any).
        changed: Collection[str] | None = None
        match event:
            case Admit():
                # Admitting a known rid again, or aborting a finished or unknown request, is a
                # no-op (most drawn admissions repeat a rid): it changes no request.
                changed = (event.rid,) if self._admit(event) else ()
            case Step():
                # A step changes the unfinished requests, and finished ones only through the
                # stale rows of the decode launch it delivers.
                live = [rid for rid, r in self.requests.items() if r.phase != "finished"]
                delivery = self._step(event)
                changed = set(live).union(delivery.launch.rids) if delivery is not None else live
            case Retract(rid=rid):
                req = self.requests.get(rid)
                if req is not None and req.phase == "running":
                    req.retract_pending = True
                changed = ()  # a pending retraction is no part of the expectation
            case Abort(rid=rid):
                changed = (rid,) if self._abort(rid) else ()
            case SwitchStride(stride=stride):
                if self.config.adaptive and stride != self.worker_stride:
                    self.worker_stride = stride
                    if self.in_flight:
                        self.reached.add("stride switch with a launch in flight")
                changed = ()
        last: Expectation | None = getattr(self, "_last", None)
        requests = refreshed(
            None if last is None else last.requests, self.requests, changed, self._expect_request
        )
        in_flight = tuple(self.in_flight)
        # An event that changed nothing (most retractions and stride switches, a repeated
        # admission) hands the last expectation on: `check_event` knows the pair passed.
        pressure_retracted = tuple(self.pressure_retracted)
        if (
            last is not None
            and delivery is None
            and last.delivery is None
            and last.requests is requests
            and last.in_flight == in_flight
            and not pressure_retracted
            and not last.pressure_retracted
        ):
            return last
        self._last = Expectation(requests, delivery, in_flight, pressure_retracted)
        return self._last

    def expectation(self, delivery: ExpectedDelivery | None = None) -> Expectation:
        """The ledger as it stands, with `delivery` when the event just applied delivered one."""
        return Expectation(
            requests=tuple(map(self._expect_request, self.requests.values())),
            delivery=delivery,
            in_flight=tuple(self.in_flight),
        )

    def _expect_request(self, r: RequestLedger) -> RequestExpectation:
        """What must hold for one request now."""
        config = self.config
        rule = config.allocation_rule
        allocating = rule.allocates
        page = config.page_size
        histogram = r.histogram
        cap_histogram = r.cap_histogram
        return RequestExpectation(
            r.rid,
            r.phase,
            r.committed,
            r.verify_ct,
            r.drafts,
            tuple(sorted(histogram.items())) if len(histogram) > 1 else tuple(histogram.items()),
            r.outputs,
            r.decode_in_flight,
            r.block_tokens,
            r.cap_tokens,
            tuple(sorted(cap_histogram.items()))
            if len(cap_histogram) > 1
            else tuple(cap_histogram.items()),
            r.allocated if allocating else None,
            r.alloc_floor,
            r.alloc_peak,
            r.decoded and rule.page_round,
            page,
            -(-r.allocated // page) if r.holds_kv and allocating else 0,
        )

    # -- events -------------------------------------------------------------------------------

    def _admit(self, event: Admit) -> bool:
        """Admit a new request; False (nothing done) for a rid already known."""
        if event.rid in self.requests:
            return False
        self.requests[event.rid] = RequestLedger(
            rid=event.rid,
            prompt_len=event.prompt_len,
            max_new_tokens=event.max_new_tokens,
            eos_at=event.eos_at,
            grammar=event.grammar,
        )
        self.waiting.append(event.rid)
        return True

    def _abort(self, rid: str) -> bool:
        """Abort a request; False (nothing done) when it is unknown or finished."""
        req = self.requests.get(rid)
        if req is None or req.phase == "finished":
            return False
        self.reached.add("abort")
        if req.phase in ("waiting", "retracted"):
            # Leaves the queue at once; it holds no KV (never admitted, or reset by retraction).
            self.waiting.remove(rid)
            self._finish(req, "abort", req.outputs)
        else:
            req.abort_pending = True
        return True

    def _step(self, step: Step) -> ExpectedDelivery | None:
        previous = self.in_flight.pop(0) if self.config.overlap and self.in_flight else None
        launched = self._build_and_launch(step)
        if not self.config.overlap:
            return self._deliver(launched) if launched is not None else None
        if launched is not None:
            self.in_flight.append(launched)
        return self._deliver(previous) if previous is not None else None

    def _build_and_launch(self, step: Step) -> Launch | None:
        # Merge the last prefill batch, then drop finished requests (SGLang's filter_batch).
        self.running.extend(self.merge_next)
        self.merge_next = []
        self.running = [rid for rid in self.running if self.requests[rid].phase == "running"]
        admitted = self._admissible()
        if admitted:
            return self._launch_prefill(admitted)
        for rid in [r for r in self.running if self.requests[r].retract_pending]:
            self._retract(self.requests[rid])
        if self.config.pool_pages:
            self._retract_for_memory()
        if not self.running:
            return None
        return self._launch_decode(step)

    # -- a fixed pool (Config.pool_pages): admission and the decode memory check --------------

    def _pages(self, length: int) -> int:
        return -(-length // self.config.page_size)

    def _free_pages(self) -> int:
        held = sum(self._pages(r.allocated) for r in self.requests.values() if r.holds_kv)
        return self.config.pool_pages - held

    def _decode_estimate(self, rids: list[str], asked_by: EstimateAsker = "admission") -> int:
        """The scheduler's estimate of the next decode launch of `rids`, in pages: the pages
        the launch allocates. Under a rule whose estimate is a bound (`decode_estimate`),
        admission reads the bound and the memory check and its retraction loop the larger of
        the bound and the launch's pages (a correct scheduler never launches what the pool
        cannot hold)."""
        stride, pages = self.worker_stride, self._pages
        launch = 0
        for rid in rids:
            req = self.requests[rid]
            launch += max(0, pages(self._sized(req, stride)[1]) - pages(req.allocated))
        return decode_estimate_pages(
            self.config.allocation_rule,
            launch,
            page_size=self.config.page_size,
            draft_tokens=stride,
            seq_lens=(self.requests[rid].prompt_len + self.requests[rid].outputs for rid in rids),
            asked_by=asked_by,
        )

    def _admissible(self) -> tuple[str, ...]:
        """The waiting requests the next prefill admits: all of them with an unbounded pool;
        with a fixed one, in queue order while each one's fill plus one decode reserve fits
        beside the running batch's next decode (kvcheck's admission rule, docs/semantics.md §5)."""
        if not self.config.pool_pages:
            return tuple(self.waiting)
        room = self._free_pages() - self._decode_estimate(self.running)
        reserve = self._reserve(self.worker_stride)
        admitted: list[str] = []
        for rid in self.waiting:
            req = self.requests[rid]
            cost = self._pages(req.prompt_len + req.outputs + reserve)
            if cost > room:
                self.reached.add("admission waits for memory")
                break
            room -= cost
            admitted.append(rid)
        return tuple(admitted)

    def _retract_for_memory(self) -> None:
        """SGLang's decode memory check: when the next launch does not fit, retract requests
        until it does, keeping one; at least one is retracted once the check failed. With
        `retraction_sorted` (0.5.17+) the fewest outputs go first, then the longest prompt,
        then the latest in the batch; without (a speculative batch before 0.5.17), the latest
        in the batch goes first."""
        if self._decode_estimate(self.running, "check") <= self._free_pages():
            return
        order = list(self.running)
        if self.config.allocation_rule.retraction_sorted:
            order.sort(
                key=lambda rid: (self.requests[rid].outputs, -self.requests[rid].prompt_len),
                reverse=True,
            )
        while len(order) > 1:
            self.pressure_retracted.append(order[-1])
            self._retract(self.requests[order.pop()])
            self.reached.add("retraction under memory pressure")
            if self._decode_estimate(order, "retraction") <= self._free_pages():
                break

    def _launch_prefill(self, rids: tuple[str, ...]) -> Launch:
        self.waiting = [rid for rid in self.waiting if rid not in rids]
        for rid in rids:
            req = self.requests[rid]
            if req.admissions:
                self.reached.add("re-admission")
            req.admissions += 1
            req.phase = "running"
            req.holds_kv = True
            # Prefill assigns (never adds) the whole fill: prompt plus outputs so far, and
            # allocates exactly that.
            req.committed = req.prompt_len + req.outputs
            req.allocated = req.alloc_peak = req.committed
            req.alloc_floor = 0
            req.decoded = False
        self.merge_next = list(rids)
        self.launches += 1
        return Launch(self.launches, "prefill", rids, self.worker_stride, ())

    def _launch_decode(self, step: Step) -> Launch:
        config = self.config
        stride = self.worker_stride
        width = config.output_width(stride)
        rids = tuple(self.running)
        accepts = tuple(
            accept_for_row(step, row, width, config.non_draft_tokens) for row in range(len(rids))
        )
        block_caps = (
            tuple(block_cap_for_row(step, row, width) for row in range(len(rids)))
            if config.block_cap
            else ()
        )
        for rid in rids:
            req = self.requests[rid]
            req.decode_in_flight += 1
            self._size_allocation(req, stride)  # sized before the pre-claim
            if config.preclaims:
                req.committed += 1
        self.launches += 1
        self.reached.add(f"stride {stride}")
        return Launch(self.launches, "decode", rids, stride, accepts, block_caps)

    def _reserve(self, stride: int) -> int:
        """R = 2A at `stride` (module docstring; docs/semantics.md §2.3)."""
        drafts = stride
        if self.config.allocation_rule.reserve_from == "adaptive-max":
            drafts = max(stride, self.config.max_stride or self.config.stride)
        return 2 * (drafts + 1 if self.config.algorithm == "uno" else drafts)

    def _sized(self, req: RequestLedger, stride: int) -> tuple[int, int]:
        """C + R, and Al after a decode launch at `stride` (docs/semantics.md §2.3)."""
        rule = self.config.allocation_rule
        floor = target = req.committed + self._reserve(stride)
        if rule.page_round:
            page = self.config.page_size
            target = -(-target // page) * page
        return floor, max(req.allocated, target) if rule.clamp else target

    def _size_allocation(self, req: RequestLedger, stride: int) -> None:
        """Al after a decode launch at `stride`."""
        if not self.config.allocation_rule.allocates:
            return
        req.alloc_floor, req.allocated = self._sized(req, stride)
        req.alloc_peak = max(req.alloc_peak, req.allocated)
        req.decoded = True

    def _retract(self, req: RequestLedger) -> None:
        if req.decode_in_flight:
            self.reached.add("retract with its launch in flight")
        if req.retractions:
            self.reached.add("second retraction of a request")
        req.retractions += 1
        req.retract_pending = False
        req.phase = "retracted"
        req.holds_kv = False
        req.committed = 0  # outputs and statistics are kept
        req.allocated = req.alloc_floor = req.alloc_peak = 0
        req.decoded = False
        self.running.remove(req.rid)
        self.waiting.append(req.rid)

    # -- delivery -----------------------------------------------------------------------------

    def _deliver(self, launch: Launch) -> ExpectedDelivery | None:
        if launch.kind == "prefill":
            for rid in launch.rids:
                req = self.requests[rid]
                if req.stale:
                    continue
                req.outputs += 1
                if self._check_finish(req):
                    self.reached.add("finish on the prefill result")
                # Offered after the finish check; a refusal aborts at the next applied row.
                refused = req.grammar is not None and not self._offer(req, 1)[1]
                if refused and req.phase != "finished":
                    req.abort_pending = True
                    self.reached.add("grammar refuses the prefill token")
            return None
        stale = tuple(self.requests[rid].stale for rid in launch.rids)
        live_rows = stale.count(False)
        if live_rows >= 4:
            self.reached.add("batch with 4+ live rows")
        config = self.config
        k = config.non_draft_tokens
        runs = [
            tuple(token_id(launch.number, row, col) for col in range(launch.accepts[row]))
            for row in range(len(launch.rids))
        ]
        offered: list[tuple[int, ...] | None] = [
            None if self.requests[rid].grammar is None else () for rid in launch.rids
        ]
        offered_before = tuple(
            None if self.requests[rid].grammar is None else self.requests[rid].grammar_offered
            for rid in launch.rids
        )
        # Drafts of a row are accept_len - k; the batch values follow the counter mode.
        per_row_drafts = tuple(a - k for a in launch.accepts)
        counted = self._counted_rows(stale)
        global_drafts = None if counted is None else sum(per_row_drafts[i] for i in counted)
        controller_feed = None if counted is None else tuple(per_row_drafts[i] for i in counted)
        controller_batch_size = None if counted is None else len(launch.rids)
        block_cap_totals = self._expected_block_cap_totals(launch, counted)
        for row, rid in enumerate(launch.rids):
            req = self.requests[rid]
            accept = launch.accepts[row]
            req.decode_in_flight -= 1
            self._label_accept(accept, config.output_width(launch.stride), stale[row])
            if stale[row]:
                self.reached.add(f"stale row of a {req.phase} request")
                if req.grammar is not None:
                    self.reached.add("stale row of a grammar request")
                if req.phase == "finished" and config.preclaims:
                    req.committed -= 1  # give back the launch's pre-claimed slot
                continue
            kept = accept
            if req.grammar is not None:
                kept, accepted = self._offer(req, accept)
                offered[row] = runs[row][: kept + (not accepted)]
                runs[row] = runs[row][:kept]
                if not accepted:
                    req.abort_pending = True  # the resolver aborts the request at this row
                    self.reached.add("grammar refusal")
                elif kept < accept:
                    self.reached.add("grammar truncates a run")
            # Statistics stay those of the raw accept length (§1.4).
            req.committed += kept - 1 if config.preclaims else kept
            req.verify_ct += 1
            req.drafts += accept - k
            req.histogram[accept - k] = req.histogram.get(accept - k, 0) + 1
            if launch.block_caps:
                block, cap = launch.block_caps[row]
                req.block_tokens += block
                req.cap_tokens += cap
                req.cap_histogram[cap] = req.cap_histogram.get(cap, 0) + 1
            req.outputs += kept
            self._check_finish(req)
        return ExpectedDelivery(
            launch,
            stale,
            tuple(runs),
            global_drafts,
            per_row_drafts,
            controller_feed,
            block_cap_totals,
            tuple(offered),
            controller_batch_size,
            offered_before,
        )

    def _offer(self, req: RequestLedger, count: int) -> tuple[int, bool]:
        """Offer the request's grammar up to `count` next output tokens, stopping once it
        terminates or refuses one: how many it kept, and whether it refused none."""
        grammar = req.grammar
        assert grammar is not None
        for kept in range(count):
            req.grammar_offered += 1
            position = req.grammar_offered
            if req.grammar_terminated or (grammar.kind == "reject" and position == grammar.at):
                return kept, False
            if grammar.kind == "terminate" and position == grammar.at:
                req.grammar_terminated = True
                return kept + 1, True
        return count, True

    def _counted_rows(self, stale: tuple[bool, ...]) -> tuple[int, ...] | None:
        """The rows the batch-level values count: every row (sglang), the live ones (ideal), or
        None when they are not judged (off)."""
        mode = self.config.global_counters
        if mode == "off":
            return None
        return tuple(i for i, is_stale in enumerate(stale) if mode == "sglang" or not is_stale)

    def _expected_block_cap_totals(
        self, launch: Launch, counted: tuple[int, ...] | None
    ) -> tuple[int, int] | None:
        if not launch.block_caps:
            return (0, 0)  # no lengths on the result: SGLang writes 0
        if counted is None:
            return None
        return (
            sum(launch.block_caps[i][0] for i in counted),
            sum(launch.block_caps[i][1] for i in counted),
        )

    def _label_accept(self, accept: int, stride: int, stale: bool) -> None:
        kind = "stale" if stale else "live"
        if accept == 1:
            self.reached.add(f"accept 1 on a {kind} row")
        if accept == stride:
            self.reached.add(f"full acceptance on a {kind} row")

    def _check_finish(self, req: RequestLedger) -> bool:
        """The scheduler's finish check after a run was appended to the request's output."""
        if req.abort_pending:
            self._finish(req, "abort", req.outputs)
            return True
        # The earliest stop position inside what has been emitted wins; the rest is over-shoot.
        if req.eos_at is not None and req.eos_at <= min(req.outputs, req.max_new_tokens):
            self._finish(req, "eos", req.eos_at)
            return True
        if req.outputs >= req.max_new_tokens:
            self._finish(req, "length", req.max_new_tokens)
            return True
        if req.grammar_terminated:
            self._finish(req, "grammar", req.outputs)
            return True
        return False

    def _finish(self, req: RequestLedger, reason: str, finished_len: int) -> None:
        self.reached.add(f"{reason} finish")
        req.phase = "finished"
        req.finish_reason = reason
        req.finished_len = finished_len
        if req.holds_kv and self.config.allocation_rule.zero_on_release:
            req.allocated = 0  # released: `req.kv = None` (0.5.16-0.5.18), Al = 0 (0.5.19+)
        req.holds_kv = False
        req.abort_pending = False
