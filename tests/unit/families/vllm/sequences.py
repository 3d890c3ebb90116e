"""Survey sequences the vLLM tests replay on kvcheck's scheduler and on the releases' own code,
and the helpers that run them."""

from __future__ import annotations

import pytest

from kvcheck.core.run import run_scenario
from kvcheck.core.scenario import Scenario
from kvcheck.errors import TargetLoadError
from kvcheck.families.vllm.real.release import release_package
from kvcheck.families.vllm.scenario import Abort, Add, Drain, Step, VllmConfig
from kvcheck.targets.loading import load_target


def scenario(config: VllmConfig, *events: object) -> Scenario:
    """A vLLM scenario of `events` on `config`."""
    return Scenario(config, tuple(events), family="vllm")


def release_or_skip(version: str) -> None:
    """Skip the test unless vLLM `version`'s wheel is cached or can be fetched."""
    try:
        release_package(version)
    except TargetLoadError as exc:
        pytest.skip(f"vLLM {version} cannot be had here: {exc}")


def first_violation(spec: str, s: Scenario) -> str | None:
    """The invariant the target `spec` first breaks on `s` (None: none)."""
    result = run_scenario(s, load_target(spec))
    return None if result.violation is None else result.violation.invariant


# vllm#48245 (survey §4 row 3): r1 is preempted with a frame in flight; the abort of r0 frees
# its blocks and the next step resumes r1 before that stale frame returns, which takes a third
# frame in the queue (the V2 runner with PP 2: depth 3).
PREEMPT_THEN_RESUME = (
    Add("r0", 4, 12),
    Add("r1", 4, 12),
    *(Step(0),) * 5,
    Abort("r0"),
    Step(0),
    Drain(0),
)
PRESSURE = VllmConfig(
    num_blocks=6,
    block_size=4,
    max_num_scheduled_tokens=16,
    max_model_len=16,
    num_spec_tokens=3,
    runner="v2",
    pp_size=2,
)
