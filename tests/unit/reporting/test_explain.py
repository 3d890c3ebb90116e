"""The one-paragraph explanation of a violation (`explain`): a stale row of a finished or a
retracted request, the global counters, a misread row after a stride switch, a live row."""

from __future__ import annotations

from kvcheck.core.run import RunResult, run_scenario
from kvcheck.core.scenario import Scenario
from kvcheck.families.sglang.scenario import Admit, Retract, Step
from kvcheck.reporting.explain import explain
from kvcheck.targets.loading import load_target
from tests.helpers import STRIDE_SWITCH_BEFORE_DELIVERY, scenario

# docs/semantics.md §3.1 (finish, then the stale row of the launch in flight).
STALE_FINISHED = scenario(Admit("r0", 10, 3), Step(), Step((2,)), Step((3,)), Step(), stride=4)


# docs/semantics.md §3.2 (retraction while a launch is in flight).
STALE_RETRACTED = scenario(Admit("r0", 10, 20), Step(), Step((3,)), Retract("r0"), Step(), stride=4)


def failing_run(s: Scenario = STALE_FINISHED, spec: str = "builtin:seed-prefix") -> RunResult:
    result = run_scenario(s, load_target(spec), record=True)
    assert result.violation is not None
    return result


def test_explains_a_stale_row_of_a_finished_request() -> None:
    text = explain(failing_run())
    assert text.startswith("r0 finished at event 3 (length, max_new_tokens 3)")
    assert "the result of launch 3 (launched at event 3) arrived at event 4" in text
    assert "stale row" in text and "extended its committed length from 13 to 15" in text
    assert "pre-claimed slot (12)" in text


def test_explains_a_stale_row_of_a_retracted_request() -> None:
    text = explain(failing_run(STALE_RETRACTED))
    assert text.startswith("r0 was retracted at event 4")
    assert "extended its committed length from 0 to 2" in text
    assert "should stay 0 until re-admission" in text


def test_explains_global_counters_and_a_misread_row() -> None:
    counters = explain(failing_run(STALE_FINISHED, "builtin:seed-fixed"))
    assert "batch-global accepted-draft total on the result as 2" in counters
    assert "ideal rule (stale rows excluded) gives 0" in counters

    switched = scenario(*STRIDE_SWITCH_BEFORE_DELIVERY, stride=4, adaptive=True)
    text = explain(failing_run(switched, "builtin:seed-fixed"))
    assert "launched at event 3 with stride 4" in text
    assert "switched to 2 at event 4" in text and "row 1 (r1)" in text


def test_explains_a_live_committed_length() -> None:
    honest = scenario(Admit("r0", 10, 20), Step(), Step((3,)), Step(), convention="honest")
    text = explain(failing_run(honest, "builtin:reference"))
    assert "live row" in text
    assert "it should be 13 (prompt 10 + outputs 4 - 1)" in text
