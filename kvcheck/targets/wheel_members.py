"""A few files of a large wheel, read from the package index with HTTP range requests.

A vLLM wheel is 250-470 MB and kvcheck reads eight of its Python files (under 1 MB). pip has
no "these members only" download (even `pip install --dry-run` downloads the whole wheel from an
index that does not serve its metadata apart), so for a family that asks for it
(`WheelSource.fetch == "members"`) the cache reads the release's wheel URL from the project page
of the index pip reads first (`PIP_INDEX_URL`, pip's configured `index-url`, else PyPI), then the
zip's central directory and the listed members from that URL with `Range:` requests (a `file:`
URL is read in place). What it keeps is a small zip of those members
and the wheel's `RECORD`, every member checked against the sha256 `RECORD` gives it.

Anything short of that (no such wheel on that index, a server that ignores ranges, a member
that fails its hash, no network) returns None, and the caller downloads the whole wheel with pip
as before, so this path never produces an error of its own.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import html
import io
import json
import os
import platform
import re
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import subprocess

__all__ = ["MEMBERS_SUFFIX", "PipRunner", "fetch_members", "index_url", "wheel_location"]

# pip, as the cache calls it: the whole command line in, the finished process out (defined
# here, where the cache's two fetch paths both find it; `wheels` re-exports it).
PipRunner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]

# The cached subset's name: the wheel's own name with this before `.whl`, so the cache's glob for
# the release finds it and nobody mistakes it for the whole wheel.
MEMBERS_SUFFIX: Final = ".members"
# Read-ahead of one range request: the central directory of a vLLM wheel is about 0.5 MB, a
# member a few hundred kB.
_BLOCK: Final = 1 << 20
# Seconds a request may wait before this path gives up for pip's download: short, since an
# index that cannot be reached directly (a proxy only pip is told of) costs this much; once a
# process, as a project page that could not be read is not asked for again (`_unreadable`).
_TIMEOUT_S: Final = 20.0
_unreadable: set[str] = set()
_PYPI: Final = "https://pypi.org/simple"
_PAGE_TYPES: Final = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"
# `download.index-url='https://...'` in `pip config list`.
_CONFIG_LINE: Final = re.compile(r"^(download|install|global)\.index-url='([^']*)'$", re.MULTILINE)
# PEP 503: one anchor per file, its text the file name.
_ANCHOR: Final = re.compile(r"<a\s[^>]*?href=\"([^\"]+)\"[^>]*>([^<]+)</a>", re.IGNORECASE)


class _Unavailable(Exception):
    """The members cannot be had this way (the caller falls back to the whole wheel)."""


def index_url(pip: PipRunner) -> str:
    """The package index pip reads first: `PIP_INDEX_URL`, else the `index-url` of pip's
    configuration (`pip config list`), else PyPI's."""
    explicit = os.environ.get("PIP_INDEX_URL", "").split()
    if explicit:
        return explicit[0]
    return _configured_index(pip)


@functools.cache
def _configured_index(pip: PipRunner) -> str:
    """pip's configured index, asked once a process (`pip config list` takes 0.4 s)."""
    done = pip([sys.executable, "-m", "pip", "config", "list"])
    settings: dict[str, str] = (
        dict(_CONFIG_LINE.findall(done.stdout)) if done.returncode == 0 else {}
    )
    for section in ("download", "install", "global"):
        urls = settings.get(section, "").split()
        if urls:
            return urls[0]
    return _PYPI


def wheel_location(
    distribution: str, version: str, index: str, *, preferred_platform: str | None = None
) -> str | None:
    """The URL of a wheel of the release on the index's project page (PEP 691's JSON, else
    PEP 503's HTML), one built for this machine preferred (the Python files kvcheck reads are
    the same in every platform's wheel). None: the index lists none, or cannot be read."""
    page = f"{index.rstrip('/')}/{distribution}/"
    if page in _unreadable:
        return None
    try:
        request = urllib.request.Request(page, headers={"Accept": _PAGE_TYPES})
        with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as response:
            kind = response.headers.get_content_type()
            body = response.read().decode("utf-8", errors="replace")
            page = response.geturl()
    except (urllib.error.URLError, TimeoutError, OSError, ValueError):
        _unreadable.add(page)
        return None
    if kind == "application/vnd.pypi.simple.v1+json":
        try:
            links = [(str(f["filename"]), str(f["url"])) for f in json.loads(body)["files"]]
        except (ValueError, KeyError, TypeError):
            return None
    else:
        links = [(html.unescape(name), html.unescape(href)) for href, name in _ANCHOR.findall(body)]
    prefix = f"{distribution}-{version}-"
    machine = preferred_platform or platform.machine()
    # This machine's wheel first, then a pure one, then any other (in the page's order).
    wheels = sorted(
        (0 if machine in name else 1 if name.endswith("-any.whl") else 2, order, url)
        for order, (name, url) in enumerate(links)
        if name.startswith(prefix) and name.endswith(".whl")
    )
    return urllib.parse.urljoin(page, wheels[0][2].split("#")[0]) if wheels else None


def fetch_members(
    distribution: str,
    version: str,
    members: frozenset[str],
    wheels: Path,
    pip: PipRunner,
) -> Path | None:
    """The wheel's `members` (paths inside it) as a small zip in `wheels` (None: not this
    way)."""
    url = wheel_location(distribution, version, index_url(pip))
    if url is None:
        return None
    name = urllib.parse.unquote(url.rsplit("/", 1)[-1])
    with tempfile.TemporaryDirectory(prefix=".members-", dir=wheels) as private:
        subset = Path(private) / f"{name.removesuffix('.whl')}{MEMBERS_SUFFIX}.whl"
        try:
            with _open_remote(url) as remote, zipfile.ZipFile(remote) as archive:
                _copy_members(members, archive, subset)
        except (_Unavailable, OSError, zipfile.BadZipFile, EOFError, zlib.error, ValueError):
            return None
        target = wheels / subset.name
        os.replace(subset, target)
        return target


def _copy_members(members: frozenset[str], archive: zipfile.ZipFile, subset: Path) -> None:
    """Write `members` of `archive` and its RECORD to `subset`, each checked against
    the sha256 RECORD gives it (a member RECORD does not list, or lists otherwise, is refused)."""
    names = archive.namelist()
    records = [n for n in names if n.endswith(".dist-info/RECORD") and n.count("/") == 1]
    if len(records) != 1:
        raise _Unavailable("no single RECORD")
    record = archive.read(records[0])
    digests = _record_digests(record)
    wanted = [name for name in names if name in members]
    if not wanted:
        raise _Unavailable("none of the listed files")
    with zipfile.ZipFile(subset, "w", zipfile.ZIP_DEFLATED) as out:
        out.writestr(records[0], record)
        for name in wanted:
            content = archive.read(name)  # zipfile checks the member's CRC
            expected = digests.get(name)
            if expected is None or _record_hash(content) != expected:
                raise _Unavailable(f"{name} does not match RECORD")
            out.writestr(name, content)


def _record_digests(record: bytes) -> dict[str, str]:
    """RECORD's `path,sha256=<urlsafe base64>,size` lines, as path -> digest."""
    digests = {}
    for line in record.decode("utf-8", errors="replace").splitlines():
        path, _, rest = line.partition(",")
        digest = rest.partition(",")[0]
        if digest.startswith("sha256="):
            digests[path] = digest.removeprefix("sha256=")
    return digests


def _record_hash(content: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=").decode()


def _open_remote(url: str) -> io.RawIOBase | io.BufferedReader:
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme
    if scheme == "file":
        return open(urllib.request.url2pathname(parts.path), "rb")
    if scheme not in ("http", "https"):
        raise _Unavailable(f"a {scheme}: URL")
    return _RangeReader(url)


class _RangeReader(io.RawIOBase):
    """A seekable, read-only file over an HTTP URL, read in blocks with `Range:` requests (what
    zipfile needs: the end of the file, the central directory, then each member's bytes)."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self._url = url
        self._blocks: dict[int, bytes] = {}
        self._position = 0
        self._size = self._fetch_size()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        end = min(self._position + len(buffer), self._size)
        if end <= self._position:
            return 0
        first, last = self._position // _BLOCK, (end - 1) // _BLOCK
        missing = [b for b in range(first, last + 1) if b not in self._blocks]
        if missing:
            self._load(missing[0], missing[-1])
        data = b"".join(self._blocks[b] for b in range(first, last + 1))
        start = self._position - first * _BLOCK
        chunk = data[start : start + end - self._position]
        memoryview(buffer)[: len(chunk)] = chunk
        self._position += len(chunk)
        return len(chunk)

    def _fetch_size(self) -> int:
        """The file's size, from the Content-Range of a first request for its last block (kept:
        zipfile reads the end first)."""
        body, total = self._get(f"bytes=-{_BLOCK}")
        offset = total - len(body)  # where the tail starts in the file
        # The tail is not block aligned: keep it only where it covers whole blocks to the end.
        first = -(-offset // _BLOCK)  # the first block starting at or after `offset`
        for block in range(first, (total - 1) // _BLOCK + 1):
            start = block * _BLOCK - offset
            self._blocks[block] = body[start : start + _BLOCK]
        return total

    def _load(self, first: int, last: int) -> None:
        start, stop = first * _BLOCK, min((last + 1) * _BLOCK, self._size)
        body, _ = self._get(f"bytes={start}-{stop - 1}")
        if len(body) != stop - start:
            raise _Unavailable("short range response")
        for block in range(first, last + 1):
            self._blocks[block] = body[(block - first) * _BLOCK : (block - first + 1) * _BLOCK]

    def _get(self, byte_range: str) -> tuple[bytes, int]:
        request = urllib.request.Request(self._url, headers={"Range": byte_range})
        try:
            with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as response:
                if response.status != 206:  # the server ignored the range: not this way
                    raise _Unavailable(f"HTTP {response.status} to a range request")
                total = response.headers.get("Content-Range", "").rpartition("/")[2]
                if not total.isdigit():
                    raise _Unavailable("no total size in Content-Range")
                return response.read(), int(total)
        except (urllib.error.URLError, TimeoutError) as exc:
            raise _Unavailable(str(exc)) from None
