"""The HTML report in a real browser: headless Chromium (Debian's `chromium`; `.ci/run` installs
it) reads back (1) the DOM after layout, which an inline script tags with the swimlane's size and
counts, and (2) a screenshot, in which the violating cell's red outline must show. It is skipped
only where Chromium is missing and CI is not set; under CI=true a missing Chromium fails it. (The
page itself is unit-tested in tests/unit/reporting/test_html.py.)
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from kvcheck.reporting.html import VIOLATION_STROKE, write_html
from tests.unit.reporting.test_html import timeline


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail("CI=true but no chromium on PATH: .ci/run must install Debian's chromium")
    pytest.skip("headless Chromium is not installed (apt-get install chromium); CI runs this")


def browser(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [
        binary,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Decode an 8-bit RGB/RGBA, non-interlaced PNG into rows of raw pixels."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            chunks += body
        pos += 12 + length
    width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and color in (2, 6) and interlace == 0
    bpp = 3 if color == 2 else 4
    raw, stride = zlib.decompress(chunks), width * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up, corner = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                pred = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                line[i] = (line[i] + pred) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, bpp, rows


def test_swimlane_renders_in_headless_chromium(tmp_path: Path) -> None:
    binary = chromium()
    page = write_html(timeline(), tmp_path / "report.html")
    url = page.resolve().as_uri()

    dom = browser(binary, tmp_path / "profile-dom", "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    match = re.search(
        r'data-swimlane="rendered (\d+)x(\d+) lanes=(\d+) cells=(\d+) '
        r'violations=(\d+)"',
        dom.stdout,
    )
    assert match, "the swimlane script did not tag the page: no layout box\n" + dom.stdout[:500]
    width, height, lanes, cells, violations = map(int, match.groups())
    assert width > 500 and height > 150
    assert (lanes, cells, violations) == (2, 11, 1)

    shot = tmp_path / "shot.png"
    taken = browser(
        binary, tmp_path / "profile-shot", f"--screenshot={shot}", "--window-size=1300,900", url
    )
    assert taken.returncode == 0 and shot.is_file(), taken.stderr[-2000:]
    _, bpp, rows = png_pixels(shot.read_bytes())
    red = tuple(int(VIOLATION_STROKE[i : i + 2], 16) for i in (1, 3, 5))
    outline = sum(
        1
        for row in rows
        for x in range(0, len(row), bpp)
        if all(abs(row[x + k] - red[k]) <= 24 for k in range(3))
    )
    # A 3-pixel outline around a 152x52 cell and the banner's edge: hundreds of pixels.
    assert outline > 300, f"only {outline} pixels of the violation colour were painted"


def test_missing_chromium_skips_locally_and_fails_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true but no chromium"):
        chromium()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="not installed"):
        chromium()
