"""Campaigns on many machines share one Redis example database: what one finds, the next replays
first. A real `redis-server` on 127.0.0.1 and two `kvcheck fuzz` campaigns in separate working
directories (as on two machines: nothing shared but the URL), each with its worker process.

Skipped where redis-server or the optional `redis` package is missing, except under CI=true,
where that fails (.ci/run installs Debian's redis-server, the dev extra the package).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import run_cli, run_process


def redis_client() -> None:
    """kvcheck reaches Redis with the optional `redis` package (the `redis` and `dev` extras)."""
    if importlib.util.find_spec("redis") is not None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail("CI=true but no redis package: the dev extra installs it")
    pytest.skip("the optional redis package is not installed (pip install 'kvcheck[redis]')")


def redis_server() -> str:
    """A redis-server to start, and the client to reach it."""
    redis_client()
    binary = shutil.which("redis-server")
    if binary is not None:
        return binary
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail("CI=true but no redis-server on PATH: .ci/run must install Debian's package")
    pytest.skip("redis-server is not installed (apt-get install redis-server); CI runs this")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    binary = redis_server()
    port = free_port()
    server = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                pytest.fail("redis-server did not start")
            time.sleep(0.1)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.terminate()
        server.wait(timeout=10)


def fuzz(
    url: str,
    cwd: Path,
    seed: str,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, object]:
    """One campaign from its own working directory, its parent in this process (which has torch
    imported already); its worker is a spawned process as always."""
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    code, out, err = run_cli(
        capfd, "fuzz", "builtin:seed-prefix", "--workers", "1", "--duration", "30", "--seed", seed,
        "--database", url, "--json",
    )  # fmt: skip
    assert code == 1, out + err
    report: dict[str, object] = json.loads(out)
    return report


def test_a_second_machine_replays_the_first_ones_failure_first(
    tmp_path: Path,
    redis_url: str,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = fuzz(redis_url, tmp_path / "machine-a", "1", capfd, monkeypatch)
    second = fuzz(redis_url, tmp_path / "machine-b", "2", capfd, monkeypatch)
    # The second campaign's first scenario is the failure the first one saved in Redis.
    assert second["examples_to_first_failure"] == 1, second
    # A third on an empty database (another Redis db number) with the same seed searches for it.
    alone = fuzz(
        redis_url.removesuffix("/0") + "/1", tmp_path / "machine-c", "2", capfd, monkeypatch
    )
    assert alone["examples_to_first_failure"] > 1  # type: ignore[operator]
    (found,) = first["failures"]  # type: ignore[misc]
    (replayed,) = second["failures"]  # type: ignore[misc]
    assert replayed["violation"]["invariant"] == found["violation"]["invariant"]
    assert (tmp_path / "machine-b" / replayed["counterexample_file"]).is_file()


def test_an_unreachable_redis_is_exit_2_naming_the_url(tmp_path: Path) -> None:
    redis_client()
    url = f"redis://127.0.0.1:{free_port()}/0"
    done = run_process("fuzz", "builtin:reference", "--database", url, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith(f"kvcheck: error: cannot reach the Redis example database {url}")
    assert done.stdout == ""
