"""A compiled vLLM release behind the family's seam (`SchedulerUnderTest`).

The release's `AsyncScheduler` runs as written on a fake `self`: its attributes are the ones
`Scheduler.__init__` sets (kvcheck sets them, with every optional feature off: no connectors,
no encoder inputs, no structured output, no LoRA, statistics off, prefix caching off), the KV
cache manager is `fakes.BlockPool` (a finite pool, so allocation fails and the release's own
`schedule()` preempts), and the requests are the release's own `Request` objects.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import attrs
import numpy

from kvcheck.families.vllm.real import fakes
from kvcheck.families.vllm.real.compiled import CompiledRelease
from kvcheck.families.vllm.target import (
    Delivered,
    FrameOutput,
    Launch,
    NewRequest,
    PoolView,
    RequestView,
    ScheduledRequest,
    SchedulerSettings,
    SpecStats,
    spec_tokens_for_batch,
)


def _config(owner: str, **values: Any) -> fakes.Strict:
    cls = type(owner, (fakes.Strict,), {"_owner": owner, "_fields": frozenset(values)})
    made: fakes.Strict = cls(**values)
    return made


class _EncoderCacheManager(fakes.Strict):
    """No request has encoder inputs: freeing one is a no-op."""

    _owner = "EncoderCacheManager"
    # What `__init__` builds it with when no model input is multimodal (`mm_budget` None:
    # `S:198-202` @0.16.0); `make_stats` reads it for the encoder cache usage (0.16-0.19).
    cache_size = 0

    def free(self, request: Any) -> None:
        return None

    def get_freed_mm_hashes(self) -> list[str]:
        return []

    def get_manager_metadata(self) -> None:
        """No encoder cache metadata for the runner (0.33+)."""
        return None

    def reset(self) -> None:
        return None


class _StructuredOutputManager(fakes.Strict):
    """The scheduler's structured-output manager over kvcheck's grammar (`target.Grammar`, None
    when no request has one): a request without structured output passes unchanged, as in
    vLLM (`validate_tokens`/`accept_tokens`, v1/structured_output/__init__.py:362-380, 533-553
    @0.33.0; `should_advance` and the request's own grammar through 0.29)."""

    _owner = "StructuredOutputManager"
    _fields = frozenset({"grammar"})

    def should_advance(self, request: Any, new_token_ids: Any = None) -> bool:
        return bool(request.use_structured_output)

    def trim_reasoning_for_advance(self, request: Any, new_token_ids: list[int]) -> list[int]:
        """No reasoning parser: every token is grammar content (0.26-0.29)."""
        return new_token_ids

    def validate_tokens(self, request: Any, spec_tokens: list[int]) -> list[int]:
        if not request.use_structured_output or self.grammar is None:
            return spec_tokens
        return list(self.grammar.validate_tokens(request.request_id, spec_tokens))

    def accept_tokens(self, request: Any, tokens: Any) -> bool:
        if not request.use_structured_output or not tokens or self.grammar is None:
            return True
        return bool(self.grammar.accept_tokens(request.request_id, list(tokens)))

    def grammar_bitmask(
        self, requests: Any, structured_output_request_ids: list[str], spec_tokens: Any
    ) -> Any:
        """A bitmask kvcheck's runner never reads (it caps acceptance at the valid drafts
        itself): one row per request."""
        return numpy.zeros((len(structured_output_request_ids), 1), dtype=numpy.int32)


class _EventPublisher(fakes.Strict):
    _owner = "KVEventPublisher"

    def publish(self, events: Any) -> None:
        return None


# An attribute `__init__` sets to one of these starts empty, as the release writes it.
_EMPTY_CONTAINERS: Final[Mapping[str, Callable[[], Any]]] = {
    "set()": set,
    "{}": dict,
    "dict()": dict,
    "[]": list,
    "deque()": deque,
}


def _scheduler_state(compiled: CompiledRelease, settings: SchedulerSettings) -> dict[str, Any]:
    """What the release's `Scheduler.__init__` (and `AsyncScheduler.__init__` when async)
    would set, for `settings`, every optional feature off.

    kvcheck's table below covers the attributes of every release it knows; the release's own
    `__init__` decides which of them exist, and an attribute it sets that kvcheck does not
    model stops the run (kvcheck's fault, exit 2) instead of being left unset.
    """
    policy = compiled.names["SchedulingPolicy"].FCFS
    queue = compiled.names["create_request_queue"]
    k = settings.num_spec_tokens
    # EAGLE/MTP, the only drafters async scheduling takes (docs/vllm-generations.md): they
    # need no extra query slots, k lookahead KV slots, and read one prefill token ahead.
    lookahead = k
    speculative_config = (
        _config(
            "SpeculativeConfig",
            num_speculative_tokens=k,
            max_num_new_slots_for_drafting=0,
        )
        if k > 0
        else None
    )
    vllm_config = _config(
        "VllmConfig",
        speculative_config=speculative_config,
        kv_transfer_config=None,
        # 0.34.0 (`S:2516`): output watermarking, off.
        watermark_config=None,
        # 0.17-0.20 (`S:1532` @0.17.0): the model's routed experts are not returned.
        model_config=_config("ModelConfig", enable_return_routed_experts=False),
    )
    parallel_config = _config(
        "ParallelConfig",
        pipeline_parallel_size=settings.pp_size,
        data_parallel_size=1,
        data_parallel_index=0,
        data_parallel_rank=0,
        decode_context_parallel_size=1,
        prefill_context_parallel_size=1,
    )
    scheduler_config = _config(
        "SchedulerConfig",
        async_scheduling=settings.async_scheduling,
        disable_chunked_mm_input=False,
        enable_chunked_prefill=True,
        long_prefill_token_threshold=settings.long_prefill_token_threshold,
        long_prefill_token_threshold_adaptive=False,
        max_num_batched_tokens=settings.max_num_scheduled_tokens,
        max_num_scheduled_tokens=settings.max_num_scheduled_tokens,
        max_num_seqs=settings.max_num_seqs,
        max_num_active_seqs=settings.max_num_seqs,
        policy="fcfs",
        prefill_schedule_interval=0,
        scheduler_reserve_full_isl=False,
        watermark=0.0,
    )
    cache_config = _config(
        "CacheConfig",
        block_size=settings.block_size,
        enable_prefix_caching=False,
        enable_mamba_shared_prefix_checkpoint=False,
        mamba_cache_mode="none",
        num_gpu_blocks=settings.num_blocks,
    )
    can_skip_drafts = compiled.init_values.get("can_skip_drafts", "")
    modelled: dict[str, Any] = {
        "vllm_config": vllm_config,
        "scheduler_config": scheduler_config,
        "cache_config": cache_config,
        "parallel_config": parallel_config,
        "lora_config": None,
        "kv_events_config": None,
        "enable_kv_cache_events": False,
        "kv_cache_config": _config("KVCacheConfig", kv_cache_groups=[object()]),
        "observability_config": _config(
            "ObservabilityConfig",
            enable_logging_iteration_details=False,
            kv_cache_metrics=False,
            kv_cache_metrics_sample=0.0,
            per_request_spec_decode_metrics="none",
        ),
        "log_stats": True,
        "model_uses_mrope": False,
        "structured_output_manager": _StructuredOutputManager(grammar=settings.grammar),
        "is_encoder_decoder": False,
        "is_mm_encoder_only": False,
        "include_finished_set": False,
        "finished_req_ids_dict": None,
        "max_num_running_reqs": settings.max_num_seqs,
        "max_num_active_reqs": settings.max_num_seqs,
        "max_num_scheduled_tokens": settings.max_num_scheduled_tokens,
        "adaptive_long_prefill_threshold": False,
        "max_model_len": settings.max_model_len,
        "num_sampled_tokens_per_step": 1,
        "connector": None,
        "connector_prefix_cache_stats": None,
        "recompute_kv_load_failures": True,
        "defer_block_free": settings.defer_block_free,
        "defer_async_loads": False,
        "requires_kv_delivery": False,
        "kv_event_publisher": _EventPublisher(),
        "ec_connector": None,
        "aux_output_connector": None,
        "block_size": settings.block_size,
        "hash_block_size": settings.block_size,
        "dcp_world_size": 1,
        "pcp_world_size": 1,
        "policy": policy,
        "num_waiting_for_streaming_input": 0,
        "max_num_encoder_input_tokens": 0,
        "_num_encoder_max_input_tokens": 0,  # no encoder inputs (0.16, `S:207`)
        "encoder_cache_manager": _EncoderCacheManager(),
        "use_eagle": k > 0,
        "use_eagle_block_drop": False,  # only with prefix caching, which is off
        "num_spec_tokens": k,
        "num_lookahead_tokens": lookahead,
        "num_prefill_lookahead": 1 if k > 0 else 0,
        "num_hash_lookahead_tokens": 0,  # prefix caching is off
        "prefix_replay_group_ids": (),
        "prefix_replay_tokens": 0,
        # 0.33 skips drafting only on the V2 runner, 0.34 on any (`can_skip_drafts` in
        # each release's `__init__`).
        "can_skip_drafts": lookahead > 0
        and (settings.use_v2_model_runner or "use_v2_model_runner" not in can_skip_drafts),
        # Dynamic SD (0.24.0 on): the dense batch size -> drafts lookup `__init__` builds from
        # `num_speculative_tokens_per_batch_size` (`S:322-329` @0.33.0), here kvcheck's own
        # reading of the table (`spec_tokens_for_batch`); index 0 unused, as the release's.
        "dynamic_sd_lookup": [0]
        + [
            spec_tokens_for_batch(settings.spec_tokens_per_batch_size, batch, k)
            for batch in range(1, settings.max_num_seqs + 1)
        ]
        if settings.spec_tokens_per_batch_size and k > 0
        else None,
        "kv_cache_manager": fakes.BlockPool.create(
            settings.num_blocks,
            settings.block_size,
            settings.max_model_len,
            compiled.computed_blocks_arity,
        ),
        "_spec_decode_step_blocks": -(-(1 + k + lookahead) // settings.block_size) if k else 0,
        "use_pp": settings.pp_size > 1,
        "pp_size": settings.pp_size,
        "decode_stagger": settings.pp_size,
        "use_v2_model_runner": settings.use_v2_model_runner,
        "current_step": 0,
        "prefill_capacity_bound": False,
        "local_prefill_interval": 0,
        "last_prefill_step": 0,
        "num_executed_steps": 0,
        "scheduler_reserve_full_isl": False,
        "has_mamba_layers": False,
        "needs_kv_cache_zeroing": False,
        "need_mamba_block_aligned_split": False,
        "mamba_partial_cache_hit": False,
        "mamba_prefill_checkpoint_alignment": None,
        "mamba_has_prefill_checkpoint_blocks": False,
        "mamba_shared_prefix_checkpoint": False,
        "sched_step_seq": 0,
        "processed_step_seq": 0,
        "perf_metrics": None,
        "enable_return_routed_experts": False,
        "routed_experts_mgr": None,
        "_spec_token_placeholders": [-1] * k,
        "_kv_fetch_stages": None,  # tracked only with a KV connector
        "_kv_fetch_counts": {},
        "_parked_reserved_blocks": 0,
        "is_encoder_only": False,
        "mm_budget": None,  # no multimodal inputs (0.17)
        "supports_mm_inputs": False,
        "model_uses_xdrope": False,
        "mamba_fine_grained_prefix_cache": False,
        "cache_aware_window": 0,  # needs prefix caching, which is off (0.34)
        "cache_aware_threshold": 0.0,
        "kv_metrics_collector": None,
        "spec_decode_metrics_level": "none",  # per-request spec metrics off (0.29+)
        "return_sampling_mask": False,
    }
    if "PauseState" in compiled.names:  # 0.17.0 on; before, no pause and no `_pause_state`
        modelled["_pause_state"] = compiled.names["PauseState"].UNPAUSED
    assigned = dict(compiled.init_values)
    if settings.async_scheduling:
        assigned.update(compiled.async_init_values)
    state: dict[str, Any] = {}
    unmodelled: list[str] = []
    for name, value in assigned.items():
        if value in _EMPTY_CONTAINERS:
            state[name] = _EMPTY_CONTAINERS[value]()
        elif value.startswith("create_request_queue("):
            state[name] = queue(policy)
        elif name in modelled:
            state[name] = modelled[name]
        elif value:
            unmodelled.append(name)
        # else: set only under a condition (a feature kvcheck keeps off): left unset, and
        # reading it is an unmodelled access.
    if unmodelled:
        raise fakes.UnmodelledAccess(
            "kvcheck does not model Scheduler."
            + ", Scheduler.".join(sorted(unmodelled))
            + " of this vLLM release"
        )
    return state


# vLLM's `ModelRunnerOutput`: what kvcheck's runner returns, the rest None (features off).
_RUNNER_OUTPUT = fakes.record_type(
    "ModelRunnerOutput",
    (
        "req_ids",
        "req_id_to_index",
        "sampled_token_ids",
        "logprobs",
        "prompt_logprobs_dict",
        "prompt_token_id_logprobs_dict",
        "pooler_output",
        "num_nans_in_logits",
        "kv_connector_output",
        "ec_connector_output",
        "cudagraph_stats",
        "routed_experts",
        "routed_experts_dict",  # 0.21.0 (`S:1379`): None, no MoE routing returned
        "sampling_mask",
        "sampling_masks",
        "aux_output",
        "aux_output_connector_output",
    ),
)


# What the runner's drafter proposed (`take_draft_token_ids`), handed to
# `update_draft_token_ids_in_output`.
_DRAFT_TOKEN_IDS = fakes.record_type("DraftTokenIds", ("req_ids", "draft_token_ids"))


# A `TypeError` for a call with arguments the callee does not take ("X.f() got an unexpected
# keyword argument 'y'"), and the fakes' class names it may name.
_FAKE_SIGNATURE: Final = re.compile(
    r"\w+\.\w+\(\) (got an unexpected keyword|takes|missing \d+ required)"
)
_FAKE_CLASSES: Final = frozenset(
    {
        "BlockPool",
        "Blocks",
        "SamplingParams",
        "PrefillStats",
        "_EncoderCacheManager",
        "_StructuredOutputManager",
        "RequestGrammar",
        "_EventPublisher",
        "EngineCoreEvent",
        "PrefixCacheStats",
        "SpecDecodingStats",
    }
)


def grammar_support(compiled: CompiledRelease) -> bool:
    """Whether the release validates a held step's drafts against a grammar
    (`update_draft_token_ids_in_output`, 0.14.0 on)."""
    return hasattr(compiled.scheduler, "update_draft_token_ids_in_output")


class ReleaseScheduler:
    """`SchedulerUnderTest` over a compiled release."""

    def __init__(self, compiled: CompiledRelease, settings: SchedulerSettings) -> None:
        cls = compiled.scheduler if settings.async_scheduling else compiled.sync_scheduler
        state = _scheduler_state(compiled, settings)
        scheduler: Any = object.__new__(cls)
        scheduler.__dict__.update(state)
        scheduler.__dict__["_fields"] = frozenset(state)
        scheduler.__dict__["_owner"] = "Scheduler"
        self._scheduler: Any = scheduler
        self._names = compiled.names
        self._compiled = compiled
        self._settings = settings
        self._step = 0
        self._outputs: dict[int, Any] = {}
        # Whether the release can defer block frees (`defer_block_free`, set in its
        # `__init__` from 0.24.0 on); before, it frees at once whatever the settings say.
        self.defers_frees = "defer_block_free" in compiled.init_values
        # Whether it validates a held step's drafts against the grammar
        # (`update_draft_token_ids_in_output`, 0.14.0 on): without it kvcheck drives no
        # request through a grammar. Whether a grammar's rejection finishes the request (0.20.0
        # on); before, kvcheck's grammar never rejects (`Reject` is not driven).
        self.structured_output = grammar_support(compiled)
        self.grammar_errors_finish = self.structured_output and compiled.grammar_errors_finish

    def _release(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call into the release's code. What the code touched of a fake that kvcheck does
        not model stops the run as kvcheck's fault (`UnmodelledAccess`, exit 2), even when the
        code caught the error (a `hasattr`, a `getattr` with a default); so does a call to a
        fake with arguments it does not take. The release's own exceptions pass: they are
        the target's."""
        fakes.UNMODELLED.clear()
        try:
            result = function(*args, **kwargs)
        except TypeError as exc:
            if _FAKE_SIGNATURE.match(str(exc)) and str(exc).split(".")[0] in _FAKE_CLASSES:
                raise fakes.UnmodelledAccess(
                    f"vLLM's code called kvcheck's fake as it does not model: {exc}"
                ) from exc
            raise
        finally:
            touched = list(fakes.UNMODELLED)
            fakes.UNMODELLED.clear()
            if touched:
                raise fakes.UnmodelledAccess(
                    f"vLLM's code {touched[0]}, which kvcheck's fake does not model"
                )
        return result

    # --- the seam -------------------------------------------------------------------------

    def add_request(self, request: NewRequest) -> None:
        """Build the release's own `Request` for `request` and hand it to `add_request`."""
        params = fakes.SamplingParams(
            max_tokens=request.max_tokens,
            min_tokens=request.min_tokens,
            eos_token_id=request.eos_token_id,
            stop_token_ids=list(request.stop_token_ids),
            ignore_eos=request.eos_token_id is None,
            extra_args=None,
            repetition_detection=None,
            logprobs=None,
            prompt_logprobs=None,
            # Any value asks for structured output; kvcheck's grammar is handed over below.
            structured_outputs="kvcheck-grammar" if self._grammar_of(request) else None,
            all_stop_token_ids=set(request.stop_token_ids),
        )
        # Through 0.15 the request takes its EOS id itself (`R:37` @0.11.1), later only its
        # sampling parameters carry it.
        takes_eos = "eos_token_id" in inspect.signature(self._names["Request"]).parameters
        built = self._release(
            self._names["Request"],
            request_id=request.request_id,
            prompt_token_ids=list(request.prompt_token_ids),
            sampling_params=params,
            pooling_params=None,
            arrival_time=0.0,
            **({"eos_token_id": request.eos_token_id} if takes_eos else {}),
        )
        if self._grammar_of(request):
            # The grammar compiled, as vLLM's compilation thread would leave it: the request is
            # promoted from WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR when next scheduled.
            built.structured_output_request.grammar = fakes.RequestGrammar(
                grammar=self._settings.grammar, request_id=request.request_id
            )
        self._release(self._scheduler.add_request, built)

    def _grammar_of(self, request: NewRequest) -> bool:
        """Whether `request` runs with kvcheck's grammar: it asks for one, kvcheck has one, and
        the release validates drafts against it (`structured_output`)."""
        return (
            request.structured_output
            and self._settings.grammar is not None
            and self.structured_output
        )

    def has_requests(self) -> bool:
        """The release's `has_requests()`."""
        return bool(self._release(self._scheduler.has_requests))

    def schedule(self) -> Launch:
        """The release's `schedule()`, with the requests it preempted meanwhile."""
        before = {r.request_id: r.num_preemptions for r in self._scheduler.requests.values()}
        output = self._release(self._scheduler.schedule)
        self._step += 1
        self._outputs[self._step] = output
        pending = bool(vars(output).get("pending_structured_output_tokens", False))
        if output.total_num_scheduled_tokens > 0 and not pending:
            # The engine core builds the bitmask before it samples a step it does not hold
            # (engine/core.py:745-752 @0.33.0).
            self._grammar_bitmask(output)
        return Launch(
            step=self._step,
            scheduled=tuple(self._scheduled(output)),
            preempted=tuple(
                rid
                for rid, request in self._scheduler.requests.items()
                if request.num_preemptions > before.get(rid, 0)
            ),
            finished=tuple(sorted(output.finished_req_ids)),
            pending_structured_output_tokens=pending and self.structured_output,
            # 0.24.0 on: the drafts the runner proposes this step (`S:1709-1713` @0.33.0).
            num_spec_tokens_to_schedule=vars(output).get("num_spec_tokens_to_schedule"),
        )

    def _grammar_bitmask(self, output: Any) -> None:
        """The release's `get_grammar_bitmask` for a step about to sample, where it has one
        and a request uses structured output (the runner is kvcheck's: the bitmask itself is
        not read)."""
        if self.structured_output and self._settings.grammar is not None:
            self._release(self._scheduler.get_grammar_bitmask, output)

    def update_draft_token_ids_in_output(
        self, launch: Launch, drafts: Mapping[str, tuple[int, ...]]
    ) -> Launch:
        """The release's `update_draft_token_ids_in_output` on a held step's output, then its
        bitmask (engine/core.py:801-822 @0.33.0); the launch with the drafts it now
        schedules."""
        output = self._outputs[launch.step]
        rids = list(drafts)
        self._release(
            self._scheduler.update_draft_token_ids_in_output,
            _DRAFT_TOKEN_IDS(req_ids=rids, draft_token_ids=[list(drafts[rid]) for rid in rids]),
            output,
        )
        self._grammar_bitmask(output)
        scheduled = output.scheduled_spec_decode_tokens
        return attrs.evolve(
            launch,
            scheduled=tuple(
                attrs.evolve(item, spec_token_ids=tuple(scheduled.get(item.request_id, ())))
                for item in launch.scheduled
            ),
        )

    def _scheduled(self, output: Any) -> list[ScheduledRequest]:
        full: dict[str, tuple[int, ...]] = {}
        computed: dict[str, int] = {}
        # What the scheduler sent the runner, as it was at launch (the lists are the
        # request's own and grow later): a new request's prompt, or its whole token list
        # (`prefill_token_ids`, how the V2 runner gets a resumed request), and a resumed
        # request's token list (`all_token_ids`, the V1 runner's).
        for new in output.scheduled_new_reqs:
            sent = vars(new).get("prefill_token_ids")
            full[new.req_id] = tuple(new.prompt_token_ids if sent is None else sent)
            computed[new.req_id] = new.num_computed_tokens
        cached = output.scheduled_cached_reqs
        # 0.34.0 re-sends a resumed request in full among the new ones (`S:1619-1626`
        # @0.34.0): its `CachedRequestData` has no resumed ids at all.
        resumed_are_cached = "resumed_req_ids" in {f.name for f in dataclasses.fields(cached)}
        for index, rid in enumerate(cached.req_ids):
            computed[rid] = cached.num_computed_tokens[index]
            if resumed_are_cached and rid in cached.resumed_req_ids and rid in cached.all_token_ids:
                full[rid] = tuple(cached.all_token_ids[rid])
        return [
            ScheduledRequest(
                request_id=rid,
                num_scheduled_tokens=n,
                spec_token_ids=tuple(output.scheduled_spec_decode_tokens.get(rid, ())),
                num_computed_tokens=computed[rid],
                all_token_ids=full.get(rid),
            )
            for rid, n in output.num_scheduled_tokens.items()
        ]

    def update_from_output(self, launch: Launch, output: FrameOutput) -> Delivered:
        """The release's `update_from_output()` on the frame's sampled tokens."""
        scheduler_output = self._outputs.pop(launch.step)
        ids = list(scheduler_output.num_scheduled_tokens)
        runner_output = _RUNNER_OUTPUT(
            req_ids=ids,
            req_id_to_index={rid: i for i, rid in enumerate(ids)},
            sampled_token_ids=[self._sampled_row(output.sampled.get(rid, ())) for rid in ids],
            logprobs=None,
            prompt_logprobs_dict={},
            prompt_token_id_logprobs_dict={},
            pooler_output=None,
            num_nans_in_logits=None,
            kv_connector_output=None,
            cudagraph_stats=None,
        )
        produced = self._release(
            self._scheduler.update_from_output, scheduler_output, runner_output
        )
        new: dict[str, tuple[int, ...]] = {}
        finished: dict[str, str] = {}
        spec_stats: SpecStats | None = None
        for outputs in produced.values():
            # A step that emits nothing still returns its statistics, in an `EngineCoreOutputs`
            # built with them alone (the fake's `outputs` then None, the release's `[]`).
            for item in outputs.outputs or ():
                new[item.request_id] = tuple(item.new_token_ids)
                if item.finish_reason is not None:
                    finished[item.request_id] = str(item.finish_reason)
            recorded = outputs.scheduler_stats
            if recorded is not None and recorded.spec_decoding_stats is not None:
                stats = recorded.spec_decoding_stats
                spec_stats = SpecStats.of(stats.num_spec_tokens, stats.observed)
        return Delivered(new_token_ids=new, finished=finished, spec_stats=spec_stats)

    def _sampled_row(self, tokens: Sequence[int]) -> Any:
        """A request's sampled tokens as the release's runner returns them: a list, or (0.11.x)
        a numpy int32 array."""
        if self._compiled.sampled_rows_are_arrays:
            return numpy.array(tokens, dtype=numpy.int32)
        return list(tokens)

    def finish_requests(self, request_ids: Sequence[str], reason: str) -> None:
        """The release's `finish_requests()` with status FINISHED_ABORTED."""
        status = self._names["RequestStatus"].FINISHED_ABORTED
        self._release(self._scheduler.finish_requests, list(request_ids), status)

    def reset_prefix_cache(self, reset_running_requests: bool) -> bool:
        """The release's `reset_prefix_cache()`. Through 0.11.x it cannot reset running
        requests (`S:1317-1318` @0.11.1: no `reset_running_requests`): a reset there is that
        release's own, which resets the prefix cache alone and preempts nothing."""
        reset = self._scheduler.reset_prefix_cache
        if "reset_running_requests" not in inspect.signature(reset).parameters:
            return bool(self._release(reset))
        return bool(self._release(reset, reset_running_requests=reset_running_requests))

    # --- reading back -------------------------------------------------------------------

    def request_ids(self) -> tuple[str, ...]:
        """Every request the release's scheduler holds (its `requests` dict)."""
        return tuple(self._scheduler.requests)

    def request_view(self, request_id: str) -> RequestView | None:
        """The release's `Request` fields, as kvcheck reads them."""
        request = self._scheduler.requests.get(request_id)
        if request is None:
            return None
        fields: Mapping[str, Any] = vars(request)
        return RequestView(
            status=request.status.name.lower(),
            num_computed_tokens=request.num_computed_tokens,
            num_tokens=request.num_tokens,
            num_output_placeholders=request.num_output_placeholders,
            num_in_flight_tokens=fields.get("num_in_flight_tokens"),
            num_stale_output_tokens=fields.get("num_stale_output_tokens"),
            async_tokens_to_discard=fields.get("async_tokens_to_discard"),
            spec_token_ids=tuple(request.spec_token_ids),
            output_token_ids=tuple(request.output_token_ids),
            is_prefill_chunk=fields.get("is_prefill_chunk"),
            drop_stale_output=fields.get("drop_stale_output"),
        )

    def pool_view(self) -> PoolView:
        """The fake block pool's state."""
        pool = self._scheduler.kv_cache_manager
        return PoolView(
            num_blocks=pool.num_blocks,
            free_blocks=len(pool.free_ids),
            ref_counts=dict(pool.ref),
            blocks_of={rid: tuple(blocks) for rid, blocks in pool.owned.items()},
            # The scheduler keeps its deferred frees itself (`deferred_frees`: fence, blocks).
            deferred=tuple(
                block
                for _, blocks in self._scheduler.__dict__.get("deferred_frees", ())
                for block in blocks
            ),
        )
