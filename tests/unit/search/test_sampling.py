"""The fast search (`kvcheck.search.sampling`): failures shrunk, saved, replayed first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis.database import DirectoryBasedExampleDatabase, InMemoryExampleDatabase

from kvcheck.core.deadline import time_limit
from kvcheck.core.scenario import from_json, legacy_scenario_dict, to_json_line
from kvcheck.counterexamples.fileformat import loads
from kvcheck.counterexamples.replay import from_run, replay
from kvcheck.errors import NondeterministicTargetError
from kvcheck.families.sglang.distribution import STRIDE_SWITCH_WITNESS
from kvcheck.families.sglang.judging import SglangJudging
from kvcheck.families.sglang.scenario import Step
from kvcheck.search.check import saved_scenarios, scenarios_key, search
from kvcheck.search.sampling import sample_search
from kvcheck.search.shrink import shrink
from kvcheck.targets.loading import load_target
from tests.helpers import TESTS_DIR, scenario

SEED_PREFIX = load_target("builtin:seed-prefix")
REFERENCE = load_target("builtin:reference")
KEY = scenarios_key(SEED_PREFIX, SglangJudging("preclaim", "ideal", False, None))


def test_a_clean_target_runs_its_budget_and_reports_labels() -> None:
    outcome = sample_search(REFERENCE, convention="preclaim", max_examples=200, seed=0)
    assert outcome.failure is None and outcome.examples == 200 and outcome.stopped is None
    assert {"re-admission", "1 requests", "algorithm eagle"} <= outcome.reached


def test_the_same_seed_draws_the_same_scenarios() -> None:
    seen: list[list[str]] = [[], []]
    for runs in seen:
        sample_search(
            REFERENCE,
            convention="preclaim",
            max_examples=30,
            seed=7,
            on_run=lambda result, runs=runs: runs.append(to_json_line(result.scenario)),
        )
    assert seen[0] == seen[1] and len(set(seen[0])) > 20


def test_a_failure_is_shrunk_deterministic_and_replays_without_the_search() -> None:
    outcome = sample_search(SEED_PREFIX, convention="preclaim", max_examples=500, seed=0)
    failure = outcome.failure
    assert failure is not None and failure.violation is not None
    assert failure.violation.invariant in {"committed-finished-frozen", "committed-retracted-zero"}
    assert outcome.examples_to_failure == outcome.examples and outcome.shrink_runs > 0
    # Shrunk: kvcheck's shrinker finds nothing smaller that still fails.
    assert shrink(failure, SEED_PREFIX).result.scenario == failure.scenario
    assert len(failure.scenario.events) <= 6
    counterexample = loads(from_run(failure, SEED_PREFIX.spec).to_json(), "test")
    replayed = replay(counterexample, SEED_PREFIX)
    assert replayed.status == "same" and replayed.violation == failure.violation


def test_a_saved_failure_is_replayed_first_by_the_next_run(
    tmp_path: Path,
) -> None:
    database = DirectoryBasedExampleDatabase(str(tmp_path))
    first = sample_search(SEED_PREFIX, convention="preclaim", seed=1, database=database)
    assert first.failure is not None and first.examples_to_failure is not None
    assert first.examples_to_failure > 1  # the seed's own draws took a while
    saved = saved_scenarios(database, KEY)
    assert [s for _, s in saved] == [first.failure.scenario]
    assert from_json(saved[0][0].decode()) == first.failure.scenario
    # Another process, another seed: the saved failure is its first scenario.
    again = DirectoryBasedExampleDatabase(str(tmp_path))
    ran: list[str] = []
    second = sample_search(
        SEED_PREFIX,
        convention="preclaim",
        seed=2,
        database=again,
        on_run=lambda result: ran.append(to_json_line(result.scenario)),
    )
    assert second.examples_to_failure == 1
    assert ran[0] == to_json_line(first.failure.scenario)
    assert second.failure is not None and second.failure.scenario == first.failure.scenario
    # ...unless told not to replay (a keep-going campaign's later rounds).
    third = sample_search(SEED_PREFIX, convention="preclaim", seed=1, database=again, reuse=False)
    assert third.examples_to_failure == first.examples_to_failure


def test_saved_entries_are_keyed_by_target_and_options() -> None:
    database = InMemoryExampleDatabase()
    sample_search(SEED_PREFIX, convention="preclaim", seed=0, database=database)
    assert list(database.fetch(KEY))
    for other in (
        scenarios_key(REFERENCE, SglangJudging("preclaim", "ideal", False, None)),
        scenarios_key(SEED_PREFIX, SglangJudging("honest", "ideal", False, None)),
        scenarios_key(SEED_PREFIX, SglangJudging("preclaim", "ideal", True, None)),
        scenarios_key(SEED_PREFIX, SglangJudging("preclaim", "ideal", False, True)),
    ):
        assert not list(database.fetch(other))
    # Hypothesis's own entries (choice sequences) are under its own key.
    hypothesis_key = b"kvcheck.search.check|builtin:seed-prefix|preclaim|ideal|False|None"
    assert not list(database.fetch(hypothesis_key))


def test_either_generator_replays_first_what_the_other_saved(tmp_path: Path) -> None:
    database = DirectoryBasedExampleDatabase(str(tmp_path / "fast-first"))
    fast = sample_search(SEED_PREFIX, convention="preclaim", seed=1, database=database)
    assert fast.failure is not None
    slow = search(SEED_PREFIX, convention="preclaim", database=database)
    assert slow.examples_to_failure == 1
    assert slow.failure is not None and slow.failure.scenario == fast.failure.scenario
    # The other way round: what Hypothesis's search found (and shrank) the fast one tries first.
    database = DirectoryBasedExampleDatabase(str(tmp_path / "hypothesis-first"))
    slow = search(SEED_PREFIX, convention="preclaim", database=database)
    assert slow.failure is not None
    assert [s for _, s in saved_scenarios(database, KEY)] == [slow.failure.scenario]
    ran: list[str] = []
    fast = sample_search(
        SEED_PREFIX,
        convention="preclaim",
        seed=1,
        database=database,
        on_run=lambda result: ran.append(to_json_line(result.scenario)),
    )
    assert fast.examples_to_failure == 1 and ran[0] == to_json_line(slow.failure.scenario)


def test_a_seeded_hypothesis_search_leaves_the_database_alone_as_before() -> None:
    database = InMemoryExampleDatabase()
    search(SEED_PREFIX, convention="preclaim", seed=0, database=database)
    assert not list(database.fetch(KEY))


def test_a_saved_scenario_that_passes_or_is_damaged_is_deleted() -> None:
    database = InMemoryExampleDatabase()
    key = scenarios_key(REFERENCE, SglangJudging("preclaim", "ideal", False, None))
    database.save(key, to_json_line(scenario(Step())).encode())
    database.save(key, b"{not json")
    database.save(key, b"\xff\xfe")
    outcome = sample_search(
        REFERENCE, convention="preclaim", max_examples=3, seed=0, database=database
    )
    assert outcome.examples == 3 and outcome.failure is None
    assert list(database.fetch(key)) == []


def test_a_failure_saved_before_schema_version_4_is_replayed_first_and_kept_once(
    tmp_path: Path,
) -> None:
    # A database an older kvcheck filled: the failure as a version 1 line, no `family`.
    database = DirectoryBasedExampleDatabase(str(tmp_path))
    found = sample_search(SEED_PREFIX, convention="preclaim", seed=1, max_examples=500)
    assert found.failure is not None
    failing = found.failure.scenario
    old_line = json.dumps(legacy_scenario_dict(failing), separators=(",", ":")).encode()
    assert b'"schema_version":1' in old_line and b"family" not in old_line
    database.save(KEY, old_line)
    ran: list[str] = []
    again = sample_search(
        SEED_PREFIX,
        convention="preclaim",
        seed=2,
        database=database,
        on_run=lambda result: ran.append(to_json_line(result.scenario)),
    )
    assert again.examples_to_failure == 1 and ran[0] == to_json_line(failing)
    # One entry, in today's form: the old line was not kept beside the new one.
    assert list(database.fetch(KEY)) == [to_json_line(failing).encode()]
    # The slow search saves without replacing; reading migrates the old line all the same.
    database.save(KEY, old_line)
    assert [s for _, s in saved_scenarios(database, KEY)] == [failing]
    assert list(database.fetch(KEY)) == [to_json_line(failing).encode()]


def test_overlap_pins_the_overlap_axis() -> None:
    # seed-prefix only goes wrong on stale rows, which need overlap.
    seen: set[bool] = set()
    off = sample_search(
        SEED_PREFIX,
        convention="preclaim",
        overlap=False,
        max_examples=100,
        seed=0,
        on_run=lambda result: seen.add(result.scenario.config.overlap),
    )
    assert off.failure is None and seen == {False}
    on = sample_search(SEED_PREFIX, convention="preclaim", overlap=True, max_examples=300, seed=0)
    assert on.failure is not None


def test_an_adaptive_search_tries_the_stride_switch_witness_first() -> None:
    ran: list[int] = []
    outcome = sample_search(
        REFERENCE,
        convention="preclaim",
        adaptive=True,
        max_examples=5,
        seed=0,
        on_run=lambda result: ran.append(len(result.scenario.events)),
    )
    assert outcome.examples == 5 and ran[0] == len(STRIDE_SWITCH_WITNESS)
    assert "stride switch with a launch in flight" in outcome.reached


def test_a_time_limit_stops_the_search_and_says_so() -> None:
    with time_limit(0.3):
        outcome = sample_search(REFERENCE, convention="preclaim", max_examples=10**9, seed=0)
    assert outcome.stopped == "time limit" and outcome.failure is None
    assert 0 < outcome.examples < 10**9 and outcome.seconds < 5


def test_ctrl_c_is_reported_or_re_raised() -> None:
    def interrupt(_: object) -> None:
        raise KeyboardInterrupt

    outcome = sample_search(
        REFERENCE, convention="preclaim", seed=0, progress=interrupt, report_interrupt=True
    )
    assert outcome.stopped == "interrupted"
    with pytest.raises(KeyboardInterrupt):
        sample_search(REFERENCE, convention="preclaim", seed=0, progress=interrupt)


def test_a_nondeterministic_target_gets_no_verdict() -> None:
    flaky = load_target(f"{TESTS_DIR / 'fixtures' / 'verdicts' / 'resolvers.py'}::twentieth_call")
    with pytest.raises(NondeterministicTargetError, match="two different results"):
        sample_search(flaky, convention="preclaim", max_examples=60, seed=0)
