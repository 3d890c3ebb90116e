"""The HTML report: self-contained, with an SVG swimlane, written where it is asked to be. (That a
real browser renders it is tests/quality/test_html_browser.py.)"""

from __future__ import annotations

import re
from pathlib import Path

from kvcheck.core.run import run_scenario
from kvcheck.families.sglang.scenario import Admit, Step
from kvcheck.reporting.html import render_html, write_html
from kvcheck.reporting.timeline import Timeline, build_timeline
from kvcheck.targets.loading import load_target
from tests.helpers import scenario

TWO_REQUESTS = scenario(
    Admit("r0", 10, 20),
    Admit("r1", 10, 3),
    Step(),
    Step((2, 2)),
    Step((1, 3)),
    Step((1, 1)),
    stride=4,
)


def timeline(spec: str = "builtin:seed-prefix") -> Timeline:
    return build_timeline(run_scenario(TWO_REQUESTS, load_target(spec), record=True), target=spec)


def test_page_is_self_contained() -> None:
    page = render_html(timeline(), heading="kvcheck <check>")
    assert page.startswith("<!DOCTYPE html>")
    assert "<title>kvcheck &lt;check&gt;</title>" in page
    for external in ("src=", "href=", "url(", "@import", "<link", "http://", "https://"):
        # The SVG namespace is an identifier, not something fetched.
        assert external not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert page.count('<g class="lane"') == 2
    assert len(re.findall(r'<g class="cell [a-z]+ violation', page)) == 1
    assert 'class="stale-marker"' in page
    assert "committed-finished-frozen" in page and "r1 finished at event 4" in page


def test_passing_run_and_event_level_violation() -> None:
    assert "no violation" in render_html(timeline("builtin:reference"))
    page = render_html(timeline("builtin:seed-fixed"))
    assert '<g class="event violation" data-index="5">' in page


def test_write_html_creates_parents(tmp_path: Path) -> None:
    out = write_html(timeline(), tmp_path / "a" / "b.html")
    assert out.read_text().startswith("<!DOCTYPE html>")
