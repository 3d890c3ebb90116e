"""vLLM releases' own scheduler code, compiled from the cached wheels and driven over kvcheck's
strict fakes. Skipped when a wheel cannot be had (no index, nothing cached); under CI=true that
is a failure instead."""

from __future__ import annotations

import os

import pytest

from kvcheck.errors import TargetLoadError
from kvcheck.families.vllm.real.adapter import ReleaseScheduler
from kvcheck.families.vllm.real.compiled import compile_release
from kvcheck.families.vllm.real.release import release_package
from kvcheck.families.vllm.target import FrameOutput, NewRequest, SchedulerSettings


def _package(version: str):  # type: ignore[no-untyped-def]
    try:
        return release_package(version)
    except TargetLoadError as exc:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"vLLM {version} cannot be had here: {exc}")


def test_the_real_0_26_0_scheduler_runs_a_request_to_its_length() -> None:
    scheduler = ReleaseScheduler(
        compile_release(_package("0.26.0")),
        SchedulerSettings(
            num_blocks=40,
            block_size=16,
            max_num_scheduled_tokens=64,
            max_num_seqs=8,
            max_model_len=256,
            num_spec_tokens=2,
            async_scheduling=True,
        ),
    )
    scheduler.add_request(NewRequest("a", tuple(range(1, 21)), max_tokens=6))
    in_flight = []
    delivered: list[int] = []
    finished = {}
    for step in range(12):
        if scheduler.has_requests():
            launch = scheduler.schedule()
            in_flight.append(launch)
            view = scheduler.request_view("a")
            if view is not None and launch.scheduled and not view.is_prefill_chunk:
                # The running-request identity C == T + PH - 1 (survey §3.1), on real code.
                assert (
                    view.num_computed_tokens == view.num_tokens + view.num_output_placeholders - 1
                )
        if len(in_flight) >= 2 or (in_flight and not scheduler.has_requests()):
            launch = in_flight.pop(0)
            sampled = {
                r.request_id: (100 + step,) + (200 + step,) * bool(r.spec_token_ids)
                for r in launch.scheduled
            }
            result = scheduler.update_from_output(launch, FrameOutput(launch.step, sampled))
            delivered += result.new_token_ids.get("a", ())
            finished.update(result.finished)
    assert finished == {"a": "length"}
    assert len(delivered) == 6
    assert scheduler.pool_view().free_blocks == 39  # every block back, the null block aside
