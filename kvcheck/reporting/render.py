"""Drawing a timeline: plain text for logs and pipes, a `rich` table for terminals, and
`print_timeline`, which picks one for a stream."""

from __future__ import annotations

import os
import re
import sys
from typing import IO, TYPE_CHECKING, Any, Final

import attrs

from kvcheck.core.family import family
from kvcheck.core.invariant import Violation
from kvcheck.reporting.timeline import Cell, Line, Row, Timeline

if TYPE_CHECKING:
    from rich.console import RenderableType


# Characters that would act on a terminal instead of showing: C0 and C1 controls (escape
# sequences, bell, carriage return), DEL, and the invisible format characters that reorder or
# hide text (bidirectional overrides, zero-width characters, the byte order mark). A request id
# or a message read from a counterexample file may hold any of them.
_UNPRINTABLE: Final = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]"
)


def printable(text: str, *, keep_newlines: bool = True) -> str:
    """`text` safe to print: each character that would act on the terminal is written as its
    Python escape (`\\x1b`, `\\u202e`); newlines are kept unless `keep_newlines` is off."""

    def escape(match: re.Match[str]) -> str:
        return match.group().encode("unicode_escape").decode("ascii")

    escaped = _UNPRINTABLE.sub(escape, text)
    return escaped if keep_newlines else escaped.replace("\n", "\\n")


def escaped_timeline(timeline: Timeline) -> Timeline:
    """`timeline` with every string in it (request ids, events, notes, the violation and the
    explanation) made `printable` on one line: what the renderers draw."""
    return _escaped(timeline)  # type: ignore[no-any-return]


_ESCAPED_CLASSES: Final = (Timeline, Row, Cell, Line, Violation)


def _escaped(value: Any) -> Any:
    if isinstance(value, str):
        return printable(value, keep_newlines=False)
    if isinstance(value, tuple):
        return tuple(_escaped(item) for item in value)
    if isinstance(value, _ESCAPED_CLASSES):
        fields = attrs.fields(type(value))
        return attrs.evolve(
            value, **{f.name: _escaped(getattr(value, f.name)) for f in fields if f.init}
        )
    return value


def _legend(timeline: Timeline) -> str:
    """What a cell shows, as the run's family says it."""
    return family(timeline.family).report.legend


def _violation_line(timeline: Timeline) -> str | None:
    v = timeline.violation
    if v is None:
        return None
    where = f" ({v.rid})" if v.rid else ""
    return f"{v.invariant} at event {v.event_index}{where}: {v.message}"


def render_plain(timeline: Timeline) -> str:
    """The timeline as plain text: a grid with one column per lane."""
    headers = ["#", "event", *timeline.lanes]
    grid: list[list[list[str]]] = []
    for row in timeline.rows:
        marker = "  <== VIOLATION" if row.violation else ""
        event_lines = [row.event + marker, *(f"  {note}" for note in row.notes)]
        cells = []
        for cell in row.cells:
            lines = [line.text for line in cell.lines]
            if cell.violation:
                lines = [f">> {text}" for text in lines]
            cells.append(lines)
        grid.append([[str(row.index)], event_lines, *cells])
    widths = [len(h) for h in headers]
    for cells in grid:
        for column, lines in enumerate(cells):
            widths[column] = max(widths[column], *(len(text) for text in lines or [""]))
    sep = "  "
    out = [f"timeline  {timeline.title}", _legend(timeline), ""]
    out.append(sep.join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    out.append(sep.join("-" * w for w in widths))
    for cells in grid:
        height = max(len(lines) for lines in cells)
        for k in range(height):
            parts = [
                (lines[k] if k < len(lines) else "").ljust(width)
                for lines, width in zip(cells, widths, strict=True)
            ]
            out.append(sep.join(parts).rstrip())
        out.append("")
    if timeline.not_run:
        out.append("not run (the replay stops at the first violation):")
        out.extend(f"  {text}" for text in timeline.not_run)
        out.append("")
    violation = _violation_line(timeline)
    if violation:
        out.append(f"violation: {violation}")
        out.append(f"why: {timeline.explanation}")
    else:
        out.append("no violation")
    return "\n".join(out)


_STYLES: Final[dict[str, str]] = {
    "state": "",
    "mismatch": "bold red",
    "launch": "cyan",
    "in-flight": "dim cyan",
    "applied": "green",
    "stale": "bold yellow",
    "lifecycle": "magenta",
    "violation": "bold white on red",
}


def render_rich(timeline: Timeline) -> RenderableType:
    """The timeline as a `rich` renderable (a boxed table with colours)."""
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(
        title=f"timeline  {timeline.title}",
        caption=_legend(timeline),
        box=box.ROUNDED,
        show_lines=True,
        title_justify="left",
        caption_justify="left",
    )
    table.add_column("#", justify="right", style="bold")
    table.add_column("event")
    for lane in timeline.lanes:
        table.add_column(lane)
    for row in timeline.rows:
        event = Text(row.event, style="bold white on red" if row.violation else "bold")
        for note in row.notes:
            event.append("\n" + note, style="dim")
        cells: list[Text] = []
        for cell in row.cells:
            text = Text()
            for k, line in enumerate(cell.lines):
                text.append(("\n" if k else "") + line.text, style=_STYLES[line.kind])
            if cell.violation:
                text.stylize("on dark_red")
            cells.append(text)
        table.add_row(str(row.index), event, *cells)
    parts: list[RenderableType] = [table]
    if timeline.not_run:
        parts.append(
            Text(
                "not run (the replay stops at the first violation): " + "; ".join(timeline.not_run),
                style="dim",
            )
        )
    violation = _violation_line(timeline)
    if violation:
        parts.append(Text(f"violation: {violation}", style="bold red"))
        parts.append(Text(f"why: {timeline.explanation}"))
    else:
        parts.append(Text("no violation", style="bold green"))
    return Group(*parts)


def use_rich(stream: IO[str]) -> bool:
    """Colour and boxes only on a terminal (and not under NO_COLOR or TERM=dumb)."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def print_timeline(timeline: Timeline, stream: IO[str] | None = None) -> None:
    """Print with rich on a terminal, as plain text otherwise."""
    out = stream if stream is not None else sys.stdout
    shown = escaped_timeline(timeline)
    if use_rich(out):
        from rich.console import Console

        Console(file=out).print(render_rich(shown))
    else:
        out.write(render_plain(shown) + "\n")
