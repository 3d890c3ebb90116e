"""How long reading a resolver from source takes, and what it costs per call afterwards.

Generates a ~3,000-line module shaped like SGLang's batch-result processor (many unrelated
methods and helpers, the resolver, a module-level stride helper it calls, a sibling method it
reaches through `self`), then prints:

- the median time of `load_from_source` over 20 runs, of the API-shape probe kvcheck runs once
  per target before judging it, and of the two together (loading and preparing a target; the
  aim is under 0.3 s);
- the median time per resolver call, loaded from source and imported normally, and their ratio.

Figures only, no timed asserts. Run: `python benchmarks/bench_source_load.py`.
"""

from __future__ import annotations

import ast
import importlib.util
import statistics
import sys
import tempfile
import textwrap
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from kvcheck.families.sglang.probe import detect_api_shape
from kvcheck.targets.source import load_from_source

QUALNAME = "SchedulerBatchResultProcessor._resolve_spec_v2_tokens"
ROWS = 64
STRIDE = 4

HEADER = '''\
"""Generated benchmark module: a large file with one spec-v2 resolver in it."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
    from sglang.srt.managers.scheduler import GenerationBatchResult

logger = logging.getLogger(__name__)
DEFAULT_WIDTH = 4


def _get_speculative_output_stride(result: GenerationBatchResult) -> int:
    stride = result.speculative_output_stride
    if stride is None:
        stride = result.speculative_num_draft_tokens
    if stride is None or stride < 1:
        raise ValueError(f"no usable stride: {stride!r}")
    return int(stride)
'''

HELPER = '''

def _helper_{i}(values: list[int], scale: int = {i}) -> list[int]:
    """Unrelated module-level helper number {i}."""
    total = 0
    out: list[int] = []
    for value in values:
        total += value * scale
        if total % 7 == {m}:
            logger.debug("helper {i} hit %d", total)
        out.append(total)
    return out
'''

CLASS_HEAD = '''

class SchedulerBatchResultProcessor:
    """Generated: many methods, one resolver."""

    def __init__(self, scheduler: object) -> None:
        self.scheduler = scheduler
'''

METHOD = '''
    def unrelated_{i}(self, batch: ScheduleBatch, limit: int = {i}) -> int:
        """Unrelated method number {i}."""
        count = 0
        for req in batch.reqs:
            if req.finished():
                continue
            count += len(req.output_ids)
            if count > limit:
                logger.info("method {i}: %d over %d", count, limit)
                break
        values = _helper_{h}([count, limit])
        return values[-1] + torch.tensor([count]).numel()
'''

RESOLVER = """
    def _record_stats(self, req: Req, drafts: int) -> None:
        req.spec_verify_ct += 1
        req.spec_num_correct_drafts += drafts

    def _resolve_spec_v2_tokens(
        self, result: GenerationBatchResult, batch: ScheduleBatch
    ) -> list[list[int]]:
        stride = _get_speculative_output_stride(result)
        token_ids: list[int] = result.next_token_ids.tolist()
        accept_lens: list[int] = result.accept_lens.tolist()
        runs: list[list[int]] = []
        for i, req in enumerate(batch.reqs):
            run = token_ids[i * stride : i * stride + accept_lens[i]]
            runs.append(run)
            if req.is_retracted or req.finished():
                continue
            req.kv_committed_len += len(run)
            self._record_stats(req, accept_lens[i] - 1)
        result.num_correct_drafts = sum(a - 1 for a in accept_lens)
        return runs
"""


def generate(target_lines: int = 3000) -> str:
    parts = [HEADER]
    helpers = 30
    parts.extend(HELPER.format(i=i, m=i % 7) for i in range(helpers))
    parts.append(CLASS_HEAD)
    i = 0
    while sum(p.count("\n") for p in parts) < target_lines - 40:
        parts.append(METHOD.format(i=i, h=i % helpers))
        i += 1
        if i == 60:
            parts.append(RESOLVER)
    return "".join(parts)


def median_seconds(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def per_call_seconds(resolver: Callable[..., Any], self_obj: object, number: int) -> float:
    reqs = [
        SimpleNamespace(
            kv_committed_len=10,
            spec_verify_ct=0,
            spec_num_correct_drafts=0,
            is_retracted=False,
            finished=lambda: False,
        )
        for _ in range(ROWS)
    ]
    batch = SimpleNamespace(reqs=reqs)
    result = SimpleNamespace(
        next_token_ids=torch.arange(ROWS * STRIDE, dtype=torch.int64),
        accept_lens=torch.full((ROWS,), 3, dtype=torch.int32),
        speculative_output_stride=None,
        speculative_num_draft_tokens=STRIDE,
    )
    timer = timeit.Timer(lambda: resolver(self_obj, result, batch))
    return statistics.median(timer.repeat(repeat=7, number=number)) / number


def main() -> None:
    source = generate()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "batch_result_processor.py"
        path.write_text(source)
        lines = source.count("\n")

        parse = median_seconds(lambda: ast.parse(path.read_bytes()), 20)
        load = median_seconds(lambda: load_from_source(str(path), QUALNAME), 20)
        print(f"file: {lines} lines")
        print(f"ast.parse alone:        median {parse * 1e3:7.2f} ms over 20 runs")
        print(f"load_from_source:       median {load * 1e3:7.2f} ms over 20 runs")

        def prepare() -> object:
            target = load_from_source(str(path), QUALNAME)
            return detect_api_shape(target.resolver, target.self_methods)

        probed = load_from_source(str(path), QUALNAME)
        detect_api_shape(probed.resolver, probed.self_methods)  # warm: torch's first tensors
        probe = median_seconds(lambda: detect_api_shape(probed.resolver, probed.self_methods), 20)
        both = median_seconds(prepare, 20)
        print(f"api-shape probe:        median {probe * 1e3:7.2f} ms over 20 runs")
        print(f"load + probe (prepare): median {both * 1e3:7.2f} ms over 20 runs")

        loaded = load_from_source(str(path), QUALNAME)
        spec = importlib.util.spec_from_file_location("bench_generated_module", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        imported_cls = module.SchedulerBatchResultProcessor

        # Siblings as class attributes, as on the imported class, so both sides call them the
        # same way and the comparison measures the loader alone.
        from_source_self = type("FakeScheduler", (), dict(loaded.self_methods))()
        imported_self = imported_cls.__new__(imported_cls)
        imported_resolver = imported_cls._resolve_spec_v2_tokens

        number = 2000
        source_calls, imported_calls = [], []
        for _ in range(3):  # interleaved rounds, so drift on a busy machine hits both sides
            source_calls.append(per_call_seconds(loaded.resolver, from_source_self, number))
            imported_calls.append(per_call_seconds(imported_resolver, imported_self, number))
        source_call = statistics.median(source_calls)
        imported_call = statistics.median(imported_calls)
        print(
            textwrap.dedent(
                f"""\
                per call ({ROWS} rows), median of 3 rounds x 7 x {number} calls:
                  loaded from source:   {source_call * 1e6:8.2f} us
                  imported normally:    {imported_call * 1e6:8.2f} us
                  ratio source/import:  {source_call / imported_call:8.3f}"""
            )
        )


if __name__ == "__main__":
    main()
