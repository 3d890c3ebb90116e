"""A self-contained HTML page for one run: an SVG swimlane of its timeline.

One lane per timeline lane (SGLang: per request), one column per event. A cell is tinted by its
phase (the colours are the family's) and shows the phase and the cell's summary (SGLang: the
committed KV length, expected, and observed when they differ); a bar along the bottom of a lane
spans each launch from the event that launched it to the event its result arrived at, ending in
a dot (applied row) or a yellow diamond (stale row). The violating cell is red.

The page is self-contained: its stylesheet and the few lines of script that tag the page once the
swimlane has a layout box (which the headless-browser test reads) are kept as package data in
`assets/` and inlined, so the file can be attached to a CI run or an issue and opened anywhere.
"""

from __future__ import annotations

import html
import os
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Final

from kvcheck.core.family import family
from kvcheck.files import write_text
from kvcheck.reporting.render import render_plain
from kvcheck.reporting.timeline import Cell, Timeline

COLUMN: Final = 160
LANE: Final = 78
LEFT: Final = 70
TOP: Final = 74
PAD: Final = 4

VIOLATION_FILL: Final = "#ffcdd2"
VIOLATION_STROKE: Final = "#d50000"
STALE_FILL: Final = "#ffd600"
# A cell whose phase, and a launch whose kind, the family gives no colour.
PLAIN_FILL: Final = "#ffffff"
LAUNCH_PLAIN: Final = "#607d8b"


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _cell_label(cell: Cell) -> tuple[str, str]:
    """Two short lines for a cell: its summary, then what happened."""
    first = cell.summary
    second = ""
    if cell.delivered is not None:
        second = f"L{cell.delivered} {'STALE row' if cell.stale else 'result applied'}"
    elif cell.launched is not None:
        second = f"launch {cell.launched}"
    elif cell.in_flight:
        second = "in flight: " + ", ".join(f"L{n}" for n in cell.in_flight)
    return first, second


def _swimlane(timeline: Timeline) -> str:
    rows, rids = timeline.rows, timeline.lanes
    report = family(timeline.family).report
    fills, strokes = report.phase_fills, report.launch_strokes
    default_kind = next(iter(strokes), "")
    width = LEFT + COLUMN * max(len(rows), 1) + PAD
    height = TOP + LANE * max(len(rids), 1) + PAD
    out: list[str] = [
        f'<svg id="swimlane" xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" data-lanes="{len(rids)}" '
        f'data-events="{len(rows)}" role="img" aria-label="per-request swimlane">',
        "<title>per-request timeline</title>",
    ]
    # Column headers: event index and a shortened description.
    for col, row in enumerate(rows):
        x = LEFT + col * COLUMN
        cls = "event violation" if row.violation else "event"
        fill = VIOLATION_FILL if row.violation else "#fafafa"
        stroke = VIOLATION_STROKE if row.violation else "#cfd8dc"
        out.append(
            f'<g class="{cls}" data-index="{row.index}">'
            f'<rect x="{x + PAD}" y="{PAD}" width="{COLUMN - 2 * PAD}" height="{TOP - 2 * PAD}" '
            f'rx="4" fill="{fill}" stroke="{stroke}"/>'
            f'<text x="{x + 2 * PAD}" y="{PAD + 16}" class="idx">event {row.index}</text>'
            f'<text x="{x + 2 * PAD}" y="{PAD + 32}">{_e(_clip(row.event, 24))}</text>'
            f'<text x="{x + 2 * PAD}" y="{PAD + 48}" class="note">'
            f"{_e(_clip(row.notes[0] if row.notes else '', 26))}</text>"
            f"<title>{_e(chr(10).join([row.event, *row.notes]))}</title></g>"
        )
    for lane, rid in enumerate(rids):
        y = TOP + lane * LANE
        out.append(f'<g class="lane" data-rid="{_e(rid)}">')
        out.append(
            f'<text x="{PAD * 2}" y="{y + LANE // 2}" class="rid">{_e(rid)}</text>'
            f'<line x1="{LEFT}" y1="{y + LANE - 1}" x2="{width - PAD}" y2="{y + LANE - 1}" '
            'stroke="#eceff1"/>'
        )
        launches: dict[int, list[int]] = {}
        kinds: dict[int, str] = {}
        for col, row in enumerate(rows):
            cell = row.cells[lane]
            x = LEFT + col * COLUMN
            if cell.launched is not None:
                launches.setdefault(cell.launched, []).append(col)
                kinds[cell.launched] = cell.launched_kind or default_kind
            for number in cell.in_flight:
                launches.setdefault(number, []).append(col)
            if cell.delivered is not None:
                launches.setdefault(cell.delivered, []).append(col)
            if cell.phase is None:
                continue
            classes = ["cell", cell.phase]
            fill, stroke, stroke_width = fills.get(cell.phase, PLAIN_FILL), "#b0bec5", 1
            if cell.violation:
                classes.append("violation")
                fill, stroke, stroke_width = VIOLATION_FILL, VIOLATION_STROKE, 3
            if cell.stale:
                classes.append("stale")
            first, second = _cell_label(cell)
            first_class = "bad" if cell.mismatch else "committed"
            tip = "\n".join(line.text for line in cell.lines)
            out.append(
                f'<g class="{" ".join(classes)}" data-index="{row.index}">'
                f'<rect x="{x + PAD}" y="{y + PAD}" width="{COLUMN - 2 * PAD}" '
                f'height="{LANE - 26}" rx="4" fill="{fill}" stroke="{stroke}" '
                f'stroke-width="{stroke_width}"/>'
                f'<text x="{x + 2 * PAD}" y="{y + PAD + 16}" class="phase">{_e(cell.phase)}</text>'
                f'<text x="{x + 2 * PAD}" y="{y + PAD + 32}" class="{first_class}">'
                f"{_e(first)}</text>"
                f'<text x="{x + 2 * PAD}" y="{y + PAD + 46}" class="note">{_e(second)}</text>'
                f"<title>{_e(tip)}</title></g>"
            )
        # Launch bars: from the launching event to the delivering one.
        for number, cols in sorted(launches.items()):
            start, end = min(cols), max(cols)
            kind = kinds.get(number, default_kind)
            x1 = LEFT + start * COLUMN + COLUMN // 2
            x2 = LEFT + end * COLUMN + COLUMN // 2
            by = y + LANE - 14 - (number % 2) * 5
            color = strokes.get(kind, LAUNCH_PLAIN)
            out.append(
                f'<g class="launch {kind}" data-launch="{number}">'
                f'<line x1="{x1}" y1="{by}" x2="{max(x2, x1 + 12)}" y2="{by}" stroke="{color}" '
                f'stroke-width="3" stroke-linecap="round"/>'
                f'<text x="{x1 - 22}" y="{by + 4}" class="launch-label" fill="{color}">'
                f"L{number}</text>"
            )
            delivered = [row.cells[lane] for row in rows if row.cells[lane].delivered == number]
            if delivered:
                cx = x2
                if delivered[0].stale:
                    out.append(
                        f'<polygon class="stale-marker" points="{cx},{by - 7} {cx + 7},{by} '
                        f'{cx},{by + 7} {cx - 7},{by}" fill="{STALE_FILL}" stroke="#6d4c41"/>'
                    )
                else:
                    out.append(f'<circle cx="{cx}" cy="{by}" r="5" fill="{color}"/>')
            out.append("</g>")
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _asset(name: str) -> str:
    """A stylesheet or script shipped as package data beside this module (`assets/`)."""
    return resources.files("kvcheck.reporting").joinpath("assets", name).read_text("utf-8")


def render_html(timeline: Timeline, *, heading: str | None = None, summary: str = "") -> str:
    """The whole page as a string."""
    violation = timeline.violation
    if violation is not None:
        where = f" ({violation.rid})" if violation.rid else ""
        verdict = (
            f'<div class="verdict fail"><strong>{_e(violation.invariant)}</strong> at event '
            f"{violation.event_index}{_e(where)}: {_e(violation.message)}<br>"
            f"<em>{_e(timeline.explanation)}</em></div>"
        )
    else:
        verdict = '<div class="verdict pass"><strong>no violation</strong></div>'
    report = family(timeline.family).report
    legend = "".join(
        f'<span><i class="swatch" style="background:{color}"></i>{_e(name)}</span>'
        for name, color in [
            *report.phase_fills.items(),
            ("violation", VIOLATION_FILL),
            ("stale row delivered", STALE_FILL),
        ]
    ) + "".join(
        f'<span><b style="color:{color}">&#8212;</b> {_e(kind)} launch in flight</span>'
        for kind, color in report.launch_strokes.items()
    )
    title = heading or "kvcheck timeline"
    extra = f"<p>{_e(summary)}</p>" if summary else ""
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)}</title>
<style>
{_asset("report.css")}</style>
</head>
<body>
<h1>{_e(title)}</h1>
<p class="sub">{_e(timeline.title)}</p>
{verdict}
{extra}
<p class="legend">{legend}</p>
<div class="scroll">
{_swimlane(timeline)}
</div>
<details open><summary>timeline as text</summary>
<pre>{_e(render_plain(timeline))}</pre>
</details>
<script>
{_asset("report.js")}</script>
</body>
</html>
"""


def write_html(
    timeline: Timeline,
    path: str | os.PathLike[str],
    *,
    heading: str | None = None,
    summary: str = "",
    inputs: Iterable[str | os.PathLike[str]] = (),
    force: bool = False,
) -> Path:
    """Write the page to `path` atomically (parent directories created); returns the path.

    Never over one of `inputs`, nor over an existing file unless `force`
    (`kvcheck.files.write_text`); raises `FileWriteError` (one line) otherwise or when the page
    cannot be written.
    """
    page = render_html(timeline, heading=heading, summary=summary)
    return write_text(path, page, inputs=inputs, force=force, what="HTML timeline")
