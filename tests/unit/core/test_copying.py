"""Deep copies of engine and model states (`kvcheck.core.copying`), which the exhaustive search
branches on: `clone()` behaves like `copy.deepcopy`."""

from __future__ import annotations

import copy
import random

import pytest

from kvcheck.core.engine import Engine
from kvcheck.core.model import ReferenceModel
from kvcheck.core.scenario import Abort, Admit, Config, Event, Retract, Step, SwitchStride
from kvcheck.targets.loading import load_target

REFERENCE = load_target("builtin:reference")


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
