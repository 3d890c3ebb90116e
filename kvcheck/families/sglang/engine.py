"""The engine: replays a scenario the way SGLang's overlap loop would, around the target resolver.

Per `Step` (docs/semantics.md §2.1): build the next batch (merge the last prefill batch,
drop finished requests, prefill every waiting request if there is one, else apply pending
retractions and prepare a decode batch), launch it (a snapshot of the row order and the launch
stride), then deliver the previous launch. A decode delivery builds the CPU tensors, calls the
target with (scheduler, result, batch), and then does what the scheduler does with the runs it
returns: skip stale rows, extend outputs of live rows, check finish, release. Without overlap the
launch is delivered in the same step, so stale rows never arise.

With an allocation rule configured (`Config.allocation`) the engine also allocates and releases
KV as the scheduler does around the resolver, through an `AllocationPath`
(`kvcheck.families.sglang.allocation`): a row and pages at prefill, the reserve at each decode
launch (before
the pre-claim), release when a request finishes or is retracted; the pool's ownership faults and
the `kv_allocated_len` the resolver found and left are observed after every event.

The engine knows nothing of the reference model: what it observes comes from the fakes, which the
target mutated. Its state is plain objects, so `clone()` is a deep copy.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, Final, NoReturn

import attrs

from kvcheck.core.calls import TargetCalls, tensor_library
from kvcheck.core.copying import Checkpoint, checkpoint, deep_copy
from kvcheck.core.deadline import TargetDeadlineExceeded, call_with_deadline
from kvcheck.core.jsonable import type_name
from kvcheck.core.snapshots import refreshed
from kvcheck.errors import UnsupportedTargetError as UnsupportedTargetError
from kvcheck.families.sglang.allocation import AllocationPath, RuleAllocation
from kvcheck.families.sglang.allocation_rules import EstimateAsker
from kvcheck.families.sglang.fakes import (
    ALGORITHM_FAKES,
    COPY_DONE,
    UNMODELLED_ACCESSES,
    ControllerFeed,
    FakeBatch,
    FakeCopyDone,
    FakeGrammar,
    FakeReq,
    FakeResult,
    FakeScheduler,
    FinishAbort,
    FinishLength,
    FinishMatchedToken,
    GrammarRefusal,
    UnmodeledAttributeError,
    histogram_of,
    is_finished,
)
from kvcheck.families.sglang.pool import PoolState
from kvcheck.families.sglang.scenario import (
    Abort,
    Admit,
    Config,
    Event,
    Retract,
    Step,
    SwitchStride,
    accept_for_row,
    block_cap_for_row,
    token_id,
)

Resolver = Callable[[Any, Any, Any], Any]

# How the engine calls the target (`kvcheck.core.calls`): a fake's unmodelled attribute is outside
# the model, a grammar refusal is the fake behaving as the real grammar does, and the resolvers
# this package ships (built-ins, the mutant corpus) are targets like any other.
_HERE: Final = Path(__file__).resolve().parent
_run_target: Final = TargetCalls(
    outside_model=(UnmodeledAttributeError,),
    not_faults=(GrammarRefusal,),
    shipped_targets=(str(_HERE / "builtins.py"), str(_HERE / "mutants") + os.sep),
).run


@attrs.frozen
class ObservedRequest:
    """What the engine read off one request's fake after an event.

    `committed` is C, `outputs` is L; `verify_ct`, `drafts` and `histogram` are the speculative
    statistics. Counters are kept exactly as the target left them (hence `Any`): a tensor or a
    float there is for the checkers to report, never coerced.
    """

    rid: str
    committed: Any
    verify_ct: Any
    drafts: Any
    histogram: tuple[tuple[int, int], ...]
    outputs: int
    finished: bool
    retracted: bool
    block_tokens: Any = 0
    cap_tokens: Any = 0
    cap_histogram: tuple[tuple[int, int], ...] = ()
    # With an allocation rule: `kv_allocated_len` as left on the fake (None without one: the
    # fake then refuses it), the pages its row holds, and whether it holds a row.
    allocated: Any = 0
    pages: int = 0
    holds_row: bool = False


@attrs.frozen
class ObservedDelivery:
    """What the target produced for one delivered decode launch.

    Per row (in launch order): the rid and whether the row was stale at delivery; the runs it
    returned; and the batch-level values it wrote on the result or fed the adaptive controller,
    which `global-counters` judges.
    """

    launch_number: int
    rids: tuple[str, ...]
    stale: tuple[bool, ...]
    # The runs the target returned, as tuples of ints; None if not a list of lists of Python
    # ints, and then `runs_problem` says what is wrong with it and `runs_repr` shows what it
    # returned (empty when the runs are ints: the repr is made only to report it).
    runs: tuple[tuple[int, ...], ...] | None
    runs_repr: str
    global_drafts: Any
    # The per-row draft list the target wrote on the result (None if not written), its calls of
    # the adaptive controller during this delivery, and the block/cap totals it wrote.
    per_row_drafts: Any = None
    controller_feeds: tuple[ControllerFeed, ...] = ()
    block_cap_totals: tuple[Any, Any] = (None, None)
    # Per row: the tokens offered to the row's request's grammar during the call (None when the
    # request has no grammar).
    grammar_offered: tuple[tuple[int, ...] | None, ...] = ()
    # Per row: how many tokens the row's grammar had been offered before the call (None when
    # the request has no grammar).
    grammar_offered_before: tuple[int | None, ...] = ()
    runs_problem: str | None = None
    # With an allocation rule: (rid, before, after) for every request whose `kv_allocated_len`
    # the resolver's call changed.
    allocated_changed: tuple[tuple[str, Any, Any], ...] = ()


@attrs.frozen
class Observation:
    """Everything the engine observed after one event, as the invariant checkers receive it.

    Every request, the decode delivery when the event delivered one, the target's exception as
    text when it raised (`target-raised`), and the aspects it is not held to.
    """

    requests: tuple[ObservedRequest, ...]
    delivery: ObservedDelivery | None
    target_error: str | None = None
    # Aspects the target is not held to (`kvcheck.families.sglang.target.ASPECTS`): its API
    # generation
    # does not maintain them.
    not_judged: frozenset[str] = frozenset()
    # With an allocation rule: the pool after the event and the ownership faults it caused, and
    # for a decode launch the pages the memory check estimated and the pages it allocated.
    pool: PoolState | None = None
    launch_pages: tuple[int, int] | None = None
    # The deadline (seconds) a call of the target ran past and was interrupted at
    # (`target-deadline`); None when every call returned in time.
    deadline_exceeded: float | None = None
    # How many of `pool.faults` (the first ones) a step caused before its delivery called the
    # target: its launch's (admission, retraction, the decode launch). Those are reported
    # before the delivery's findings (`kvcheck.families.sglang.invariants.check_event`).
    faults_before_delivery: int = 0
    # The requests the step's decode memory check retracted, in the order it took them (the
    # release's chooser where the allocation path brings one).
    pressure_retracted: tuple[str, ...] = ()


@attrs.define
class _EngineLaunch:
    number: int
    kind: str
    batch: FakeBatch
    stride: int
    accepts: tuple[int, ...]
    block_caps: tuple[tuple[int, int], ...] = ()


class Engine:
    """SGLang's overlap scheduler around one target resolver, on strict fakes.

    `apply` plays one scenario event as the scheduler would (module docstring) and returns what
    it then observes on the fakes. The engine never consults the reference model.
    """

    def __init__(
        self,
        config: Config,
        resolver: Resolver,
        self_methods: Mapping[str, Callable[..., Any]] | None = None,
        *,
        not_judged: frozenset[str],
        allocation: AllocationPath | None = None,
        deadline: float | None = None,
    ) -> None:
        """`not_judged`: the aspects (`kvcheck.families.sglang.target.ASPECTS`) the target is not
        held to,
        from its probed shape (`Target.shape.not_judged`); the engine never probes.
        `allocation`: the path that allocates and releases when `config.allocation` names a
        rule (default: kvcheck's own, `RuleAllocation`). `deadline`: seconds each call of the
        target may take (`kvcheck.core.deadline`; None: no limit)."""
        self.not_judged = not_judged
        self.deadline = deadline
        self.allocation: AllocationPath | None = None
        if config.allocation_rule.allocates:
            self.allocation = allocation if allocation is not None else RuleAllocation(config)
        self.config = config
        self.resolver = resolver
        self.scheduler = FakeScheduler(config.stride, config.overlap)
        if self_methods:
            self.scheduler.bind_methods(dict(self_methods))
        # The target's file defines the grammar step SGLang's scheduler also runs on prefill
        # batches (0.5.17+): the engine runs it there instead of accepting the token itself.
        self.own_grammar_fsm = "advance_grammar_fsm" in (self_methods or {})
        self.reqs: dict[str, FakeReq] = {}
        self.eos_at: dict[str, int | None] = {}
        self.waiting: list[FakeReq] = []
        self.running: list[FakeReq] = []
        self.last_prefill: list[FakeReq] = []
        self.pending: _EngineLaunch | None = None
        self.retract_requested: set[str] = set()
        self.launch_count = 0
        # Unmodelled accesses the target made during its calls and caught itself
        # (`kvcheck.families.sglang.fakes.UNMODELLED_ACCESSES`): a run with any gives no verdict.
        self.unmodelled: list[str] = []
        # The decode launch of the current event: (pages the memory check estimated, pages it
        # allocated), with an allocation rule.
        self.launch_pages: tuple[int, int] | None = None
        # The last observation `apply` returned: its requests are handed on where the next
        # event leaves them unchanged (`kvcheck.core.snapshots`), and all of it where the
        # event changed nothing; whether the target ran in this step, and the rows of the
        # prefill it delivered.
        self._last: Observation | None = None
        self._target_ran = False
        self._delivered_rids: tuple[str, ...] = ()
        self._faults_before_delivery = 0  # `Observation.faults_before_delivery`
        self._pressure_retracted: list[str] = []  # `Observation.pressure_retracted`

    @property
    def own_scheduler(self) -> bool:
        """Whether kvcheck plays the scheduler itself: its own allocation path
        (`RuleAllocation`) on a pool nobody else writes."""
        allocation = self.allocation
        return type(allocation) is RuleAllocation and allocation.pool.exclusive

    def clone(self) -> Engine:
        """An independent copy for exhaustive search to branch from.

        Requests, queues and the pending launch are deep-copied; the resolver itself is shared.
        """
        # The resolver and bound methods are shared; fakes and queues are copied.
        copied: Engine = deep_copy(self, share=(self.resolver,))
        return copied

    def checkpoint(self) -> Checkpoint | None:
        """What `clone` copies (all but the resolver), to put back after events applied in
        place (`kvcheck.core.copying.checkpoint`); None when the state holds what cannot be
        put back (a tensor the target stored)."""
        return checkpoint(self, share=(self.resolver,))

    def state_key(self, inert: frozenset[str] = frozenset()) -> tuple[Any, ...]:
        """A hashable summary of everything later events and checks depend on (exhaustive mode).

        Two engines with equal keys behave alike on every continuation, up to token ids: those
        encode launch numbers, so they are abstracted to output lengths, and launch numbers,
        retraction counts and the controller's feed log are left out. Values the target stored
        with a non-int type are kept by type and repr, so they never merge with a correct state.
        Requests in `inert` (finished, in no queue or launch: `kvcheck.search.exhaust` says why
        that is sound) are keyed by their id alone.
        """
        reqs = tuple(
            (rid, "inert")
            if rid in inert
            else (
                rid,
                len(req.origin_input_ids),
                req.sampling_params.max_new_tokens,
                self.eos_at[rid],
                len(req.output_ids),
                _plain(req.kv_committed_len),
                _plain(req._allocated),
                req.is_retracted,
                req._aborted_waiting,
                _reason_key(req.finished_reason),
                req.finished_len,
                _reason_key(req.to_finish),
                _plain(req.spec_verify_ct),
                _plain(req._spec_drafts),
                req.histogram(),
                _plain(req.spec_num_block_accept_tokens),
                _plain(req.spec_num_cap_tokens),
                tuple(sorted(req._cap_histogram.items())),
                None
                if req.grammar is None
                else (
                    req.grammar._kind,
                    req.grammar._at,
                    len(req.grammar._offered),
                    req.grammar._terminated,
                ),
            )
            for rid, req in self.reqs.items()
        )
        pending = self.pending
        return (
            self.config.convention,
            self.config.overlap,
            self.config.adaptive,
            self.config.page_size,
            self.config.global_counters,
            self.config.algorithm,
            self.config.block_cap,
            # The allocation rule: two rules start from the same empty pool but diverge.
            self.config.allocation,
            self.scheduler.draft_worker.speculative_num_draft_tokens,
            reqs,
            tuple(req.rid for req in self.waiting),
            tuple(req.rid for req in self.running),
            tuple(req.rid for req in self.last_prefill),
            tuple(sorted(self.retract_requested)),
            None if self.allocation is None else self.allocation.pool.summary(),
            None
            if pending is None
            else (
                pending.kind,
                tuple(req.rid for req in pending.batch.reqs),
                pending.stride,
                pending.accepts,
                pending.block_caps,
            ),
        )

    # -- events -------------------------------------------------------------------------------

    def apply(self, event: Event) -> Observation:
        """Play one event and observe every request afterwards.

        A `Step` calls the target when it delivers a decode launch. Raises `UnsupportedTargetError`
        (exit 2) when the target touches something kvcheck does not model or imports what it cannot
        provide; any other exception from the target is recorded in `Observation.target_error`.
        """
        delivery: ObservedDelivery | None = None
        target_error: str | None = None
        self.launch_pages = None
        self._faults_before_delivery = 0
        self._pressure_retracted = []
        exceeded: float | None = None
        # The requests the event may change (None: any).
        changed: Collection[str] | None = None
        match event:
            case Admit(rid=rid, prompt_len=p, max_new_tokens=m, eos_at=e, grammar=g):
                # A rid admitted again is a no-op (most drawn admissions repeat one), and so
                # is an abort of a finished or unknown request: no fake changes.
                changed = ()
                if rid not in self.reqs:
                    changed = (rid,)
                    admitted = FakeReq(rid, p, m, allocation_modelled=self.allocation is not None)
                    if g is not None:
                        admitted.grammar = FakeGrammar(g.kind, g.at)
                    self.reqs[rid] = admitted
                    self.eos_at[rid] = e
                    self.waiting.append(admitted)
            case Step():
                # The target may change any request it ever saw; without it, a step changes the
                # unfinished requests and the rows of the prefill it delivers.
                live = [rid for rid, req in self.reqs.items() if not is_finished(req)]
                self._target_ran = False
                try:
                    delivery, target_error = self._step(event)
                except TargetDeadlineExceeded as exc:
                    exceeded = exc.seconds
                if not self._target_ran:
                    changed = set(live).union(self._delivered_rids)
            case Retract(rid=rid):
                req = self.reqs.get(rid)
                if (
                    req is not None
                    and not is_finished(req)
                    and (req in self.running or req in self.last_prefill)
                ):
                    self.retract_requested.add(rid)
                changed = ()  # a retraction request is no part of the observation
            case Abort(rid=rid):
                changed = (rid,) if self._abort(rid) else ()
            case SwitchStride(stride=stride):
                if self.config.adaptive:
                    self.scheduler.draft_worker.speculative_num_draft_tokens = stride
                changed = ()
        pool = None
        if self.allocation is not None:
            self.allocation.pool.check_changed()
            pool = self.allocation.pool.state()
        last: Observation | None = getattr(self, "_last", None)
        requests = refreshed(
            None if last is None else last.requests, self.reqs, changed, self._observe
        )
        # An event that changed nothing hands the last observation on (see the model's
        # `apply`): `check_event` knows the pair passed.
        if (
            last is not None
            and requests is last.requests
            and pool is last.pool
            and delivery is None
            and last.delivery is None
            and target_error is None
            and last.target_error is None
            and self.launch_pages is None
            and last.launch_pages is None
            and exceeded is None
            and last.deadline_exceeded is None
            and not self._pressure_retracted
            and not last.pressure_retracted
        ):
            return last
        self._last = Observation(
            requests,
            delivery,
            target_error,
            self.not_judged,
            pool,
            self.launch_pages,
            exceeded,
            self._faults_before_delivery,
            tuple(self._pressure_retracted),
        )
        return self._last

    def observe_requests(self) -> tuple[ObservedRequest, ...]:
        """Every request admitted so far as its fake now holds it, in admission order."""
        return tuple(map(self._observe, self.reqs.values()))

    def _observe(self, req: FakeReq) -> ObservedRequest:
        """One request as its fake now holds it."""
        pool = None if self.allocation is None else self.allocation.pool
        # Positional, in field order: made after nearly every event, and fourteen keyword
        # arguments cost half as much again as the record itself.
        return ObservedRequest(
            req.rid,
            req.kv_committed_len,  # committed
            req.spec_verify_ct,  # verify_ct
            req._spec_drafts,  # drafts
            histogram_of(req),  # histogram
            len(req.output_ids),  # outputs
            is_finished(req),  # finished
            req.is_retracted,  # retracted
            req.spec_num_block_accept_tokens,  # block_tokens
            req.spec_num_cap_tokens,  # cap_tokens
            tuple(sorted(req._cap_histogram.items())),  # cap_histogram
            req._allocated,  # allocated (None without an allocation rule)
            0 if pool is None else pool.held(req.rid),  # pages
            pool is not None and pool.has_row(req.rid),  # holds_row
        )

    def _abort(self, rid: str) -> bool:
        """Abort a request; False (nothing done) when it is unknown or finished."""
        req = self.reqs.get(rid)
        if req is None or is_finished(req):
            return False
        if req in self.waiting:
            self._drop_waiting(req)
        else:
            req.to_finish = FinishAbort()  # `abort_request`'s, without an abort message
        return True

    def _drop_waiting(self, req: FakeReq) -> None:
        """SGLang's abort of a waiting request: popped from the queue, with no finish reason
        and no `finished_len` (scheduler.py `abort_request`, every release; only disaggregated
        decode sets one). A retracted request's stale row can still be delivered after it."""
        self.waiting.remove(req)
        req._aborted_waiting = True

    def _step(self, step: Step) -> tuple[ObservedDelivery | None, str | None]:
        self._delivered_rids = ()
        previous = self.pending if self.config.overlap else None
        self.pending = None
        launched = self._build_and_launch(step)
        to_deliver = previous if self.config.overlap else launched
        if self.config.overlap:
            self.pending = launched
        if self.allocation is not None:
            # The launch in flight reads its rows until it is delivered (next step).
            reading = launched.batch.reqs if launched is not None and self.config.overlap else []
            self.allocation.pool.reading = {req.rid for req in reading}
        if to_deliver is None:
            return None, None
        if self.allocation is not None:
            self._faults_before_delivery = len(self.allocation.pool.faults)
        return self._deliver(to_deliver)

    # -- build and launch ---------------------------------------------------------------------

    def _build_and_launch(self, step: Step) -> _EngineLaunch | None:
        self.running.extend(self.last_prefill)
        self.last_prefill = []
        self.running = [req for req in self.running if not is_finished(req)]
        admitted = self._admissible()
        if admitted:
            return self._prefill(admitted)
        for req in [r for r in self.running if r.rid in self.retract_requested]:
            self._reset_for_retract(req)
        if self.config.pool_pages and self.running:
            self._check_decode_mem()
        if not self.running:
            return None
        return self._prepare_for_decode(step)

    def _admissible(self) -> list[FakeReq]:
        """The waiting requests a prefill admits now: all of them, or with a fixed pool those
        that fit in queue order beside the running batch's next decode (docs/semantics.md §5)."""
        if not self.config.pool_pages or self.allocation is None:
            return list(self.waiting)
        path, stride = self.allocation, self.scheduler.draft_worker.speculative_num_draft_tokens
        room = path.pool.available_size() // path.pool.page_size
        room -= path.estimate_decode(self.running, stride)
        admitted = []
        for req in self.waiting:
            cost = path.admission_pages(req, stride)
            if cost > room:
                break
            room -= cost
            admitted.append(req)
        return admitted

    def _check_decode_mem(self) -> None:
        """SGLang's `check_decode_mem` / `retract_decode` before a decode launch: when the
        estimate does not fit, retract from the back of the batch until it does, keeping one
        request. The batch is in the release's own order where the allocation path brings
        one; else sorted under the rule's `retraction_sorted` (0.5.17+: fewest outputs, then
        longest prompt, then latest in the batch go first), and as it stands without."""
        assert self.allocation is not None
        path, stride = self.allocation, self.scheduler.draft_worker.speculative_num_draft_tokens

        def fits(reqs: list[FakeReq], asked_by: EstimateAsker = "retraction") -> bool:
            free = path.pool.available_size() // path.pool.page_size
            return path.estimate_decode(reqs, stride, asked_by=asked_by) <= free

        # The release's own check where the path brings it (its estimate, eviction and
        # comparison), else the estimate against the pool.
        released = path.decode_fits(self.running, stride)
        if fits(self.running, "check") if released is None else released:
            return
        faults = len(path.pool.faults)
        aborted = path.retract_for_memory(self.running, self._retract_under_pressure)
        if aborted is not None:  # the release's own loop ran
            # What cannot fit even alone is aborted (0.5.10+) or left to fail (before); an
            # abort with a fault is the fault's doing, which is judged.
            if not fits(self.running) or (aborted and len(path.pool.faults) == faults):
                self._out_of_memory((aborted or self.running)[0])
            return
        order = path.retraction_order(self.running)
        if order is None:
            order = list(self.running)
            if self.config.allocation_rule.retraction_sorted:
                order.sort(
                    key=lambda req: (len(req.output_ids), -len(req.origin_input_ids)),
                    reverse=True,
                )
        while len(order) > 1:
            self._retract_under_pressure(order.pop())
            if fits(order):
                return
        if not fits(order):
            self._out_of_memory(order[0])

    def _retract_under_pressure(self, req: FakeReq) -> None:
        """The memory check's retraction of `req`, in the order it retracts."""
        self._pressure_retracted.append(req.rid)
        self._reset_for_retract(req)

    def _out_of_memory(self, req: FakeReq) -> NoReturn:
        raise UnsupportedTargetError(
            f"the pool ({self.config.pool_pages} pages) cannot hold {req.rid}'s next decode "
            "even alone; SGLang then aborts it, which kvcheck does not model"
        )

    def _prefill(self, batch: list[FakeReq]) -> _EngineLaunch:
        self.waiting = [req for req in self.waiting if req not in batch]
        path = self.allocation
        for req in batch:
            req.is_retracted = False
            if path is None or not path.owns_admission_lengths:
                req.kv_committed_len = len(req.origin_input_ids) + len(req.output_ids)
                if path is not None:
                    req.kv_allocated_len = req.kv_committed_len
        if path is not None:
            path.admit(batch)
        self.last_prefill = list(batch)
        self.launch_count += 1
        stride = self.scheduler.draft_worker.speculative_num_draft_tokens
        prefill = FakeBatch(batch, "extend")
        prefill.enable_overlap = self.config.overlap  # the scheduler's, on every batch it makes
        return _EngineLaunch(self.launch_count, "prefill", prefill, stride, ())

    def _reset_for_retract(self, req: FakeReq) -> None:
        self.retract_requested.discard(req.rid)
        self.running.remove(req)
        if self.allocation is not None:
            self.allocation.retract(req)
        if self.allocation is None or not self.allocation.resets_retracted:
            req.retraction_count += 1
            req.is_retracted = True
            req.kv_committed_len = 0
            if self.allocation is not None:
                req.kv_allocated_len = 0
        self.waiting.append(req)

    def _prepare_for_decode(self, step: Step) -> _EngineLaunch:
        config = self.config
        stride = self.scheduler.draft_worker.speculative_num_draft_tokens
        width = config.output_width(stride)
        reqs = list(self.running)
        if self.allocation is not None:
            pool = self.allocation.pool
            estimate = self.allocation.estimate_decode(reqs, stride)
            handed_out = pool.handed_out
            self.allocation.prepare_decode(reqs, stride)  # sized before the pre-claim
            # Judged (`alloc-estimate-matches`) where the rule's estimate is the launch's own
            # sizing; a bound (0.5.6-0.5.10) is only required to decide retraction as the
            # model does.
            if config.allocation_rule.decode_estimate == "next-sizing":
                self.launch_pages = (estimate, pool.handed_out - handed_out)
        if config.preclaims and not (self.allocation and self.allocation.owns_preclaim):
            for req in reqs:
                req.kv_committed_len += 1
        rows = range(len(reqs))
        accepts = tuple(accept_for_row(step, row, width, config.non_draft_tokens) for row in rows)
        block_caps = (
            tuple(block_cap_for_row(step, row, width) for row in rows) if config.block_cap else ()
        )
        self.launch_count += 1
        batch = FakeBatch(reqs)  # a fresh list: the snapshot's row order is fixed at launch
        batch.enable_overlap = config.overlap
        batch.spec_algorithm = ALGORITHM_FAKES[config.algorithm]
        return _EngineLaunch(self.launch_count, "decode", batch, stride, accepts, block_caps)

    # -- delivery -----------------------------------------------------------------------------

    def _deliver(self, launch: _EngineLaunch) -> tuple[ObservedDelivery | None, str | None]:
        self._delivered_rids = tuple(req.rid for req in launch.batch.reqs)
        if launch.kind == "prefill":
            return None, self._deliver_prefill(launch)
        self._target_ran = True

        result = self._make_result(launch)
        feeds_before = len(self.scheduler.model_worker.verify_feeds)
        offered_before = [
            None if req.grammar is None else len(req.grammar._offered) for req in launch.batch.reqs
        ]
        UNMODELLED_ACCESSES.clear()
        allocated_before = (
            [(req, req._allocated) for req in self.reqs.values()]
            if self.allocation is not None
            else []
        )
        returned, target_error = _run_target(
            call_with_deadline, self.deadline, self.resolver, self.scheduler, result, launch.batch
        )
        self.unmodelled.extend(UNMODELLED_ACCESSES)
        allocated_changed: tuple[tuple[str, Any, Any], ...] = ()
        if self.allocation is not None:
            allocated_changed = tuple(
                (req.rid, before, req._allocated)
                for req, before in allocated_before
                if not _values_same(before, req._allocated)
            )
        runs, runs_problem = _runs_as_ints(returned)
        grammar_offered = tuple(
            None if req.grammar is None or before is None else tuple(req.grammar._offered[before:])
            for req, before in zip(launch.batch.reqs, offered_before, strict=True)
        )
        self._apply_abort_requests()
        stale = tuple(req.is_retracted or is_finished(req) for req in launch.batch.reqs)
        # The scheduler's per-row loop (docs/semantics.md §2.4 step 3) with the target's runs.
        for row, req in enumerate(launch.batch.reqs):
            if stale[row]:
                continue
            if runs is not None and row < len(runs):
                req.output_ids.extend(runs[row])
            self._update_finish_state(req)
            self._release_if_finished(req)
            if req.grammar is not None:
                req.grammar.finished = is_finished(req)
        observed = ObservedDelivery(
            launch_number=launch.number,
            rids=tuple(req.rid for req in launch.batch.reqs),
            stale=stale,
            runs=runs,
            runs_repr="" if runs is not None else _short_repr(returned),
            global_drafts=result._draft_total,
            per_row_drafts=result._draft_per_req,
            controller_feeds=tuple(self.scheduler.model_worker.verify_feeds[feeds_before:]),
            block_cap_totals=(result.num_block_accept_tokens, result.num_cap_tokens),
            grammar_offered=grammar_offered,
            grammar_offered_before=tuple(offered_before),
            runs_problem=runs_problem,
            allocated_changed=allocated_changed,
        )
        return observed, target_error

    def _apply_abort_requests(self) -> None:
        """What SGLang's `abort_request(AbortReq(rid=...))` does to the requests the target named
        (a 0.5.14-0.5.15 grammar refusal): a waiting request whose rid starts with it leaves the
        queue; an unfinished running one gets `to_finish`."""
        requests, self.scheduler._abort_requests = self.scheduler._abort_requests, []
        for recv in requests:
            for req in list(self.waiting):
                if req.rid.startswith(recv.rid):
                    self._drop_waiting(req)
            for req in self.running + self.last_prefill:
                if not is_finished(req) and req.rid.startswith(recv.rid):
                    req.to_finish = FinishAbort()

    def _deliver_prefill(self, launch: _EngineLaunch) -> str | None:
        """A prefill result: each live request takes its first token, then (after the finish
        check, as SGLang's prefill processing does) its grammar accepts it. A target whose own
        file defines `advance_grammar_fsm` (0.5.17+) has that code run on the prefill batch, as
        SGLang's scheduler does; its exception is the target's (`target-raised`)."""
        live = []
        for row, req in enumerate(launch.batch.reqs):
            if req.is_retracted or is_finished(req):
                continue
            req.output_ids.append(token_id(launch.number, row, 0))
            self._update_finish_state(req)
            self._release_if_finished(req)
            live.append((row, req))
        if not launch.batch.has_grammar:
            return None
        if self.own_grammar_fsm:
            return self._call_target(self.scheduler.advance_grammar_fsm, launch)
        for row, req in live:
            if req.grammar is not None:
                try:
                    req.grammar.accept_token(token_id(launch.number, row, 0))
                except ValueError:
                    if not is_finished(req):
                        req.to_finish = FinishAbort()  # 0.5.16-0.5.22; 0.5.23 adds a message
                req.grammar.finished = is_finished(req)
        return None

    def _call_target(self, method: Callable[..., Any], launch: _EngineLaunch) -> str | None:
        """Run the target's grammar step on a prefill batch; the error text if it raised."""
        import torch  # see _make_result

        rows = len(launch.batch.reqs)
        tokens = [token_id(launch.number, row, 0) for row in range(rows)]
        result = FakeResult(
            torch.tensor(tokens, dtype=torch.int64),
            torch.ones(rows, dtype=torch.int32),
            launch.stride,
            copy_done=self._copy_done(),
        )
        result.accept_lens = None  # a prefill result has none
        self._target_ran = True
        UNMODELLED_ACCESSES.clear()
        _, target_error = _run_target(
            call_with_deadline, self.deadline, method, result, launch.batch
        )
        self.unmodelled.extend(UNMODELLED_ACCESSES)
        if target_error is not None:
            return target_error
        for req in launch.batch.reqs:
            if req.grammar is not None:
                req.grammar.finished = is_finished(req)
        return None

    def _make_result(self, launch: _EngineLaunch) -> FakeResult:
        # Imported at the first result: torch takes seconds to import, and a CLI that only
        # reports a usage error should not pay for it (workers import it up front).
        torch = tensor_library()
        config = self.config
        rows, width = len(launch.batch.reqs), config.output_width(launch.stride)
        next_token_ids = _token_ids(torch, launch.number, rows, width)
        accept_lens = _int32_row(torch, launch.accepts)
        blocks = caps = None
        if launch.block_caps:
            blocks = _int32_row(torch, tuple(b for b, _ in launch.block_caps))
            caps = _int32_row(torch, tuple(c for _, c in launch.block_caps))
        return FakeResult(
            next_token_ids,
            accept_lens,
            launch.stride,
            output_stride=width if config.algorithm == "uno" else None,
            non_draft_tokens=config.non_draft_tokens,
            block_accept_lens=blocks,
            cap_lens=caps,
            copy_done=self._copy_done(),
        )

    def _copy_done(self) -> FakeCopyDone | None:
        # SGLang's overlap path records a device-to-host copy event on the result; its
        # synchronous path leaves `copy_done` None (scheduler.py's non-overlap branch, 0.5.23).
        return COPY_DONE if self.config.overlap else None

    def _release_if_finished(self, req: FakeReq) -> None:
        """Release a request's KV once it finished on the row just processed, as the result
        processor does (a grammar step's abort is released where the next row finishes it).
        Not when the resolver just wrote something other than an int into `kv_allocated_len`:
        SGLang's release would fail on it, and `alloc-untouched-by-resolver` reports the write
        at this event rather than kvcheck's allocator raising."""
        if self.allocation is not None and is_finished(req):
            if type(req._allocated) is not int:
                return
            self.allocation.release(req)

    def _update_finish_state(self, req: FakeReq) -> None:
        if is_finished(req):
            return
        # What SGLang's `Req.check_finished` / `update_finish_state` sets (docs/fakes.md): the
        # pending reason as it is, with no `finished_len`; an EOS or length finish with one; a
        # terminated grammar with none.
        if req.to_finish is not None:
            req.finished_reason, req.to_finish = req.to_finish, None
            return
        emitted = len(req.output_ids)
        max_new = req.sampling_params.max_new_tokens
        eos_at = self.eos_at[req.rid]
        if eos_at is not None and eos_at <= min(emitted, max_new):
            req.finished_reason = FinishMatchedToken(req.output_ids[eos_at - 1])
            req.finished_len = eos_at
        elif emitted >= max_new:
            req.finished_reason, req.finished_len = FinishLength(max_new), max_new
        elif req.grammar is not None and req.grammar.is_terminated():
            # After the EOS and length checks (0.5.18+ order).
            req.finished_reason = FinishMatchedToken(req.output_ids[-1])


# Templates of the result tensors, by shape (`next_token_ids`) and by values (per-row int32
# lists). A result gets a new tensor made from one (`add`, `clone`): an ordinary CPU tensor of its
# own, which the target may change at will, made in a third of `torch.tensor(list)`'s time.
_TOKEN_TEMPLATES: dict[tuple[int, int], Any] = {}
_INT32_TEMPLATES: dict[tuple[int, ...], Any] = {}
_TEMPLATES_MAX: Final = 4096


def _token_ids(torch: Any, launch_no: int, rows: int, width: int) -> Any:
    """A new int64 tensor of `token_id(launch_no, row, col)` for `rows` rows of `width`, row by
    row (`token_id` is `token_id(launch_no, 0, 0)` plus `token_id(0, row, col)`)."""
    template = _TOKEN_TEMPLATES.get((rows, width))
    if template is None:
        if len(_TOKEN_TEMPLATES) >= _TEMPLATES_MAX:
            _TOKEN_TEMPLATES.clear()
        template = _TOKEN_TEMPLATES[(rows, width)] = torch.tensor(
            [token_id(0, row, col) for row in range(rows) for col in range(width)],
            dtype=torch.int64,
        )
    return template.add(token_id(launch_no, 0, 0))


def _int32_row(torch: Any, values: tuple[int, ...]) -> Any:
    """A new int32 tensor holding `values`."""
    template = _INT32_TEMPLATES.get(values)
    if template is None:
        if len(_INT32_TEMPLATES) >= _TEMPLATES_MAX:
            _INT32_TEMPLATES.clear()
        template = _INT32_TEMPLATES[values] = torch.tensor(values, dtype=torch.int32)
    return template.clone()


def _values_same(before: Any, after: Any) -> bool:
    """Whether a value the target may have rebound is still the same plain int."""
    return type(after) is type(before) and after == before


def _plain(value: Any) -> Any:
    """`value` for a state key: an int as itself, anything else by type and repr."""
    return value if type(value) is int else (type(value).__name__, repr(value))


def _reason_key(reason: Any) -> Any:
    """A finish reason for a state key: a matched token by its kind alone (token ids encode
    launch numbers, and it is always the output token at the stop), else as `_plain`."""
    if reason is None:
        return None
    if type(reason) is FinishMatchedToken:
        return FinishMatchedToken.sglang_name
    return _plain(reason)


def _runs_as_ints(returned: Any) -> tuple[tuple[tuple[int, ...], ...] | None, str | None]:
    """The target's return value as tuples of ints, or (None, what is wrong with it).

    SGLang extends `req.output_ids` with each run as it is, so a run must be a list of Python
    ints: a tensor, a numpy integer, a float, a bool or a string there is a bug even when its
    value is right, never normalised away."""
    if not isinstance(returned, list | tuple):
        return None, f"it is {type_name(returned)}, not a list of runs"
    for row, run in enumerate(returned):
        if not isinstance(run, list | tuple):
            return None, f"run {row} is {type_name(run)}, not a list of Python ints"
        for token in run:
            if type(token) is not int:
                return None, (
                    f"run {row} holds {_short_repr(token, 40)} ({type_name(token)}), "
                    "not a Python int"
                )
    return tuple(tuple(run) for run in returned), None


def _short_repr(value: Any, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
