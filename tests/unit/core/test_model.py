"""The reference model against hand-computed values (docs/semantics.md §3) and §2.9's closed
forms."""

from __future__ import annotations

import pytest
from hypothesis import given

from kvcheck.core.scenario import Scenario
from kvcheck.families.sglang.model import Expectation, ReferenceModel, RequestExpectation
from kvcheck.families.sglang.scenario import Abort, Admit, Config, Retract, Step, SwitchStride
from kvcheck.strategies import scenarios


def replay(scenario: Scenario) -> list[Expectation]:
    model = ReferenceModel(scenario.config)
    return [model.apply(event) for event in scenario.events]


def request(expectation: Expectation, rid: str = "r0") -> RequestExpectation:
    return next(r for r in expectation.requests if r.rid == rid)


# docs/semantics.md §3.1: admit(r, P=10, max_new=3); launch#1; launch#2; deliver#1 a=2 (finishes by
# length at L=3); deliver#2 a=3 (stale). With kvcheck events a Step launches and then delivers
# the previous launch, so "launch#2 + deliver#1" is one step.
FINISH_CASE = (
    Admit("r0", prompt_len=10, max_new_tokens=3),
    Step(),  # prefill launch: C = P
    Step((2,)),  # decode launch #1 (a=2), prefill result: L = 1
    Step((3,)),  # decode launch #2 (a=3), deliver #1: L = 3, finished by length
    Step(),  # nothing to launch, deliver #2: stale row
)


@pytest.mark.parametrize(
    ("convention", "committed_after_each"),
    [
        # §3.1 table, pre-claim column: 10 at prefill, 11 after launch#1, 12 after launch#2,
        # 13 after deliver#1, 12 after the stale row gives the pre-claim back.
        ("preclaim", [0, 10, 11, 13, 12]),
        # honest column: 10, 10, then 12 after deliver#1, frozen at 12.
        ("honest", [0, 10, 10, 12, 12]),
    ],
)
def test_finish_case_committed_length(convention: str, committed_after_each: list[int]) -> None:
    expectations = replay(Scenario(Config(convention=convention), FINISH_CASE))  # type: ignore[arg-type]
    assert [request(e).committed for e in expectations] == committed_after_each
    final = request(expectations[-1])
    assert final.phase == "finished"
    assert (final.outputs, final.verify_ct, final.drafts) == (3, 1, 1)
    assert final.histogram == ((1, 1),)


def test_finish_case_stale_delivery_and_global_counters() -> None:
    ideal = replay(Scenario(Config(global_counters="ideal"), FINISH_CASE))
    sglang = replay(Scenario(Config(global_counters="sglang"), FINISH_CASE))
    off = replay(Scenario(Config(global_counters="off"), FINISH_CASE))
    stale_delivery = ideal[-1].delivery
    assert stale_delivery is not None
    assert stale_delivery.stale == (True,)
    # Launch 3 is decode #2 (launch 1 was the prefill): its row 0 run is 3 tokens.
    assert stale_delivery.runs == ((30000, 30001, 30002),)
    assert stale_delivery.global_drafts == 0  # ideal: the stale row is excluded
    assert sglang[-1].delivery is not None and sglang[-1].delivery.global_drafts == 2  # a - 1
    assert off[-1].delivery is not None and off[-1].delivery.global_drafts is None
    live_delivery = ideal[3].delivery
    assert live_delivery is not None and live_delivery.global_drafts == 1


def test_retraction_case() -> None:
    # §3.2: admit; launch#1 (a=3); retract during the next build; deliver#1 is stale.
    events = (
        Admit("r0", prompt_len=10, max_new_tokens=50),
        Step(),
        Step((3,)),
        Retract("r0"),
        Step(),  # retracts r0 (C=0), nothing left to launch, delivers launch #2 stale
        Step(),  # re-admission prefill: C = P + L = 11
        Step((2,)),  # decode launch, prefill result: L = 2
    )
    expectations = replay(Scenario(Config(convention="preclaim"), events))
    after_stale = request(expectations[4])
    assert (after_stale.phase, after_stale.committed, after_stale.outputs) == ("retracted", 0, 1)
    assert (after_stale.verify_ct, after_stale.drafts) == (0, 0)
    assert request(expectations[5]).committed == 11
    readmitted = request(expectations[6])
    assert (readmitted.phase, readmitted.outputs, readmitted.committed) == ("running", 2, 12)


def test_overshoot_past_max_new_tokens_and_eos() -> None:
    events = (
        Admit("r0", prompt_len=5, max_new_tokens=4, eos_at=None),
        Admit("r1", prompt_len=5, max_new_tokens=20, eos_at=3),
        Step(),
        Step((4, 4)),
        Step(),
    )
    expectations = replay(Scenario(Config(convention="honest", stride=4), events))
    r0, r1 = request(expectations[4], "r0"), request(expectations[4], "r1")
    # Both runs over-shoot: L = 1 + 4 = 5 (> max_new 4, > eos position 3); C counts all of it.
    assert (r0.phase, r0.outputs, r0.committed) == ("finished", 5, 9)
    assert (r1.phase, r1.outputs, r1.committed) == ("finished", 5, 9)


def test_abort_takes_effect_at_next_applied_row() -> None:
    events = (
        Admit("r0", prompt_len=3, max_new_tokens=50),
        Step(),
        Step((2,)),
        Abort("r0"),
        Step((2,)),  # delivers launch #2 (a=2) as a live row, then finishes by abort
        Step(),  # the next launch's row is stale
    )
    expectations = replay(Scenario(Config(convention="preclaim"), events))
    assert request(expectations[3]).phase == "running"
    aborted = request(expectations[4])
    assert (aborted.phase, aborted.outputs, aborted.verify_ct) == ("finished", 3, 1)
    assert expectations[5].delivery is not None and expectations[5].delivery.stale == (True,)
    assert request(expectations[5]).committed == 3 + 3 - 1


def test_stride_switch_applies_to_later_launches_only() -> None:
    events = (
        Admit("r0", prompt_len=3, max_new_tokens=50),
        Admit("r1", prompt_len=3, max_new_tokens=50),
        Step(),
        Step((2, 3)),
        SwitchStride(2),
        Step((2, 2)),
    )
    expectations = replay(Scenario(Config(stride=4, adaptive=True), events))
    delivery = expectations[5].delivery
    assert delivery is not None
    assert delivery.launch.stride == 4  # recorded at launch, before the switch
    # docs/semantics.md §3.4: row 1 is read at offset 1 * 4, not 1 * 2.
    assert delivery.runs == ((20000, 20001), (20100, 20101, 20102))
    assert expectations[5].in_flight[0].stride == 2


def test_switch_is_a_no_op_without_adaptive() -> None:
    events = (Admit("r0", 3, 50), Step(), SwitchStride(2), Step((4,)), Step())
    expectations = replay(Scenario(Config(stride=4, adaptive=False), events))
    delivery = expectations[4].delivery
    assert delivery is not None and delivery.launch.stride == 4


def test_nonsense_events_are_no_ops() -> None:
    events = (Retract("ghost"), Abort("ghost"), Step((3,)), Admit("r0", 3, 5), Admit("r0", 9, 9))
    expectations = replay(Scenario(Config(), events))
    assert [r.rid for r in expectations[-1].requests] == ["r0"]
    assert request(expectations[-1]).committed == 0  # waiting, no KV yet


@given(scenarios(convention="preclaim", adaptive=True) | scenarios(convention="honest"))
def test_ledger_matches_closed_forms(scenario: Scenario) -> None:
    """§2.9 invariants 1, 4, 6 and 7, computed differently from the ledger's running sums."""
    model = ReferenceModel(scenario.config)
    preclaim = 1 if scenario.config.convention == "preclaim" else 0
    for event in scenario.events:
        expectation = model.apply(event)
        for req in expectation.requests:
            ledger = model.requests[req.rid]
            prefill_in_flight = any(
                launch.kind == "prefill" and req.rid in launch.rids
                for launch in expectation.in_flight
            )
            if req.phase == "retracted" or (req.phase == "waiting" and not ledger.admissions):
                assert req.committed == 0
            elif req.phase == "running":
                assert req.committed == (
                    ledger.prompt_len
                    + req.outputs
                    - 1
                    + int(prefill_in_flight)
                    + preclaim * req.decode_in_flight
                )
            elif req.phase == "finished":
                settled = ledger.prompt_len + req.outputs - 1 + preclaim * req.decode_in_flight
                # An abort while waiting (never admitted, or retracted) leaves no KV at all.
                assert req.committed == settled or (
                    ledger.finish_reason == "abort" and req.committed == 0
                )
            assert sum(count for _, count in req.histogram) == req.verify_ct
            assert sum(d * count for d, count in req.histogram) == req.drafts
            assert req.committed >= 0
