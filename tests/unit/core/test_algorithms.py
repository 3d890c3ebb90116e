"""The model's rules for the algorithms and block/cap lengths, against hand-computed values
(docs/semantics.md §1.2, §1.4), and the engine's results carrying them."""

from __future__ import annotations

from typing import Any

from kvcheck.core.run import run_scenario
from kvcheck.core.scenario import Scenario
from kvcheck.families.sglang.builtins import reference_v2
from kvcheck.families.sglang.model import ReferenceModel
from kvcheck.families.sglang.scenario import Admit, Config, Event, Retract, Step
from tests.helpers import target


def _apply(config: Config, events: tuple[Event, ...]) -> Any:
    model = ReferenceModel(config)
    expectation = None
    for event in events:
        expectation = model.apply(event)
    return expectation


def test_uno_rows_are_one_wider_and_count_two_non_draft_tokens() -> None:
    config = Config(convention="honest", stride=3, algorithm="uno")
    # prefill (C = 10, L = 1), a decode launch with accept 4 (of F + 1 = 4), its delivery.
    expectation = _apply(config, (Admit("r0", 10, 50), Step(), Step((4,)), Step((1,))))
    delivery = expectation.delivery
    assert delivery.launch.stride == 3 and delivery.launch.accepts == (4,)
    assert delivery.runs == ((20000, 20001, 20002, 20003),)  # row width F + 1
    assert delivery.per_row_drafts == (2,)  # a - k, k = 2
    (req,) = expectation.requests
    assert (req.committed, req.drafts, req.histogram) == (14, 2, ((2, 1),))
    # An accept length below k clamps to k: the launch in flight (accept 1) reports 2.
    assert expectation.in_flight[0].accepts == (2,)


def test_dflash_never_preclaims_even_under_the_preclaim_convention() -> None:
    events = (Admit("r0", 10, 1), Step(), Step((3,)), Step())  # finishes on its prefill result
    eagle = _apply(Config(convention="preclaim"), events)
    dflash = _apply(Config(convention="preclaim", algorithm="dflash"), events)
    # EAGLE: the launch pre-claimed one slot, the stale row gives it back; DFLASH claims nothing.
    assert eagle.requests[0].committed == dflash.requests[0].committed == 10
    launched = _apply(Config(convention="preclaim", algorithm="dflash"), events[:3])
    pre = _apply(Config(convention="preclaim"), events[:3])
    assert (launched.requests[0].committed, pre.requests[0].committed) == (10, 11)


def test_block_cap_totals_follow_the_counter_mode() -> None:
    # r0 and r1 decode together; r1 is retracted while that launch is in flight, so its row
    # arrives stale: lengths (block 2, cap 1) for r0 and (3, 2) for r1.
    events = (
        Admit("r0", 5, 50),
        Admit("r1", 5, 50),
        Step(),
        Step((2, 2), (2, 3), (1, 2)),
        Retract("r1"),
        Step(),
    )
    for mode, totals in (("ideal", (2, 1)), ("sglang", (5, 3))):
        config = Config(convention="honest", block_cap=True, global_counters=mode)
        expectation = _apply(config, events)
        assert expectation.delivery.block_cap_totals == totals, mode
        r0, r1 = expectation.requests
        assert (r0.block_tokens, r0.cap_tokens, r0.cap_histogram) == (2, 1, ((1, 1),))
        assert (r1.block_tokens, r1.cap_tokens, r1.cap_histogram) == (0, 0, ())


def test_without_lengths_the_totals_are_zero() -> None:
    expectation = _apply(Config(), (Admit("r0", 5, 50), Step(), Step((2,), (9,), (9,)), Step()))
    assert expectation.delivery.block_cap_totals == (0, 0)  # block_cap off: lengths ignored


def test_the_engine_hands_uno_and_block_cap_results_to_the_target() -> None:
    seen: list[dict[str, Any]] = []

    def recording(self: Any, result: Any, batch: Any) -> Any:
        seen.append(
            {
                "width": result.next_token_ids.numel() // len(batch.reqs),
                "draft_tokens": result.speculative_num_draft_tokens,
                "output_stride": result.speculative_output_stride,
                "k": result.num_non_draft_tokens_per_req,
                "blocks": result.block_accept_lens.tolist(),
                "uno": batch.spec_algorithm.is_uno(),
            }
        )
        return reference_v2(self, result, batch)

    checked = target(recording)
    seen.clear()
    config = Config(convention="honest", stride=3, algorithm="uno", block_cap=True)
    events = (Admit("r0", 4, 50), Step(), Step((4,), (2,), (1,)), Step())
    assert run_scenario(Scenario(config, events), checked).violation is None
    assert seen == [
        {"width": 4, "draft_tokens": 3, "output_stride": 4, "k": 2, "blocks": [2], "uno": True}
    ]
