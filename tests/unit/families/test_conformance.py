"""The conformance suite: one set of properties every engine family must have, run against each
registered family and the toy (tests/unit/families/toy.py).

- a drawn scenario round-trips through JSON;
- replaying a run's counterexample file gives the run's violation (and a run is repeatable);
- shrinking keeps the invariant and never grows the scenario;
- the exhaustive search agrees with the search on small bounds (`Moves.conformance_bounds`):
  both pass the correct built-in, both fail a mutant, and what each found replays;
- the correct built-in (`TargetLoader.correct_builtin`) passes;
- every invariant fires on the built-in mutant its record names (`Invariant.mutant`): the
  exhaustive search finds it among the shortest counterexamples' invariants; the few no
  plausible edit of a target breaks say why in their record instead (`Invariant.no_mutant`),
  and the family's own firing tests show them (for SGLang, tests/unit/core/
  test_invariants_fire.py and test_allocation.py, which each check that every invariant they
  own has a case).

Kept cheap (small budgets and bounds): the whole file takes about 10 s of CPU, vLLM's part about
3.5 s (2 s of it the #48245 mutant, which needs two requests at depth 3).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from kvcheck.core.draws import RandomDraws
from kvcheck.core.family import Family, MutantEntry, family, family_names, registered
from kvcheck.core.run import RunResult, run_scenario
from kvcheck.core.scenario import Scenario, from_json, to_json
from kvcheck.core.target import Target
from kvcheck.counterexamples.fileformat import load, save
from kvcheck.counterexamples.replay import from_run, replay
from kvcheck.search.check import check, search
from kvcheck.search.exhaust import ExhaustResult, exhaust
from kvcheck.search.shrink import shrink
from kvcheck.targets.loading import load_target
from tests.unit.families import toy

FAMILY_NAMES: Final = (*family_names(), toy.NAME)

SCENARIOS: Final = 40  # drawn per family for the properties over scenarios
MAX_EXAMPLES: Final = 30  # per search


@pytest.fixture(params=FAMILY_NAMES)
def subject(request: pytest.FixtureRequest) -> Iterator[Family]:
    """Each family, the toy registered for the test only."""
    if request.param == toy.NAME:
        with registered(toy.NAME, toy.PATH) as registered_toy:
            yield registered_toy
    else:
        yield family(request.param)


def _correct(subject: Family) -> Target:
    return load_target(subject.targets.correct_builtin)


def _options(subject: Family, target: Target) -> Any:
    return subject.judge.judging({}, target).options


def _conformance_mutant(subject: Family, invariant: str) -> MutantEntry | None:
    """The corpus entry the record of `invariant` names (`Invariant.mutant`), if any."""
    assert subject.mutants is not None, f"{subject.name} has no mutant corpus"
    name = subject.judge.invariants[invariant].mutant
    return None if name is None else subject.mutants.get(name)


def _a_mutant(subject: Family) -> MutantEntry:
    """The conformance mutant of the last invariant in checking order that has one: breaking
    only that one, its runs go through every check before it."""
    for invariant in reversed(list(subject.judge.invariants)):
        entry = _conformance_mutant(subject, invariant)
        if entry is not None:
            return entry
    raise AssertionError(f"{subject.name}: no invariant has a conformance mutant")


def _drawn(subject: Family, target: Target, options: Any, count: int) -> Iterator[Scenario]:
    """`count` scenarios a search of `target` under `options` draws (the seeded driver)."""
    assert subject.distribution is not None
    space = subject.distribution.space(target, options)
    rng = random.Random(0)
    for _ in range(count):
        yield subject.distribution.draw_scenario(RandomDraws(rng), space)


def _first_failure(subject: Family, entry: MutantEntry) -> RunResult:
    target = entry.target()
    for drawn in _drawn(subject, target, entry.options, 400):
        result = run_scenario(drawn, target)
        if result.violation is not None:
            return result
    raise AssertionError(f"no drawn scenario fails {entry.name}")


def _exhaust(subject: Family, target: Target, options: Any, mutant: bool) -> ExhaustResult:
    bounds = subject.moves.conformance_bounds
    if mutant:
        assert subject.mutants is not None
        bounds = subject.mutants.bounds_for(target, bounds)
    return exhaust(target, bounds, options=options, measure_coverage=False)


def test_a_scenario_round_trips_through_json(subject: Family) -> None:
    target = _correct(subject)
    for drawn in _drawn(subject, target, _options(subject, target), SCENARIOS):
        assert drawn.family == subject.name
        assert from_json(to_json(drawn)) == drawn


def test_replay_equals_run(subject: Family, tmp_path: Path) -> None:
    entry = _a_mutant(subject)
    target = entry.target()
    failing = 0
    for drawn in _drawn(subject, target, entry.options, SCENARIOS):
        run = run_scenario(drawn, target, record=True)
        again = run_scenario(drawn, target, record=True)
        assert again.violations == run.violations and again.trace == run.trace
        if run.violation is None:
            continue
        failing += 1
        path = save(from_run(run, target.spec), tmp_path)
        replayed = replay(load(path), deadline=None)
        assert replayed.status == "same"
        assert replayed.result.violations == run.violations
    assert failing, f"none of {SCENARIOS} drawn scenarios fails {entry.name}"


def test_shrinking_keeps_the_invariant(subject: Family) -> None:
    entry = _a_mutant(subject)
    failing = _first_failure(subject, entry)
    assert failing.violation is not None
    shrunk = shrink(failing, entry.target()).result
    assert shrunk.violation is not None
    assert shrunk.violation.invariant == failing.violation.invariant
    assert subject.moves.size(shrunk.scenario) <= subject.moves.size(failing.scenario)
    # What the shrinker kept fails the same way when run again from its scenario.
    again = run_scenario(shrunk.scenario, entry.target())
    assert again.violation is not None and again.violation.invariant == shrunk.violation.invariant


def test_exhaust_agrees_with_search_on_small_bounds(subject: Family) -> None:
    correct = _correct(subject)
    options = _options(subject, correct)
    proof = _exhaust(subject, correct, options, mutant=False)
    assert proof.verdict == "pass" and proof.complete, proof.stopped
    assert search(correct, options, max_examples=MAX_EXAMPLES, seed=0).failure is None
    entry = _a_mutant(subject)
    mutant = entry.target()
    shortest = _exhaust(subject, mutant, entry.options, mutant=True)
    found = search(mutant, entry.options, max_examples=MAX_EXAMPLES, seed=0).failure
    assert shortest.failure is not None and shortest.violation is not None
    assert found is not None and found.violation is not None
    # Each one's counterexample fails as it said when run again.
    for result in (shortest.failure, found):
        again = run_scenario(result.scenario, mutant)
        assert again.violation is not None
        assert result.violation is not None
        assert again.violation.invariant == result.violation.invariant
    assert shortest.violation.invariant in shortest.minimal_invariants


def test_the_correct_builtin_passes(subject: Family) -> None:
    verdict = check(subject.targets.correct_builtin, max_examples=MAX_EXAMPLES, seed=0)
    assert verdict.passed, verdict.violation
    assert verdict.family == subject.name


def _mutated_cases() -> Iterator[Any]:
    for name in FAMILY_NAMES:
        with registered(toy.NAME, toy.PATH):
            invariants = list(family(name).judge.invariants.items())
        for invariant, record in invariants:
            if record.mutant is not None:
                yield pytest.param(name, invariant, id=f"{name}-{invariant}")


@pytest.mark.parametrize(("name", "invariant"), list(_mutated_cases()))
def test_every_invariant_fires_on_a_builtin_mutant(name: str, invariant: str) -> None:
    with registered(toy.NAME, toy.PATH):
        subject = family(name)
        assert subject.mutants is not None
        entry = _conformance_mutant(subject, invariant)
        assert entry is not None, f"the {name} corpus has no mutant that {invariant} names"
        assert (entry.kind, entry.family) == ("mutant", name)
        assert subject.mutants.get(entry.name) is entry
        result = _exhaust(subject, entry.target(), entry.options, mutant=True)
        assert invariant in result.minimal_invariants, (entry.name, result.minimal_invariants)


def test_every_invariant_names_its_mutant_or_why_it_has_none(subject: Family) -> None:
    for invariant, record in subject.judge.invariants.items():
        assert (record.mutant is None) != (record.no_mutant is None), invariant
        assert record.no_mutant is None or len(record.no_mutant) > 20, invariant
        if record.mutant is not None:
            assert _conformance_mutant(subject, invariant) is not None, record.mutant
