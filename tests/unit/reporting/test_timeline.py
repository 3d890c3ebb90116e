"""Timelines: plain text for pipes, rich for terminals, the same facts in both."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from kvcheck.core.run import run_scenario
from kvcheck.families.sglang.scenario import Admit, Retract, Step
from kvcheck.reporting.render import print_timeline, render_plain, render_rich, use_rich
from kvcheck.reporting.timeline import Timeline, build_timeline
from kvcheck.targets.loading import load_target
from tests.helpers import STRIDE_SWITCH_BEFORE_DELIVERY, scenario

# r1 finishes by length on launch 2's result while r0 keeps running; launch 3 then carries a
# stale row for r1 (docs/semantics.md §3.1 with a bystander).
TWO_REQUESTS = scenario(
    Admit("r0", 10, 20),
    Admit("r1", 10, 3),
    Step(),
    Step((2, 2)),
    Step((1, 3)),
    Step((1, 1)),
    Step(),
    stride=4,
)


def timeline(spec: str = "builtin:seed-prefix", s: object = TWO_REQUESTS) -> Timeline:
    return build_timeline(run_scenario(s, load_target(spec), record=True), target=spec)  # type: ignore[arg-type]


def test_cells_follow_each_request() -> None:
    t = timeline()
    assert t.lanes == ("r0", "r1")
    assert [row.index for row in t.rows] == [0, 1, 2, 3, 4, 5]
    r1 = [row.cells[1] for row in t.rows]
    assert r1[0].phase is None  # not admitted yet: blank
    assert r1[2].launched == 1 and r1[2].launched_kind == "prefill"
    assert r1[3].launched == 2 and r1[3].delivered == 1 and not r1[3].stale
    assert r1[4].phase == "finished" and r1[4].in_flight == (3,)
    assert r1[5].delivered == 3 and r1[5].stale and r1[5].violation and r1[5].mismatch
    assert r1[5].detail == {"expected": 12, "observed": 15}
    assert r1[5].summary == "C exp 12 / obs 15"
    r0 = [row.cells[0] for row in t.rows]
    assert not any(cell.violation for cell in r0)
    assert t.violation is not None and t.violation.invariant == "committed-finished-frozen"
    assert t.not_run == ("6  step",)


def test_plain_text_marks_stale_rows_in_flight_launches_and_the_violation() -> None:
    text = render_plain(timeline())
    assert "\x1b[" not in text
    lines = text.splitlines()
    assert lines[0].startswith("timeline  builtin:seed-prefix: preclaim convention, overlap on")
    header = next(line for line in lines if line.startswith("#"))
    assert header.split() == ["#", "event", "r0", "r1"]
    assert ">> finished  C exp 12 / obs 15" in text
    assert ">> launch 3 result: STALE row, a=3" in text
    assert ">> VIOLATION committed-finished-frozen: expected 12, observed 15" in text
    assert "decode launch 3 (stride 4) in flight" in text
    assert "finished (length, max_new_tokens 3)" in text
    assert "not run (the replay stops at the first violation):" in text
    assert text.splitlines()[-1].startswith(
        "why: r1 finished at event 4 (length, max_new_tokens 3); the result of launch 3"
    )


def test_event_level_violation_marks_the_event() -> None:
    t = timeline("builtin:seed-fixed")
    assert t.violation is not None and t.violation.invariant == "global-counters"
    assert t.rows[-1].violation
    assert "step accepts=[1, 1]  <== VIOLATION" in render_plain(t)


def test_retraction_and_stride_switch_notes() -> None:
    retracted = scenario(Admit("r0", 10, 20), Step(), Step((3,)), Retract("r0"), Step(), stride=4)
    text = render_plain(timeline(s=retracted))
    assert "retracted: KV released, C reset to 0" in text
    assert ">> retracted  C exp 0 / obs 2" in text

    switched = scenario(*STRIDE_SWITCH_BEFORE_DELIVERY, stride=4, adaptive=True)
    text = render_plain(timeline("builtin:seed-fixed", switched))
    assert "worker stride is now 2" in text and "launch 3: decode of r0, r1, stride 2" in text


def test_passing_run_says_so() -> None:
    text = render_plain(timeline("builtin:reference"))
    assert text.endswith("no violation") and ">>" not in text


def test_rich_table_has_boxes_and_colour() -> None:
    out = io.StringIO()
    Console(file=out, force_terminal=True, width=220, color_system="truecolor").print(
        render_rich(timeline())
    )
    text = out.getvalue()
    assert "\x1b[" in text and "╭" in text and "│" in text
    assert "STALE row" in text and "committed-finished-frozen" in text
    assert "why: r1 finished at event 4" in text


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_print_timeline_uses_rich_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    pipe = io.StringIO()
    print_timeline(timeline(), pipe)
    assert pipe.getvalue() == render_plain(timeline()) + "\n"

    tty = FakeTty()
    assert use_rich(tty)
    print_timeline(timeline(), tty)
    assert "╭" in tty.getvalue()

    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_rich(tty)


def test_without_overlap_launch_and_delivery_share_an_event() -> None:
    sync = scenario(Admit("r0", 10, 20), Step(), Step((3,)), stride=4, overlap=False)
    t = timeline("builtin:reference", sync)
    cell = t.rows[2].cells[0]
    assert (cell.launched, cell.delivered, cell.in_flight) == (2, 2, ())
    text = render_plain(t)
    assert "decode launch 2 (stride 4)" in text and "in flight" not in text
