"""What of a release's allocation code only inputs outside kvcheck's scenarios reach.

The functions `ReleaseAllocation` drives (docs/release-allocation.md) reach helpers of features
kvcheck does not model: sliding-window attention, prefix sharing (the radix cache), mamba
state, HiSparse, DeepSeek-V4 pools, KV sharding, NPU and HIP devices, disaggregation.
`OUT_OF_SCOPE` names the functions only those features call (by qualname) and the source lines
(stripped) whose never-taken branches only they take, each with the feature; the coverage
report lists what they leave unrun with that reason and does not count it
(`SideCode.out_of_scope`). A line kvcheck's scenarios do run is counted whatever this says.
Written from 0.5.23's files (mem_cache/common.py, allocation.py, allocation_sizing.py,
allocator/base.py, managers/schedule_batch.py, speculative/eagle_utils.py, dflash_info_v2.py,
uno_info.py) and, where 0.5.9-0.5.22 write a line differently, theirs (`WRITTEN_FROM`); a
line of another release with the same text means the same.

`out_of_scope` adds what depends on the run: members kvcheck's fakes implement in the
release's stead (the allocator's free list is its pool's), and the draft inputs of the
algorithms whose scenarios all ran kvcheck's model (adaptive switching under DFLASH or UNO,
which no release runs: `runs_adaptively`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

__all__ = ["OUT_OF_SCOPE", "WRITTEN_FROM", "out_of_scope"]

_SWA: Final = "sliding-window attention (SWA eviction), which kvcheck does not model"
_PREFIX_SHARING: Final = "prefix sharing (a radix cache), which kvcheck's runs leave disabled"
_MAMBA: Final = "a mamba-capable cache freeing state before any KV, which kvcheck does not model"
_HISPARSE: Final = "HiSparse (a hisparse coordinator), which kvcheck's runs leave off"
_DSV4: Final = "DeepSeek-V4 pools (c128 pages), which kvcheck does not model"
_SHARDING: Final = "page-interleaved KV sharding (DCP), which kvcheck's pool is not"
_NPU: Final = "an NPU device; kvcheck's runs are a CUDA-like device with a Triton backend"
_HIP: Final = "HIP or NPU devices; kvcheck's runs are a CUDA-like device with a Triton backend"
_TORCH_BACKEND: Final = (
    "the torch-native or Ascend attention backends; kvcheck answers a Triton backend"
)
_OOM: Final = (
    "an allocation that fails (out of memory): kvcheck's scheduler launches only what the "
    "memory check admitted, as SGLang's does"
)
_DISAGG: Final = "decode disaggregation (the retracted KV offloaded), which kvcheck does not model"
_NOT_SPECULATIVE: Final = "decoding without speculation; kvcheck's runs always speculate"
_TREE_DRAFTS: Final = (
    "tree drafting (topk > 1) with pages above 1; kvcheck's drafts are chains (topk 1)"
)
_TOPK: Final = "tree drafting (topk > 1); kvcheck's drafts are chains (topk 1)"
_PENALTIES: Final = "sampling penalties, which kvcheck's greedy requests do not ask for"
_NO_HOST_LENS: Final = (
    "a batch without host sequence lengths (the NPU backend's mirrorless opt-out); "
    "kvcheck's batches carry them"
)
_EMBEDS: Final = "requests given as input embeddings; kvcheck's requests are token ids"
_STREAMING: Final = (
    "streaming sessions keeping the row (claim_kv_row), which kvcheck does not model"
)
_THINKING: Final = "strip_thinking_cache with reasoning tokens, which kvcheck's runs leave off"
_ONE_RANGE: Final = (
    "several ranges in one free_kv_row call: the release frees one range a call "
    "(0.5.23 mem_cache/common.py:433, 476)"
)
_EMPTY_RANGE: Final = (
    "an empty range: the release frees [cache_protected_len, owned) with nothing protected "
    "(kvcheck's tree cache is disabled) and owned above 0"
)
_RELEASED: Final = (
    "asking a request that holds no allocated length (released already, or a mamba cache's "
    "early free); the release asks requests holding KV only"
)
_UNFINISHED: Final = (
    "an unfinished request, which owned_kv_len never asks: it returns first "
    "(0.5.23 managers/schedule_batch.py:1557)"
)
_FREE_GROUPS: Final = (
    "free groups, which only ScheduleBatch's SWA eviction opens (0.5.23 "
    "managers/schedule_batch.py:4080), which kvcheck does not model"
)
_UNO_NO_DRAFTS: Final = (
    "UNO without a draft count, which kvcheck always gives (SGLang refuses it at startup)"
)

_PLAN_STREAM: Final = (
    "the overlap plan stream (SGLANG_ENABLE_OVERLAP_PLAN_STREAM, a device stream), which "
    "kvcheck's runs leave off"
)
_BUFFERS: Final = (
    "a draft input reused with its scratch buffers large enough: kvcheck gives each launch a "
    "fresh draft input (the buffers hold no accounting)"
)
_EMPTY_BATCH: Final = "an empty decode batch, which the scheduler never launches"
_NO_DRAFTS: Final = "a non-positive draft count, which SGLang refuses at startup"
_TOP_K: Final = "requests sampling with top_k above 1; kvcheck's requests are greedy"
_UNO_SYNC: Final = (
    "UNO without future indices (seeded bonus tokens and frontier lengths); kvcheck's UNO "
    "draft input always carries one future index per request"
)
_UNO_COUNT: Final = (
    "a future-index count other than the batch size, which kvcheck's draft input never has"
)
_NO_RECORD: Final = "a decode request without a KV record, which 0.5.19+ never launches"
_WATERMARK: Final = (
    "an allocated length below the committed one, which a correct release never records "
    "(kvcheck's alloc-* invariants judge it)"
)
_ROW_WIDTH: Final = (
    "a reserve wider than the req_to_token row: kvcheck's rows are 4096 slots, beyond any "
    "scenario's lengths"
)

_ARGS_GIVEN: Final = (
    "server args passed in, which the driven callers never do: they read the runtime settings"
)
_NO_TRITON: Final = (
    "a backend or device without Triton (torch-native, Intel AMX); kvcheck answers a Triton backend"
)
_CHUNKED: Final = (
    "a request extending a row it already holds (a later chunk of chunked prefill, a session's "
    "record); kvcheck prefills each prompt whole, without sessions"
)
_DLLM: Final = "diffusion LLM (dLLM) batches reusing retained KV, which kvcheck does not model"
_AUX_CACHE: Final = (
    "an auxiliary row cache failing to grow (alloc_aux_to_lengths raising): no 0.5.23 code "
    "attaches one (mem_cache/memory_pool.py:475), and kvcheck's row pool has none"
)
_BEAM: Final = "beam search groups (aborted, not retracted), which kvcheck's runs leave off"
_NO_BACKUP: Final = (
    "a retraction whose KV backup failed (decode disaggregation's host pool), which kvcheck "
    "does not model: its release_req always resumes"
)
_LAST_OOM: Final = (
    "a decode batch that does not fit even down to one request, which SGLang aborts (0.5.10+) "
    "or fails on: kvcheck does not model it, and such a scenario gets no verdict"
)
_PRIORITY_RETRACTION: Final = (
    "the priority retraction policy (request priorities); kvcheck's runs keep SGLang's default "
    "length policy, whose order they do run"
)

_BACKUP: Final = "an allocator state backup (backup_state), which a decode launch does not ask for"
_NO_TREE: Final = "no tree cache, which a scheduler always has"
_HYBRID_ROWS: Final = "a hybrid (mamba) row pool, which kvcheck's full-attention pool is not"

_FROM_0_5_23: Final[Mapping[str, str]] = {
    # Functions only the features call.
    "get_last_loc_torch": _TORCH_BACKEND,
    "_kv_shard_rotation_bases": _SHARDING,
    "_alloc_paged_token_slots_extend_npu": _NPU,
    "available_and_evictable_str": _OOM,
    "dsv4_needs_rebootstrap": _DISAGG,
    "backup_kv_cache": _DISAGG,
    "truncate_weight_version_events": _EMBEDS,
    "ReqKvInfo.max_evicted_seqlen": _RELEASED,
    "BaseTokenToKVPoolAllocator.evict_to_free_tokens": _PREFIX_SHARING,
    "BaseTokenToKVPoolAllocator.free_group_begin": _FREE_GROUPS,
    "BaseTokenToKVPoolAllocator.free_group_end": _FREE_GROUPS,
    "BaseTokenToKVPoolAllocator.free_full_segments": _SWA,
    "BaseTokenToKVPoolAllocator.free_full_segment": _SWA,
    "_alloc_extend_loc_with_kv_reuse": _DLLM,
    # Lines whose never-taken branches only the features take.
    # mem_cache/allocation.py
    "if (_is_hip or _is_npu) and uses_triton_dispatch:": _HIP,
    "if uses_triton_dispatch:": _TORCH_BACKEND,
    "if out_cache_loc is None:": _OOM,
    "if page_interleave_shard_size(allocator) > 1:": _SHARDING,
    "if is_dsv4:": _DSV4,
    "if kv_shard_rotation_bases is not None:": _SHARDING,
    "if batch is not None and batch.hisparse_coordinator is not None:": _HISPARSE,
    "if support_triton(prefill_backend):": _NO_TRITON,
    "if not isinstance(req_to_token_pool, HybridReqToTokenPool):": _HYBRID_ROWS,
    "if req_pool_indices is None:": _OOM,
    "if (_is_hip or _is_cuda or _is_xpu or _is_npu) and get_parallel().dcp_enabled:": _SHARDING,
    "if req.kv.holds_kv:": _CHUNKED,
    "if req.prefix_len == 0:": _PREFIX_SHARING,
    "if batch.is_dllm():": _DLLM,
    "if batch.hisparse_coordinator is not None:": _HISPARSE,
    "if reuse_kv is not None and any(reuse_kv):": _DLLM,
    # An `except` line is named with the line after it (its handler's first).
    "except Exception:batch.tree_cache.token_to_kv_pool_allocator.free(out_cache_loc)": _AUX_CACHE,
    "if _is_npu:": _NPU,
    # mem_cache/allocation_sizing.py
    "if spec.speculative_algorithm is None:": _NOT_SPECULATIVE,
    "if spec_tokens is None:": _UNO_NO_DRAFTS,
    "if page_size == 1 or spec_topk == 1 or not spec_algo.has_draft_kv():": _TREE_DRAFTS,
    # speculative/eagle_utils.py
    "if batch.sampling_info.penalizer_orchestrator.is_required:": _PENALTIES,
    "if batch.seq_lens_cpu is None:": _NO_HOST_LENS,
    "if page_size > 1 and (get_spec().speculative_eagle_topk or 1) > 1:": _TREE_DRAFTS,
    # mem_cache/allocator/base.py
    "if n == 0:": _EMPTY_RANGE,
    # mem_cache/common.py
    "if merged and start == merged[-1][1]:": _ONE_RANGE,
    "if hi <= lo:": _SWA,
    "if swa_dead and swa_alive:": _SWA,
    "if swa_dead:": _SWA,
    "if swa_alive:": _SWA,
    "if tree_cache is not None and tree_cache.supports_prefix_sharing():": _PREFIX_SHARING,
    "if not req.kv.holds_kv:": _MAMBA,
    "if tree_cache.claim_kv_row(req):": _STREAMING,
    "if spec_algo is None and not get_serving().strip_thinking_cache:": _NOT_SPECULATIVE,
    # speculative/dflash_info_v2.py (0.5.19+)
    "if not envs.SGLANG_ENABLE_OVERLAP_PLAN_STREAM.get():": _PLAN_STREAM,
    "if plan_stream is not None:": _PLAN_STREAM,
    "if plan_stream is not None and caller_stream is not None:": _PLAN_STREAM,
    "if caller_stream is not None:": _PLAN_STREAM,
    "if needs_cpu_alloc(self._prepare_batch_seq_lens_cpu_buf):": _BUFFERS,
    "if needs_gpu_alloc(self._prepare_cur_kv_lens_gpu_buf):": _BUFFERS,
    "if bs == 0:": _EMPTY_BATCH,
    "if block_size <= 0:": _NO_DRAFTS,
    "if top_k > max_top_k:": _TOP_K,
    "elif uniform_top_k and top_k != uniform_top_k_value:": _TOP_K,
    # speculative/uno_info.py
    "if batch_size == 0:": _EMPTY_BATCH,
    "if self.future_indices is None:": _UNO_SYNC,
    "elif self.future_indices.numel() != batch_size:": _UNO_COUNT,
    "if req.kv is None:": _NO_RECORD,
    "if allocated < committed:": _WATERMARK,
    "if max(next_lengths) > row_width:": _ROW_WIDTH,
    # managers/schedule_batch.py
    "if page_size > 1 and lo > self.cache_protected_len:": _SWA,
    "if self.finished_len is not None:": _UNFINISHED,
    "if get_serving().strip_thinking_cache and self.reasoning_tokens > 0:": _THINKING,
    "if self.input_embeds is not None:": _EMBEDS,
    "if hisparse_coordinator is not None and not req.finished():": _HISPARSE,
    'if get_disagg().disaggregation_mode == "decode" and offload_kv:': _DISAGG,
    'if get_schedule().retraction_policy == "priority":': _PRIORITY_RETRACTION,
    # `retract_decode` (0.5.23 :3451-3538) and the beam-search helpers it calls
    # (beam_search/batch_tail.py, fork.py).
    "if len(sorted_indices) == 1:": _LAST_OOM,
    "if len(sorted_indices) <= 1 and not self.check_decode_mem(": _LAST_OOM,
    "if req.beam_group is not None:": _BEAM,
    "if last_req.beam_group is not None:": _BEAM,
    "if not any(reqs[i].beam_group is not None for i in sorted_indices):": _BEAM,
    "free_member_rows": _BEAM,
    # mem_cache/allocator/base.py: `evict_to_free_tokens`, which the decode memory check's
    # `check_decode_capacity` asks first (0.5.23 :164).
    "if tree_cache is None or not tree_cache.supports_prefix_sharing():": _PREFIX_SHARING,
    # Beam rows' decode slots, which only the estimate without speculation adds.
    "num_beam_member_rows": _NOT_SPECULATIVE,
    "if self.release_req(idx, len(sorted_indices)):": _NO_BACKUP,
    'if get_disagg().disaggregation_decode_retraction_backup == "host_pool":': _DISAGG,
}

# What 0.5.16-0.5.18 write differently (0.5.16's files; the 0.5.23 text above holds where
# the line is the same).
_FROM_0_5_16: Final[Mapping[str, str]] = {
    # mem_cache/allocation_sizing.py
    "if server_args is None:": _ARGS_GIVEN,
    "if server_args.speculative_algorithm is None:": _NOT_SPECULATIVE,
    # mem_cache/allocation.py
    "if _is_hip and uses_triton_dispatch:": _HIP,
    "if backup_state:": _BACKUP,
    # mem_cache/common.py
    "if tree_cache is None:": _NO_TREE,
    "if tree_cache.is_chunk_cache():": _PREFIX_SHARING,
    "if req.req_pool_idx is None:": _MAMBA,
    "if req.req_pool_idx is None and req.kv is None:": _STREAMING,
    "if isinstance(tree_cache.req_to_token_pool, HybridReqToTokenPool) and (": _HYBRID_ROWS,
    "if spec_algo is None and not global_server_args.strip_thinking_cache:": _NOT_SPECULATIVE,
    # managers/schedule_batch.py
    "if get_server_args().strip_thinking_cache and self.reasoning_tokens > 0:": _THINKING,
    'if server_args.disaggregation_mode == "decode" and offload_kv:': _DISAGG,
    'if server_args.retraction_policy == "priority":': _PRIORITY_RETRACTION,
    # `retract_decode` lets the chooser sort only without speculation (:2603-2609).
    "if not allow_policy_sort:": _NOT_SPECULATIVE,
    # speculative/eagle_utils.py
    "if page_size > 1 and (get_server_args().speculative_eagle_topk or 1) > 1:": _TREE_DRAFTS,
}
_ONE_SEGMENT: Final = (
    "several segments in one free_segments call: the release frees one range a call, which "
    "stays one segment without SWA (0.5.19 mem_cache/common.py:325, base_prefix_cache.py:379)"
)
_NO_EMPTY_SEGMENT: Final = (
    "an empty range: the release frees its committed KV (never empty) and the tail only when "
    "it is not empty (0.5.19 mem_cache/common.py:324)"
)
_CHUNK_EVICTION: Final = (
    "evicting a tree cache for room, which a chunk cache skips (0.5.20 mem_cache/common.py:168) "
    "and kvcheck's runs leave prefix sharing disabled"
)

# What 0.5.12-0.5.15 write differently (0.5.15's files).
_FROM_0_5_15: Final[Mapping[str, str]] = {
    # managers/schedule_batch.py
    "if get_global_server_args().strip_thinking_cache and self.reasoning_tokens > 0:": _THINKING,
    'if server_args.disaggregation_mode == "decode":': _DISAGG,
    # speculative/eagle_utils.py
    "if page_size > 1 and (get_global_server_args().speculative_eagle_topk or 1) > 1:": (
        _TREE_DRAFTS
    ),
}

# What 0.5.9-0.5.12 write differently, each by the release whose files it was read from.
_FROM_0_5_12: Final[Mapping[str, str]] = {
    # managers/schedule_batch.py: `new_tokens_required_next_decode` past the v2 worker
    # (0.5.7-0.5.13), whose estimate is `_new_tokens_required_next_decode_spec_v2`.
    "if self.is_spec_v2:": (
        "the v1 speculative worker (no overlap scheduling), which kvcheck's runs never are: "
        "they run the v2 worker's spec path"
    ),
    # managers/schedule_batch.py
    "if self.hisparse_coordinator is not None and not req.finished():": _HISPARSE,
    # managers/utils.py
    "if page_size == 1 or spec_topk == 1:": _TREE_DRAFTS,
}
_FROM_0_5_11: Final[Mapping[str, str]] = {
    # managers/schedule_batch.py
    "if self.hisparse_coordinator is not None:": _HISPARSE,
}
_FROM_0_5_7: Final[Mapping[str, str]] = {
    # managers/schedule_batch.py: `pop_committed_kv_cache` keeps C only for chains (0.5.6
    # :719-728).
    "if enable_kv_committed_len:": _TOPK,
    # mem_cache/common.py: a chunk cache returns first (0.5.6 :229).
    "if isinstance(tree_cache, (SWAChunkCache, ChunkCache)):": _PREFIX_SHARING,
    # speculative/eagle_info_v2.py (0.5.7 :83)
    "if isinstance(batch.tree_cache, SWAChunkCache):": _SWA,
    # managers/schedule_batch.py: `retract_decode` sorts only without speculation (0.5.6
    # :1599, to 0.5.15).
    "if not server_args.speculative_algorithm:": _NOT_SPECULATIVE,
}
# What only 0.5.6 writes (0.5.6's files): `retract_decode` checks what it cannot reach, a first
# pass that retracted nothing (managers/schedule_batch.py:1638) and the pool of an SWA model
# (:1615).
_FROM_0_5_6: Final[Mapping[str, str]] = {
    "if len(retracted_reqs) == 0:": (
        "a retraction loop that retracted nothing, which its first pass never is: it always "
        "retracts one (0.5.6 managers/schedule_batch.py:1630-1636)"
    ),
    "if self.is_hybrid_swa:": _SWA,
}
_FROM_0_5_9: Final[Mapping[str, str]] = {
    # managers/schedule_batch.py
    "if self.spec_algorithm.is_none():": _NOT_SPECULATIVE,
    "if page_size > 1 and spec_topk > 1:": _TREE_DRAFTS,
    # mem_cache/common.py
    "if spec_algo is None:": _NOT_SPECULATIVE,
}

# What 0.5.17-0.5.22 write differently, each by the release whose files it was read from (the
# same text in a neighbouring release means the same).
_FROM_0_5_18: Final[Mapping[str, str]] = {
    # mem_cache/common.py: the retracted KV offloaded to the host, which `release_req` asks for
    # under decode disaggregation only (0.5.18 managers/schedule_batch.py:1925; 0.5.19:2055,
    # 0.5.20:2182).
    "retraction_backup": _DISAGG,
}
_FROM_0_5_19: Final[Mapping[str, str]] = {
    # mem_cache/allocation.py
    "if isinstance(req_to_token_pool, HybridReqToTokenPool):": _HYBRID_ROWS,
    "if (_is_hip or _is_cuda) and get_parallel().dcp_enabled:": _SHARDING,
    # mem_cache/allocator/base.py
    "if prev_end is not None and start_pos // ps == (prev_end - 1) // ps:": _ONE_SEGMENT,
    # mem_cache/common.py
    "if num_indices == 0:": _NO_EMPTY_SEGMENT,
    "if num_dead > 0:": _SWA,
    "if num_dead < num_indices:": _SWA,  # never false: a segment wholly below the SWA floor
    "if len(swa_dead) == 1:": _SWA,
    "elif swa_dead:": _SWA,
}
_FROM_0_5_20: Final[Mapping[str, str]] = {
    # mem_cache/common.py
    "_evict_until_allocatable": _CHUNK_EVICTION,
}
_FROM_0_5_21: Final[Mapping[str, str]] = {
    # mem_cache/allocator/base.py: `evict_to_free_tokens` (0.5.21 :144).
    "if tree_cache is None or tree_cache.is_chunk_cache():": _PREFIX_SHARING,
    # mem_cache/common.py
    "if tree_cache is not None and not tree_cache.is_chunk_cache():": _PREFIX_SHARING,
    "dsv41_dspark_needs_rebootstrap": _DISAGG,  # asked by backup_kv_cache only (:235)
}
_FROM_0_5_22: Final[Mapping[str, str]] = {
    # mem_cache/allocation.py
    "if (_is_hip or _is_cuda or _is_xpu) and get_parallel().dcp_enabled:": _SHARDING,
}
# Each release's table by the release it was written from (a quality test checks each line and
# function is there).
WRITTEN_FROM: Final[Mapping[str, Mapping[str, str]]] = {
    "0.5.23": _FROM_0_5_23,
    "0.5.6": _FROM_0_5_6,
    "0.5.7": _FROM_0_5_7,
    "0.5.9": _FROM_0_5_9,
    "0.5.11": _FROM_0_5_11,
    "0.5.12": _FROM_0_5_12,
    "0.5.15": _FROM_0_5_15,
    "0.5.16": _FROM_0_5_16,
    "0.5.18": _FROM_0_5_18,
    "0.5.19": _FROM_0_5_19,
    "0.5.20": _FROM_0_5_20,
    "0.5.21": _FROM_0_5_21,
    "0.5.22": _FROM_0_5_22,
}
# The oldest first, so that 0.5.23's reason stands where a text is in two tables.
OUT_OF_SCOPE: Final[Mapping[str, str]] = {
    key: reason
    for version in sorted(WRITTEN_FROM, key=lambda v: tuple(map(int, v.split("."))))
    for key, reason in WRITTEN_FROM[version].items()
}

# The lines that route to an algorithm's own sizing, by algorithm.
_ALGORITHM_LINES: Final[Mapping[str, tuple[str, ...]]] = {"uno": ("if spec_algo.is_uno():",)}


# The code only memory-pressure retraction runs: its loop, the chooser it orders the batch by
# (0.5.16+) and the beam-group order it asks (0.5.19+). The decode memory check
# (`check_decode_mem`) is not here: it runs before every decode launch with a bounded pool.
_RETRACTION: Final = (
    "ScheduleBatch.retract_decode",
    "ScheduleBatch._get_decode_retraction_order",
    "beam_retraction_order",
)
# The paged side of the launch and the release: a page's last slot, the paged allocator's entry,
# and the branches that round to pages or leave the page-size-1 path.
_PAGED: Final = (
    # 0.5.6-0.5.8's estimate reads it at page sizes above 1 only (0.5.6
    # managers/schedule_batch.py:1556).
    "Req.seqlen",
    "get_last_loc",
    "alloc_paged_token_slots_extend",
    "if page_size == 1:",
    "if page_size > 1:",
    "elif page_size > 1:",
)
_UNPAGED_RUN: Final = (
    "page sizes above 1, at which no scenario of this search ran the release's own code "
    "(rules before 0.5.16 are modelled at page size 1 only: docs/allocation-rules.md)"
)
_NO_PRESSURE: Final = (
    "memory-pressure retraction (a decode batch the pool cannot hold), which no scenario of "
    "this search reached; tests/quality/test_release_allocation.py drives it on a pressure "
    "scenario"
)


def out_of_scope(
    faked: Iterable[tuple[str, str]],
    not_run: Mapping[str, tuple[Iterable[str], bool]],
    *,
    chose_retractions: bool = True,
    paged: bool = True,
) -> dict[str, str]:
    """`OUT_OF_SCOPE`, with the members kvcheck's fakes implement in the release's stead
    (`faked`: qualname and the class), per algorithm none of whose scenarios ran the
    release's code (`not_run`: algorithm -> the qualnames of its own launch code, and whether
    scenarios of it ran kvcheck's model instead) that code and the lines routing to it, the
    retraction loop and its chooser where kvcheck did not run them (`chose_retractions` false:
    no scenario reached memory-pressure retraction), and the
    paged code where no scenario ran the release's code at a page size above 1 (`paged`
    false)."""
    reasons = dict(OUT_OF_SCOPE)
    if not paged:
        reasons |= dict.fromkeys(_PAGED, _UNPAGED_RUN)
    if not chose_retractions:
        reasons |= dict.fromkeys(_RETRACTION, _NO_PRESSURE)
    for qualname, owner in faked:
        name = qualname.rpartition(".")[2]
        reasons[qualname] = (
            f"the release's own {owner}: kvcheck's fake implements {name} in its stead"
        )
    for algorithm, (qualnames, modelled) in not_run.items():
        name = algorithm.upper()
        why = (
            f"{name} scenarios, which all ran kvcheck's model here: with adaptive switching "
            f"no release runs them (--no-adaptive drives {name}'s own code)"
            if modelled
            else f"{name} scenarios, none of which was drawn here"
        )
        for key in (*qualnames, *_ALGORITHM_LINES.get(algorithm, ())):
            reasons[key] = why
    return reasons
