"""The generation table behind `kvcheck releases --family vllm`: every release from 0.11.1 to
0.34.0 in exactly one generation, and a failure the table does not know is `unexplained`, never
attributed to a bug it is not."""

from __future__ import annotations

import itertools

import pytest

from kvcheck.families.vllm.real import RELEASES
from kvcheck.families.vllm.real.generations import (
    GENERATIONS,
    NO_BUG,
    UNEXPLAINED,
    facts,
    generation_of,
)
from kvcheck.targets.wheels import version_key

# Every vLLM release on the index from 0.11.1 (docs/vllm-generations.md).
INDEXED = [
    "0.11.1",
    "0.11.2",
    "0.12.0",
    "0.13.0",
    "0.14.0",
    "0.14.1",
    "0.15.0",
    "0.15.1",
    "0.16.0",
    "0.17.0",
    "0.17.1",
    "0.18.0",
    "0.18.1",
    "0.19.0",
    "0.19.1",
    "0.20.0",
    "0.20.1",
    "0.20.2",
    "0.21.0",
    "0.22.0",
    "0.22.1",
    "0.23.0",
    "0.24.0",
    "0.25.0",
    "0.25.1",
    "0.26.0",
    "0.27.0",
    "0.27.1",
    "0.28.0",
    "0.29.0",
    "0.30.0",
    "0.31.0",
    "0.32.0",
    "0.33.0",
    "0.34.0",
]


def test_the_generations_are_ordered_and_disjoint() -> None:
    for earlier, later in itertools.pairwise(GENERATIONS):
        assert version_key(earlier.first) <= version_key(earlier.last)
        assert version_key(earlier.last) < version_key(later.first)
    assert GENERATIONS[0].first == RELEASES.oldest


@pytest.mark.parametrize("version", INDEXED)
def test_every_release_is_in_one_generation(version: str) -> None:
    assert sum(g.holds(version) for g in GENERATIONS) == 1


def test_a_failure_names_its_generation_s_bug_or_is_unexplained() -> None:
    assert dict(facts("0.23.0", "vllm-counters"))["bug"] == "vllm#46066"
    # 0.25.0 has #46066's fix: the same invariant is #48245's there.
    assert dict(facts("0.25.0", "vllm-counters"))["bug"] == "vllm#48245"
    assert dict(facts("0.26.0", "vllm-exactly-once"))["bug"] == "vllm#49620"
    # The stale-output mechanism fixed all of them: a FAIL there is something new.
    assert dict(facts("0.30.0", "vllm-exactly-once"))["bug"] == UNEXPLAINED
    assert dict(facts("0.33.0", None))["bug"] == NO_BUG
    assert dict(facts("0.34.0", None))["resolves"] == "S._update_request_with_output"
    assert dict(facts("0.32.0", None))["resolves"] == "A._update_request_with_output"


def test_a_release_past_the_table_is_unknown() -> None:
    assert generation_of("0.35.0") is None
    assert dict(facts("0.35.0", "vllm-pool")) == {
        "generation": "unknown",
        "bug": UNEXPLAINED,
        "resolves": "unknown",
    }
