"""Ctrl-C always stops a run (`kvcheck.core.interrupts`): one that Python dropped (raised in a
garbage-collector callback, where exceptions are only reported) and one the target swallowed are
raised again at the next call of the target."""

from __future__ import annotations

import gc
import os
import signal
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from kvcheck.core import interrupts
from kvcheck.core.run import run_scenario
from kvcheck.families.sglang.builtins import reference
from kvcheck.families.sglang.scenario import Admit, Step
from tests.helpers import scenario, target

TWO_STEPS = scenario(Admit("r0", 10, 20), Step(), Step((2,)), Step((3,)))


@pytest.fixture
def installed() -> Iterator[None]:
    handler, hook = signal.getsignal(signal.SIGINT), sys.unraisablehook
    interrupts.install()
    try:
        yield
    finally:
        interrupts.install()  # counts nothing pending
        signal.signal(signal.SIGINT, handler)
        sys.unraisablehook = hook


def test_a_ctrl_c_dropped_in_a_gc_callback_stops_the_next_run(installed: None) -> None:
    checked = target(reference)
    pressed: list[bool] = []

    def presses_ctrl_c_once(phase: str, info: dict[str, Any]) -> None:
        if not pressed:
            pressed.append(True)
            raise KeyboardInterrupt  # where SIGINT's handler raises it, when it lands here

    gc.callbacks.append(presses_ctrl_c_once)
    try:
        gc.collect()  # Python reports the exception and goes on
    finally:
        gc.callbacks.remove(presses_ctrl_c_once)
    assert pressed
    with pytest.raises(KeyboardInterrupt):
        run_scenario(TWO_STEPS, checked)
    run_scenario(TWO_STEPS, checked)  # raised once: the next run goes on


def test_a_ctrl_c_the_target_swallows_stops_the_run(installed: None) -> None:
    armed: list[bool] = []
    calls: list[int] = []

    def swallows_ctrl_c(self: Any, result: Any, batch: Any) -> Any:
        calls.append(1)
        if armed and len(calls) == 1:
            try:
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(1000):  # the handler runs at one of these bytecodes
                    pass
            except BaseException:
                pass
        return reference(self, result, batch)

    checked = target(swallows_ctrl_c)  # the probe's calls: not armed yet
    armed.append(True)
    calls.clear()
    with pytest.raises(KeyboardInterrupt):
        run_scenario(TWO_STEPS, checked)
    assert len(calls) == 1  # stopped at the call that swallowed it


def test_without_a_ctrl_c_nothing_is_raised(installed: None) -> None:
    result = run_scenario(TWO_STEPS, target(reference))
    assert result.violation is None
    assert interrupts.received() == 0
