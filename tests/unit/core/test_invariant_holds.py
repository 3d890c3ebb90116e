"""`check_event` runs an invariant's checker only where its quick test (`Invariant.holds`) fails,
and skips a request whose records passed unchanged: it must report exactly what running every
checker at every event reports (the oracle below), also on observations a target has corrupted
in any field, with any aspects not judged."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvcheck.core.invariant import Violation
from kvcheck.core.target import Target
from kvcheck.families.sglang.engine import Engine, Observation, UnsupportedTargetError
from kvcheck.families.sglang.fakes import ControllerFeed
from kvcheck.families.sglang.invariants import INVARIANTS, check_event
from kvcheck.families.sglang.model import Expectation, ReferenceModel
from kvcheck.families.sglang.pool import PoolFault
from kvcheck.families.sglang.scenario import Admit, Step
from kvcheck.families.sglang.target import ASPECTS, allocation_path
from kvcheck.mutants import corpus_of
from kvcheck.strategies import scenarios
from kvcheck.targets.loading import load_target
from tests.helpers import scenario

# A correct target and mutants of every kind: their own runs break invariants too.
_SPECS = ("builtin:reference", "builtin:seed-prefix")
_TARGETS: dict[str, Target] = {}

# SGLang's corpus: these tests drive SGLang's engine and model (vLLM's: tests/unit/families/vllm/).
ENTRIES = corpus_of("sglang").entries


def _target(name: str) -> Target:
    if name not in _TARGETS:
        by_name = {entry.name: entry for entry in ENTRIES}
        _TARGETS[name] = by_name[name].target() if name in by_name else load_target(name)
    return _TARGETS[name]


def oracle(index: int, expected: Expectation, observed: Observation) -> list[Violation]:
    """Every checker at every event, as `check_event` did before it had quick tests. Each
    finding's aspect must be one its invariant's record declares (`Invariant.aspects`)."""
    violations = []
    for invariant in INVARIANTS.values():
        for f in invariant.check(expected, observed):
            assert f.aspect is None or f.aspect in invariant.aspects, (invariant.id, f.aspect)
            if f.aspect is None or f.aspect not in observed.not_judged:
                violations.append(
                    Violation(invariant.id, index, f.rid, f.expected, f.observed, f.message)
                )
    return violations


def shown(violations: list[Violation]) -> list[tuple[Any, ...]]:
    """Violations comparable whatever values they carry (a tensor compares element-wise)."""
    return [
        (v.invariant, v.event_index, v.rid, repr(v.expected), repr(v.observed), v.message)
        for v in violations
    ]


def _values(current: Any) -> list[Any]:
    """What a target may leave in a counter: off by one, negative, or not an int."""
    base = current if type(current) is int else 0
    return [base + 1, -1, float(base), True, None, torch.tensor(base), torch.tensor([base, 0])]


_HISTOGRAMS = [(), ((0, 1),), ((-1, 1),), ((0, 1), (2, 3)), ((1.0, 1),)]
_FAULT_KINDS = ["double-owner", "use-after-free", "double-free", "leak", "pool", "out-of-memory"]


def _request_variants(observed: Observation) -> Iterator[Observation]:
    for i, req in enumerate(observed.requests):
        changes: list[tuple[str, Any]] = [
            (name, value)
            for name in ("committed", "verify_ct", "drafts", "block_tokens", "cap_tokens")
            for value in _values(getattr(req, name))
        ]
        changes += [
            (name, value) for name in ("histogram", "cap_histogram") for value in _HISTOGRAMS
        ]
        changes += [
            (name, not getattr(req, name)) for name in ("finished", "retracted", "holds_row")
        ]
        changes += [("outputs", req.outputs + 1), ("pages", req.pages + 1), ("pages", 0)]
        changes += [("allocated", value) for value in _values(req.allocated)]
        for name, value in changes:
            requests = list(observed.requests)
            requests[i] = attrs.evolve(req, **{name: value})
            yield attrs.evolve(observed, requests=tuple(requests))


def _delivery_variants(observed: Observation) -> Iterator[Observation]:
    d = observed.delivery
    if d is None:
        return
    runs = d.runs or ()
    rows = len(d.rids)
    feed = ControllerFeed(tuple(range(rows)))
    changes: list[dict[str, Any]] = [
        {"rids": tuple(reversed(d.rids))},
        {"rids": (*d.rids, "extra")},
        {"stale": tuple(not s for s in d.stale)},
        {"runs": None, "runs_problem": "it is None", "runs_repr": "None"},
        {"runs": tuple(runs[:-1])},
        {"runs": tuple((*run, 7) if j == 0 else run for j, run in enumerate(runs))},
        *({"global_drafts": value} for value in _values(d.global_drafts)),
        *(
            {"per_row_drafts": value}
            for value in (None, [], [0] * rows, [1] * rows, torch.tensor([0] * rows), "x")
        ),
        *(
            {"controller_feeds": value}
            for value in (
                (),
                (feed,),
                (feed, feed),
                (ControllerFeed(feed.per_req, rows),),
                (ControllerFeed(feed.per_req, rows + 1),),
                (ControllerFeed("tensor([1])", 2.0),),
            )
        ),
        *({"block_cap_totals": (value, 0)} for value in _values(0)),
        *({"block_cap_totals": (0, value)} for value in _values(0)),
        *(
            {"grammar_offered": tuple(value for _ in d.rids)}
            for value in (None, (), (1,), (token(d.launch_number),))
        ),
        {"allocated_changed": (("r0", 0, 1),)},
    ]
    for change in changes:
        yield attrs.evolve(observed, delivery=attrs.evolve(d, **change))


def token(launch: int) -> int:
    return launch * 10_000


def _event_variants(observed: Observation) -> Iterator[Observation]:
    yield attrs.evolve(observed, target_error="RuntimeError: boom")
    yield attrs.evolve(observed, deadline_exceeded=0.25)
    yield attrs.evolve(observed, launch_pages=(1, 1))
    yield attrs.evolve(observed, launch_pages=(1, 2))
    if observed.pool is not None:
        for kind in _FAULT_KINDS:
            fault = PoolFault(kind, "r0", f"a {kind}")
            yield attrs.evolve(observed, pool=attrs.evolve(observed.pool, faults=(fault,)))


def variants(observed: Observation) -> Iterator[Observation]:
    """`observed`, and every corruption of one of its fields a target could cause."""
    yield observed
    yield attrs.evolve(observed, requests=tuple(reversed(observed.requests)))
    yield attrs.evolve(observed, requests=observed.requests[:-1])  # one the engine lacks
    yield from _request_variants(observed)
    yield from _delivery_variants(observed)
    yield from _event_variants(observed)


@pytest.mark.parametrize("name", [*_SPECS, *(e.name for e in ENTRIES[::12])])
@settings(
    max_examples=5,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)
@given(data=st.data())
def test_check_event_reports_what_every_checker_reports(name: str, data: st.DataObject) -> None:
    target = _target(name)
    shape = target.shape
    scenario = data.draw(
        scenarios(
            adaptive=data.draw(st.booleans()),
            global_counters=data.draw(st.sampled_from(["ideal", "sglang", "off"])),
            algorithms=shape.algorithms,
            block_cap=shape.block_cap,
            grammar=shape.grammar,
            allocation=True,
        )
    )
    not_judged = frozenset(data.draw(st.sets(st.sampled_from(sorted(ASPECTS)))))
    model = ReferenceModel(scenario.config)
    engine = Engine(
        scenario.config,
        target.resolver,
        target.self_methods,
        not_judged=not_judged,
        allocation=allocation_path(target, scenario.config),
    )
    for index, event in enumerate(scenario.events):
        expected = model.apply(event)
        try:
            observed = engine.apply(event)
        except UnsupportedTargetError:
            return
        for variant in variants(observed) if data.draw(st.booleans()) else [observed]:
            try:
                want = oracle(index, expected, variant)
            except Exception as exc:  # a checker raises on the value: so must check_event
                with pytest.raises(type(exc)):
                    check_event(index, expected, variant)
                continue
            assert shown(check_event(index, expected, variant)) == shown(want)
        if oracle(index, expected, observed):
            return  # a run stops at its first violation


def test_a_request_that_passed_is_tested_again_once_its_records_change() -> None:
    from kvcheck.families.sglang.scenario import Admit, Step
    from tests.helpers import scenario

    target = load_target("builtin:reference")
    run = scenario(Admit("r0", 4, 8), Step(), Step())
    model = ReferenceModel(run.config)
    engine = Engine(run.config, target.resolver, not_judged=target.shape.not_judged)
    for index, event in enumerate(run.events):
        expected, observed = model.apply(event), engine.apply(event)
        assert check_event(index, expected, observed) == []
    # The same expectation with a new, corrupted record of r0: reported.
    bad = attrs.evolve(observed.requests[0], verify_ct=observed.requests[0].verify_ct + 1)
    corrupted = attrs.evolve(observed, requests=(bad,))
    assert [v.invariant for v in check_event(2, expected, corrupted)] == ["stats-verify-count"]


def test_allocation_tests_hold_without_allocation() -> None:
    # `check_event` skips them there: each must hold on any such pair, whatever it holds.
    needing = [name for name, invariant in INVARIANTS.items() if invariant.needs_allocation]

    target = load_target("builtin:reference")
    run = scenario(Admit("r0", 4, 8), Admit("r1", 2, 1), Step(), Step(), Step(), Step())
    assert run.config.allocation == "off"
    model = ReferenceModel(run.config)
    engine = Engine(run.config, target.resolver, not_judged=target.shape.not_judged)
    assert needing
    for event in run.events:
        expected, observed = model.apply(event), engine.apply(event)
        assert observed.pool is None
        for variant in variants(observed):
            for name in needing:
                invariant = INVARIANTS[name]
                assert invariant.holds is not None
                if invariant.scope == "event":
                    assert invariant.holds(expected, variant, frozenset())
                for exp_req, obs_req in zip(expected.requests, variant.requests, strict=False):
                    request_test = (
                        invariant.holds if invariant.scope == "request" else invariant.each_request
                    )
                    assert request_test is None or request_test(exp_req, obs_req, frozenset())
