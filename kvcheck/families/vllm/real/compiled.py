"""A vLLM release's scheduler, compiled from the release's own files.

What runs is vLLM's text: `Request` and `RequestStatus` (`v1/request.py`), `check_stop` and
`remove_all` (`v1/core/sched/utils.py`), the scheduler's output records
(`v1/core/sched/output.py`), its waiting queue (`v1/core/sched/request_queue.py`), and the
methods of `Scheduler` (`v1/core/sched/scheduler.py`) that schedule, deliver, preempt, finish
and reset, with every method of the class they reach, and `AsyncScheduler`'s overrides
(`v1/core/sched/async_scheduler.py`) on top, `super()` reaching the compiled `Scheduler`.
Everything else the code names is a strict fake (`kvcheck.families.vllm.real.fakes`) or, when
the code never reaches it on kvcheck's paths, a placeholder that fails when used.
"""

from __future__ import annotations

import ast
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from kvcheck.core.target import CodeSpan
from kvcheck.errors import TargetLoadError
from kvcheck.families.vllm.real import fakes
from kvcheck.targets.source import definition_spans, load_definitions, load_methods

# The scheduler's entry points kvcheck calls; the loader adds what they reach as `self.X`.
SCHEDULER_ROOTS: Final = (
    "add_request",
    "schedule",
    "update_from_output",
    "finish_requests",
    "reset_prefix_cache",
    "has_requests",
    "get_num_unfinished_requests",
    # Structured output with drafts (0.14.0 on): the engine core validates a held step's drafts
    # and builds its grammar bitmask (engine/core.py:745-764, 801-822 @0.33.0).
    "update_draft_token_ids_in_output",
    "get_grammar_bitmask",
)
ASYNC_OVERRIDES: Final = ("_update_after_schedule", "_update_request_with_output")
_SCHED: Final = "v1/core/sched"


@attrs.frozen
class CompiledRelease:
    """The classes and names of one release, compiled."""

    scheduler: type  # `AsyncScheduler` over `Scheduler`
    sync_scheduler: type  # `Scheduler` alone
    names: Mapping[str, Any]  # Request, RequestStatus, SchedulingPolicy, ...
    code: tuple[CodeSpan, ...]
    # Every attribute `Scheduler.__init__` (and, for `scheduler`, `AsyncScheduler.__init__`)
    # sets, with the source text of the first value it assigns: kvcheck builds the scheduler's
    # state from these (it does not run `__init__`, which builds the whole engine).
    init_values: Mapping[str, str]
    async_init_values: Mapping[str, str]
    # How many values the scheduler unpacks from `kv_cache_manager.get_computed_blocks(...)`:
    # (blocks, tokens) through 0.25, (blocks, tokens, shared prefix) after.
    computed_blocks_arity: int = 3
    # Whether the runner's sampled rows are numpy arrays the scheduler turns into lists
    # (`sampled_token_ids[i].tolist()`, 0.11.x: `v1/outputs.py:161` @0.11.1) rather than lists.
    sampled_rows_are_arrays: bool = False
    # Whether `update_from_output` finishes a request whose tokens its grammar rejects
    # (`request.status = RequestStatus.FINISHED_ERROR`, 0.20.0 on: `S:1754` @0.26.0); through
    # 0.19 the scheduler logs the rejection and goes on (`S:1228-1238` @0.14.0).
    grammar_errors_finish: bool = True


class _NullContext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _record_function_or_nullcontext(name: str) -> _NullContext:
    return _NullContext()


def _init_logger(name: str) -> logging.Logger:
    logger = logging.getLogger(f"kvcheck.vllm.{name}")
    logger.addHandler(logging.NullHandler())
    logger.propagate = False
    return logger


def _length_of_prompt(prompt_token_ids: Any, prompt_embeds: Any = None) -> int:
    return len(prompt_token_ids)


def _strip_covered_mm_data(mm_features: Any, num_computed_tokens: int, **options: Any) -> Any:
    """vLLM's `strip_covered_mm_data`: kvcheck's requests carry no multimodal data."""
    if mm_features:
        raise fakes.UnmodelledAccess("a request carries multimodal data kvcheck does not model")
    return mm_features


def _gc_untrack(container: Any) -> Any:
    """vLLM's `gc_untrack` (0.34.0): hides a container from the cyclic garbage collector, a
    memory hint with no effect on what the container holds; the container as is."""
    return container


def _strip_speculative_padding(token_ids: list[int]) -> list[int]:
    """vLLM's `strip_speculative_padding` (v1/structured_output/utils.py @0.33.0): the ids
    before the first negative one (the `-1` padding of invalid or placeholder drafts)."""
    for index, token_id in enumerate(token_ids):
        if token_id < 0:
            return token_ids[:index]
    return token_ids


def _bc_linter_include(cls: Any) -> Any:
    """vLLM's `bc_linter_include` (0.11-0.16): a marker for its API linter, the class as is."""
    return cls


class _StructuredOutputRequest(fakes.Strict):
    """vLLM's `StructuredOutputRequest`, the fields the scheduler and `Request` touch: the
    compiled grammar (None until the adapter hands it kvcheck's, as a finished compilation
    would) and the reasoning fields `Request.__init__` sets (0.33+; no reasoning parser)."""

    _owner = "StructuredOutputRequest"
    _fields = frozenset({"grammar", "reasoning_ended", "reasoning_parser_kwargs"})

    @classmethod
    def from_sampling_params(cls, sampling_params: Any) -> _StructuredOutputRequest | None:
        """A request asking for structured output gets one; others None."""
        if sampling_params is None or sampling_params.structured_outputs is None:
            return None
        return cls(grammar=None, reasoning_ended=None, reasoning_parser_kwargs=None)


EngineCoreOutput = fakes.record_type(
    "EngineCoreOutput",
    (
        "request_id",
        "new_token_ids",
        "finish_reason",
        "new_logprobs",
        "new_prompt_logprobs_tensors",
        "pooling_output",
        "stop_reason",
        "events",
        "kv_transfer_params",
        "trace_headers",
        "num_cached_tokens",
        "num_external_computed_tokens",
        "routed_experts",
        "num_nans_in_logits",
        "prefill_stats",
        "spec_decode_metrics",
        "ec_transfer_params",
        "sampling_mask",
        "new_sampling_mask",
        "prompt_token_id_logprobs",
        "error",
        "num_preemptions",
        "watermarking",  # 0.34.0 (`S:2599`)
    ),
)
EngineCoreOutputs = fakes.record_type(
    "EngineCoreOutputs",
    (
        "engine_index",
        "outputs",
        "scheduler_stats",
        "timestamp",
        "utility_output",
        "finished_requests",
        "wave_complete",
        "start_wave",
    ),
)
# What `make_stats` returns when statistics are on (the union of every release's fields): the
# adapter reads its `spec_decoding_stats` (the release's calls to `observe_draft`).
SchedulerStats = fakes.record_type(
    "SchedulerStats",
    (
        "num_running_reqs",
        "num_waiting_reqs",
        "num_skipped_waiting_reqs",
        "num_kv_fetch_reqs_by_stage",
        "kv_cache_usage",
        "encoder_cache_usage",
        "prefix_cache_stats",
        "connector_prefix_cache_stats",
        "kv_cache_eviction_events",
        "spec_decoding_stats",
        "kv_connector_stats",
        "cudagraph_stats",
        "perf_stats",
        "ec_connector_stats",
    ),
)


def _base_stand_ins() -> dict[tuple[str, str], object]:
    return {
        ("vllm.logger", "init_logger"): _init_logger,
        ("vllm.v1.utils", "record_function_or_nullcontext"): _record_function_or_nullcontext,
        ("vllm.v1.utils", "ConstantList"): fakes.ReadOnlyList,
        ("vllm.utils", "length_from_prompt_token_ids_or_embeds"): _length_of_prompt,
        ("vllm.v1.structured_output.request", "StructuredOutputRequest"): _StructuredOutputRequest,
        ("vllm.v1.engine", "EngineCoreOutput"): EngineCoreOutput,
        ("vllm.v1.engine", "EngineCoreOutputs"): EngineCoreOutputs,
        ("vllm.v1.spec_decode.metrics", "SpecDecodingStats"): fakes.SpecDecodingStats,
        ("vllm.v1.metrics.stats", "SchedulerStats"): SchedulerStats,
        ("vllm.v1.metrics.stats", "PrefixCacheStats"): fakes.PrefixCacheStats,
        ("vllm.v1.engine", "EngineCoreEvent"): fakes.EngineCoreEvent,
        ("vllm.v1.metrics.stats", "PrefillStats"): fakes.PrefillStats,
        ("vllm.multimodal.utils", "strip_covered_mm_data"): _strip_covered_mm_data,
        ("vllm._bc_linter", "bc_linter_include"): _bc_linter_include,
        ("vllm.utils.gc_utils", "gc_untrack"): _gc_untrack,
        # Through 0.29 the scheduler asserts a request's grammar is one (`S:1736` @0.26.0).
        ("vllm.v1.structured_output", "StructuredOutputGrammar"): fakes.RequestGrammar,
        ("vllm.v1.structured_output.utils", "strip_speculative_padding"): (
            _strip_speculative_padding
        ),
        ("vllm.v1.token_buffer", "TokenBuffer"): fakes.TokenBuffer,
        ("vllm.v1.token_buffer", "extend_from_slice"): fakes.extend_from_slice,
    }


def compile_release(
    package: Path, *, scheduler_file: Path | None = None, scheduler_class: str = "AsyncScheduler"
) -> CompiledRelease:
    """Compile the scheduler of the `vllm` package directory `package`.

    `scheduler_file`/`scheduler_class` name a class of the user's to run in place of one of the
    package's (a `file.py::Qualname` target): `Scheduler` replaces the package's `Scheduler`
    (the package's `AsyncScheduler` still on top); any other class is run as the async
    scheduler, every method it defines over the package's compiled `Scheduler`.
    """
    stand_ins = _base_stand_ins()

    def publish(module: str, path: Path, names: list[str]) -> dict[str, Any]:
        # Compiled from the release's `path`, and what the files compiled later import from
        # `module`.
        loaded = load_definitions(path, names, stand_ins=stand_ins, allow_unavailable=True)
        for name, value in loaded.items():
            stand_ins[(module, name)] = value
        return loaded

    engine = publish(
        "vllm.v1.engine",
        package / "v1/engine/__init__.py",
        ["FinishReason", "EngineCoreEventType"],
    )
    request = publish("vllm.v1.request", package / "v1/request.py", ["Request", "RequestStatus"])
    utils = publish(
        "vllm.v1.core.sched.utils", package / _SCHED / "utils.py", ["check_stop", "remove_all"]
    )
    output_records = ["SchedulerOutput", "NewRequestData", "CachedRequestData"]
    # The grammar bitmask's record (`get_grammar_bitmask`), where the release has one.
    if _class_node(package / _SCHED / "output.py", "GrammarOutput") is not None:
        output_records.append("GrammarOutput")
    output = publish("vllm.v1.core.sched.output", package / _SCHED / "output.py", output_records)
    # `PauseState` arrives in 0.17.0 (the scheduler's pause, `interface.py`); the releases
    # before neither define nor import it.
    interface: dict[str, Any] = {}
    if _class_node(package / _SCHED / "interface.py", "PauseState") is not None:
        interface = publish(
            "vllm.v1.core.sched.interface", package / _SCHED / "interface.py", ["PauseState"]
        )
    queue = publish(
        "vllm.v1.core.sched.request_queue",
        package / _SCHED / "request_queue.py",
        ["SchedulingPolicy", "create_request_queue"],
    )
    sync_file = package / _SCHED / "scheduler.py"
    async_file, async_class = package / _SCHED / "async_scheduler.py", "AsyncScheduler"
    if scheduler_file is not None and scheduler_class == "Scheduler":
        sync_file = scheduler_file
    elif scheduler_file is not None:
        async_file, async_class = scheduler_file, scheduler_class
    sync = load_methods(
        sync_file,
        "Scheduler",
        [m for m in SCHEDULER_ROOTS if m in defined_methods(sync_file, "Scheduler")],
        stand_ins=stand_ins,
        base=fakes.SchedulerBase,
        allow_unavailable=True,
    )
    overrides: list[str]
    if async_class == "AsyncScheduler" and scheduler_file is None:
        overrides = [m for m in ASYNC_OVERRIDES if m in defined_methods(async_file, async_class)]
    else:
        overrides = defined_methods(async_file, async_class)
    stand_ins[("vllm.v1.core.sched.scheduler", "Scheduler")] = sync.cls
    asynchronous = load_methods(
        async_file,
        async_class,
        overrides,
        stand_ins=stand_ins,
        base=sync.cls,
        allow_unavailable=True,
    )
    names = {**engine, **interface, **request, **utils, **output, **queue}
    return CompiledRelease(
        scheduler=asynchronous.cls,
        sync_scheduler=sync.cls,
        names=names,
        # `check_stop` is the scheduler's stop rule (0.11+ `update_from_output`): its code too.
        code=(
            *sync.code,
            *asynchronous.code,
            *definition_spans(
                package / _SCHED / "utils.py", [n for n in utils if n == "check_stop"]
            ),
        ),
        init_values=init_assignments(sync_file, "Scheduler"),
        async_init_values=init_assignments(async_file, async_class),
        computed_blocks_arity=unpacked_arity(sync_file, "get_computed_blocks") or 3,
        sampled_rows_are_arrays=_converts_sampled_rows(sync_file),
        grammar_errors_finish=_sets_status(sync_file, "update_from_output", "FINISHED_ERROR"),
    )


def _sets_status(file: Path, method: str, status: str) -> bool:
    """Whether `Scheduler.method` in `file` assigns `<request>.status = RequestStatus.<status>`
    itself."""
    node = _class_node(file, "Scheduler")
    function = next(
        (
            f
            for f in (node.body if node else ())
            if isinstance(f, ast.FunctionDef) and f.name == method
        ),
        None,
    )
    return function is not None and any(
        isinstance(item, ast.Assign)
        and isinstance(item.targets[0], ast.Attribute)
        and item.targets[0].attr == "status"
        and isinstance(item.value, ast.Attribute)
        and item.value.attr == status
        for item in ast.walk(function)
    )


def _converts_sampled_rows(file: Path) -> bool:
    """Whether the code of `file` calls `.tolist()` on a row of `sampled_token_ids`."""
    tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "tolist"
        and isinstance(node.func.value, ast.Subscript)
        and isinstance(node.func.value.value, ast.Name)
        and node.func.value.value.id == "sampled_token_ids"
        for node in ast.walk(tree)
    )


def _class_node(file: Path, class_name: str) -> ast.ClassDef | None:
    try:
        tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError) as exc:
        raise TargetLoadError(f"cannot read {str(file)!r} as Python: {exc}") from None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return node
    return None


def defined_methods(file: Path, class_name: str) -> list[str]:
    """The methods the module-level class `class_name` of `file` defines itself (not
    `__init__`, which kvcheck does not run, nor other dunders)."""
    node = _class_node(file, class_name)
    if node is None:
        return []
    return [
        item.name
        for item in node.body
        if isinstance(item, ast.FunctionDef) and not item.name.startswith("__")
    ]


def init_assignments(file: Path, class_name: str) -> dict[str, str]:
    """`self.NAME` -> the source of the value the class's `__init__` in `file` assigns it
    unconditionally (a statement of the body itself, the first one), or "" for an attribute it
    sets only inside a block (an `if` for a feature, a loop, a `try`)."""
    node = _class_node(file, class_name)
    if node is None:
        return {}
    init = next(
        (i for i in node.body if isinstance(i, ast.FunctionDef) and i.name == "__init__"), None
    )
    if init is None:
        return {}
    values: dict[str, str] = {}
    for statement in init.body:
        for name, value in _self_assignments(statement):
            values.setdefault(name, ast.unparse(value))
    for nested in ast.walk(init):
        for name, _ in _self_assignments(nested):
            values.setdefault(name, "")
    return values


def unpacked_arity(file: Path, method: str) -> int | None:
    """How many names the code of `file` unpacks the result of a call to `.method(...)` into
    (the first such assignment), None when it never unpacks one."""
    tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Tuple)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute)
            and node.value.func.attr == method
        ):
            return len(node.targets[0].elts)
    return None


def _self_assignments(statement: ast.AST) -> list[tuple[str, ast.expr]]:
    """The `self.NAME = value` targets of one assignment statement (none for others)."""
    targets: list[ast.expr]
    if isinstance(statement, ast.Assign):
        targets, value = statement.targets, statement.value
    elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
        targets, value = [statement.target], statement.value
    else:
        return []
    return [
        (target.attr, value)
        for target in targets
        if isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id == "self"
    ]
