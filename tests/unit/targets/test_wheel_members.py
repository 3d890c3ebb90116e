"""A large wheel's few files read with range requests (kvcheck.targets.wheel_members), from a
local index (HTML and JSON project pages) whose server serves ranges or ignores them, and from a
`file:` URL; every way it cannot work falls back to pip's whole-wheel download."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.server
import json
import subprocess
import threading
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from kvcheck.targets import wheel_members, wheels
from kvcheck.targets.wheel_members import MEMBERS_SUFFIX

SOURCE = wheels.WheelSource(
    distribution="engine",
    display="Engine",
    package="engine",
    files=frozenset({"core/a.py", "core/b.py"}),
    oldest="1.0",
    fetch="members",
)
WHEEL_NAME = "engine-1.0-py3-none-any.whl"
CONTENT = {"engine/core/a.py": b"A = 1\n", "engine/core/b.py": b"B = 2\n" * 5000}


def _record_line(name: str, content: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(content)}"


def _wheel(path: Path, *, lie_about: str | None = None) -> Path:
    """A wheel with the two listed files, a large unlisted one and a RECORD (which gives a wrong
    hash for `lie_about`)."""
    files = {**CONTENT, "engine/big.bin": bytes(range(256)) * 20_000}
    record = [
        _record_line(name, b"other" if name == lie_about else content)
        for name, content in files.items()
    ]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in files.items():
            archive.writestr(name, content)
        archive.writestr("engine-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return path


class _Server(http.server.ThreadingHTTPServer):
    ranges = True
    json_pages = False
    requests: list[tuple[str, str | None]]


class _RangeHandler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        path = self.path.lstrip("/")
        if path.endswith("/"):  # a project page
            json_page = "json" in self.headers.get("Accept", "") and self.server.json_pages
            name = "index.json" if json_page else "index.html"
            body = (Path(self.server.directory) / path / name).read_bytes()  # type: ignore[attr-defined]
            self.send_response(200)
            kind = "application/vnd.pypi.simple.v1+json" if json_page else "text/html"
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        body = (Path(self.server.directory) / path).read_bytes()  # type: ignore[attr-defined]
        asked = self.headers.get("Range")
        self.server.requests.append((path, asked))
        if asked is None or not self.server.ranges:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        first, _, last = asked.removeprefix("bytes=").partition("-")
        if not first:  # a suffix: the last N bytes
            start, stop = max(0, len(body) - int(last)), len(body)
        else:
            start, stop = int(first), min(int(last) + 1, len(body))
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{len(body)}")
        self.send_header("Content-Length", str(stop - start))
        self.end_headers()
        self.wfile.write(body[start:stop])

    def log_message(self, format: str, *args: object) -> None:
        pass


def _publish(served: Path, files: dict[str, str]) -> None:
    """The index's project page for `engine`: file name -> URL (relative to the page)."""
    page = served / "simple" / "engine"
    page.mkdir(parents=True, exist_ok=True)
    anchors = "".join(f'<a href="{url}#sha256=00">{name}</a>\n' for name, url in files.items())
    (page / "index.html").write_text(f"<html><body>\n{anchors}</body></html>\n")
    entries = [{"filename": name, "url": url, "hashes": {}} for name, url in files.items()]
    (page / "index.json").write_text(json.dumps({"meta": {"api-version": "1.0"}, "files": entries}))


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[_Server]:
    served = tmp_path / "served"
    served.mkdir()
    httpd = _Server(("127.0.0.1", 0), _RangeHandler)
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{httpd.server_address[1]}/simple")
    _publish(
        served,
        {
            "engine-1.0-py3-none-macos_arm64.whl": "../../other/macos.whl",
            WHEEL_NAME: f"../../{WHEEL_NAME}",
            "engine-1.01-py3-none-any.whl": "../../engine-1.01-py3-none-any.whl",
            "engine-1.0.tar.gz": "../../engine-1.0.tar.gz",
        },
    )
    httpd.directory = str(served)  # type: ignore[attr-defined]
    httpd.requests = []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


class _Pip:
    """pip as the cache calls it: a download writes `whole`; nothing else answers."""

    def __init__(self, whole: Path | None = None) -> None:
        self.whole = whole
        self.calls: list[str] = []

    def __call__(self, command: Sequence[str]) -> subprocess.CompletedProcess[str]:
        verb = command[3]
        self.calls.append(verb)
        if verb == "download" and self.whole is not None:
            destination = Path(command[command.index("-d") + 1])
            (destination / WHEEL_NAME).write_bytes(self.whole.read_bytes())
            return subprocess.CompletedProcess(list(command), 0, "", "")
        return subprocess.CompletedProcess(list(command), 1, "", "ERROR: no")


def _unpacked(cache: Path) -> dict[str, bytes]:
    root = cache / "engine" / "1.0"
    return {name: (root / name).read_bytes() for name in CONTENT if (root / name).is_file()}


@pytest.mark.parametrize("json_pages", [False, True], ids=["html-page", "json-page"])
def test_only_the_listed_files_travel_and_are_kept(
    server: _Server, tmp_path: Path, json_pages: bool
) -> None:
    server.json_pages = json_pages
    _wheel(Path(server.directory) / WHEEL_NAME)  # type: ignore[attr-defined]
    pip = _Pip()
    cache = tmp_path / "cache"
    wheels.release_package(SOURCE, "1.0", pip=pip, cache=cache)
    assert _unpacked(cache) == CONTENT
    assert pip.calls == []  # pip neither asked nor downloading
    wheel_requests = [asked for path, asked in server.requests if path.endswith(".whl")]
    assert wheel_requests and None not in wheel_requests  # ranges only
    kept = list((cache / "wheels").iterdir())
    assert [k.name for k in kept] == [f"engine-1.0-py3-none-any{MEMBERS_SUFFIX}.whl"]
    assert kept[0].stat().st_size < 10_000  # the 5 MB member stayed on the server
    # A damaged unpacked file is unpacked again from the kept members, with no request.
    (cache / "engine" / "1.0" / "engine" / "core" / "a.py").write_bytes(b"edited")
    before = len(server.requests)
    wheels.release_package(SOURCE, "1.0", pip=pip, cache=cache)
    assert _unpacked(cache) == CONTENT and len(server.requests) == before


def test_this_machines_wheel_is_preferred_and_another_release_is_not_taken() -> None:
    files = [("engine-1.0-cp311-manylinux_aarch64.whl", "a"), ("engine-1.0-cp311-x86_64.whl", "x")]
    anchors = "".join(f'<a href="../../{url}.whl">{name}</a>' for name, url in files)
    with _page_server(anchors) as index:
        found = wheel_members.wheel_location("engine", "1.0", index, preferred_platform="x86_64")
        assert found is not None and found.endswith("/x.whl")
        found = wheel_members.wheel_location("engine", "1.0", index, preferred_platform="aarch64")
        assert found is not None and found.endswith("/a.whl")
        assert wheel_members.wheel_location("engine", "1.0.1", index) is None


def test_the_index_is_pips(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)

    def pip(command: Sequence[str]) -> subprocess.CompletedProcess[str]:
        out = "global.cert='x'\nglobal.index-url='https://mirror.example/simple https://b'\n"
        return subprocess.CompletedProcess(list(command), 0, out, "")

    assert wheel_members.index_url(pip) == "https://mirror.example/simple"
    failing = _Pip()
    assert wheel_members.index_url(failing) == "https://pypi.org/simple"
    monkeypatch.setenv("PIP_INDEX_URL", "https://env.example/simple")
    assert wheel_members.index_url(failing) == "https://env.example/simple"


def test_a_server_that_ignores_ranges_means_the_whole_wheel_from_pip(
    server: _Server, tmp_path: Path
) -> None:
    server.ranges = False
    whole = _wheel(Path(server.directory) / WHEEL_NAME)  # type: ignore[attr-defined]
    pip = _Pip(whole)
    cache = tmp_path / "cache"
    wheels.release_package(SOURCE, "1.0", pip=pip, cache=cache)
    assert _unpacked(cache) == CONTENT
    assert pip.calls == ["download"]
    assert [k.name for k in (cache / "wheels").iterdir()] == [WHEEL_NAME]


def test_a_member_that_fails_its_record_hash_is_not_kept(server: _Server, tmp_path: Path) -> None:
    _wheel(Path(server.directory) / WHEEL_NAME, lie_about="engine/core/b.py")  # type: ignore[attr-defined]
    pip = _Pip(_wheel(tmp_path / WHEEL_NAME))
    cache = tmp_path / "cache"
    wheels.release_package(SOURCE, "1.0", pip=pip, cache=cache)
    assert pip.calls == ["download"]  # the subset was refused, the wheel fetched whole
    assert _unpacked(cache) == CONTENT


def test_a_file_url_is_read_in_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    local = _wheel(tmp_path / WHEEL_NAME)
    anchors = f'<a href="{local.as_uri()}">{WHEEL_NAME}</a>'
    with _page_server(anchors) as index:
        monkeypatch.setenv("PIP_INDEX_URL", index)
        pip = _Pip()
        cache = tmp_path / "cache"
        wheels.release_package(SOURCE, "1.0", pip=pip, cache=cache)
    assert _unpacked(cache) == CONTENT and pip.calls == []


@pytest.mark.parametrize("index", ["http://127.0.0.1:9/simple", "not a url"])
def test_no_index_falls_back_to_the_download(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, index: str
) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", index)
    pip = _Pip(_wheel(tmp_path / WHEEL_NAME))
    cache = tmp_path / "cache"
    wheels.release_package(SOURCE, "1.0", pip=pip, cache=cache)
    assert _unpacked(cache) == CONTENT and pip.calls == ["download"]


def test_an_index_that_cannot_be_read_is_asked_once_a_process() -> None:
    with _page_server("") as index:
        dead = index.replace("/simple", "/gone")  # the same server: a page it refuses
        assert wheel_members.wheel_location("engine", "1.0", dead) is None
        page = f"{dead}/engine/"
        assert page not in wheel_members._unreadable  # 200 with nothing listed: asked again
    assert wheel_members.wheel_location("engine", "1.0", "http://127.0.0.1:9/simple") is None
    assert "http://127.0.0.1:9/simple/engine/" in wheel_members._unreadable
    wheel_members._unreadable.discard("http://127.0.0.1:9/simple/engine/")


@contextlib.contextmanager
def _page_server(anchors: str) -> Iterator[str]:
    """An index whose only page, `engine`'s, holds `anchors`; yields the index URL."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = f"<html><body>{anchors}</body></html>".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/simple"
    finally:
        httpd.shutdown()
        httpd.server_close()
