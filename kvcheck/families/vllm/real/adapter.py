"""A compiled vLLM release behind the family's seam (`SchedulerUnderTest`).

The release's `AsyncScheduler` runs as written on a fake `self`: its attributes are the ones
`Scheduler.__init__` sets (kvcheck sets them, with every optional feature off: no connectors,
no encoder inputs, no structured output, no LoRA, statistics off, prefix caching off), the KV
cache manager is `fakes.BlockPool` (a finite pool, so allocation fails and the release's own
`schedule()` preempts), and the requests are the release's own `Request` objects.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

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
)


def _config(owner: str, **values: Any) -> fakes.Strict:
    cls = type(owner, (fakes.Strict,), {"_owner": owner, "_fields": frozenset(values)})
    made: fakes.Strict = cls(**values)
    return made


class _EncoderCacheManager(fakes.Strict):
    """No request has encoder inputs: freeing one is a no-op."""

    _owner = "EncoderCacheManager"

    def free(self, request: Any) -> None:
        return None

    def get_freed_mm_hashes(self) -> list[str]:
        return []

    def reset(self) -> None:
        return None


class _StructuredOutputManager(fakes.Strict):
    """No request uses structured output: nothing advances, every token is accepted."""

    _owner = "StructuredOutputManager"

    def should_advance(self, request: Any) -> bool:
        return False

    def accept_tokens(self, request: Any, tokens: Any) -> bool:
        return True


class _EventPublisher(fakes.Strict):
    _owner = "KVEventPublisher"

    def publish(self, events: Any) -> None:
        return None


def _scheduler_state(compiled: CompiledRelease, settings: SchedulerSettings) -> dict[str, Any]:
    """What `Scheduler.__init__` would set, for `settings`, features off."""
    policy = compiled.names["SchedulingPolicy"].FCFS
    queue = compiled.names["create_request_queue"]
    k = settings.num_spec_tokens
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
    return {
        "vllm_config": None,
        "scheduler_config": scheduler_config,
        "cache_config": cache_config,
        "lora_config": None,
        "kv_cache_config": _config("KVCacheConfig", kv_cache_groups=[object()]),
        "observability_config": _config(
            "ObservabilityConfig",
            enable_logging_iteration_details=False,
            kv_cache_metrics=False,
            kv_cache_metrics_sample=0.0,
            per_request_spec_decode_metrics=False,
        ),
        "log_stats": False,
        "structured_output_manager": _StructuredOutputManager(),
        "is_encoder_decoder": False,
        "is_mm_encoder_only": False,
        "include_finished_set": False,
        "finished_req_ids_dict": None,
        "max_num_running_reqs": settings.max_num_seqs,
        "max_num_active_reqs": settings.max_num_seqs,
        "max_num_scheduled_tokens": settings.max_num_scheduled_tokens,
        "max_model_len": settings.max_model_len,
        "num_sampled_tokens_per_step": 1,
        "connector": None,
        "connector_prefix_cache_stats": None,
        "recompute_kv_load_failures": True,
        "defer_block_free": settings.defer_block_free,
        "kv_event_publisher": _EventPublisher(),
        "ec_connector": None,
        "aux_output_connector": None,
        "block_size": settings.block_size,
        "hash_block_size": settings.block_size,
        "dcp_world_size": 1,
        "pcp_world_size": 1,
        "requests": {},
        "policy": policy,
        "waiting": queue(policy),
        "skipped_waiting": queue(policy),
        "kv_holding_waiting": queue(policy),
        "deferred_waiting": queue(policy),
        "running": [],
        "finished_req_ids": set(),
        "reset_preempted_req_ids": set(),
        "num_waiting_for_streaming_input": 0,
        "finished_recving_kv_req_ids": set(),
        "failed_recving_kv_req_ids": set(),
        "grammar_compile_error_reqs": set(),
        "encoder_cache_mismatch_reqs": set(),
        "max_num_encoder_input_tokens": 0,
        "encoder_cache_manager": _EncoderCacheManager(),
        "use_eagle": k > 0,
        "num_spec_tokens": k,
        "num_lookahead_tokens": k,
        "dynamic_sd_lookup": None,
        "kv_cache_manager": fakes.BlockPool.create(settings.num_blocks, settings.block_size),
        "use_pp": settings.pp_size > 1,
        "pp_size": settings.pp_size,
        "decode_stagger": settings.pp_size,
        "use_v2_model_runner": settings.use_v2_model_runner,
        "current_step": 0,
        "prefill_capacity_bound": False,
        "scheduler_reserve_full_isl": False,
        "has_mamba_layers": False,
        "needs_kv_cache_zeroing": False,
        "_skip_zero_block_ids": set(),
        "need_mamba_block_aligned_split": False,
        "mamba_partial_cache_hit": False,
        "sched_step_seq": 0,
        "processed_step_seq": 0,
        "deferred_frees": deque(),
        "perf_metrics": None,
        "enable_return_routed_experts": False,
        "routed_experts_mgr": None,
        "_re_block_ids": {},
        "_inflight_prefills": set(),
        "_pause_state": compiled.names["PauseState"].UNPAUSED,
        "_pending_encoder_input_ids": {},
        "_spec_token_placeholders": [-1] * k,
        "prev_step_scheduled_req_ids": set(),
        "kv_metrics_collector": None,
        "requires_kv_delivery": False,
        "spec_decode_metrics_level": None,
        "return_sampling_mask": False,
        "deferred_loads": {},
    }


# vLLM's `ModelRunnerOutput`: what kvcheck's runner returns, the rest None (features off).
_RUNNER_OUTPUT = fakes.record_type(
    "ModelRunnerOutput",
    (
        "req_ids",
        "req_id_to_index",
        "sampled_token_ids",
        "logprobs",
        "prompt_logprobs_dict",
        "pooler_output",
        "num_nans_in_logits",
        "kv_connector_output",
        "ec_connector_output",
        "cudagraph_stats",
        "routed_experts",
        "sampling_mask",
        "aux_output",
    ),
)


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
        self._settings = settings
        self._step = 0
        self._outputs: dict[int, Any] = {}

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
            structured_outputs=None,
            all_stop_token_ids=set(request.stop_token_ids),
        )
        built = self._names["Request"](
            request_id=request.request_id,
            prompt_token_ids=list(request.prompt_token_ids),
            sampling_params=params,
            pooling_params=None,
            arrival_time=0.0,
        )
        self._scheduler.add_request(built)

    def has_requests(self) -> bool:
        """The release's `has_requests()`."""
        return bool(self._scheduler.has_requests())

    def schedule(self) -> Launch:
        """The release's `schedule()`, with the requests it preempted meanwhile."""
        before = {r.request_id: r.num_preemptions for r in self._scheduler.requests.values()}
        output = self._scheduler.schedule()
        self._step += 1
        self._outputs[self._step] = output
        return Launch(
            step=self._step,
            scheduled=tuple(self._scheduled(output)),
            preempted=tuple(
                rid
                for rid, request in self._scheduler.requests.items()
                if request.num_preemptions > before.get(rid, 0)
            ),
            finished=tuple(sorted(output.finished_req_ids)),
        )

    def _scheduled(self, output: Any) -> list[ScheduledRequest]:
        full: dict[str, tuple[int, ...]] = {}
        computed: dict[str, int] = {}
        for new in output.scheduled_new_reqs:
            full[new.req_id] = tuple(new.prompt_token_ids)
            computed[new.req_id] = new.num_computed_tokens
        cached = output.scheduled_cached_reqs
        for index, rid in enumerate(cached.req_ids):
            computed[rid] = cached.num_computed_tokens[index]
            if rid in cached.resumed_req_ids:
                full[rid] = tuple(self._scheduler.requests[rid].all_token_ids)
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
            sampled_token_ids=[list(output.sampled.get(rid, ())) for rid in ids],
            logprobs=None,
            prompt_logprobs_dict={},
            pooler_output=None,
            num_nans_in_logits=None,
            kv_connector_output=None,
            cudagraph_stats=None,
        )
        produced = self._scheduler.update_from_output(scheduler_output, runner_output)
        new: dict[str, tuple[int, ...]] = {}
        finished: dict[str, str] = {}
        for outputs in produced.values():
            for item in outputs.outputs:
                new[item.request_id] = tuple(item.new_token_ids)
                if item.finish_reason is not None:
                    finished[item.request_id] = str(item.finish_reason)
        return Delivered(new_token_ids=new, finished=finished)

    def finish_requests(self, request_ids: Sequence[str], reason: str) -> None:
        """The release's `finish_requests()` with status FINISHED_ABORTED."""
        status = self._names["RequestStatus"].FINISHED_ABORTED
        self._scheduler.finish_requests(list(request_ids), status)

    def reset_prefix_cache(self, reset_running_requests: bool) -> bool:
        """The release's `reset_prefix_cache()`."""
        return bool(
            self._scheduler.reset_prefix_cache(reset_running_requests=reset_running_requests)
        )

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
            deferred=tuple(b for _, blocks in pool.deferred for b in blocks),
        )
