"""The records the model and the engine hand on from event to event (`kvcheck.core.snapshots`)
equal the ones made afresh, after every event: on correct targets, on mutants, and on a target
that corrupts a request outside the batch it is given."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvcheck.core.run import run_scenario
from kvcheck.core.snapshots import refreshed
from kvcheck.families.sglang.builtins import reference
from kvcheck.families.sglang.engine import Engine, UnsupportedTargetError
from kvcheck.families.sglang.model import ReferenceModel
from kvcheck.families.sglang.scenario import Admit, Step
from kvcheck.families.sglang.target import allocation_path
from kvcheck.mutants import corpus_of
from kvcheck.strategies import scenarios
from kvcheck.targets.loading import load_target
from tests.helpers import scenario, target

# SGLang's corpus: these tests drive SGLang's engine and model (vLLM's: tests/unit/families/vllm/).
ENTRIES = corpus_of("sglang").entries


@attrs.frozen
class _Record:
    rid: str
    value: int


def test_refreshed_hands_on_what_did_not_change() -> None:
    items = {"a": 1, "b": 2}
    make = lambda value: _Record("a" if value == 1 else "b", value)  # noqa: E731
    last = refreshed(None, items, (), make)
    assert last == (_Record("a", 1), _Record("b", 2))
    assert refreshed(last, items, (), make) is last
    items["b"] = 5
    again = refreshed(last, items, ("b",), make)
    assert again[0] is last[0] and again[1] == _Record("b", 5)
    items["c"] = 1  # new: made, whatever `changed` says
    assert len(refreshed(again, items, (), make)) == 3
    assert refreshed(again, {"a": 1, "b": 5}, None, make) == again  # None: all made anew


_TARGETS = [load_target("builtin:reference"), *(e.target() for e in ENTRIES[::5])]


@pytest.mark.parametrize("index", range(len(_TARGETS)))
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(data=st.data())
def test_handed_on_records_equal_fresh_ones(index: int, data: st.DataObject) -> None:
    tested = _TARGETS[index]
    shape = tested.shape
    drawn = data.draw(
        scenarios(
            adaptive=data.draw(st.booleans()),
            algorithms=shape.algorithms,
            block_cap=shape.block_cap,
            grammar=shape.grammar,
            allocation=True,
        )
    )
    model = ReferenceModel(drawn.config)
    engine = Engine(
        drawn.config,
        tested.resolver,
        tested.self_methods,
        not_judged=shape.not_judged,
        allocation=allocation_path(tested, drawn.config),
    )
    for event in drawn.events:
        expected = model.apply(event)
        try:
            observed = engine.apply(event)
        except UnsupportedTargetError:
            return
        assert expected.requests == model.expectation().requests
        assert observed.requests == engine.observe_requests()


_SEEN: list[Any] = []


def corrupts_earlier_requests(self: Any, result: Any, batch: Any) -> Any:
    """Correct on its batch, but bumps the committed length of every finished request it saw
    in an earlier call."""
    for req in _SEEN:
        if req.finished() and req not in batch.reqs:
            req.kv_committed_len += 1
    _SEEN.extend(req for req in batch.reqs if req not in _SEEN)
    return reference(self, result, batch)


def test_a_request_corrupted_outside_the_batch_is_caught() -> None:
    _SEEN.clear()
    run = scenario(
        Admit("r0", 4, 1),
        Admit("r1", 4, 8),
        Step(),
        Step(),
        Step(),
        Step(),
        Step(),
    )
    result = run_scenario(run, target(corrupts_earlier_requests))
    assert result.violation is not None
    assert (result.violation.invariant, result.violation.rid) == ("committed-finished-frozen", "r0")
