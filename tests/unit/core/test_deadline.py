"""The deadline on a call of the target (`kvcheck.core.deadline`): it interrupts a pure-Python
loop and a sleep in the main thread, a loop in another thread (the watchdog), a target that
swallows the interruption, and leaves nothing armed behind; and a run's time limit."""

from __future__ import annotations

import signal
import sys
import threading
import time
from typing import Any

import attrs
import pytest

from kvcheck.core.deadline import (
    TargetDeadlineExceeded,
    TimeLimitReached,
    call_with_deadline,
    check_time_limit,
    time_left,
    time_limit,
)


def loop_forever() -> None:
    while True:
        pass


def sleep_long() -> None:
    time.sleep(30)


def swallow_then_return() -> str:
    end = time.monotonic() + 0.4
    while time.monotonic() < end:
        try:
            while time.monotonic() < end:
                pass
        except BaseException:
            pass
    return "late"


def _timed(function: Any, deadline: float | None = 0.1) -> tuple[BaseException | None, float]:
    started = time.monotonic()
    try:
        call_with_deadline(deadline, function)
    except BaseException as exc:
        return exc, time.monotonic() - started
    return None, time.monotonic() - started


@pytest.mark.parametrize("function", [loop_forever, sleep_long], ids=["loop", "sleep"])
def test_main_thread_call_is_interrupted_at_its_deadline(function: Any) -> None:
    error, took = _timed(function)
    assert isinstance(error, TargetDeadlineExceeded)
    assert error.seconds == 0.1
    assert took < 2
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # nothing left armed


def test_other_thread_call_is_interrupted_by_the_watchdog() -> None:
    found: list[Any] = []
    worker = threading.Thread(target=lambda: found.append(_timed(loop_forever)))
    worker.start()
    worker.join(10)
    assert not worker.is_alive()
    error, took = found[0]
    assert isinstance(error, TargetDeadlineExceeded)
    assert took < 2


def test_a_swallowed_interruption_still_counts() -> None:
    error, took = _timed(swallow_then_return)
    assert isinstance(error, TargetDeadlineExceeded)
    assert took >= 0.4


def test_a_call_within_its_deadline_returns_and_leaves_nothing_armed() -> None:
    assert call_with_deadline(0.5, lambda x: x + 1, 1) == 2
    assert call_with_deadline(None, lambda: "free") == "free"
    time.sleep(0.6)  # a stray alarm would raise here


def test_someone_elses_interval_timer_is_left_alone() -> None:
    fired: list[int] = []
    previous = signal.signal(signal.SIGALRM, lambda *_: fired.append(1))
    try:
        signal.setitimer(signal.ITIMER_REAL, 5.0)
        error, _ = _timed(loop_forever)  # falls back on the watchdog
        assert isinstance(error, TargetDeadlineExceeded)
        remaining, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 0 < remaining <= 5.0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert not fired


def test_a_timer_armed_under_our_handler_is_put_back() -> None:
    # Our handler stays installed between calls; a timer someone arms meanwhile without a
    # handler of their own is found when ours is armed, put back, and the call is watched.
    assert call_with_deadline(0.5, lambda: 1) == 1
    try:
        signal.setitimer(signal.ITIMER_REAL, 5.0)
        error, elapsed = _timed(loop_forever)
        assert isinstance(error, TargetDeadlineExceeded)
        remaining, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 5.0 - elapsed - 0.5 < remaining <= 5.0 - elapsed
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def test_the_time_limit_interrupts_a_call_without_deadline() -> None:
    with time_limit(0.2):
        left = time_left()
        assert left is not None and 0 < left <= 0.2
        error, took = _timed(loop_forever, deadline=None)
        assert isinstance(error, TimeLimitReached)
        assert took < 2
        with pytest.raises(TimeLimitReached):
            check_time_limit()
    assert time_left() is None
    check_time_limit()  # no limit outside


def test_after_the_watchdog_a_coverage_measured_call_still_runs() -> None:
    """A watchdog exception set but never delivered once left CPython 3.11's interpreter-wide
    "async exception pending" flag on, and a later coverage-measured call hung; a swallowing
    target makes the watchdog fire several times."""
    import coverage

    worker = threading.Thread(target=lambda: _timed(swallow_then_return))
    worker.start()
    worker.join(10)
    meter = coverage.Coverage(data_file=None, config_file=False)

    def measured() -> int:
        meter.start()
        try:
            return sum(range(1000))
        finally:
            meter.stop()

    started = time.monotonic()
    assert call_with_deadline(5.0, measured) == 499500
    assert time.monotonic() - started < 5


def test_through_the_engine_a_time_limit_stops_the_run_and_a_deadline_is_its_violation() -> None:
    """The engine calls the target through `_run_target`, which turns a target's exception,
    `BaseException`s included, into `target-raised`: kvcheck's own interruptions must pass
    through it, or a time limit would become a verdict on the target (and a run would go on)."""
    from kvcheck.core.run import run_scenario
    from kvcheck.families.sglang.scenario import Admit, Step
    from tests.helpers import scenario, target

    def never_returns(self: Any, result: Any, batch: Any) -> Any:
        while True:
            pass

    hanging = attrs.evolve(target(never_returns), deadline=None)
    events = scenario(Admit("r0", 3, 4), Step(), Step(), Step(), overlap=False)
    with time_limit(0.3), pytest.raises(TimeLimitReached):
        run_scenario(events, hanging)
    found = run_scenario(events, attrs.evolve(hanging, deadline=0.1)).violation
    assert found is not None and found.invariant == "target-deadline"


def test_an_interruption_python_cannot_raise_is_dropped_quietly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An interruption landing in a garbage-collector callback or a `__del__` cannot propagate;
    # Python would print "Exception ignored in ...". The call's scope has recorded it, so it is
    # dropped; anything else raised there still reaches the hook it replaced.
    reported: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: reported.append(u.exc_value))

    class RaisesWhenCollected:
        def __init__(self, exc: BaseException) -> None:
            self.exc = exc

        def __del__(self) -> None:
            raise self.exc

    def target() -> int:
        RaisesWhenCollected(TargetDeadlineExceeded(0.1))
        RaisesWhenCollected(ValueError("someone else's"))
        return 1

    assert call_with_deadline(5.0, target) == 1
    assert [type(exc) for exc in reported] == [ValueError]
