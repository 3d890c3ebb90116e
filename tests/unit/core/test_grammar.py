"""Grammar requests (docs/semantics.md §1.4): the JSON form, the model's truncation and abort, and
the engine and model agreeing on grammar-aware resolvers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kvcheck.core.run import run_scenario
from kvcheck.core.scenario import (
    Scenario,
    from_json,
    legacy_scenario_dict,
    scenario_to_dict,
    to_json,
)
from kvcheck.families.sglang.builtins import reference_v2
from kvcheck.families.sglang.model import ReferenceModel
from kvcheck.families.sglang.probe import probe_target
from kvcheck.families.sglang.scenario import Admit, Config, Grammar, Step, token_id
from tests.helpers import scenario, target


def test_grammar_is_schema_version_2_and_only_written_when_set() -> None:
    plain = Scenario(Config(), (Admit("r0", 4, 8), Step()))
    assert legacy_scenario_dict(plain)["schema_version"] == 1
    assert "grammar" not in scenario_to_dict(plain)["events"][0]
    constrained = Scenario(Config(), (Admit("r0", 4, 8, grammar=Grammar("terminate", 3)),))
    data = scenario_to_dict(constrained)
    assert legacy_scenario_dict(constrained)["schema_version"] == 2
    assert data["events"][0]["grammar"] == {"kind": "terminate", "at": 3}
    assert from_json(to_json(constrained)) == constrained
    accept = Scenario(Config(), (Admit("r0", 4, 8, grammar=Grammar("accept")),))
    assert scenario_to_dict(accept)["events"][0]["grammar"] == {"kind": "accept"}
    assert from_json(to_json(accept)) == accept


@pytest.mark.parametrize(
    ("kind", "at"), [("accept", 2), ("terminate", None), ("terminate", 1), ("reject", 0)]
)
def test_grammar_positions_validate(kind: str, at: int | None) -> None:
    with pytest.raises(ValueError):
        Grammar(kind, at)  # type: ignore[arg-type]


def _model(*events: object, **config: object) -> ReferenceModel:
    model = ReferenceModel(Config(**config))  # type: ignore[arg-type]
    for event in events:
        model.apply(event)  # type: ignore[arg-type]
    return model


def test_a_terminating_grammar_truncates_the_run_and_finishes_the_request() -> None:
    # Prefill (position 1), then a decode row of 4 whose second token (position 3) terminates.
    events = (Admit("r0", 10, 20, grammar=Grammar("terminate", 3)), Step(), Step((4,)), Step())
    model = ReferenceModel(Config(convention="honest"))
    expectations = [model.apply(e) for e in events]
    delivery = expectations[-1].delivery
    assert delivery is not None and delivery.runs == ((token_id(2, 0, 0), token_id(2, 0, 1)),)
    ledger = model.requests["r0"]
    assert (ledger.phase, ledger.finish_reason, ledger.outputs) == ("finished", "grammar", 3)
    assert ledger.committed == 10 + 3 - 1  # P + L - 1: honest commits the retained two
    assert (ledger.verify_ct, ledger.drafts) == (1, 3)  # statistics keep the raw a - 1


def test_a_refused_token_aborts_at_its_row_under_preclaim() -> None:
    # The last step delivers the stale row of the launch already in flight: its -1.
    events = (Admit("r0", 10, 20, grammar=Grammar("reject", 2)), Step(), Step((3,)), Step(), Step())
    model = _model(*events, convention="preclaim")
    ledger = model.requests["r0"]
    assert (ledger.phase, ledger.finish_reason, ledger.outputs) == ("finished", "abort", 1)
    assert ledger.committed == 10  # an empty retained run commits -1 after the +1: P + L - 1


def test_a_refused_prefill_token_aborts_at_the_next_applied_row() -> None:
    events = (Admit("r0", 10, 20, grammar=Grammar("reject", 1)), Step(), Step((3,)), Step())
    ledger = _model(*events, convention="honest").requests["r0"]
    assert (ledger.phase, ledger.finish_reason, ledger.outputs) == ("finished", "abort", 4)


@pytest.mark.parametrize(
    "grammar",
    [Grammar("accept"), Grammar("terminate", 3), Grammar("reject", 1), Grammar("reject", 3)],
)
@pytest.mark.parametrize("overlap", [True, False])
def test_the_grammar_aware_reference_passes(grammar: Grammar, overlap: bool) -> None:
    events = (
        Admit("r0", 10, 20, grammar=grammar),
        Admit("r1", 5, 3),
        Step(),
        Step((4, 2)),
        Step((3, 3)),
        Step((2,)),
        Step(),
    )
    result = run_scenario(
        scenario(*events, convention="honest", overlap=overlap), target(reference_v2)
    )
    assert result.violation is None


def test_the_shrinker_drops_or_simplifies_a_grammar() -> None:
    from kvcheck.families.sglang.search import event_variants

    admit = Admit("r0", 4, 8, grammar=Grammar("terminate", 6))
    variants = [v.grammar for v in event_variants(admit) if isinstance(v, Admit)]
    assert variants[:3] == [None, Grammar("accept"), Grammar("terminate", 2)]


def test_exhaustive_bounds_take_grammars() -> None:
    from kvcheck.errors import KvcheckUsageError
    from kvcheck.families.sglang.search import Bounds

    assert Bounds(grammars=(None, Grammar("reject", 2))).grammars[1] == Grammar("reject", 2)
    with pytest.raises(KvcheckUsageError, match="grammars"):
        Bounds(grammars=())


def _prefill_grammar_step(times: int) -> Callable[[Any, Any, Any], None]:
    """A target's own `advance_grammar_fsm` (0.5.17+) that offers each live grammar row's
    prefilled token `times` times (0: it forgets the prefill step); decode results go to the
    fake scheduler's faithful step."""

    def advance_grammar_fsm(self: Any, result: Any, batch: Any) -> None:
        if result.accept_lens is not None:
            type(self).advance_grammar_fsm(self, result, batch)
            return
        tokens = result.next_token_ids.tolist()
        for row, req in enumerate(batch.reqs):
            if req.grammar is not None and not (req.is_retracted or req.finished()):
                for _ in range(times):
                    req.grammar.accept_token(tokens[row])

    return advance_grammar_fsm


@pytest.mark.parametrize(("times", "what"), [(0, "never taken"), (2, "taken more than once")])
def test_a_wrong_prefill_grammar_step_is_blamed_on_the_prefill(times: int, what: str) -> None:
    # The grammar terminates at output position 3; off by one, the decode row meets it late
    # (or early), which is where the violation shows.
    events = (Admit("r0", 10, 20, grammar=Grammar("terminate", 3)), Step(), Step((4,)))
    step = _prefill_grammar_step(times)
    resolver = probe_target(
        "test:prefill-grammar", reference_v2, "test resolver", {"advance_grammar_fsm": step}
    )
    result = run_scenario(scenario(*events, convention="honest", overlap=False), resolver)
    violation = result.violation
    assert violation is not None and violation.invariant == "grammar-advanced-once"
    assert f"the grammar step on r0's prefill result was {what}" in violation.message
    assert (violation.expected, violation.observed) == (1, times)
    assert "should be offered" not in violation.message  # not the decode row's fault
    faithful = probe_target(
        "test:prefill-grammar",
        reference_v2,
        "test resolver",
        {"advance_grammar_fsm": _prefill_grammar_step(1)},
    )
    assert (
        run_scenario(scenario(*events, convention="honest", overlap=False), faithful).violation
        is None
    )
