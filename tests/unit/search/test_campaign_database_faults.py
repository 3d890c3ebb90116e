"""A campaign that loses its example database goes on without it (issue 23 item 11), and a
directory database that cannot be saved to is refused when it is opened (item 12). The worker's
loop runs in this process; a real Redis server that dies mid-campaign is
tests/quality/test_fuzz_redis_drop.py."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable
from pathlib import Path

import pytest
from hypothesis.database import ExampleDatabase, InMemoryExampleDatabase

from kvcheck.errors import KvcheckUsageError
from kvcheck.families.sglang.judging import SglangJudging
from kvcheck.search import campaign
from kvcheck.search.campaign import (
    CampaignPlan,
    CampaignState,
    TolerantDatabase,
    WorkerStatus,
    _DatabaseLost,
    _Done,
    _FailureFound,
    _Progress,
    _work,
    open_database,
)
from kvcheck.search.workers import WorkerMessage


class DroppingDatabase(ExampleDatabase):
    """An in-memory database whose server goes away after `calls` calls, as Redis's client sees
    it; `back_after` failed calls later it answers again (None: never)."""

    def __init__(self, calls: int, back_after: int | None = None) -> None:
        # Redis's own error is what a dropped server raises: without the optional package (the
        # `redis` extra) the tests that need it skip.
        self.redis = pytest.importorskip("redis")
        super().__init__()
        self.inner = InMemoryExampleDatabase()
        self.calls_left = calls
        self.back_after = back_after
        self.failed = 0

    def _maybe_fail(self) -> None:
        if self.calls_left > 0:
            self.calls_left -= 1
            return
        if self.back_after is not None and self.failed >= self.back_after:
            return
        self.failed += 1
        refused = "Error 111 connecting to 127.0.0.1:6379. Connection refused."
        raise self.redis.ConnectionError(refused)

    def fetch(self, key: bytes) -> Iterable[bytes]:
        self._maybe_fail()
        yield from self.inner.fetch(key)

    def save(self, key: bytes, value: bytes) -> None:
        self._maybe_fail()
        self.inner.save(key, value)

    def delete(self, key: bytes, value: bytes) -> None:
        self._maybe_fail()
        self.inner.delete(key, value)


def plan(**changes: object) -> CampaignPlan:
    fields: dict[str, object] = {
        "target": "builtin:seed-prefix",
        "options": SglangJudging("preclaim", "ideal", False),
        "reason": "given",
        "workers": 1,
        "seed": 3,
        "database": "redis://127.0.0.1:6379/0",
        "max_examples": 300,
        "measure_coverage": False,
    }
    return CampaignPlan(**(fields | changes))  # type: ignore[arg-type]


def run_worker(monkeypatch: pytest.MonkeyPatch, database: ExampleDatabase) -> list[WorkerMessage]:
    monkeypatch.setattr(campaign, "open_database", lambda spec: database)
    monkeypatch.setattr(campaign, "_DATABASE_RETRY_PAUSES", (0.0, 0.0))
    messages: queue.Queue[WorkerMessage] = queue.Queue()
    _work(0, messages, threading.Event(), plan())
    return [messages.get_nowait() for _ in range(messages.qsize())]


def test_a_worker_whose_database_drops_goes_on_without_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    received = run_worker(monkeypatch, DroppingDatabase(calls=1))
    # The round's first fetch is answered; saving the failure it finds is not.
    kinds = [type(m) for m in received]
    assert kinds[-2:] == [_Progress, _Done], kinds
    (lost,) = [m for m in received if isinstance(m, _DatabaseLost)]
    assert "ConnectionError" in lost.why
    assert kinds.index(_DatabaseLost) < kinds.index(_FailureFound)  # the finding is not lost


def test_a_database_that_comes_back_within_the_retries_is_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dropping = DroppingDatabase(calls=1, back_after=2)
    received = run_worker(monkeypatch, dropping)
    assert [m for m in received if isinstance(m, _DatabaseLost)] == []
    assert isinstance(received[-1], _Done)
    assert dropping.failed == 2 and list(dropping.inner.fetch(next(iter(dropping.inner.data))))


def test_a_lost_database_is_told_once_and_then_left_alone() -> None:
    told: list[str] = []
    dropping = DroppingDatabase(calls=0)
    tolerant = TolerantDatabase(dropping, told.append, pauses=(0.0, 0.0))
    assert tolerant.fetch(b"k") == []
    tolerant.save(b"k", b"v")
    tolerant.delete(b"k", b"v")
    tolerant.move(b"k", b"j", b"v")
    assert len(told) == 1 and "Connection refused" in told[0]
    assert dropping.failed == 3  # the three tries of the first call only


def test_a_bug_in_a_database_call_is_not_taken_for_a_lost_database() -> None:
    class Broken(InMemoryExampleDatabase):
        def save(self, key: bytes, value: bytes) -> None:
            raise TypeError("kvcheck's own bug")

    with pytest.raises(TypeError):
        TolerantDatabase(Broken(), lambda why: None, pauses=()).save(b"k", b"v")


def test_a_crashed_workers_last_rate_is_not_added_to_the_campaigns() -> None:
    workers = [
        WorkerStatus(0, state="running", examples=100, seconds=1.0),
        WorkerStatus(1, state="crashed", examples=50, seconds=0.5, error="boom"),
    ]
    state = CampaignState(plan(workers=2), workers)
    assert state.rate == pytest.approx(100.0)
    assert state.examples == 150  # what it ran still counts


def test_a_database_that_is_a_file_is_refused(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_text("not a directory\n")
    with pytest.raises(KvcheckUsageError, match="not a directory"):
        open_database(str(plain))
    with pytest.raises(KvcheckUsageError, match="cannot save failures there"):
        open_database(str(plain / "sub"))


def test_a_database_nobody_can_write_is_refused() -> None:
    # /proc takes no new files, not even from root (permission bits would not stop root).
    with pytest.raises(KvcheckUsageError, match="cannot save failures there"):
        open_database("/proc/kvcheck-examples")
    with pytest.raises(KvcheckUsageError, match="cannot save failures there"):
        open_database("/proc")


def test_a_usable_directory_is_created_and_left_clean(tmp_path: Path) -> None:
    open_database(str(tmp_path / "a" / "b"))
    assert (tmp_path / "a" / "b").is_dir() and list((tmp_path / "a" / "b").iterdir()) == []
