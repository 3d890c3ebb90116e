"""What a target does is judged as SGLang would meet it (issue 12, items 4, 5 and 7): a
`SystemExit` from the target is its violation; an unmodelled access the target catches itself
still means no verdict; runs must be lists of Python ints, and a report names the types when
only the type differs; a batch that diverged is said to have diverged. The adversarial resolvers
are files in tests/fixtures/verdicts/."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from kvcheck.core.jsonable import only_type_differs, show, type_name
from kvcheck.core.run import RunResult, run_scenario
from kvcheck.core.scenario import Scenario
from kvcheck.core.target import Target
from kvcheck.families.sglang.builtins import reference
from kvcheck.families.sglang.engine import UnsupportedTargetError
from kvcheck.families.sglang.fakes import FakeReq
from kvcheck.families.sglang.scenario import Admit, Retract, Step, SwitchStride
from kvcheck.targets.loading import load_target
from tests.helpers import STRIDE_SWITCH_BEFORE_DELIVERY, TESTS_DIR, scenario, target

RESOLVERS = TESTS_DIR / "fixtures" / "verdicts" / "resolvers.py"
EVENTS = (Admit("r0", 4, 8), Step(), Step((2,)), Step((2,)))


def adversary(name: str) -> Target:
    return load_target(f"{RESOLVERS}::{name}")


def run(name: str, *events: Any, **config: Any) -> RunResult:
    return run_scenario(scenario(*(events or EVENTS), **config), adversary(name))


# --- item 4: a target's SystemExit is its own violation -----------------------------------------


def test_a_target_raising_system_exit_breaks_target_raised() -> None:
    result = run("exits")
    assert result.violation is not None and result.violation.invariant == "target-raised"
    assert result.violation.observed == "SystemExit: 3"


def test_other_base_exceptions_too_but_never_keyboard_interrupt() -> None:
    class Custom(BaseException):
        pass

    def raises_custom(self: Any, result: Any, batch: Any) -> Any:
        raise Custom("mine")

    violation = run_scenario(scenario(*EVENTS), target(raises_custom)).violation
    assert violation is not None and violation.observed == "Custom: mine"

    def interrupted(self: Any, result: Any, batch: Any) -> Any:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        target(interrupted)  # the probe runs it


# --- item 5: unmodelled access the target caught ------------------------------------------------


def test_a_caught_unmodelled_read_followed_by_a_violation_is_no_verdict() -> None:
    adaptive = scenario(*STRIDE_SWITCH_BEFORE_DELIVERY, adaptive=True)
    with pytest.raises(UnsupportedTargetError) as info:
        run_scenario(adaptive, adversary("falls_back"))
    message = str(info.value)
    assert "reads `self.server_args`" in message and "caught the error itself" in message
    assert "runs-aligned" in message and "no verdict" in message


def test_a_caught_unmodelled_read_without_a_violation_passes() -> None:
    adaptive = scenario(*STRIDE_SWITCH_BEFORE_DELIVERY, adaptive=True)
    assert run_scenario(adaptive, adversary("falls_back_correctly")).violation is None


def test_a_caught_write_and_a_refused_call_are_recorded_too() -> None:
    def writes_and_calls(self: Any, result: Any, batch: Any) -> Any:
        with contextlib.suppress(AttributeError):
            batch.server_note = 1
        with contextlib.suppress(Exception):
            self.metrics_reporter.snapshot_spec_decode_metrics()
        return []  # a violation (runs-aligned) after both

    with pytest.raises(UnsupportedTargetError) as info:
        run_scenario(scenario(*EVENTS), target(writes_and_calls))
    message = str(info.value)
    assert "writes `batch.server_note`" in message
    assert "snapshot_spec_decode_metrics" in message


def test_unmodelled_reads_outside_the_targets_calls_do_not_count() -> None:
    # kvcheck's own code (or an earlier run) reading past the fakes is not the target's doing.
    assert getattr(FakeReq("r9", 1, 1), "server_args", None) is None
    stale_finished = scenario(Admit("r0", 10, 3), Step(), Step((2,)), Step((3,)), Step())
    violation = run_scenario(stale_finished, load_target("builtin:seed-prefix")).violation
    assert violation is not None and violation.invariant == "committed-finished-frozen"


# --- item 7: types as SGLang needs them ---------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("string_runs", "run 0 holds '20000' (str), not a Python int"),
        ("float_runs", "run 0 holds 20000.0 (float), not a Python int"),
        ("bool_runs", "run 0 holds True (bool), not a Python int"),
    ],
)
def test_runs_must_be_python_ints(name: str, needle: str) -> None:
    violation = run(name).violation
    assert violation is not None and violation.invariant == "runs-aligned"
    assert needle in violation.message


def test_a_run_as_a_tensor_is_not_a_list_of_ints() -> None:
    import torch

    def tensor_runs(self: Any, result: Any, batch: Any) -> Any:
        return [torch.tensor(run) for run in reference(self, result, batch)]

    violation = run_scenario(scenario(*EVENTS), target(tensor_runs)).violation
    assert violation is not None and violation.invariant == "runs-aligned"
    assert "run 0 is torch.Tensor, not a list of Python ints" in violation.message


def test_a_tensor_counter_is_named_by_type() -> None:
    violation = run("tensor_counter").violation
    assert violation is not None and violation.invariant == "stats-verify-count"
    assert "has 1 (int) applied verify rows" in violation.message
    assert "spec_verify_ct is tensor(1, dtype=torch.int32) (torch.Tensor)" in violation.message


def test_types_are_named_only_when_the_values_look_alike() -> None:
    import torch

    assert type_name(torch.tensor(0)) == "torch.Tensor" and type_name(3) == "int"
    assert show(torch.tensor(0), 0) == "tensor(0) (torch.Tensor)"
    assert show(0, torch.tensor(0)) == "0 (int)"
    assert show(2.0, 2) == "2.0 (float)" and show("20000", 20000) == "'20000' (str)"
    assert show(3, 4) == "3" and show(True, 1) == "True (bool)"
    assert not only_type_differs(5, 5) and not only_type_differs(None, 0)


def test_failure_text_names_the_types() -> None:
    from kvcheck.reporting.text import format_failure

    result = run("tensor_counter")
    assert result.violation is not None
    line = format_failure(result.violation, result.scenario)[0]
    assert "expected 1 (int), observed tensor(1, dtype=torch.int32) (torch.Tensor)" in line


def test_a_resolver_extending_output_ids_is_told_so_not_blamed_for_its_run_count() -> None:
    events = (
        Admit("r0", 4, 6),
        Admit("r1", 4, 20),
        Step(),
        Step((3, 3)),
        Step((3, 3)),
        Step((2, 2)),
        Step(),
    )
    result = run("extends_outputs", *events, convention="honest", overlap=False)
    violation = result.violation
    assert violation is not None and violation.invariant == "runs-aligned"
    assert violation.expected == ["r0", "r1"] and violation.observed == ["r1"]
    assert "should hold rows r0, r1" in violation.message
    assert "r0 is not in the scheduler's batch (it is finished there" in violation.message
    assert "returned 1 runs" not in violation.message


def test_correct_resolvers_never_see_diverged_rows() -> None:
    events = (
        Admit("r0", 4, 6),
        Admit("r1", 4, 20),
        Step(),
        Step((3, 3)),
        Retract("r1"),
        SwitchStride(2),
        Step((3, 3)),
        Step((2, 2)),
        Step(),
    )
    for overlap in (True, False):
        checked = Scenario(scenario(*events, adaptive=True, overlap=overlap).config, events)
        assert run_scenario(checked, load_target("builtin:reference")).violation is None
