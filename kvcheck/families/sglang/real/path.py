"""`ReleaseAllocation`: an `AllocationPath` that drives a release's own allocation functions
(issue 21) over the fakes of `kvcheck.families.sglang.real.objects`, on kvcheck's `KvPool`.

It drives the 0.5.16-0.5.18 layout (C and the row on `Req`, Al in a `ReqKvInfo` dropped at
release), the 0.5.19+ layout (`ReqKvInfo` holding C, Al and the row; checked on 0.5.23) and the
flat layout of 0.5.6-0.5.14 (`ReleaseFunctions._load_flat`):

- a decode launch: the release's `eagle_prepare_for_decode(batch)` (speculative/eagle_utils.py)
  for EAGLE, EAGLE3 and n-gram, DFLASH's and UNO's own draft input's `prepare_for_decode` where
  the release has one, each allocating with its `alloc_for_spec_decode`; the launch's draft
  count is installed in the runtime settings first;
- finish and retraction: its `release_kv_cache` (mem_cache/common.py), with its `Req.owned_kv_len`
  and `ReqKvInfo.mark_kv_released` (0.5.19+) or its chunk cache's `cache_finished_req` and
  `Req.effective_kv_committed_len` (0.5.16-0.5.18);
- retraction: its `release_req` (release without caching, then the request's own
  `reset_for_retract`, which the engine then leaves the reset to: `resets_retracted`);
- the memory estimate: its `ScheduleBatch._new_tokens_required_next_decode_spec_v2` (0.5.11+),
  `new_tokens_required_next_decode` (0.5.9-0.5.10) or `check_decode_mem` (0.5.6-0.5.8), each
  judged under its own rule's `decode_estimate`;
- the decode memory check before a launch: its `ScheduleBatch.check_decode_mem` (estimate,
  eviction and comparison with the pool; 0.5.19+ the allocator's `check_decode_capacity`:
  `decode_fits`);
- memory-pressure retraction: its `ScheduleBatch.retract_decode` (every release), the loop that
  orders the decode batch (0.5.16+ through its `_get_decode_retraction_order`), retracts with
  its `release_req` until its memory check passes, and aborts what cannot fit; `filter_batch`
  keeps the rows it is told to (`retract_for_memory`);
- admission (0.5.19+): its `alloc_for_extend(batch)` (mem_cache/allocation.py), batch-level,
  which takes the rows and token indices, writes them with `write_cache_indices` and assigns C
  and Al itself (`owns_admission_lengths`); the extend batch it reads (prefix, extend and
  sequence lengths) is kvcheck's `prepare_for_extend`, with no cached prefix.

Before 0.5.19 admission stays kvcheck's: a row and token indices for `[0, C)`, bound through the
fakes as SGLang's `write_cache_indices` would. The Triton kernels are
`kvcheck.families.sglang.real.kernels`. An exception the release's code raises is a `pool`
fault at that call (the target's doing); one raised in kvcheck's fakes is kvcheck's
(`KvcheckInternalError`), and an unmodelled access is `UnsupportedTargetError`: never a verdict.
docs/release-allocation.md says what each release needed and what the path found.
"""

from __future__ import annotations

import copy
import functools
import inspect
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from kvcheck.core.calls import TargetCalls
from kvcheck.core.target import CallWrapper, CodeSpan, SideCode
from kvcheck.errors import BrokenTreeCode, TargetLoadError
from kvcheck.families.sglang.allocation import RuleAllocation, admission_pages, decode_reserve
from kvcheck.families.sglang.allocation_rules import AllocationRule, EstimateAsker
from kvcheck.families.sglang.fakes import FakeReq, UnmodeledAttributeError, is_finished
from kvcheck.families.sglang.pool import KvPool
from kvcheck.families.sglang.real import kernels
from kvcheck.families.sglang.real.coverage_scope import out_of_scope
from kvcheck.families.sglang.real.objects import (
    UNBOUND,
    Bag,
    DisabledTreeCache,
    ReqToTokenPool,
    RuntimeSettings,
    Strict,
    TokenAllocator,
)
from kvcheck.families.sglang.scenario import Config
from kvcheck.targets.source import TreeSource

_EAGLE: Final = "sglang.srt.speculative.eagle_utils"
_EAGLE_V2: Final = "sglang.srt.speculative.eagle_info_v2"
_DFLASH: Final = "sglang.srt.speculative.dflash_info_v2"
_UNO: Final = "sglang.srt.speculative.uno_info"
_COMMON: Final = "sglang.srt.mem_cache.common"
_BATCH: Final = "sglang.srt.managers.schedule_batch"
_BASE_ALLOCATOR: Final = "sglang.srt.mem_cache.allocator.base"
_PREFIX_CACHE: Final = "sglang.srt.mem_cache.base_prefix_cache"
_CHUNK_CACHE: Final = "sglang.srt.mem_cache.chunk_cache"
_ALLOCATION: Final = "sglang.srt.mem_cache.allocation"
# The algorithms SGLang runs adaptive speculation for: any other falls back to static draft
# counts at startup (0.5.16 and 0.5.23 speculative/adaptive_spec_params.py,
# `adaptive_unsupported_reason`, lines 54 and 61). A scenario switching strides under another
# algorithm is one no release runs: its allocation stays kvcheck's model (`runs_adaptively`).
ADAPTIVE_ALGORITHMS: Final = ("eagle", "eagle3")
# Rows of `req_to_token` kvcheck's fakes start with; the table grows when a scenario needs more.
_ROWS: Final = 8
_WIDTH: Final = 4096

_run: Final = TargetCalls(
    outside_model=(UnmodeledAttributeError, kernels.KernelUnsupported),
    not_faults=(kernels.KernelOutOfBounds,),
).run


# The memory check's entry points, newest first, with the `ScheduleBatch` members each needs:
# 0.5.11+'s estimate of the next sizing, 0.5.9-0.5.10's draft bound, and 0.5.6-0.5.8's page
# count, which `check_decode_mem` multiplies by what the scheduler passes
# (docs/release-allocation.md).
_ESTIMATE_MEMBERS: Final[dict[str, tuple[str, ...]]] = {
    "_new_tokens_required_next_decode_spec_v2": ("_new_tokens_required_next_decode_spec_v2",),
    "new_tokens_required_next_decode": ("new_tokens_required_next_decode",),
    "check_decode_mem": ("check_decode_mem", "new_page_count_next_decode"),
}


def _estimate_entry(tree: TreeSource) -> str:
    """The newest of `_ESTIMATE_MEMBERS` the tree's `ScheduleBatch` defines."""
    for entry in _ESTIMATE_MEMBERS:
        if tree.has(_BATCH, f"ScheduleBatch.{entry}"):
            return entry
    raise TargetLoadError(
        f"{tree.file_of(_BATCH)} defines no decode memory estimate kvcheck drives "
        f"({', '.join(_ESTIMATE_MEMBERS)})"
    )


class ReleaseFunctions:
    """The release's own functions this path drives, compiled once per tree (module
    docstring); `TargetLoadError` when the tree lacks one (a release this slice does not
    drive yet)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.settings_box: list[RuntimeSettings] = []
        box = self.settings_box
        # What module-level code reads while the tree is compiled (`_is_hip = is_hip()`).
        at_load = RuntimeSettings(
            algorithm="eagle", page_size=1, draft_tokens=1, max_draft_tokens=1
        )
        accessors = at_load.accessors()

        def accessor(name: str) -> Callable[..., Any]:
            # Answers from the settings of the launch being run (installed per call).
            return lambda *a, **k: (box[-1] if box else at_load).accessors()[name](*a, **k)

        overrides: dict[str, Any] = {name: accessor(name) for name in accessors}
        overrides.update(
            get_last_loc_triton=kernels.last_loc,
            get_last_loc_triton_safe=kernels.last_loc,
            page_interleave_shard_size=lambda allocator: 1,
            # No pinned host memory on a CPU-only machine (DFLASH's length buffers ask).
            is_pin_memory_available=lambda device=None: False,
            # The mamba row pool, which 0.5.16-0.5.18's release tests the row pool against
            # (mem_cache/common.py, `release_kv_cache`): kvcheck's full-attention pool never
            # is one, and compiling its module would reach platform probes.
            HybridReqToTokenPool=type("HybridReqToTokenPool", (), {}),
        )
        self.tree = TreeSource(root, "sglang", overrides=overrides)
        self.draft_mixin: type | None = None
        self._writes: list[Callable[[list[kernels.RowWrite]], None]] = []
        self.tree._overrides["assign_req_to_token_pool_func"] = self._assign
        # The prefill's row write, launched `kernel[grid](...)` by `write_cache_indices`.
        self.tree._overrides["write_req_to_token_pool_triton"] = _Launch(self._write_prefill)
        # The flat layout of 0.5.11-0.5.14 (checked on 0.5.11): C, Al and the row on `Req`,
        # the decode launch a method of the EAGLE v2 draft input.
        self.flat = not self.tree.has(_EAGLE, "eagle_prepare_for_decode") and self.tree.has(
            _EAGLE_V2, "EagleDraftInputV2Mixin.prepare_for_decode"
        )
        # C, Al, the row and the freed flags on `Req` itself (0.5.11-0.5.15): the flat layout,
        # and 0.5.15, which has 0.5.16's launch and retraction functions over those fields.
        self.fields_on_req = self.tree.has(_BATCH, "Req.pop_overallocated_kv_cache")
        if self.flat:
            self._load_flat()
            self._load_retraction_loop()
            return
        for module, name in ((_EAGLE, "eagle_prepare_for_decode"), (_COMMON, "release_kv_cache")):
            if not self.tree.has(module, name):
                raise TargetLoadError(
                    f"{self.tree.file_of(module)} defines no {name}: kvcheck drives the "
                    "release's own allocation code for the 0.5.16+ layouts only so far"
                )
        # 0.5.19+ keeps a request's lengths and row in its `ReqKvInfo` record and releases
        # with `mark_kv_released`; 0.5.16-0.5.18 keep C and the row on `Req`, Al in a
        # `ReqKvInfo(kv_allocated_len, swa_evicted_seqlen)` dropped at release (`req.kv = None`).
        self.kv_record = self.tree.has(_BATCH, "ReqKvInfo.mark_kv_released")
        # Admission where the release assigns both C and Al (0.5.19+; 0.5.16-0.5.18's assigns
        # Al only and leaves C to `prepare_for_extend`, which stays kvcheck's).
        self.alloc_for_extend: Callable[..., Any] | None = None
        if self.kv_record and self.tree.has(_ALLOCATION, "alloc_for_extend"):
            self.alloc_for_extend = self.tree.function(_ALLOCATION, "alloc_for_extend")
        self.prepare_for_decode: Callable[..., Any] | None = self.tree.function(
            _EAGLE, "eagle_prepare_for_decode"
        )
        self.release_kv_cache = self.tree.function(_COMMON, "release_kv_cache")
        # Whether the tree keeps what it can key: `is_insert` up to 0.5.21, `checkpoint` after.
        parameters = inspect.signature(self.release_kv_cache).parameters
        self.release_flag = "checkpoint" if "checkpoint" in parameters else "is_insert"
        # The retraction chooser, where the release has one (0.5.16+): 0.5.17+ sort every
        # batch; 0.5.16's `retract_decode` tells its chooser not to sort with speculative
        # decoding (`allow_policy_sort`, schedule_batch.py:2603-2609), so it returns the batch
        # order, retracting from the back (rule feature `retraction_sorted`).
        self.estimate_by = "_new_tokens_required_next_decode_spec_v2"
        self.retraction_scales_estimate = True  # one estimate whoever asks
        self.launch_preclaims = False
        batch_names = ["_new_tokens_required_next_decode_spec_v2"]
        if self.tree.has(_BATCH, "ScheduleBatch._get_decode_retraction_order"):
            batch_names.append("_get_decode_retraction_order")
        self.batch_members = self.tree.members(_BATCH, "ScheduleBatch", batch_names)
        order_of = getattr(self.batch_members, "_get_decode_retraction_order", None)
        self.chooses_retractions = order_of is not None
        # 0.5.16's chooser takes `allow_policy_sort` and its `retract_decode` passes False with
        # speculative decoding (schedule_batch.py:2603-2609); 0.5.17+ take no such argument and
        # sort every batch (0.5.17 :2738, :2785).
        self.chooser_told_not_to_sort = order_of is not None and (
            "allow_policy_sort" in inspect.signature(order_of).parameters
        )
        # Retraction: the module-level `release_req` (release, then the request's own
        # `reset_for_retract`; 0.5.16+ schedule_batch.py), where the release has both.
        self.release_req: Callable[..., Any] | None = None
        self.reset_members: type = type("Req", (), {})
        if self.tree.has(_BATCH, "release_req") and self.tree.has(_BATCH, "Req.reset_for_retract"):
            self.release_req = self.tree.function(_BATCH, "release_req")
            self.reset_members = self.tree.members(_BATCH, "Req", ["reset_for_retract"])
        self.req_members: type
        self.kv_members: type
        self.allocator_members: type
        self.cache_members: tuple[type, ...]
        if self.kv_record:
            # Each release of the layout has some of these (0.5.19-0.5.20 no `owned_kv_len`,
            # 0.5.21-0.5.22 fewer segment methods): what it has runs, and a name it calls that
            # is neither there nor modelled is kvcheck's gap (exit 2), never a verdict.
            # `output_ids_through_stop` where `owned_kv_len` reads it (0.5.22+): before, only
            # detokenization and the output streamer do (0.5.21 schedule_batch.py:1718).
            req_names = ["owned_kv_len", "effective_kv_committed_len"]
            if _member_reads(
                self.tree.file_of(_BATCH), "Req", "owned_kv_len", "output_ids_through_stop"
            ):
                req_names.append("output_ids_through_stop")
            self.req_members = self._present(_BATCH, "Req", req_names)
            kv_names = ["holds_kv", "is_kv_released", "mark_kv_released", "get_evicted_seqlen"]
            # `swa_dead_lo` where `free_kv_row` reads it (0.5.21+): before, only SWA eviction
            # does (0.5.20 mem_cache/common.py:74).
            if _member_reads(
                self.tree.file_of(_PREFIX_CACHE), "BasePrefixCache", "free_kv_row", "swa_dead_lo"
            ):
                kv_names.append("swa_dead_lo")
            self.kv_members = self._present(_BATCH, "ReqKvInfo", kv_names)
            self.allocator_members = self._present(
                _BASE_ALLOCATOR,
                "BaseTokenToKVPoolAllocator",
                [
                    "free_segment",
                    "free_segments",
                    "free_full_segments",
                    "get_extend_allocation_demand",
                    "evict_to_free_tokens",
                    "free_group_begin",
                    "free_group_end",
                    "check_decode_capacity",
                ],
            )
            # The chunk cache's own `cache_finished_req` where release still calls it
            # (0.5.19-0.5.20), over the base cache's `free_kv_row`.
            self.cache_members = (
                self._present(_CHUNK_CACHE, "ChunkCache", ["cache_finished_req"]),
                self._present(_PREFIX_CACHE, "BasePrefixCache", ["free_kv_row"]),
            )
        elif self.fields_on_req:
            self._load_fields_on_req()
        else:
            self.req_members = self.tree.members(_BATCH, "Req", ["effective_kv_committed_len"])
            self.kv_members = type("ReqKvInfo", (), {})
            # The base allocator's segment method where the release has it (0.5.17-0.5.18
            # free the tail with `free_segment`, mem_cache/common.py:201 in 0.5.17). Their
            # `free_segments` is not driven: only their radix caches call it (0.5.17
            # mem_cache/radix_cache.py:474, unified_radix_cache.py:663).
            self.allocator_members = self._present(
                _BASE_ALLOCATOR, "BaseTokenToKVPoolAllocator", ["free_segment"]
            )
            # The chunk cache's own release entry point (mem_cache/chunk_cache.py).
            self.cache_members = (
                self.tree.members(_CHUNK_CACHE, "ChunkCache", ["cache_finished_req"]),
            )
        self._load_draft_inputs()
        self._load_retraction_loop()

    def _load_retraction_loop(self) -> None:
        """`ScheduleBatch.retract_decode`, with the siblings it reaches (`release_req`, the
        chooser, its memory check `check_decode_mem` and what that reaches) but `filter_batch`,
        the batch's tensor bookkeeping, no KV accounting, which `_RetractionBatch` stands in
        for."""
        self.retraction_loop = self.tree.members(
            _BATCH, "ScheduleBatch", ["retract_decode"], faked=_RETRACTION_FAKED
        )
        # The release's own signatures of the members faked there: a call its loop makes that
        # the release's method would refuse is refused alike (the release's `TypeError`), and
        # one it would take is never kvcheck's `TypeError` blamed on the release.
        file = self.tree.file_of(_BATCH)
        self.faked_signatures = {
            name: _member_signature(file, "ScheduleBatch", name) for name in _RETRACTION_FAKED
        }
        # 0.5.6-0.5.8's check takes the scheduler's multiplier (0.5.6 schedule_batch.py:1548),
        # and 0.5.7-0.5.8's loop hands it on (:1754).
        self.check_signature = _member_signature(file, "ScheduleBatch", "check_decode_mem")
        self.check_parameters = tuple(self.check_signature.parameters)
        self.loop_parameters = tuple(
            inspect.signature(self.retraction_loop.retract_decode).parameters  # type: ignore[attr-defined]
        )

    def _load_draft_inputs(self) -> None:
        """The draft inputs whose own `prepare_for_decode` SGLang's dispatcher calls instead of
        `eagle_prepare_for_decode` (0.5.23 speculative/spec_utils.py:1259-1270) or the EAGLE v2
        mixin's (DFLASH from 0.5.14), where the release has them."""
        self.draft_inputs: dict[str, type] = {}
        for algorithm, module, class_name, names in (
            (
                "dflash",
                _DFLASH,
                "DFlashDraftInputV2",
                ["prepare_for_decode", "_ensure_prepare_length_buffers"],
            ),
            ("uno", _UNO, "UnoDraftInput", ["prepare_for_decode"]),
        ):
            if self.tree.has(module, f"{class_name}.prepare_for_decode"):
                self.draft_inputs[algorithm] = self.tree.members(module, class_name, names)
        # Where each draft input's code lives (its coverage: `ReleaseAllocationCode`).
        self.draft_input_files = {
            algorithm: os.path.abspath(self.tree.file_of(module))
            for algorithm, module in (("dflash", _DFLASH), ("uno", _UNO))
            if algorithm in self.draft_inputs
        }

    @functools.cached_property
    def tree_cache_class(self) -> type:
        """kvcheck's tree cache with the release's own members, one class per tree, and a chunk
        cache to the release's `isinstance` checks, as SGLang's is with prefix sharing off:
        0.5.6-0.5.7's `evict_from_tree_cache` returns first for `isinstance(tree_cache,
        (SWAChunkCache, ChunkCache))` (0.5.6 mem_cache/common.py:231); not recognised, it went
        on to evict from the fake."""
        cache_class = type("TreeCache", (DisabledTreeCache, *self.cache_members), {})
        if self.tree.has(_CHUNK_CACHE, "ChunkCache"):
            chunk_cache = self.tree.binding(_CHUNK_CACHE, "ChunkCache")
            # The release's caches derive from an ABC (`BasePrefixCache`).
            register = getattr(chunk_cache, "register", None)
            if register is not None:
                register(cache_class)
        return cache_class

    def _load_flat(self) -> None:
        """The functions of the flat layout (0.5.6-0.5.14; 0.5.11 described): the launch is
        `EagleDraftInputV2Mixin.prepare_for_decode` (speculative/eagle_info_v2.py:89), which
        sizes `Al += C + 2A - Al` with no clamp (:125-129) and pre-claims C itself (:132);
        release is `release_kv_cache` (mem_cache/common.py:566) through the chunk cache's
        `cache_finished_req` and `Req.pop_committed_kv_cache` / `pop_overallocated_kv_cache`
        (their freed flags), with Al kept; retraction is `ScheduleBatch.release_req`, a
        method, ending in `Req.reset_for_retract`. Before: 0.5.6-0.5.10's launch pre-claims
        nothing (`launch_preclaims`), 0.5.6-0.5.8's takes its draft length from the draft
        input's class (`ALLOC_LEN_PER_DECODE`) and their chunk cache frees the row by index
        before the tail is read from it (`ReqToTokenPool.free`); each has its own estimate
        (`estimate_by`)."""
        tree = self.tree
        self.kv_record = False
        self.alloc_for_extend = None
        self.prepare_for_decode = None
        self.draft_mixin = tree.members(_EAGLE_V2, "EagleDraftInputV2Mixin", ["prepare_for_decode"])
        self.release_kv_cache = tree.function(_COMMON, "release_kv_cache")
        self.release_flag = "is_insert"
        # The memory check's estimate, each release's own (rule feature `decode_estimate`).
        self.estimate_by = _estimate_entry(tree)
        self.batch_members = tree.members(
            _BATCH, "ScheduleBatch", [*_ESTIMATE_MEMBERS[self.estimate_by], "release_req"]
        )
        self.chooses_retractions = False  # no chooser: the back of the batch (to 0.5.15)
        self.chooser_told_not_to_sort = False
        self.release_req = None
        self.reset_members = tree.members(_BATCH, "Req", ["reset_for_retract"])
        # `Req.seqlen` where the estimate reads it (0.5.6-0.5.8's `new_page_count_next_decode`).
        seqlen = ["seqlen"] if self.estimate_by == "check_decode_mem" else []
        self.req_members = tree.members(
            _BATCH, "Req", ["pop_committed_kv_cache", "pop_overallocated_kv_cache", *seqlen]
        )
        # Whether `retract_decode` hands the scheduler's multiplier on to the estimate it
        # retracts by (0.5.7-0.5.8's `buf_multiplier`, schedule_batch.py:1754; 0.5.6's has none).
        self.retraction_scales_estimate = _member_takes(
            tree.file_of(_BATCH), "ScheduleBatch", "retract_decode", "buf_multiplier"
        )
        # 0.5.11-0.5.14's launch pre-claims C (0.5.11 eagle_info_v2.py:132); 0.5.6-0.5.10's is
        # honest (the resolver commits the accepted tokens: 0.5.9
        # scheduler_output_processor_mixin.py:353). Told by the estimate that came with the
        # pre-claim in 0.5.11 (schedule_batch.py:2108), not by the launch's text, so that a
        # launch that lost its pre-claim is the release's fault, never kvcheck's convention.
        self.launch_preclaims = self.estimate_by == "_new_tokens_required_next_decode_spec_v2"
        self.kv_members = type("ReqKvInfo", (), {})
        self.allocator_members = type("BaseTokenToKVPoolAllocator", (), {})
        self.cache_members = (tree.members(_CHUNK_CACHE, "ChunkCache", ["cache_finished_req"]),)
        # DFLASH's own draft input from 0.5.14 (speculative/dflash_info_v2.py:131), which
        # pre-claims nothing; EAGLE, EAGLE3 and n-gram launch through the mixin.
        self._load_draft_inputs()

    def _load_fields_on_req(self) -> None:
        """0.5.15's members over the fields on `Req`: release frees through the chunk cache's
        `cache_finished_req` and `Req.pop_committed_kv_cache` / `pop_overallocated_kv_cache`
        (0.5.15 mem_cache/common.py:635-689, managers/schedule_batch.py:1059-1076), keeping
        Al; the launch (speculative/eagle_utils.py:771) is honest, pre-claiming nothing."""
        self.req_members = self.tree.members(
            _BATCH, "Req", ["pop_committed_kv_cache", "pop_overallocated_kv_cache"]
        )
        self.kv_members = type("ReqKvInfo", (), {})
        self.allocator_members = type("BaseTokenToKVPoolAllocator", (), {})
        self.cache_members = (
            self.tree.members(_CHUNK_CACHE, "ChunkCache", ["cache_finished_req"]),
        )

    def __deepcopy__(self, memo: dict[int, Any]) -> ReleaseFunctions:
        """Itself: a copy of a path (an engine the exhaustive search branches) shares the
        compiled release, as every scenario of a search already does (`ReleaseAllocationCode`).
        The compiled modules cannot be copied, and their per-call stacks (`settings_box`,
        `_writes`) are empty between calls; each path's mutable state is its own fakes."""
        return self

    def _present(self, module: str, class_name: str, names: list[str]) -> type:
        """The members of `class_name` among `names` that this release's file defines."""
        present = [name for name in names if self.tree.has(module, f"{class_name}.{name}")]
        if not present:
            return type(class_name, (), {})
        return self.tree.members(module, class_name, present)

    def _assign(self, *args: Any) -> None:
        """`assign_req_to_token_pool_func`: the kernel's CPU equivalent, then the binding."""
        writes = kernels.assign_req_to_token_pool(*args)
        self._writes[-1](writes)

    def _write_prefill(self, *args: Any) -> None:
        """`write_req_to_token_pool_triton`: the kernel's CPU equivalent, then the binding."""
        writes = kernels.write_req_to_token_pool(*args)
        self._writes[-1](writes)


def _member_definition(file: Path, class_name: str, member: str) -> Any:
    """The `ast.FunctionDef` of `class_name.member` in `file` (None: it has none)."""
    import ast

    for node in ast.walk(ast.parse(file.read_text())):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for definition in node.body:
                if isinstance(definition, ast.FunctionDef) and definition.name == member:
                    return definition
    return None


def _member_signature(file: Path, class_name: str, member: str) -> inspect.Signature:
    """The signature `class_name.member` in `file` declares (defaults evaluated as written; a
    default that names something is taken as None); `TargetLoadError` where it has none."""
    import ast

    definition = _member_definition(file, class_name, member)
    if definition is None:
        raise TargetLoadError(f"{file} defines no {class_name}.{member}, which kvcheck drives")
    arguments = copy.deepcopy(definition.args)

    def plain(default: ast.expr | None) -> ast.expr | None:
        return (
            default if default is None or isinstance(default, ast.Constant) else ast.Constant(None)
        )

    arguments.defaults = [ast.Constant(None) if d is None else plain(d) for d in arguments.defaults]
    arguments.kw_defaults = [plain(d) for d in arguments.kw_defaults]
    for argument in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
        argument.annotation = None
    for argument in (arguments.vararg, arguments.kwarg):
        if argument is not None:
            argument.annotation = None
    stub = ast.Module(
        body=[
            ast.FunctionDef(
                name=member, args=arguments, body=[ast.Pass()], decorator_list=[], returns=None
            )
        ],
        type_ignores=[],
    )
    namespace: dict[str, Any] = {}
    exec(compile(ast.fix_missing_locations(stub), str(file), "exec"), namespace)
    return inspect.signature(namespace[member])


def _member_takes(file: Path, class_name: str, member: str, parameter: str) -> bool:
    """Whether `class_name.member` in `file` takes a parameter named `parameter`."""
    definition = _member_definition(file, class_name, member)
    if definition is None:
        return False
    arguments = definition.args
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    return any(argument.arg == parameter for argument in every)


def _member_reads(file: Path, class_name: str, member: str, attribute: str) -> bool:
    """Whether `class_name.member` in `file` reads `attribute` (`self.attribute`)."""
    import ast

    definition = _member_definition(file, class_name, member)
    return definition is not None and any(
        isinstance(read, ast.Attribute) and read.attr == attribute for read in ast.walk(definition)
    )


class _Launch:
    """A Triton kernel as its callers launch it (`kernel[grid](*args)`): `run` over the
    arguments; the grid is the number of programs, which `run` reads off the arguments."""

    def __init__(self, run: Callable[..., None]) -> None:
        self._run = run

    def __getitem__(self, grid: Any) -> Callable[..., None]:
        return self._run


class ReleaseAllocation:
    """The release's own allocation path for one scenario (module docstring)."""

    def __init__(
        self,
        config: Config,
        functions: ReleaseFunctions,
        measure: CallWrapper | None = None,
        on_retraction_order: Callable[[], None] | None = None,
    ) -> None:
        """`measure` wraps each call into the release's code (its coverage: None, unmeasured);
        `on_retraction_order` is told each time the release's retraction chooser is asked."""
        self.config = config
        self.functions = functions
        self.measure = measure
        self.on_retraction_order = on_retraction_order
        self.pool = KvPool(config.page_size, config.pool_pages)
        self.pool.exclusive = False
        self.settings = RuntimeSettings(
            algorithm=config.algorithm,
            page_size=config.page_size,
            draft_tokens=config.stride,
            max_draft_tokens=max(config.stride, config.max_stride or config.stride),
        )
        allocator_class = type("Allocator", (TokenAllocator, functions.allocator_members), {})
        self.allocator = allocator_class(self.pool)
        self.rows = ReqToTokenPool(self.pool, self.allocator, _ROWS, _WIDTH)
        self.tree_cache = functions.tree_cache_class(self.allocator, self.rows)
        self._views: dict[str, Any] = {}
        req_view: type
        kv_view: type
        req_view, kv_view = (
            (_ReqView, _KvView) if functions.kv_record else (_ReqFieldsView, _AllocatedLenView)
        )
        if functions.fields_on_req:
            req_view = _FlatReqView
        self._req_class = type(
            "Req", (req_view, functions.req_members, functions.reset_members), {}
        )
        # With the release's own `release_req`, its `reset_for_retract` resets the request.
        self.resets_retracted = functions.release_req is not None or functions.flat
        # The flat layout's launch pre-claims C itself in 0.5.11 (eagle_info_v2.py:132).
        self.owns_preclaim = functions.launch_preclaims
        # With the release's own `alloc_for_extend`, it assigns C and Al at admission.
        self.owns_admission_lengths = functions.alloc_for_extend is not None
        self._kv_class = type("ReqKvInfo", (kv_view, functions.kv_members), {})
        self._batch_class = type("ScheduleBatch", (_BatchView, functions.batch_members), {})
        self._retraction_class = type(
            "ScheduleBatch", (_RetractionBatch, functions.retraction_loop), {}
        )
        # Inside the release's `retract_decode`: the release its `release_req` is about to run
        # for the request the engine retracts next, and what it returned (`retract`).
        self._pending_release: Callable[[], Any] | None = None
        self._release_returned: Any = None
        # The tokens the last `estimate_decode` found (its pages are these over the page size).
        self._estimated_tokens = 0

    # -- what the engine calls ------------------------------------------------------------------

    def view(self, req: FakeReq) -> Any:
        """The release-side request of `req` (made once per request)."""
        view = self._views.get(req.rid)
        if view is None:
            view = self._views[req.rid] = self._req_class(req, self._kv_class(req))
        return view

    def admit(self, reqs: list[FakeReq]) -> None:
        """Admission of a prefill batch: the release's `alloc_for_extend` where it has one
        (0.5.19+), else kvcheck's, request by request (`_admit_one`)."""
        alloc_for_extend = self.functions.alloc_for_extend
        if alloc_for_extend is None:
            for req in reqs:
                self._admit_one(req)
            return
        import torch

        # kvcheck's `prepare_for_extend`: no cached prefix, so each request extends its whole
        # fill (prompt and outputs so far, a retracted request's too).
        fills = [len(req.origin_input_ids) + len(req.output_ids) for req in reqs]
        seq_lens = torch.tensor(fills, dtype=torch.int64)
        batch = self._batch_class()
        batch._set(
            reqs=[self.view(req) for req in reqs],
            token_to_kv_pool_allocator=self.allocator,
            tree_cache=self.tree_cache,
            req_to_token_pool=self.rows,
            prefix_lens=[0] * len(reqs),
            extend_lens=list(fills),
            extend_num_tokens=sum(fills),
            seq_lens=seq_lens,
            seq_lens_cpu=seq_lens.clone(),
        )
        self._call(alloc_for_extend, batch)

    def _admit_one(self, req: FakeReq) -> None:
        """kvcheck's admission: a row and indices for `[0, C)`, bound as SGLang writes them."""
        view = self.view(req)
        if not self.functions.fields_on_req and view.kv is None:  # 0.5.16-0.5.18 drop it
            view.kv = self._kv_class(req)
        row = self.rows.take(req.rid)
        view._set_row_index(row)
        length = req.kv_allocated_len
        if length > 0:
            out = self.allocator.alloc(length)
            if out is not None:
                self.rows.write((row, slice(0, length)), out)
        self._settle()

    def prepare_decode(self, reqs: list[FakeReq], stride: int) -> None:
        """The release's decode launch at `stride` (module docstring): DFLASH's and UNO's own
        draft input's `prepare_for_decode` where the release has one, else
        `eagle_prepare_for_decode` (EAGLE, EAGLE3, n-gram), as SGLang's dispatcher routes."""
        self.pool.check_launch([req.rid for req in reqs])
        batch = self._batch(reqs, stride)
        draft_input = self.functions.draft_inputs.get(self.config.algorithm)
        if draft_input is None and self.functions.draft_mixin is not None:
            draft = type("DraftInput", (_EagleV2Input, self.functions.draft_mixin), {})(
                self.settings
            )
            self._call(draft.prepare_for_decode, batch)
            return
        if draft_input is None:
            assert self.functions.prepare_for_decode is not None
            self._call(self.functions.prepare_for_decode, batch)
            return
        fake = _DRAFT_INPUT_FAKES[self.config.algorithm]
        spec_info = type("DraftInput", (fake, draft_input), {})(len(reqs))
        self._call(spec_info.prepare_for_decode, batch)

    def estimate_decode(
        self, reqs: list[FakeReq], stride: int, *, asked_by: EstimateAsker = "admission"
    ) -> int:
        """The release's estimate of the next launch, in pages, by its own entry point
        (`ReleaseFunctions.estimate_by`): 0.5.11+'s `_new_tokens_required_next_decode_spec_v2`,
        0.5.9-0.5.10's `new_tokens_required_next_decode`, or 0.5.6-0.5.8's `check_decode_mem`,
        which the scheduler calls with its `decode_mem_cache_buf_multiplier` and
        `retract_decode` without (0.5.6 scheduler.py:1910, schedule_batch.py:1611). The
        release's own answer whoever asks: where it lets a launch through that the pool
        cannot hold, the launch's out-of-memory is the release's fault."""
        batch = self._batch(reqs, stride)
        page = self.pool.page_size
        if self.functions.estimate_by == "new_tokens_required_next_decode":
            tokens = self._call(batch.new_tokens_required_next_decode)
        elif self.functions.estimate_by == "check_decode_mem":
            # The scheduler's multiplier (0.5.6 scheduler.py:798-808), topk 1; 0.5.6's
            # `retract_decode` takes none and asks without it (schedule_batch.py:1611).
            scaled = asked_by != "retraction" or self.functions.retraction_scales_estimate
            multiplier = stride + self.settings.steps if scaled else 1
            self._call(batch.check_decode_mem, multiplier, selected_indices=list(range(len(reqs))))
            tokens = batch._asked_tokens
        else:
            tokens = self._call(batch._new_tokens_required_next_decode_spec_v2, batch.reqs, page)
        self._estimated_tokens = int(tokens or 0)
        return self._estimated_tokens // page

    def retraction_order(self, reqs: list[FakeReq]) -> list[FakeReq] | None:
        """None: the release's own loop orders and retracts (`retract_for_memory`)."""
        return None

    def decode_fits(self, reqs: list[FakeReq], stride: int) -> bool | None:
        """The release's own `check_decode_mem` on the decode batch `reqs` (with the
        scheduler's multiplier where it takes one, 0.5.6-0.5.8): its estimate, its eviction
        and its comparison with the pool (0.5.19+ the allocator's `check_decode_capacity`).
        None where it raised (a `pool` fault): the engine then compares for itself."""
        self.settings.draft_tokens = stride
        batch = self._loop_batch(reqs, _asked_by="check")
        multiplier = {"buf_multiplier": stride + self.settings.steps}
        given = {k: v for k, v in multiplier.items() if k in self.functions.check_parameters}
        fits = self._call(batch.check_decode_mem, **given)
        return None if fits is None else bool(fits)

    def _loop_batch(self, reqs: list[FakeReq], **hooks: Any) -> Any:
        """The batch the release's memory check and retraction loop run on (`_RetractionBatch`)."""
        batch = self._retraction_class()
        batch._set(
            reqs=[self.view(req) for req in reqs],
            token_to_kv_pool_allocator=self.allocator,
            tree_cache=self.tree_cache,
            req_to_token_pool=self.rows,
            _path=self,
            _released=[],
            **hooks,
        )
        return batch

    def retract_for_memory(
        self, reqs: list[FakeReq], retract: Callable[[FakeReq], None]
    ) -> list[FakeReq] | None:
        """The release's own `retract_decode` over the decode batch `reqs`, with its own memory
        check (`decode_fits`); each request its `release_req` releases is the engine's to retract
        (`retract`, which comes back to `retract` here to run that release as the loop made
        it). What it aborted for want of memory, which kvcheck does not model ([] where it
        raised: a `pool` fault). A batch it leaves holding a request it released, or missing
        one it neither released nor kept (SGLang's `filter_batch` drops it, unfinished, with
        its KV), is a `pool` fault too."""
        functions = self.functions
        if self.on_retraction_order is not None:
            self.on_retraction_order()
        batch = self._loop_batch(reqs, _retract=retract, _asked_by="retraction")
        given = {
            "server_args": self.settings.server_args(),
            "buf_multiplier": self.settings.draft_tokens + self.settings.steps,
        }
        arguments = [given[name] for name in functions.loop_parameters if name in given]
        returned = self._call(batch.retract_decode, *arguments)
        if returned is None:
            return []
        kept = {view.rid for view in batch.reqs}
        released = set(batch._released)
        dropped = [req.rid for req in reqs if req.rid not in kept | released]
        both = sorted(kept & released)
        wrong = [
            *([f"without {', '.join(dropped)}, neither retracted nor aborted"] if dropped else []),
            *([f"with {', '.join(both)}, which it released"] if both else []),
        ]
        if wrong:
            self.pool.fault(
                "pool", None, f"SGLang's retract_decode left the decode batch {' and '.join(wrong)}"
            )
        return [view._req for view in returned[2]]

    def admission_pages(self, req: FakeReq, stride: int) -> int:
        """kvcheck's own, by the config's rule (SGLang's `PrefillAdder` is not driven)."""
        return admission_pages(self.pool, req, decode_reserve(self.config, stride))

    def release(self, req: FakeReq) -> None:
        """Finish: the release's `release_kv_cache(req, tree_cache, checkpoint=True)`
        (`is_insert=True` up to 0.5.21)."""
        if is_finished(req):
            self.pool.reading.discard(req.rid)
        if not self.pool.has_row(req.rid):
            self.pool.fault("double-free", req.rid, f"{req.rid} is released again")
            return
        self._release(req, checkpoint=True)

    def retract(self, req: FakeReq) -> None:
        """Retraction: the release's `release_req` (its `release_kv_cache` without caching,
        then the request's own `reset_for_retract`, which zeroes C and counts the
        retraction), or `release_kv_cache` alone where the release has no `release_req`
        (the engine then resets the request). Inside the release's `retract_decode`, its own
        `ScheduleBatch.release_req` call, as it made it (`retract_for_memory`)."""
        self.pool.reading.discard(req.rid)
        pending, self._pending_release = self._pending_release, None
        if pending is not None:
            self._release_returned = self._retracting(req, pending)
            return
        release_req = self.functions.release_req
        if self.functions.flat:
            batch = self._batch([req], self.settings.draft_tokens)
            self._retracting(req, batch.release_req, 0, 0, self.settings.server_args())
            return
        if release_req is None:
            self._release(req, checkpoint=False)
            return
        view = self.view(req)
        given = {
            "req": view,
            "remaing_req_count": 0,  # spelled so; it sizes an eviction a disabled cache skips
            "server_args": self.settings.server_args(),
            "req_to_token_pool": self.rows,
            "token_to_kv_pool_allocator": self.allocator,
            "tree_cache": self.tree_cache,
            "hisparse_coordinator": None,
        }
        parameters = inspect.signature(release_req).parameters
        arguments = {name: value for name, value in given.items() if name in parameters}
        self._retracting(req, release_req, **arguments)

    def _retracting(
        self, retracted: FakeReq, call: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> Any:
        """`call` as the retraction of `retracted`: its frees on its behalf, and what its reset
        writes that kvcheck does not model kept aside (`_Resettable`); what it returned."""
        view = self.view(retracted)
        records = (
            [view]
            if self.functions.fields_on_req
            else [r for r in (view, view.kv) if r is not None]
        )
        self.allocator._acting = retracted.rid
        for record in records:
            record._retracting = True
        try:
            return self._call(call, *args, **kwargs)
        finally:
            self.allocator._acting = None
            for record in records:
                record._retracting = False

    # -- helpers --------------------------------------------------------------------------------

    def _release(self, req: FakeReq, *, checkpoint: bool) -> None:
        view = self.view(req)
        self.allocator._acting = req.rid
        try:
            self._call(
                self.functions.release_kv_cache,
                view,
                self.tree_cache,
                **{self.functions.release_flag: checkpoint},
            )
        finally:
            self.allocator._acting = None

    def _batch(self, reqs: list[FakeReq], stride: int) -> Any:
        import torch

        self.settings.draft_tokens = stride
        views = [self.view(req) for req in reqs]
        batch = self._batch_class()
        batch._set(
            reqs=views,
            token_to_kv_pool_allocator=self.allocator,
            tree_cache=self.tree_cache,
            req_to_token_pool=self.rows,
            req_pool_indices=torch.tensor([v._row_index() or 0 for v in views], dtype=torch.int64),
            seq_lens=torch.tensor([r.kv_committed_len for r in reqs], dtype=torch.int64),
            seq_lens_cpu=torch.tensor([r.kv_committed_len for r in reqs], dtype=torch.int64),
        )
        return batch

    def _call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self.functions.settings_box.append(self.settings)
        self.functions._writes.append(self.rows.bind)

        def call() -> Any:
            return function(*args, **kwargs)

        try:
            returned, error = _run(call if self.measure is None else self.measure(call))
        finally:
            self.functions.settings_box.pop()
            self.functions._writes.pop()
        if error is not None and not self.pool.faults:
            self.pool.fault(
                "pool", None, f"SGLang's {getattr(function, '__name__', 'code')} raised {error}"
            )
        self._settle()
        return returned

    def _settle(self) -> None:
        """Pages allocated and bound to no row by the end of a call are leaked; rows the call
        freed by index are given back to the pool now (`ReqToTokenPool.settle_freed_rows`)."""
        self.rows.settle_freed_rows()
        unbound = [page for page, holder in self.pool.owner.items() if holder == UNBOUND]
        if unbound:
            self.pool.fault("leak", None, f"pages {unbound} were allocated and never bound")
            self.allocator.free_pages(unbound)


class _Resettable(Strict):
    """A release-side view whose request the release's `reset_for_retract` resets: while
    `_retracting`, a write to a field kvcheck does not model (the dozens of prefix, logprob,
    mamba and grammar fields the reset clears) is kept aside in `_reset_writes`; reading one
    back stays unmodelled. What kvcheck judges (C, Al, `is_retracted`, the retraction count)
    goes to the request as always."""

    _retracting = False

    def __setattr__(self, name: str, value: Any) -> None:
        if (
            self._retracting
            and not name.startswith("_")
            and name not in self._fields
            and not hasattr(type(self), name)
        ):
            self.__dict__.setdefault("_reset_writes", {})[name] = value
            return
        super().__setattr__(name, value)


class _KvView(_Resettable):
    """`req.kv` for the release's code: C and Al are the fake request's; the rest its own."""

    _owner = "req.kv"
    _fields = frozenset(
        {
            "req_pool_idx",
            "cache_protected_len",
            "swa_evict_floor",
            "component_evicted_seqlens",
            "swa_evicted_seqlen",  # 0.5.19-0.5.20's name for what SWA eviction freed
        }
    )

    def __init__(self, req: FakeReq) -> None:
        self._req = req
        self.req_pool_idx: int | None = None
        self.cache_protected_len = 0
        self.swa_evict_floor = 0
        self.component_evicted_seqlens: dict[Any, int] = {}
        self.swa_evicted_seqlen = 0

    kv_committed_len = property(
        lambda self: self._req.kv_committed_len,
        lambda self, value: setattr(self._req, "kv_committed_len", value),
    )
    kv_allocated_len = property(
        lambda self: self._req._allocated,
        lambda self, value: setattr(self._req, "_allocated", value),
    )


class _ReqView(_Resettable):
    """A request as the release's allocation code sees it (its `Req`'s own methods mixed in)."""

    _owner = "req"
    _fields = frozenset(
        {
            "kv",
            "decode_batch_idx",
            "lock",
            "skip_radix_cache_insert",
            "reasoning_tokens",
            # Set by `retract_decode` on what it aborts for want of memory.
            "to_finish",
            "prefix_indices",
        }
    )
    # Greedy sampling: what DFLASH's and UNO's launches read to size their tree; the length
    # cap, which `retract_decode`'s new token ratio sums.
    sampling_params = property(
        lambda self: Bag(
            "req.sampling_params", top_k=1, max_new_tokens=self._req.sampling_params.max_new_tokens
        )
    )
    # No beam search (0.5.19+'s `retract_decode` aborts a beam group instead of retracting it).
    beam_group = None
    to_finish = None

    def __init__(self, req: FakeReq, kv: _KvView) -> None:
        self._req = req
        self.kv = kv
        self.decode_batch_idx = 0
        self.lock = None
        self.skip_radix_cache_insert = False
        self.reasoning_tokens = 0
        self.prefix_indices = _no_prefix()

    rid = property(lambda self: self._req.rid)
    origin_input_ids = property(lambda self: self._req.origin_input_ids)
    output_ids = property(lambda self: self._req.output_ids)
    finished_len = property(lambda self: self._req.finished_len)
    # What `reset_for_retract` counts and sets, kept on the request the engine judges.
    retraction_count = property(
        lambda self: self._req.retraction_count,
        lambda self, value: setattr(self._req, "retraction_count", value),
    )
    is_retracted = property(
        lambda self: self._req.is_retracted,
        lambda self, value: setattr(self._req, "is_retracted", value),
    )
    input_embeds = None  # token ids only: the reset keeps the outputs
    # No cached prefix at admission (a disabled cache matches nothing): 0.5.22+ read its
    # length, 0.5.19-0.5.21 its slots (`prefix_indices`, which their reset writes back empty).
    prefix_len = 0

    def finished(self) -> bool:
        """Whether the scheduler is done with it."""
        return is_finished(self._req)

    def refresh_fill_ids(self) -> None:
        """The fill ids feed the tree's keys, which a disabled cache never uses."""

    def _row_index(self) -> int | None:
        return self.kv.req_pool_idx

    def _set_row_index(self, row: int | None) -> None:
        self.kv.req_pool_idx = row


def _no_prefix() -> Any:
    import torch

    return torch.empty((0,), dtype=torch.int64)


class _AllocatedLenView(Strict):
    """`req.kv` of 0.5.16-0.5.18: `ReqKvInfo(kv_allocated_len, swa_evicted_seqlen)`."""

    _owner = "req.kv"
    _fields = frozenset({"swa_evicted_seqlen"})

    def __init__(self, req: FakeReq) -> None:
        self._req = req
        self.swa_evicted_seqlen = 0

    kv_allocated_len = property(
        lambda self: self._req._allocated,
        lambda self, value: setattr(self._req, "_allocated", value),
    )


class _RowOnReq(_Resettable):
    """A request whose row index (`req_pool_idx`) sits on `Req` itself, as in the layouts
    before 0.5.19; what it shares with 0.5.19+'s request is read through `_ReqView`."""

    req_pool_idx: int | None

    rid = _ReqView.rid
    retraction_count = _ReqView.retraction_count
    is_retracted = _ReqView.is_retracted
    input_embeds = _ReqView.input_embeds
    origin_input_ids = _ReqView.origin_input_ids
    output_ids = _ReqView.output_ids
    finished_len = _ReqView.finished_len
    finished = _ReqView.finished
    beam_group = _ReqView.beam_group
    to_finish = None

    def _row_index(self) -> int | None:
        return self.req_pool_idx

    def _set_row_index(self, row: int | None) -> None:
        self.req_pool_idx = row


class _ReqFieldsView(_RowOnReq):
    """A request of 0.5.16-0.5.18: C, the row and the cache fields on `Req` itself, Al in its
    `kv` record, which release drops (`req.kv = None`: no allocated length, as Al = 0)."""

    _owner = "req"
    _fields = frozenset(
        {
            "req_pool_idx",
            "cache_protected_len",
            "swa_evict_floor",
            "decode_batch_idx",
            "lock",
            "skip_radix_cache_insert",
            "reasoning_tokens",
            # Set by `retract_decode` on what it aborts for want of memory.
            "to_finish",
        }
    )
    sampling_params = _ReqView.sampling_params

    def __init__(self, req: FakeReq, kv: _AllocatedLenView) -> None:
        self._req = req
        self._kv: _AllocatedLenView | None = kv
        self.req_pool_idx: int | None = None
        self.cache_protected_len = 0
        self.swa_evict_floor = 0
        self.decode_batch_idx = 0
        self.lock = None
        self.skip_radix_cache_insert = False
        self.reasoning_tokens = 0

    @property
    def kv(self) -> _AllocatedLenView | None:
        """The allocated-length record; None once released."""
        return self._kv

    @kv.setter
    def kv(self, record: _AllocatedLenView | None) -> None:
        if record is None:
            self._req._allocated = 0
        self._kv = record

    kv_committed_len = property(
        lambda self: self._req.kv_committed_len,
        lambda self, value: setattr(self._req, "kv_committed_len", value),
    )


class _FlatReqView(_RowOnReq):
    """A request of 0.5.11-0.5.15 (the flat layout and 0.5.15): C, Al, the row and the freed flags
    `pop_committed_kv_cache` / `pop_overallocated_kv_cache` set, all on `Req`."""

    _owner = "req"
    _fields = frozenset(
        {
            "req_pool_idx",
            "kv_committed_freed",
            "kv_overallocated_freed",
            "decode_batch_idx",
            "reasoning_tokens",
            # Set by `retract_decode` on what it aborts for want of memory.
            "to_finish",
            "prefix_indices",
        }
    )

    sampling_params = _ReqView.sampling_params

    def __init__(self, req: FakeReq, kv: Any = None) -> None:
        self._req = req
        self.req_pool_idx: int | None = None
        self.kv_committed_freed = False
        self.kv_overallocated_freed = False
        self.decode_batch_idx = 0
        self.reasoning_tokens = 0
        self.prefix_indices = _no_prefix()

    kv_committed_len = _ReqFieldsView.kv_committed_len
    kv_allocated_len = property(
        lambda self: self._req._allocated,
        lambda self, value: setattr(self._req, "_allocated", value),
    )


class _EagleV2Input(Strict):
    """The EAGLE v2 draft input whose `prepare_for_decode` is the flat layout's launch; the
    launch reads nothing of its own but, in 0.5.6-0.5.8, the draft length the worker sets on
    the class at start (`ALLOC_LEN_PER_DECODE`)."""

    _owner = "batch.spec_info"

    def __init__(self, settings: RuntimeSettings) -> None:
        self._settings = settings

    @property
    def ALLOC_LEN_PER_DECODE(self) -> int:  # the release names it so
        """`max(steps * topk, draft tokens)`, as 0.5.6's worker sets it
        (speculative/eagle_worker_v2.py:99-101), topk 1; a rule without adaptive switching
        launches at one draft count, so the worker's start value is the launch's."""
        return max(self._settings.steps, self._settings.draft_tokens)


class _BatchView(Strict):
    """The `ScheduleBatch` a decode launch and the memory check run on."""

    _owner = "batch"
    _fields = frozenset(
        {
            "reqs",
            "token_to_kv_pool_allocator",
            "tree_cache",
            "req_to_token_pool",
            "req_pool_indices",
            "seq_lens_cpu",
            "seq_lens_sum",
            "max_seq_len_host",
            # What admission's `alloc_for_extend` reads (kvcheck's `prepare_for_extend`).
            "prefix_lens",
            "extend_lens",
            "extend_num_tokens",
            "seq_lens",
        }
    )
    device = "cpu"
    hisparse_coordinator = None
    sampling_info = Bag(
        "batch.sampling_info",
        penalizer_orchestrator=Bag("batch.sampling_info.penalizer_orchestrator", is_required=False),
    )

    def _set(self, **values: Any) -> None:
        self.__dict__.update(values)

    def maybe_evict_swa(self) -> None:
        """No sliding-window attention is modelled."""

    def maybe_wait_verify_done(self) -> None:
        """No verify runs on another stream: the last one is done."""

    def is_dllm(self) -> bool:
        """No diffusion language model."""
        return False

    def batch_size(self) -> int:
        """The requests in the batch."""
        return len(self.reqs)

    # A speculative batch of the overlap scheduler's v2 worker (what 0.5.6-0.5.10's memory
    # estimates test), no sliding-window pool.
    spec_algorithm = Bag("batch.spec_algorithm", is_none=lambda: False)
    is_spec_v2 = True
    is_hybrid_swa = False
    _asked_tokens: int | None = None

    def _is_available_size_sufficient(self, num_tokens: int) -> bool:
        """Whether the pool holds `num_tokens` (0.5.6-0.5.8's last step of `check_decode_mem`,
        kept here so the estimate it was asked can be read back: `_asked_tokens`)."""
        self._asked_tokens = int(num_tokens)
        return bool(self.token_to_kv_pool_allocator.available_size() >= num_tokens)


# The `ScheduleBatch` members the retraction loop reaches that `_RetractionBatch` defines.
_RETRACTION_FAKED: Final = ("filter_batch",)


class _RetractionBatch(_BatchView):
    """The decode batch the release's `retract_decode` runs on (`retract_for_memory`)."""

    reqs: list[Any]
    _retract: Callable[[FakeReq], None]
    _path: ReleaseAllocation
    _released: list[str]  # the requests its `release_req` released, in order
    _asked_by: EstimateAsker

    def check_decode_mem(self, *args: Any, **kwargs: Any) -> Any:
        """The release's own memory check, held to what it checks: its own estimate of the
        rows it selected against the free pool (with a chunk cache nothing is evictable). An
        answer the comparison does not give is a `pool` fault at this call: a check that
        refuses what fits retracts, or aborts, a request the pool holds; one that lets
        through what does not fit runs the launch out of memory."""
        said = super().check_decode_mem(*args, **kwargs)  # type: ignore[misc]
        path = self._path
        signature = path.functions.check_signature
        selected = signature.bind(self, *args, **kwargs).arguments.get("selected_indices")
        views = self.reqs if selected is None else [self.reqs[i] for i in selected]
        rows = [view._req for view in views]
        path.estimate_decode(rows, path.settings.draft_tokens, asked_by=self._asked_by)
        tokens, free = path._estimated_tokens, path.allocator.available_size()
        if bool(said) != (free >= tokens):
            names = ", ".join(req.rid for req in rows) or "no rows"
            verdict = "fit" if said else "do not fit"
            path.pool.fault(
                "pool",
                None,
                f"SGLang's check_decode_mem said {names} {verdict}, but its own estimate for "
                f"them is {tokens} tokens and {free} are free",
            )
        return said

    def filter_batch(self, *args: Any, **kwargs: Any) -> None:
        """Keep the rows `keep_indices` (the rest were retracted or aborted), taking what the
        release's own method takes (`_bound`)."""
        keep = self._bound("filter_batch", args, kwargs).get("keep_indices")
        if keep is not None:
            self.reqs = [self.reqs[i] for i in keep]

    def _bound(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The arguments of a call of the faked member `name`, bound to the release's own
        signature of it: the release's `TypeError` for a call that method refuses."""
        signature = self._path.functions.faked_signatures[name]
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        return dict(bound.arguments)

    def release_req(self, idx: int, *args: Any, **kwargs: Any) -> Any:
        """The release's own `release_req` of row `idx`, as the engine's retraction of it."""
        path = self._path
        path._pending_release = functools.partial(super().release_req, idx, *args, **kwargs)  # type: ignore[misc]
        path._release_returned = None
        self._released.append(self.reqs[idx].rid)
        try:
            self._retract(self.reqs[idx]._req)
        finally:
            path._pending_release = None
        return path._release_returned


class _DflashInput(Strict):
    """DFLASH's draft input at a decode launch: its length buffers, grown by its own code."""

    _owner = "batch.spec_info"
    _fields = frozenset(
        {
            "_prepare_batch_seq_lens_cpu_buf",
            "_prepare_cur_kv_lens_cpu_buf",
            "_prepare_nxt_kv_lens_cpu_buf",
            "_prepare_cur_kv_lens_gpu_buf",
            "_prepare_nxt_kv_lens_gpu_buf",
            "max_top_k",
            "uniform_top_k_value",
            "nxt_kv_lens_cpu",  # what its launch records: 0.5.23's names
            "nxt_kv_lens_sum",
            "reserved_seq_lens_cpu",  # and 0.5.14-0.5.18's
            "reserved_seq_lens_sum",
            # 0.5.14's: two more length buffers, its planning bound, the previous verify's
            # event (None: done) and a carried allocated length no code of the release sets
            # (None: the request's own `kv_allocated_len` is read).
            "_prepare_committed_kv_lens_cpu_buf",
            "_prepare_planning_kv_lens_cpu_buf",
            "planning_seq_lens_cpu",
            "planning_seq_lens_sum",
            "verify_done",
            "cur_allocated_seq_lens_cpu",
        }
    )

    def __init__(self, batch_size: int) -> None:
        for name in self._fields:
            setattr(self, name, None)


class _UnoInput(Strict):
    """UNO's draft input at a decode launch: one future index per request (what the overlap
    scheduler's result carries), and what its launch records."""

    _owner = "batch.spec_info"
    _fields = frozenset(
        {
            "future_indices",
            "bonus_tokens",
            "new_seq_lens",
            "max_top_k",
            "uniform_top_k_value",
            "reserved_seq_lens_cpu",
            "reserved_seq_lens_sum",
        }
    )

    def __init__(self, batch_size: int) -> None:
        import torch

        for name in self._fields:
            setattr(self, name, None)
        self.future_indices = torch.zeros(batch_size, dtype=torch.int64)


_DRAFT_INPUT_FAKES: Final[dict[str, type]] = {"dflash": _DflashInput, "uno": _UnoInput}


class ReleaseAllocationCode:
    """The `Target.allocation` of a release tree (`sglang==V`, a checkout, a package
    directory): the release's own allocation path, a fresh one per scenario.

    `root` (a callable, so that `sglang==V` unpacks its allocation files only when they are
    used) gives the directory holding the tree's `sglang` package. Nothing is compiled until
    `unavailable()` or the first scenario asks: judging a release tree by kvcheck's own model
    (`--allocation-path model`) costs nothing more than before."""

    def __init__(
        self, root: Callable[[], Path], where: str, rule: AllocationRule | None = None
    ) -> None:
        """`rule`: the allocation rule of the release the tree is (`rule_of_release`), which
        its own code is judged under on the release path; None where the version is unknown
        (the rules of the generations its resolver fits then)."""
        self._root = root
        self.where = where
        self.rule = rule
        self._functions: ReleaseFunctions | None = None
        self._error: TargetLoadError | None = None
        self._measure: CallWrapper | None = None
        # The algorithms whose scenarios ran the release's code, and those that ran kvcheck's
        # model instead (`runs_adaptively`): what the coverage report says of their launches.
        self.released: set[str] = set()
        self.modelled: set[str] = set()
        # Whether any scenario reached memory-pressure retraction and asked the release's
        # retraction chooser (what the coverage report says of the chooser otherwise).
        self.chose_retractions = False
        # Whether any scenario ran the release's code at a page size above 1 (what the coverage
        # report says of the paged code otherwise).
        self.paged = False

    def functions(self) -> ReleaseFunctions:
        """The compiled functions; `TargetLoadError` (the same one each time) when the tree
        cannot give them."""
        if self._functions is None:
            if self._error is not None:
                raise self._error
            try:
                self._functions = ReleaseFunctions(self._root())
            except TargetLoadError as exc:
                self._error = exc
                raise
        return self._functions

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (a target sent to a worker) without what was compiled: a worker compiles
        the tree again on first use."""
        return {**self.__dict__, "_functions": None, "_error": None}

    def measured_with(self, wrap: CallWrapper) -> ReleaseAllocationCode:
        """A copy whose paths run each call into the release's code through `wrap` (its
        coverage), sharing what this one compiled."""
        copied = copy.copy(self)
        copied._measure = wrap
        copied.released, copied.modelled = set(), set()
        copied.chose_retractions = False
        copied.paged = False
        return copied

    def side_code(self) -> SideCode | None:
        """The release's allocation code compiled so far (None: none was, as when kvcheck's
        model is judged), for its coverage beside the resolver's."""
        if self._functions is None:
            return None
        functions = self._functions
        tree = functions.tree
        code = tree.code()
        not_run = {
            algorithm: (
                [span.qualname for span in code if span.file == str(tree_file)],
                algorithm in self.modelled,
            )
            for algorithm, tree_file in functions.draft_input_files.items()
            if algorithm not in self.released
        }
        return SideCode(
            label="allocation",
            include=str(tree.root / tree.package / "*"),
            code=code,
            out_of_scope=out_of_scope(
                _faked(code),
                not_run,
                chose_retractions=self.chose_retractions,
                paged=self.paged,
            ),
        )

    def retraction_sorted(self) -> bool | None:
        """Whether this tree's memory-pressure retraction sorts a speculative decode batch (rule
        feature `retraction_sorted`), read off its own code: sorted where its chooser is not
        told otherwise (0.5.17+), from the back of the batch where it is (0.5.16) or where the
        tree has no chooser (to 0.5.15). None where the tree cannot be compiled (the search
        reports why). What narrows the rules of a tree whose version is unknown."""
        try:
            functions = self.functions()
        except TargetLoadError:
            return None
        return functions.chooses_retractions and not functions.chooser_told_not_to_sort

    def unavailable(self) -> str | None:
        """Why this tree's own allocation path cannot run (None: it can): a layout kvcheck does
        not drive, a release whose files cannot be fetched. A file the path compiles that does
        not parse raises `BrokenTreeCode` instead: judged on kvcheck's model, a checkout whose
        allocation file was not valid Python passed (exit 0) on code that was not the user's."""
        try:
            self.functions()
        except BrokenTreeCode as exc:
            raise BrokenTreeCode(
                f"the allocation code of {self.where} cannot be compiled: {exc} "
                "(--allocation-path model judges kvcheck's model of it instead)"
            ) from None
        except TargetLoadError as exc:
            return str(exc)
        return None

    def __call__(self, config: Config) -> ReleaseAllocation | RuleAllocation:
        """A fresh path for one scenario of `config`: the release's own, except where no
        release runs the config (`runs_adaptively`), and under a rule other than the
        release's (a stand-in for what its rule cannot run: adaptive switching under overlap
        for 0.5.12), where kvcheck's model keeps judging the resolver as it always did."""
        if self.rule is not None and config.allocation != self.rule:
            return RuleAllocation(config)
        functions = self.functions()
        if not runs_adaptively(config):
            self.modelled.add(config.algorithm)
            return RuleAllocation(config)
        self.released.add(config.algorithm)
        self.paged = self.paged or config.page_size > 1

        def chosen() -> None:
            # A plain function: an engine copy (exhaustive search) shares it, and this code.
            self.chose_retractions = True

        return ReleaseAllocation(config, functions, self._measure, chosen)


# The fakes standing in for the release's classes, by the class whose members they inherit: a
# member a fake defines never runs as the release wrote it (the allocator's free list is the
# pool's), and the coverage report says so.
_FAKES: Final[dict[str, tuple[type, ...]]] = {
    "BaseTokenToKVPoolAllocator": (TokenAllocator,),
    "BasePrefixCache": (DisabledTreeCache,),
    "ChunkCache": (DisabledTreeCache,),
    "ReqKvInfo": (_KvView, _AllocatedLenView),
    "Req": (_ReqView, _ReqFieldsView),
    "ScheduleBatch": (_BatchView,),
}


def _faked(code: tuple[CodeSpan, ...]) -> list[tuple[str, str]]:
    """The compiled members a fake defines, each with the class it stands in for."""
    faked = []
    for span in code:
        owner, _, name = span.qualname.rpartition(".")
        for fake in _FAKES.get(owner, ()):
            if any(name in vars(cls) for cls in fake.__mro__ if cls is not object):
                faked.append((span.qualname, owner))
                break
    return faked


def runs_adaptively(config: Config) -> bool:
    """Whether a release can run `config`'s stride switching: adaptive speculation runs for
    `ADAPTIVE_ALGORITHMS` only, and a release started with another algorithm keeps static
    draft counts (no switch, no adaptive maximum above them)."""
    return not config.adaptive or config.algorithm in ADAPTIVE_ALGORITHMS


def release_allocation_factory(root: Path) -> ReleaseAllocationCode:
    """The release allocation code of the tree at `root`, compiled now."""
    code = ReleaseAllocationCode(lambda: root, str(root))
    code.functions()
    return code
