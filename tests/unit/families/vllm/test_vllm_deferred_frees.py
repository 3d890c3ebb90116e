"""Deferred block frees (`VllmConfig.defer_frees`, vLLM's `defer_block_free`): the reference
holds a freed request's blocks until its frames return, the `eager-free` mutant does not and
`vllm-deferred-free` catches it, a second free of deferred blocks shows in `vllm-pool`, and
the releases are judged only where they have the setting."""

from __future__ import annotations

import attrs
import pytest

from kvcheck.core.run import run_scenario
from kvcheck.core.scenario import from_json, to_json
from kvcheck.errors import ScenarioFormatError
from kvcheck.families.vllm.builtins import ReferenceScheduler, Req, builtin_target
from kvcheck.families.vllm.engine import VllmEngine
from kvcheck.families.vllm.scenario import (
    Abort,
    Add,
    Drain,
    Reset,
    Step,
    VllmConfig,
    VllmScenarios,
)
from kvcheck.targets.loading import load_target
from tests.unit.families.vllm.sequences import first_violation, release_or_skip, scenario

# Depth 2, roomy: r0's frames are always in flight between two steps.
DEFERRING = VllmConfig(num_blocks=12, max_model_len=16, num_spec_tokens=2, defer_frees=True)
# r0 is aborted with its frame in flight; r1 is admitted into the blocks r0 freed.
ABORT_IN_FLIGHT = (Add("r0", 4, 8), Step(0), Step(0), Abort("r0"), Add("r1", 12, 2), Step(0))


class FreedTwice(ReferenceScheduler):
    """Frees a request's blocks at once and defers them too: each is freed twice."""

    def _free_blocks(self, req: Req) -> None:
        if self._must_defer(req):
            self.pool.release(req.blocks)
        super()._free_blocks(req)


def test_an_eager_free_is_caught_only_when_frees_are_deferred() -> None:
    deferring = scenario(DEFERRING, *ABORT_IN_FLIGHT, Drain(0))
    eager = scenario(attrs.evolve(DEFERRING, defer_frees=False), *ABORT_IN_FLIGHT, Drain(0))
    assert first_violation("vllm-mutant:eager-free", deferring) == "vllm-deferred-free"
    assert first_violation("vllm-mutant:eager-free", eager) is None
    assert first_violation("builtin:vllm-reference", deferring) is None


def test_the_reference_holds_the_blocks_until_the_frame_returns() -> None:
    engine = VllmEngine(DEFERRING, load_target("builtin:vllm-reference"))
    for event in ABORT_IN_FLIGHT[:4]:
        observed = engine.apply(event)
    assert observed.pool is not None and observed.defers
    assert observed.pool.deferred and "r0" not in observed.pool.blocks_of
    observed = engine.apply(Step(0))  # the frame with r0 returns
    assert observed.pool is not None and not observed.pool.deferred


def test_a_deferred_block_freed_again_breaks_the_pool() -> None:
    target = builtin_target("vllm-test:freed-twice", FreedTwice, "frees deferred blocks twice")
    result = run_scenario(scenario(DEFERRING, *ABORT_IN_FLIGHT, Drain(0)), target)
    assert result.violation is not None and result.violation.invariant == "vllm-pool"


def test_defer_frees_round_trips_and_must_be_a_boolean() -> None:
    s = scenario(DEFERRING, *ABORT_IN_FLIGHT)
    assert from_json(to_json(s)) == s
    with pytest.raises(ScenarioFormatError, match="'defer_frees' must be a boolean"):
        VllmScenarios.config_from_dict({"defer_frees": "yes"})


def test_a_release_with_the_setting_defers_and_an_older_one_is_not_judged() -> None:
    release_or_skip("0.33.0")
    release_or_skip("0.23.0")
    deferring = scenario(DEFERRING, *ABORT_IN_FLIGHT, Drain(0))
    assert first_violation("vllm==0.33.0", deferring) is None
    engine = VllmEngine(DEFERRING, load_target("vllm==0.33.0"))
    for event in ABORT_IN_FLIGHT[:4]:
        observed = engine.apply(event)
    assert observed.defers and observed.pool is not None and observed.pool.deferred
    # 0.23.0 has no `defer_block_free`: it frees at once, and deferral is not judged there.
    assert not VllmEngine(DEFERRING, load_target("vllm==0.23.0")).defers


def test_0_33_0_raises_at_a_reset_with_frees_deferred_and_frames_in_flight() -> None:
    """The release's own crash (docs/vllm.md "Deferred block frees"): the reset preempts r0
    with its frame in flight, the free is deferred, the pool is not all free, and
    `reset_prefix_cache(reset_running_requests=True)` raises (scheduler.py:3211-3219)."""
    release_or_skip("0.33.0")
    reset = (Add("r0", 4, 8), Step(0), Reset())
    assert first_violation("vllm==0.33.0", scenario(DEFERRING, *reset)) == "vllm-no-exception"
    undeferred = scenario(attrs.evolve(DEFERRING, defer_frees=False), *reset)
    assert first_violation("vllm==0.33.0", undeferred) is None
    assert first_violation("builtin:vllm-reference", scenario(DEFERRING, *reset)) is None
