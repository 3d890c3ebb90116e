"""`kvcheck exhaust` keeps to the runners a vLLM target can run behind, as `check` and `fuzz`
draw from them: a release before 0.23.0 pipelines two batches only (`runners == ("v1",)`), so
its exhaustive search runs at depth 2 alone, and a depth it cannot run at is refused."""

from __future__ import annotations

import attrs
import pytest

from kvcheck.cli.main import build_parser
from kvcheck.core.family import family
from kvcheck.core.target import Target
from kvcheck.errors import KvcheckUsageError
from kvcheck.families.vllm.target import SchedulerSettings, SchedulerUnderTest
from kvcheck.search.exhaust import exhaust
from kvcheck.targets.loading import load_target


class V1Only:
    """The reference scheduler behind the V1 runner only, as a release before 0.23.0: asked
    to run behind the V2 runner, it raises (which would be its verdict)."""

    runners = ("v1",)

    def __init__(self, factory: object) -> None:
        self.factory = factory

    def __call__(self, settings: SchedulerSettings) -> SchedulerUnderTest:
        if settings.use_v2_model_runner:
            raise RuntimeError("this scheduler cannot run behind the V2 runner")
        made: SchedulerUnderTest = self.factory(settings)  # type: ignore[operator]
        return made


@pytest.fixture
def v1_only() -> Target:
    reference = load_target("builtin:vllm-reference")
    return attrs.evolve(reference, resolver=V1Only(reference.resolver), spec="v1-only")


def _cli_bounds(target: Target, *flags: str) -> object:
    args = build_parser().parse_args(["exhaust", "builtin:vllm-reference", *flags])
    return family("vllm").moves.bounds_from_args(args, target)


def test_without_depths_the_search_takes_those_the_target_runs_at(v1_only: Target) -> None:
    bounds = _cli_bounds(v1_only, "--events", "5")
    assert bounds.depths == (2,)  # type: ignore[attr-defined]
    result = exhaust(v1_only, bounds)
    assert result.complete and result.failure is None
    # A target that says nothing runs behind every runner: the defaults stay.
    reference = load_target("builtin:vllm-reference")
    assert _cli_bounds(reference).depths == (2, 3)  # type: ignore[attr-defined]


def test_a_depth_the_target_cannot_run_at_is_refused_in_one_line(v1_only: Target) -> None:
    for bounds in (
        _cli_bounds(v1_only, "--depths", "2,3", "--events", "5"),
        family("vllm").moves.bounds({"depths": (2, 3), "events": 5}),  # the API's
    ):
        with pytest.raises(KvcheckUsageError) as refused:
            exhaust(v1_only, bounds)
        message = str(refused.value)
        assert "\n" not in message
        assert "v1-only runs at depth 2 only" in message and "depth 3 cannot be judged" in message
