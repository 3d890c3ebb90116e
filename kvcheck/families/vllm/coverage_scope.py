"""What of a vLLM release's scheduler only inputs outside kvcheck's scenarios reach.

kvcheck drives the KV-cache accounting of text generation (`docs/vllm.md`); a release's
`Scheduler` also holds the code of features kvcheck does not model: KV connectors (disaggregated
prefill, KV offload), encoder inputs and their cache, hybrid Mamba models, grammar compilation,
streaming-input sessions, the priority policy, LoRA, pooling, statistics, sync scheduling
(the list of docs/vllm.md's "Not modelled"). `OUT_OF_SCOPE` names the source
lines (stripped) whose never-taken branches only those features take, and the functions only
they call, each with the feature; the coverage report lists what they leave unrun with that
reason and does not count it (`VllmDistribution.uncounted_out_of_scope`). Written from vLLM
0.33.0's `v1/core/sched/scheduler.py` (a line of an older release with the same text means the
same); a line kvcheck's scenarios do run is counted whatever this says.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

__all__ = ["OUT_OF_SCOPE"]

_ENCODER_CONNECTOR: Final = (
    "an encoder-cache connector (disaggregated encoders), which kvcheck does not model"
)
_KV_CONNECTOR: Final = (
    "a KV connector (disaggregated prefill, KV offload), which kvcheck does not model"
)
_MAMBA: Final = "hybrid Mamba models, whose state cache kvcheck does not model"
_ENCODER: Final = (
    "multimodal or encoder-decoder requests (encoder inputs); kvcheck's requests are text"
)
# Structured output itself is driven (a request's grammar trims its drafts and may reject its
# tokens, docs/vllm.md "Grammars"); its grammar is compiled when the request is added.
_GRAMMAR_COMPILING: Final = (
    "a grammar still compiling or that failed to compile; kvcheck's grammars are compiled when "
    "their request is added"
)
_PRIORITY: Final = "the priority policy; kvcheck's schedulers are FCFS"
_STREAMING: Final = "streaming-input sessions, which kvcheck's requests are not"
_POOLING: Final = "pooling models"
_SAMPLING_MASK: Final = "returned sampling masks, which kvcheck's runs do not ask for"
_LORA: Final = "LoRA adapters"
_PREFIX_CACHING: Final = "prefix replay over the prefix cache, which kvcheck's runs leave off"

_STATISTICS: Final = "statistics and metrics logging, which kvcheck's runs leave off"
_PAUSED: Final = "a paused scheduler, which kvcheck's engine never pauses"
_RUNNER_ERRORS: Final = (
    "per-request errors and NaN logits from the model runner, which kvcheck's runner never reports"
)
_DEFERRED_COPIES: Final = (
    "deferring the free of copy-on-write retentions, which only prefix caching makes and "
    "kvcheck's runs leave off"
)
_DEFERRED_RESET: Final = (
    "a deferred free of a request whose blocks are already deferred, which only a reset with "
    'frames in flight makes and which then raises (docs/vllm.md "Deferred block frees")'
)
_SAMPLING: Final = (
    "stop token ids, min_tokens or repetition detection, which kvcheck's requests do not set"
)
_ONE_ID: Final = "a single request id given as a string; kvcheck's engine passes a list"
_CLIENTS: Final = (
    "several engine clients (per-client finished sets), which kvcheck's one engine is not"
)

_ALL_IDS: Final = "finishing every request at once (no ids); kvcheck's engine names them"

_SYNC: Final = "sync scheduling; kvcheck's engine always schedules async"

# Engine settings and request fields kvcheck's scenarios leave at one value, and guards no
# scheduler state reaches: in scope, but the branch they take elsewhere is never taken here.
_MTP: Final = (
    "a multi-module MTP drafter (num_prefill_lookahead > 1), whose prefill lookahead kvcheck's "
    "drafts do not need"
)
_ADAPTIVE_THRESHOLD: Final = (
    "the adaptive long-prefill threshold, which kvcheck's engine leaves off"
)
_PREFILL_CADENCE: Final = (
    "prefill cadence (local_prefill_interval, data-parallel prefill balancing), which kvcheck's "
    "engine leaves off"
)
_DRAFT_SLOTS: Final = (
    "drafters with input slots of their own (max_num_new_slots_for_drafting > 0); kvcheck's "
    "input budget is its token budget"
)
_NO_CHUNKING: Final = "chunked prefill turned off; kvcheck's engine always chunks"
_COPY_ON_WRITE: Final = (
    "copy-on-write block copies (prefix caching), which kvcheck's pool never makes"
)
_ZEROING: Final = (
    "KV cache zeroing for attention backends that need it, which kvcheck does not model"
)
_LOGPROBS: Final = "logprobs, which kvcheck's requests do not ask for"
_KV_EVENTS: Final = "KV cache events for a publisher, which kvcheck's pool does not emit"
_HOLDS_KV: Final = (
    "a waiting request that holds KV blocks (computed tokens: a remote KV load or a streaming "
    "session); a preempted request restarts from 0 computed tokens (scheduler.py:1799-1843 "
    "@0.33.0)"
)
_INVALID_STATUS: Final = (
    "a scheduled waiting request neither WAITING nor PREEMPTED: a defensive raise that no "
    "scheduler state reaches"
)
_KEEP_RUNNING_RESET: Final = (
    "a reset that keeps the running requests; kvcheck's reset event is "
    "reset_prefix_cache(reset_running_requests=True)"
)
_ROLLBACK_GUARDS: Final = (
    "rejected drafts of a fresh frame on a request with no computed tokens or no placeholders, "
    "which no state reaches (a fresh frame's C and PH include its own drafts); vllm-counters "
    "judges what the guard would hide"
)
_NO_ROOM_TO_PAD: Final = (
    "padding a one-token admission to 1 + k where 2 + k exceeds max_model_len; kvcheck draws "
    "k <= 3 and max_model_len >= 8"
)

OUT_OF_SCOPE: Final[Mapping[str, str]] = {
    # Functions only the features call.
    "Scheduler._try_schedule_encoder_inputs": _ENCODER,
    "Scheduler._update_requests_with_invalid_blocks": _KV_CONNECTOR,
    "Scheduler._handle_invalid_blocks": _KV_CONNECTOR,
    "Scheduler._mamba_block_aligned_split": _MAMBA,
    "Scheduler._update_request_as_session": _STREAMING,
    "Scheduler._update_waiting_for_remote_kv": _KV_CONNECTOR,
    "Scheduler._update_from_kv_xfer_finished": _KV_CONNECTOR,
    "Scheduler._free_encoder_inputs": _ENCODER,
    "Scheduler._make_scheduled_encoder_input_stats": _ENCODER,
    "Scheduler._drain_deferred_loads": _KV_CONNECTOR,
    "Scheduler.reset_connector_cache": _KV_CONNECTOR,
    "Scheduler._handle_failed_recving": _KV_CONNECTOR,
    "Scheduler._allocate_encoder_inputs": _ENCODER,
    "Scheduler._reject_on_encoder_cache_embed_mismatch": _ENCODER,
    "Scheduler._free_encoder_input": _ENCODER,
    "Scheduler._build_kv_connector_meta": _KV_CONNECTOR,
    "Scheduler._load_restores_replay_window": _KV_CONNECTOR,
    # Lines whose untaken branches only the features take.
    "if self.use_pp and not self.scheduler_config.async_scheduling:": _SYNC,
    "if finished_req_ids:": _CLIENTS,
    "if pending is None:": _ENCODER,
    "if existing is not None:": _STREAMING,
    "elif request_ids is not None:": _ALL_IDS,
    "Scheduler.make_stats": _STATISTICS,
    "Scheduler.make_spec_decoding_stats": _STATISTICS,
    "if self.log_stats:": _STATISTICS,
    "if not self.log_stats:": _STATISTICS,
    "if not self.log_stats or not num_draft_tokens:": _STATISTICS,
    'if self.spec_decode_metrics_level != "none":': _STATISTICS,
    "if request.spec_decode_metrics is not None:": _STATISTICS,
    "if self.perf_metrics and self.perf_metrics.is_enabled():": _STATISTICS,
    "if self._pause_state == PauseState.PAUSED_ALL:": _PAUSED,
    "if self._pause_state == PauseState.PAUSED_NEW:": _PAUSED,
    "if num_nans_in_logits is not None and req_id in num_nans_in_logits:": _RUNNER_ERRORS,
    "if error_req_ids:": _RUNNER_ERRORS,
    "for request in error_reqs:": _RUNNER_ERRORS,
    "if kv_transfer_config is not None and kv_transfer_config.is_kv_producer:": _KV_CONNECTOR,
    "if failed_kv_load_req_ids and req_id in failed_kv_load_req_ids:": _KV_CONNECTOR,
    "if not self.defer_block_free or fence_seq <= self.processed_step_seq:": _DEFERRED_COPIES,
    "if blocks:": _DEFERRED_RESET,
    # `_drain_deferred_loads` runs with deferred frees on; only a connector's loads fill it.
    "for request_id, (fence, num_tokens, queries, hits) in list(self.deferred_loads.items()": (
        _KV_CONNECTOR
    ),
    "if last_token_id in (sampling_params.stop_token_ids or ()):": _SAMPLING,
    "if request.num_output_tokens < sampling_params.min_tokens:": _SAMPLING,
    "if repetition_detection is not None and (": _SAMPLING,
    "if isinstance(request_ids, str):": _ONE_ID,
    "if self.finished_req_ids_dict is not None:": _CLIENTS,
    "if self.connector is not None:": _KV_CONNECTOR,
    "if self.policy == SchedulingPolicy.PRIORITY:": _PRIORITY,
    "if not self.is_encoder_decoder:": _ENCODER,
    "for req_id in kv_connector_output.finished_recving or ():": _KV_CONNECTOR,
    "if request.status == RequestStatus.WAITING_FOR_REMOTE_KVS:": _KV_CONNECTOR,
    "if load_kv_async:": _KV_CONNECTOR,
    "for input_id in list(cached_encoder_input_ids):": _ENCODER,
    "for req_id, input_ids in scheduled_encoder_inputs.items():": _ENCODER,
    "for req_id in failed_req_ids:": _KV_CONNECTOR,
    "if load_failed:": _KV_CONNECTOR,
    "if kv_fetch_stages is not None:": _KV_CONNECTOR,
    "for input_id in list(pending):": _ENCODER,
    "if self.need_mamba_block_aligned_split:": _MAMBA,
    "if item_identifier in mm_hashes_to_schedule:": _ENCODER,
    "for input_id in encoding:": _ENCODER,
    "if request.streaming_queue:": _STREAMING,
    "if self.ec_connector is not None and self.ec_connector.has_cache_item(": _ENCODER_CONNECTOR,
    "if not self.encoder_cache_manager.can_allocate(": _ENCODER,
    "if update.mm_features:": _ENCODER,
    "if partial_tail and ext_tokens > partial_tail:": _KV_CONNECTOR,
    "for req_id in kv_connector_output.finished_sending or ():": _KV_CONNECTOR,
    "if existing.status != RequestStatus.WAITING_FOR_STREAMING_REQ:": _STREAMING,
    "if connector_events:": _KV_CONNECTOR,
    "if self.ec_connector:": _ENCODER_CONNECTOR,
    "if self.connector:": _KV_CONNECTOR,
    "if self.return_sampling_mask:": _SAMPLING_MASK,
    "for input_id in input_ids:": _ENCODER,
    "if self.recompute_kv_load_failures:": _KV_CONNECTOR,
    "if not marked_invalid_block:": _KV_CONNECTOR,
    "if req.status == RequestStatus.WAITING_FOR_REMOTE_KVS:": _KV_CONNECTOR,
    "elif request.status == RequestStatus.WAITING_FOR_STREAMING_REQ:": _STREAMING,
    "if isinstance(struct_output_req.grammar, Exception):": _GRAMMAR_COMPILING,
    "if request_id not in self.finished_recving_kv_req_ids:": _KV_CONNECTOR,
    "if window_loaded:": _KV_CONNECTOR,
    "if not isinstance(self.connector, SupportsHMA):": _KV_CONNECTOR,
    "if self.connector_prefix_cache_stats is not None:": _KV_CONNECTOR,
    "if self.connector is None:": _KV_CONNECTOR,
    "if self.connector_prefix_cache_stats is not None and queries != 0:": _KV_CONNECTOR,
    "if self.ec_connector is not None:": _ENCODER_CONNECTOR,
    "if self.is_encoder_decoder and request.num_computed_tokens > 0:": _ENCODER,
    "elif request.pooling_params and pooler_output is not None:": _POOLING,
    "if self.is_encoder_decoder and num_computed_tokens > 0:": _ENCODER,
    "if encoder_inputs_to_schedule:": _ENCODER,
    "if self._ec_transfer_pending(request, num_computed_tokens):": _ENCODER_CONNECTOR,
    "if self._ec_transfer_pending(request, ec_computed_tokens):": _ENCODER_CONNECTOR,
    "if self.aux_output_connector is not None:": _KV_CONNECTOR,
    "elif partial_tail:": _KV_CONNECTOR,
    "if self.prefix_replay_tokens and not (": _PREFIX_CACHING,
    "if ext_tokens is None:": _KV_CONNECTOR,
    "if request.resumable and self.num_hash_lookahead_tokens:": _STREAMING,
    "if self.lora_config:": _LORA,
    "if preempted_encoder_inputs:": _ENCODER,
    "if sync_blocks_to_evict and not self.recompute_kv_load_failures:": _KV_CONNECTOR,
    "if marked_invalid_block:": _KV_CONNECTOR,
    "if block_id in marked_invalid_block_ids:": _KV_CONNECTOR,
    "if block_id not in invalid_block_ids:": _KV_CONNECTOR,
    "if not struct_output_req or struct_output_req.grammar is None:": _GRAMMAR_COMPILING,
    "if finished_partial_tails:": _KV_CONNECTOR,
    "if self.connector.reset_cache() is False:": _KV_CONNECTOR,
    "if reset_successful and self.aux_output_connector is not None:": _KV_CONNECTOR,
    "if reset_connector:": _KV_CONNECTOR,
    "if request.status == RequestStatus.WAITING_FOR_STREAMING_REQ:": _STREAMING,
    "if request.resumable:": _STREAMING,
    "if not cached_encoder_input_ids:": _ENCODER,
    "if input_id in encoding:": _ENCODER,
    "if self.ec_connector is not None and ec_connector_output:": _ENCODER_CONNECTOR,
    "if kv_connector_output:": _KV_CONNECTOR,
    "if failed_kv_load_req_ids and not self.recompute_kv_load_failures:": _KV_CONNECTOR,
    "if new_token_ids and sampling_masks is not None:": _SAMPLING_MASK,
    "if self.aux_output_connector is not None and should_emit_output:": _KV_CONNECTOR,
    "if request.has_encoder_inputs:": _ENCODER,
    "if kv_connector_output and kv_connector_output.invalid_block_ids:": _KV_CONNECTOR,
    "if kv_connector_output and kv_connector_output.failed_recving:": _KV_CONNECTOR,
    "if self.encoder_cache_manager.check_and_update_cache(request, i):": _ENCODER,
    "if cached_num_encoder_embeds is not None and (": _ENCODER,
    "if self._reject_on_encoder_cache_embed_mismatch(": _ENCODER,
    "if self.is_encoder_decoder:": _ENCODER,
    "if num_new_tokens == 0 or not request.has_encoder_inputs:": _ENCODER,
    "for input_id in duplicate_input_ids:": _ENCODER,
    "if cached_num_encoder_embeds == requested_num_encoder_embeds:": _ENCODER,
    "if session.status == RequestStatus.WAITING_FOR_STREAMING_REQ:": _STREAMING,
    "for mm_feature in update.mm_features:": _ENCODER,
    "if encoder_inputs_to_schedule or external_load_encoder_input:": _ENCODER,
    "if self.lora_config and request.lora_request:": _LORA,
    "if num_external_computed_tokens > 0:": _KV_CONNECTOR,
    "if hit_diverged and num_external_computed_tokens == 0:": _KV_CONNECTOR,
    "if connector is not None and connector.supports_divergent_local_hybrid_hits:": _KV_CONNECTOR,
    "if not self.prefix_replay_tokens:": _PREFIX_CACHING,
    "if not new_request.mm_features:": _ENCODER,
    "if not request.resumable:": _STREAMING,
    "if not window_loaded:": _KV_CONNECTOR,
    # Only an async remote KV load reserves blocks for in-flight prefills.
    "Scheduler._inflight_prefill_reserved_blocks": _KV_CONNECTOR,
    "Scheduler._request_remaining_blocks": _KV_CONNECTOR,
    "Scheduler._free_cow_retained_blocks": _COPY_ON_WRITE,
    # Lines whose untaken branch only settings kvcheck's engine leaves at one value take, or
    # no state reaches (a line ending in "(" is named with its next line).
    "if 0 < remaining < self.num_prefill_lookahead:": _MTP,
    # Three lines have this text (scheduler.py:891, 1357, 1394 @0.33.0): the running loop's
    # runs both ways; the admission's two leave only after a Mamba split or an MTP lookahead.
    "if num_new_tokens == 0:": (
        "a prefill chunk cut to nothing by a hybrid Mamba block-aligned split or a multi-module "
        "MTP lookahead, neither of which kvcheck models"
    ),
    "if long_prefill_token_threshold > 0 and self.adaptive_long_prefill_threshold:": (
        _ADAPTIVE_THRESHOLD
    ),
    "if (not defer_prefills": _PREFILL_CADENCE,
    "if defer_prefills and request.is_prefill_chunk:": _PREFILL_CADENCE,
    "elif defer_prefills and num_computed_tokens < request.num_tokens - 1:": _PREFILL_CADENCE,
    "if not defer_prefills:": _PREFILL_CADENCE,
    "if self.local_prefill_interval > 1 and (prefill_scheduled or prefill_admitted):": (
        _PREFILL_CADENCE
    ),
    "if input_budget <= draft_slots:": _DRAFT_SLOTS,
    "if (self.ec_connector is not None": _ENCODER_CONNECTOR,
    "if (self.connector is not None": _KV_CONNECTOR,
    "if (self.policy == SchedulingPolicy.PRIORITY": _PRIORITY,
    "if (self.lora_config": _LORA,
    "if (not window_loaded": _PREFIX_CACHING,
    "if (self.is_encoder_decoder": _ENCODER,
    "elif (self.is_mm_encoder_only": _ENCODER,
    "if (not self.scheduler_config.enable_chunked_prefill": _NO_CHUNKING,
    "if (num_computed_tokens": _NO_ROOM_TO_PAD,
    "if self._holds_kv_blocks(request_to_skip):": _HOLDS_KV,
    "if not request_queue and self._pause_state == PauseState.UNPAUSED:": _HOLDS_KV,
    "if step_skipped_kv_holding:": _HOLDS_KV,
    "if self._holds_kv_blocks(request):": _HOLDS_KV,
    "if request.num_computed_tokens == 0:": _HOLDS_KV,
    "if did_prefix_cache_lookup:": _HOLDS_KV,
    "if not ready_to_schedule:": (
        "a blocked waiting status (a remote KV load, a grammar still compiling, a streaming "
        "session), which kvcheck's requests never have"
    ),
    "if self._is_blocked_waiting_status(request.status):": _STREAMING,
    "if finished:": _STREAMING,
    "for request in continuing_reqs:": _STREAMING,
    "elif request.status == RequestStatus.PREEMPTED:": _INVALID_STATUS,
    "if kv_cache_block_copies:": _COPY_ON_WRITE,
    "if (self.log_stats": _STATISTICS,
    "if (stats := self.make_stats(": _STATISTICS,
    "if (eco := next(iter(engine_core_outputs.values()), None)) is None:": _STATISTICS,
    "if not self.needs_kv_cache_zeroing:": _ZEROING,
    "if request.num_computed_tokens > 0:": _ROLLBACK_GUARDS,
    "if request.num_output_placeholders > 0:": _ROLLBACK_GUARDS,
    "if (request.sampling_params is not None": _LOGPROBS,
    "if (prefill_stats is not None": _KV_CONNECTOR,
    "if events:": _KV_EVENTS,
    "if not delay_free_blocks:": _KV_CONNECTOR,
    "if reset_running_requests:": _KEEP_RUNNING_RESET,
    "if reset_running_requests and not reset_successful:": (
        "a reset that fails with every running request preempted: only a request waiting for "
        "a remote KV transfer holds blocks then"
    ),
    "if self.num_spec_tokens:": _KV_CONNECTOR,
}
