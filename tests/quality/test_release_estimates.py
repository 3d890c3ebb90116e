"""The decode memory estimate as a rule feature (issue 21): 0.5.6-0.5.8 count pages per request
through `check_decode_mem`, 0.5.9-0.5.10 take a bound on the draft tokens, 0.5.11 the pages the
next launch allocates. Each release tree's own estimate runs on the release path, and each
release is judged under its own rule's estimate (docs/release-allocation.md)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import attrs
import pytest

from kvcheck.core.run import run_scenario
from kvcheck.core.scenario import Scenario
from kvcheck.core.target import Target
from kvcheck.errors import KvcheckUsageError
from kvcheck.families.sglang.allocation import RuleAllocation
from kvcheck.families.sglang.allocation_rules import AllocationRule, rule_of_release
from kvcheck.families.sglang.fakes import FakeReq
from kvcheck.families.sglang.real.path import ReleaseAllocationCode, release_allocation_factory
from kvcheck.families.sglang.scenario import Admit, Config, Step
from kvcheck.targets.loading import load_target

# One release of each estimate: page count (with and without the multiplier in the retraction
# loop), draft bound, next sizing.
RELEASES = ("0.5.6", "0.5.7", "0.5.9", "0.5.11")


@pytest.fixture(scope="module")
def codes() -> dict[str, ReleaseAllocationCode]:
    """Each release's allocation code, compiled once for the module."""
    from kvcheck.families.sglang.real.tree import allocation_tree

    compiled = {}
    for version in RELEASES:
        try:
            compiled[version] = release_allocation_factory(allocation_tree(version))
        except KvcheckUsageError as exc:
            if os.environ.get("CI") == "true":
                raise
            pytest.skip(f"SGLang {version}'s wheel cannot be fetched here: {exc}")
    return compiled


def _after_one_launch(path: Any, config: Config) -> list[FakeReq]:
    """Two requests of prompt 5 admitted, then one decode launch at stride 3, with the
    pre-claim of `config`'s convention (the engine's, where the launch does not own it)."""
    reqs = [FakeReq("a", 5, 10), FakeReq("b", 5, 10)]
    for req in reqs:
        req.kv_committed_len = req.kv_allocated_len = 5
    path.admit(reqs)
    path.prepare_decode(reqs, 3)
    if config.preclaims and not path.owns_preclaim:
        for req in reqs:
            req.kv_committed_len += 1
    return reqs


def test_each_release_estimates_by_its_own_code_and_the_rule_says_the_same(
    codes: dict[str, ReleaseAllocationCode],
) -> None:
    # Stride D = 3, steps 2, page 1, two requests of C = 5, after a launch sized Al = C + 2D =
    # 11 (hand-computed from each release's formula, not read from the code): 0.5.6-0.5.8: a
    # page per request times D + steps = 5 for the check, and in the retraction loop too from
    # 0.5.7, times 1 there in 0.5.6;
    # 0.5.9-0.5.10: max(steps, D) * 2 = 6 per request whoever asks; 0.5.11: the pages the
    # next launch allocates, one per request (its launch pre-claimed C = 6: 6 + 2D - 11).
    expected = {
        "0.5.6": {"admission": 10, "check": 10, "retraction": 2},
        "0.5.7": {"admission": 10, "check": 10, "retraction": 10},
        "0.5.9": {"admission": 12, "check": 12, "retraction": 12},
        "0.5.11": {"admission": 2, "check": 2, "retraction": 2},
    }
    for version, asked in expected.items():
        rule = rule_of_release(version)
        assert rule == version  # each release is the first of its rule's row
        convention = "preclaim" if version == "0.5.11" else "honest"
        config = Config(convention=convention, stride=3, allocation=rule)
        release = codes[version](config)
        released = _after_one_launch(release, config)
        model = RuleAllocation(config)
        modelled = _after_one_launch(model, config)
        for asked_by, pages in asked.items():
            assert release.estimate_decode(released, 3, asked_by=asked_by) == pages  # type: ignore[union-attr]
            # The model's path reads the same bound; its memory check also never lets
            # through a launch the pool cannot hold (here each launch needs fewer pages).
            assert model.estimate_decode(modelled, 3, asked_by=asked_by) == pages
    # The four estimates differ on the same state: a rule's feature, not a detail.
    assert len({tuple(asked.values()) for asked in expected.values()}) == 4


def _reference(convention: str) -> Target:
    return load_target("builtin:reference" if convention == "preclaim" else "builtin:reference-v2")


def _run(
    codes: dict[str, ReleaseAllocationCode],
    version: str,
    rule: AllocationRule,
    events: tuple[Any, ...],
    *,
    stride: int,
    pool_pages: int,
    path: str = "release",
) -> str | None:
    """`events` with kvcheck's correct resolver and `version`'s allocation code under `rule`."""
    convention = "preclaim" if version == "0.5.11" else "honest"  # 0.5.11's launch pre-claims
    target = attrs.evolve(_reference(convention), allocation=codes[version])
    config = Config(
        convention=convention,
        overlap=False,
        stride=stride,
        allocation=rule,
        pool_pages=pool_pages,
        allocation_path=path,
    )
    result = run_scenario(Scenario(config, events), target)
    return None if result.violation is None else result.violation.invariant


# Three requests of prompt 36 under pressure in a pool of 142 pages: the estimates of 0.5.6 and
# 0.5.9 part at one memory check, one retracting where the other does not.
PRESSURE = (*(Admit(f"r{i}", 36, 12) for i in range(3)), *(Step((3, 3, 3)),) * 8)


def test_each_release_row_is_judged_by_its_own_estimate(
    codes: dict[str, ReleaseAllocationCode],
) -> None:
    verdicts = {
        (version, rule): _run(codes, version, rule, PRESSURE, stride=3, pool_pages=142)
        for version in ("0.5.6", "0.5.9")
        for rule in ("0.5.6", "0.5.9", "0.5.11")
    }
    assert verdicts == {
        ("0.5.6", "0.5.6"): None,
        ("0.5.9", "0.5.9"): None,
        # Judged by the other's estimate, the model retracts where the release does not.
        ("0.5.6", "0.5.9"): "runs-aligned",
        ("0.5.9", "0.5.6"): "runs-aligned",
        # Judged as 0.5.11+ (the estimate is the launch's pages), a bound is no match.
        ("0.5.6", "0.5.11"): "alloc-estimate-matches",
        ("0.5.9", "0.5.11"): "alloc-estimate-matches",
    }
    assert _run(codes, "0.5.11", "0.5.11", PRESSURE, stride=3, pool_pages=142) is None


# Fourteen one-token prompts at stride 4 in 128 pages: memory pressure at every launch.
CROWD = (*(Admit(f"r{i}", 1, 60) for i in range(14)), *(Step((4,) * 14),) * 30)


def test_0_5_6_retraction_loop_lets_through_a_launch_the_pool_cannot_hold(
    codes: dict[str, ReleaseAllocationCode],
) -> None:
    # 0.5.6's `retract_decode` asks `check_decode_mem` without the scheduler's multiplier
    # (managers/schedule_batch.py:1611), one page per request: it stops retracting while the
    # next launch needs up to D pages per request, and the release's own launch runs out of
    # memory (the decode OOM with speculative decoding of sglang#13741 and #14942).
    assert _run(codes, "0.5.6", "0.5.6", CROWD, stride=4, pool_pages=128) == "kv-pool-conserved"
    # kvcheck's model retracts until the launch fits, so a resolver judged on the model path
    # under the same rule is never blamed for it.
    assert _run(codes, "0.5.6", "0.5.6", CROWD, stride=4, pool_pages=128, path="model") is None
    # 0.5.7 hands the multiplier to its loop (`retract_decode(server_args, buf_multiplier)`,
    # schedule_batch.py:1751-1778) and 0.5.9's bound covers every launch: both pass.
    assert _run(codes, "0.5.7", "0.5.7", CROWD, stride=4, pool_pages=128) is None
    assert _run(codes, "0.5.9", "0.5.9", CROWD, stride=4, pool_pages=128) is None


# Single-line bugs in a copy of a tree, each judged under the release's own rule.
OLD_TREE_BUGS = {
    # 0.5.9's bound without the v2 doubling: the release retracts less than its rule says.
    "0.5.9-estimate-not-doubled": (
        "runs-aligned",
        "0.5.9",
        "sglang/srt/managers/schedule_batch.py",
        "        return num_tokens * (1 + self.is_spec_v2)\n",
        "        return num_tokens\n",
    ),
    # 0.5.6's tail, read from the freed row, never freed.
    "0.5.6-tail-never-freed": (
        "kv-released-once",
        "0.5.6",
        "sglang/srt/mem_cache/common.py",
        "    tree_cache.token_to_kv_pool_allocator.free(indices_to_free)\n",
        "    pass\n",
    ),
}


@pytest.mark.parametrize("name", sorted(OLD_TREE_BUGS))
def test_single_line_bugs_in_the_old_trees_are_caught(tmp_path: Path, name: str) -> None:
    from kvcheck.families.sglang.real.tree import allocation_tree

    expected, version, file, line, mutated = OLD_TREE_BUGS[name]
    copy = tmp_path / "tree"
    shutil.copytree(allocation_tree(version), copy)
    target = copy / file
    text = target.read_text()
    assert text.count(line) == 1
    target.write_text(text.replace(line, mutated))
    codes = {version: release_allocation_factory(copy)}
    rule = rule_of_release(version)
    assert rule is not None
    verdicts = [
        _run(codes, version, rule, PRESSURE, stride=3, pool_pages=142),
        _run(codes, version, rule, CROWD, stride=4, pool_pages=128),
    ]
    assert verdicts == [expected, expected], name
