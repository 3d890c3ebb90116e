"""A Redis example database that dies mid-campaign (issue 23 item 11): every worker goes on
without it with a warning, none crashes, and the summary is printed with the verdict. A real
`redis-server` on 127.0.0.1, killed while `kvcheck fuzz` runs in another process.

Skipped where redis-server is missing, except under CI=true (as tests/quality/test_fuzz_redis.py).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.quality.test_fuzz_redis import free_port, redis_server


def start_redis(directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    server = subprocess.Popen(
        [redis_server(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(directory)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and server.poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                conn.sendall(b"PING\r\n")
                if conn.recv(16).startswith(b"+PONG"):
                    return server, f"redis://127.0.0.1:{port}/0"
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise AssertionError("redis-server did not start")


def test_a_redis_that_dies_mid_campaign_loses_no_worker_and_no_summary(tmp_path: Path) -> None:
    server, url = start_redis(tmp_path)
    try:
        campaign = subprocess.Popen(
            [sys.executable, "-m", "kvcheck.cli", "fuzz", "builtin:reference", "--workers", "2",
             "--duration", "10", "--seed", "5", "--database", url, "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        )  # fmt: skip
        # Kill the server once the workers search (they report every half second, and fetch
        # from the database at the start of every round of about a second).
        time.sleep(6)
        server.kill()
        server.wait(timeout=10)
        out, err = campaign.communicate(timeout=120)
    finally:
        if server.poll() is None:
            server.kill()
    assert "Traceback" not in out + err, err
    assert campaign.returncode == 0, err
    report = json.loads(out)
    assert report["verdict"] == "pass" and report["crashed_workers"] == [], report
    assert all(w["state"] == "done" for w in report["per_worker"]), report["per_worker"]
    assert report["examples"] > 0
    lost = [w for w in report["warnings"] if "lost the example database" in w]
    assert len(lost) == 2, report["warnings"]  # each worker says so once
    assert "kvcheck: warning: worker 0 lost the example database" in err
