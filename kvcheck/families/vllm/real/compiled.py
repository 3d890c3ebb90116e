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

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from kvcheck.core.target import CodeSpan
from kvcheck.families.vllm.real import fakes
from kvcheck.targets.source import load_definitions, load_methods

# The scheduler's entry points kvcheck calls; the loader adds what they reach as `self.X`.
SCHEDULER_ROOTS: Final = (
    "add_request",
    "schedule",
    "update_from_output",
    "finish_requests",
    "reset_prefix_cache",
    "has_requests",
    "get_num_unfinished_requests",
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


class _NoStructuredOutput:
    """`StructuredOutputRequest.from_sampling_params`: kvcheck's requests have no grammar."""

    @staticmethod
    def from_sampling_params(sampling_params: Any) -> None:
        return None


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
        "error",
        "num_preemptions",
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
SpecDecodingStats = fakes.record_type("SpecDecodingStats", ("num_spec_tokens",))


def _base_stand_ins() -> dict[tuple[str, str], object]:
    return {
        ("vllm.logger", "init_logger"): _init_logger,
        ("vllm.v1.utils", "record_function_or_nullcontext"): _record_function_or_nullcontext,
        ("vllm.v1.utils", "ConstantList"): fakes.ReadOnlyList,
        ("vllm.utils", "length_from_prompt_token_ids_or_embeds"): _length_of_prompt,
        ("vllm.v1.structured_output.request", "StructuredOutputRequest"): _NoStructuredOutput,
        ("vllm.v1.engine", "EngineCoreOutput"): EngineCoreOutput,
        ("vllm.v1.engine", "EngineCoreOutputs"): EngineCoreOutputs,
        ("vllm.v1.spec_decode.metrics", "SpecDecodingStats"): SpecDecodingStats,
        ("vllm.v1.metrics.stats", "PrefillStats"): fakes.PrefillStats,
    }


def compile_release(package: Path) -> CompiledRelease:
    """Compile the scheduler of the `vllm` package directory `package`."""
    stand_ins = _base_stand_ins()
    engine = load_definitions(
        package / "v1/engine/__init__.py",
        ["FinishReason", "EngineCoreEventType"],
        stand_ins=stand_ins,
        allow_unavailable=True,
    )
    for name, value in engine.items():
        stand_ins[("vllm.v1.engine", name)] = value
    request = load_definitions(
        package / "v1/request.py",
        ["Request", "RequestStatus"],
        stand_ins=stand_ins,
        allow_unavailable=True,
    )
    for name, value in request.items():
        stand_ins[("vllm.v1.request", name)] = value
    utils = load_definitions(
        package / _SCHED / "utils.py",
        ["check_stop", "remove_all"],
        stand_ins=stand_ins,
        allow_unavailable=True,
    )
    for name, value in utils.items():
        stand_ins[("vllm.v1.core.sched.utils", name)] = value
    output = load_definitions(
        package / _SCHED / "output.py",
        ["SchedulerOutput", "NewRequestData", "CachedRequestData"],
        stand_ins=stand_ins,
        allow_unavailable=True,
    )
    for name, value in output.items():
        stand_ins[("vllm.v1.core.sched.output", name)] = value
    interface = load_definitions(
        package / _SCHED / "interface.py",
        ["PauseState"],
        stand_ins=stand_ins,
        allow_unavailable=True,
    )
    stand_ins[("vllm.v1.core.sched.interface", "PauseState")] = interface["PauseState"]
    queue = load_definitions(
        package / _SCHED / "request_queue.py",
        ["SchedulingPolicy", "create_request_queue"],
        stand_ins=stand_ins,
        allow_unavailable=True,
    )
    for name, value in queue.items():
        stand_ins[("vllm.v1.core.sched.request_queue", name)] = value
    sync = load_methods(
        package / _SCHED / "scheduler.py",
        "Scheduler",
        [m for m in SCHEDULER_ROOTS if _defines(package / _SCHED / "scheduler.py", m)],
        stand_ins=stand_ins,
        base=fakes.SchedulerBase,
        allow_unavailable=True,
    )
    async_file = package / _SCHED / "async_scheduler.py"
    overrides = [m for m in ASYNC_OVERRIDES if _defines(async_file, m)]
    stand_ins[("vllm.v1.core.sched.scheduler", "Scheduler")] = sync.cls
    asynchronous = load_methods(
        async_file,
        "AsyncScheduler",
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
        code=(*sync.code, *asynchronous.code),
    )


def _defines(file: Path, method: str) -> bool:
    return f"def {method}(" in file.read_text(encoding="utf-8")
