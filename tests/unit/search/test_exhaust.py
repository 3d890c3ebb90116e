"""Bounded exhaustive checking (`kvcheck exhaust`): the proof on the reference resolver, shortest
counterexamples, state merging, branching, the command's output and exit codes."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import pytest

from kvcheck.cli.main import main
from kvcheck.core.engine import Engine
from kvcheck.core.model import ReferenceModel
from kvcheck.core.run import run_scenario
from kvcheck.core.scenario import Abort, Admit, Config, Event, Retract, Step, SwitchStride
from kvcheck.search.exhaust import Bounds, exhaust
from kvcheck.targets.loading import load_target

REFERENCE = load_target("builtin:reference")
SEED_PREFIX = load_target("builtin:seed-prefix")


def test_reference_is_proven_within_the_issue_bounds() -> None:
    # 2 requests, 8 events, accept up to 3, strides {2,3}, every event kind, both overlap modes.
    bounds = Bounds()
    assert (bounds.requests, bounds.events, bounds.max_accept) == (2, 8, 3)
    assert bounds.strides == (2, 3)
    assert set(bounds.kinds) == {"admit", "step", "retract", "abort", "switch_stride"}
    result = exhaust(REFERENCE, bounds, convention="preclaim")
    assert result.adaptive
    assert result.verdict == "pass" and result.complete
    assert result.depth == 8
    assert result.states > 10_000 and result.scenarios > result.states


def test_seed_prefix_counterexample_has_the_minimal_length() -> None:
    result = exhaust(SEED_PREFIX, Bounds(), convention="preclaim")
    assert result.verdict == "fail"
    scenario = result.counterexample
    assert scenario is not None
    # semantics.md §3.1's finish-on-prefill form: admit; prefill launch; decode launch while the
    # prefill result finishes the request; the decode row arrives stale.
    assert [type(e) for e in scenario.events] == [Admit, Step, Step, Step]
    admit = scenario.events[0]
    assert isinstance(admit, Admit) and (admit.max_new_tokens == 1 or admit.eos_at == 1)
    assert result.depth == 4
    violation = result.violation
    assert violation is not None and violation.invariant == "committed-finished-frozen"
    replayed = run_scenario(scenario, SEED_PREFIX)
    assert replayed.violation == violation


def test_seed_fixed_shortest_counterexample_is_the_global_counter() -> None:
    result = exhaust(load_target("builtin:seed-fixed"), Bounds(), convention="preclaim")
    assert result.verdict == "fail" and result.depth == 4
    assert result.minimal_invariants == {"global-counters"}


def test_no_violation_is_shorter_than_the_one_found() -> None:
    # Every shorter level was searched completely: the reference passes there, and so does the
    # seed-prefix resolver on scenarios one event shorter than its counterexample.
    result = exhaust(SEED_PREFIX, Bounds(events=3), convention="preclaim")
    assert result.verdict == "pass"


@pytest.mark.parametrize(
    "spec, events",
    [("builtin:seed-prefix", 4), ("builtin:reference", 4), ("builtin:seed-fixed", 4)],
)
def test_state_merging_changes_nothing_but_the_work(spec: str, events: int) -> None:
    bounds = Bounds(events=events, kinds=("step", "admit", "retract"), max_new=(1, 4))
    target = load_target(spec)
    merged = exhaust(target, bounds, convention="preclaim")
    plain = exhaust(target, bounds, convention="preclaim", merge=False)
    assert merged.verdict == plain.verdict
    assert merged.depth == plain.depth
    assert merged.minimal_invariants == plain.minimal_invariants
    assert merged.states <= plain.states


def test_step_bound_alone_ends_the_search() -> None:
    result = exhaust(REFERENCE, Bounds(events=None, steps=2, strides=(2,)), convention="preclaim")
    assert result.verdict == "pass" and result.complete
    # Other events between the two steps are unbounded but finite.
    assert result.depth > 2


def test_limits_give_an_incomplete_verdict() -> None:
    result = exhaust(REFERENCE, Bounds(), convention="preclaim", max_states=500)
    assert result.verdict == "incomplete" and not result.complete
    assert result.failure is None


def test_bad_bounds_are_usage_errors() -> None:
    from kvcheck.errors import KvcheckUsageError

    with pytest.raises(KvcheckUsageError):
        Bounds(strides=(0,))
    with pytest.raises(KvcheckUsageError):
        Bounds(events=None, steps=None)
    with pytest.raises(KvcheckUsageError):
        Bounds(kinds=("step", "teleport"))


# --- branching ----------------------------------------------------------------------------------


def _random_events(rng: random.Random, count: int) -> list[Event]:
    events: list[Event] = []
    for _ in range(count):
        roll = rng.random()
        rid = f"r{rng.randrange(3)}"
        if roll < 0.5:
            events.append(Step(tuple(rng.randint(1, 4) for _ in range(rng.randrange(4)))))
        elif roll < 0.7:
            events.append(Admit(rid, rng.randint(1, 9), rng.randint(1, 8), rng.choice([None, 2])))
        elif roll < 0.8:
            events.append(Retract(rid))
        elif roll < 0.9:
            events.append(Abort(rid))
        else:
            events.append(SwitchStride(rng.randint(2, 5)))
    return events


@pytest.mark.parametrize("seed", range(12))
def test_clone_behaves_like_a_generic_deepcopy(seed: int) -> None:
    rng = random.Random(seed)
    config = Config(convention=rng.choice(["preclaim", "honest"]), stride=4, adaptive=True)
    engine = Engine(config, REFERENCE.resolver, not_judged=REFERENCE.shape.not_judged)
    model = ReferenceModel(config)
    for event in _random_events(rng, 10):
        engine.apply(event)
        model.apply(event)
    generic = copy.deepcopy(engine, {id(engine.resolver): engine.resolver})
    copies = [(engine.clone(), model.clone()), (generic, copy.deepcopy(model))]
    before = (engine.state_key(), model.state_key())
    continuation = _random_events(rng, 10)
    outcomes = []
    for copied_engine, copied_model in copies:
        assert copied_engine.resolver is engine.resolver
        seen = []
        for event in continuation:
            observed = copied_engine.apply(event)
            copied_model.apply(event)
            seen.append((observed.requests, copied_engine.state_key(), copied_model.state_key()))
        outcomes.append(seen)
    assert outcomes[0] == outcomes[1]
    # The original is untouched by what its copies went through.
    assert (engine.state_key(), model.state_key()) == before


# --- the command --------------------------------------------------------------------------------


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["exhaust", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_counterexample_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "builtin:seed-prefix", "--no-save", "--json")
    data = json.loads(out)
    assert code == 1
    assert data["verdict"] == "fail"
    assert data["scenarios"] > 0 and data["states"] > 0
    assert data["violation"]["invariant"] == "committed-finished-frozen"
    assert [e["kind"] for e in data["events"]] == ["admit", "step", "step", "step"]
    assert data["convention"] == "preclaim"


def test_cli_pass_text(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "builtin:reference", "--events", "5")
    assert code == 0
    assert "no violation within bounds" in out
    assert "distinct states" in out and "scenarios" in out


def test_cli_saves_a_replayable_counterexample(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, _ = _run(capsys, "builtin:seed-prefix", "--save-dir", str(tmp_path))
    assert code == 1
    assert "shortest counterexample (4 events)" in out
    files = list(tmp_path.glob("*.kvcheck.json"))
    assert len(files) == 1
    assert main(["replay", str(files[0]), "--json"]) == 1
    replayed = json.loads(capsys.readouterr().out)
    assert replayed["violation"]["invariant"] == "committed-finished-frozen"


def test_cli_mutant_target_uses_its_annotation(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "mutant:ideal-total-in-sglang-mode", "--no-save", "--json")
    data = json.loads(out)
    assert code == 1
    assert data["global_counters"] == "sglang"
    assert data["convention"] == "honest"
    assert data["violation"]["invariant"] == "global-counters"


def test_cli_time_limit_is_incomplete_not_a_failure(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "builtin:reference", "--max-states", "200", "--json")
    assert code == 0
    assert json.loads(out)["verdict"] == "incomplete"


@pytest.mark.parametrize(
    "argv",
    [
        ["builtin:reference", "--strides", "0"],
        ["builtin:reference", "--strides", "two"],
        ["builtin:reference", "--kinds", "step,teleport"],
        ["builtin:reference", "--events", "0"],
        ["builtin:reference", "--overlap", "sometimes"],
        ["builtin:nope"],
        ["mutant:nope"],
    ],
)
def test_cli_usage_errors_are_one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, out, err = _run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err
