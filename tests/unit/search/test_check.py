"""The property search (`kvcheck.search.check`): `search` and `check`, their verdicts, the
convention fallback, bad options and the example database's keys."""

from __future__ import annotations

from typing import Any

import pytest

from kvcheck.core.run import run_scenario
from kvcheck.errors import KvcheckUsageError
from kvcheck.search.check import check, search
from kvcheck.targets.loading import load_target
from tests.helpers import target

REFERENCE = load_target("builtin:reference")
SEED_PREFIX = load_target("builtin:seed-prefix")


def honest_with_0_5_12_spellings(self: Any, result: Any, batch: Any) -> list[list[int]]:
    """A correct honest resolver written with 0.5.12's spellings, which the probe places in the
    pre-claim generations (0.5.12-0.5.13): judged pre-claim first, it fails."""
    stride = result.speculative_num_draft_tokens
    accepts = result.accept_lens.tolist()
    for req, a in zip(batch.reqs, accepts, strict=True):
        if req.is_retracted or req.finished():
            continue
        req.kv_committed_len += a
        req.spec_verify_ct += 1
        req.spec_num_correct_drafts += a - 1
        req.update_spec_correct_drafts_histogram(a - 1)
    ids = result.next_token_ids.tolist()
    return [ids[i * stride : i * stride + a] for i, a in enumerate(accepts)]


HONEST = target(honest_with_0_5_12_spellings)


def test_a_passing_verdict() -> None:
    verdict = check(REFERENCE, convention="preclaim", max_examples=20, seed=0)
    assert verdict.passed and verdict.verdict == "pass"
    assert verdict.violation is None and verdict.counterexample is None
    assert (verdict.target, verdict.description) == ("builtin:reference", REFERENCE.description)
    assert verdict.convention == "preclaim"
    assert verdict.convention_reason == "convention preclaim (given)"
    assert verdict.global_counters == "ideal"
    # The reference never feeds the adaptive controller, so auto leaves strides alone.
    assert not verdict.adaptive
    assert verdict.adaptive_reason == "auto: the target never feeds the adaptive controller"
    assert verdict.api_shape is REFERENCE.shape
    assert verdict.examples == verdict.outcome.examples == 20
    assert verdict.other_outcomes == ()
    assert verdict.outcome.failure is None and verdict.outcome.examples_to_failure is None


def test_a_given_adaptive_counts_the_stride_switch_witness_as_an_example() -> None:
    verdict = check(REFERENCE, convention="preclaim", adaptive=True, max_examples=10, seed=0)
    assert verdict.adaptive and verdict.adaptive_reason == "given"
    assert verdict.passed and verdict.examples == 10


def test_a_failing_verdict_carries_the_shrunk_replayable_counterexample() -> None:
    verdict = check("builtin:seed-prefix", convention="preclaim", max_examples=100, seed=0)
    assert not verdict.passed and verdict.verdict == "fail"
    outcome = verdict.outcome
    assert outcome.failure is not None
    assert verdict.violation is outcome.failure.violation
    assert verdict.counterexample is outcome.failure.scenario
    assert verdict.violation is not None
    assert verdict.violation.invariant in {"committed-finished-frozen", "committed-retracted-zero"}
    assert outcome.examples_to_failure is not None
    assert 1 <= outcome.examples_to_failure <= outcome.examples
    assert outcome.seconds_to_failure is not None and outcome.shrink_runs > 0
    # What is reported is exactly what a replay without Hypothesis reproduces.
    assert verdict.counterexample is not None
    replayed = run_scenario(verdict.counterexample, SEED_PREFIX)
    assert replayed.violation == verdict.violation


def test_auto_falls_back_to_the_other_convention_and_says_so() -> None:
    assert HONEST.shape.convention == "preclaim"
    verdict = check(HONEST, max_examples=50, seed=0)
    assert verdict.passed
    assert verdict.convention == "honest"
    assert verdict.convention_reason.startswith(HONEST.shape.convention_reason)
    assert verdict.convention_reason.endswith(
        ", but it fails under preclaim; it passes under honest"
    )
    (first,) = verdict.other_outcomes
    assert first.options.to_dict()["convention"] == "preclaim" and first.failure is not None
    assert first.failure.violation is not None
    # Judged as pre-claim it is one short on a live row, or does not give a finished request's
    # slot back.
    assert first.failure.violation.invariant in {"committed-live", "committed-finished-frozen"}
    assert verdict.examples == verdict.outcome.examples + first.examples


def test_auto_reports_the_first_convention_when_both_fail() -> None:
    verdict = check(SEED_PREFIX, max_examples=100, seed=0)
    assert not verdict.passed
    assert verdict.convention == SEED_PREFIX.shape.convention == "preclaim"
    assert verdict.convention_reason.endswith("; it also fails under honest")
    (other,) = verdict.other_outcomes
    assert other.options.to_dict()["convention"] == "honest" and other.failure is not None


def test_a_given_convention_is_searched_alone() -> None:
    verdict = check(HONEST, convention="preclaim", max_examples=50, seed=0)
    assert not verdict.passed and verdict.convention == "preclaim"
    assert verdict.other_outcomes == ()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"convention": "sideways"}, "unknown convention 'sideways'"),
        ({"global_counters": "most"}, "unknown global-counter mode 'most'"),
        ({"max_examples": 0}, "max-examples must be at least 1, got 0"),
    ],
)
def test_bad_options_are_usage_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(KvcheckUsageError, match=message):
        check(REFERENCE, **options)


def test_an_unloadable_spec_is_a_usage_error() -> None:
    with pytest.raises(KvcheckUsageError, match="unknown builtin 'nope'"):
        check("builtin:nope", max_examples=5)


def test_overlap_pins_the_overlap_axis() -> None:
    # seed-prefix only goes wrong on stale rows, which need overlap.
    pinned_off = search(SEED_PREFIX, convention="preclaim", overlap=False, max_examples=50, seed=0)
    assert pinned_off.failure is None and pinned_off.examples == 50
    pinned_on = search(SEED_PREFIX, convention="preclaim", overlap=True, max_examples=50, seed=0)
    assert pinned_on.failure is not None


def test_database_entries_are_keyed_by_target_and_options() -> None:
    from hypothesis.database import InMemoryExampleDatabase

    from kvcheck.search.check import search

    db = InMemoryExampleDatabase()
    outcome = search(load_target("builtin:seed-prefix"), convention="preclaim", database=db)
    assert outcome.failure is not None
    keys = {key for key in db.data if not key.startswith(b".hypothesis")}
    assert b"kvcheck.search.check|builtin:seed-prefix|preclaim|ideal|False|None" in keys
