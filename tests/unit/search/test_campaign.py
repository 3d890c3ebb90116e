"""The campaign's pieces that run in one process: the database it opens, the seeds and shares its
workers get, and a seeded search that keeps its database (multi-process runs:
tests/quality/test_fuzz.py)."""

from __future__ import annotations

import queue
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis.database import DirectoryBasedExampleDatabase, InMemoryExampleDatabase

from kvcheck.counterexamples.fileformat import loads
from kvcheck.errors import KvcheckUsageError
from kvcheck.families.sglang.judging import SglangJudging
from kvcheck.search.campaign import (
    CampaignPlan,
    _Done,
    _FailureFound,
    _Progress,
    _round_size,
    _work,
    open_database,
    redact,
    round_seed,
)
from kvcheck.search.check import search
from kvcheck.search.workers import WorkerMessage
from kvcheck.targets.loading import load_target


def plan(**changes: object) -> CampaignPlan:
    fields: dict[str, object] = {
        "target": "builtin:reference",
        "options": SglangJudging("preclaim", "ideal", False),
        "reason": "given",
        "workers": 3,
        "seed": 7,
        "database": None,
    }
    return CampaignPlan(**(fields | changes))  # type: ignore[arg-type]


def test_a_directory_is_a_directory_database(tmp_path: Path) -> None:
    assert isinstance(open_database(str(tmp_path / "db")), DirectoryBasedExampleDatabase)
    assert open_database(None) is None


def test_an_unknown_scheme_is_a_usage_error() -> None:
    with pytest.raises(KvcheckUsageError, match="not a directory nor a Redis URL"):
        open_database("http://example.invalid/db")


def test_an_unreachable_redis_names_the_url_and_the_error() -> None:
    pytest.importorskip("redis")  # the optional `redis` extra
    # Port 1 on the loopback: nothing listens there, the connection is refused at once.
    with pytest.raises(KvcheckUsageError) as raised:
        open_database("redis://:secret@127.0.0.1:1/0")
    message = str(raised.value)
    assert "cannot reach the Redis example database redis://:***@127.0.0.1:1/0" in message
    assert "secret" not in message
    assert "refused" in message.lower() or "error" in message.lower()


def test_a_redis_url_without_the_redis_package_says_which_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)  # import redis -> ImportError
    with pytest.raises(
        KvcheckUsageError, match=r"needs the redis package: pip install 'kvcheck\[redis\]'"
    ):
        open_database("redis://127.0.0.1:6379/0")


def test_redact_hides_only_the_password() -> None:
    assert redact("redis://user:pw@host:1/0") == "redis://user:***@host:1/0"
    assert redact("redis://host:1/0") == "redis://host:1/0"


def test_every_worker_and_round_gets_its_own_seed_and_a_campaign_repeats_them() -> None:
    seeds = {round_seed(1, w, r) for w in range(4) for r in range(50)}
    assert len(seeds) == 200
    assert round_seed(1, 2, 3) == round_seed(1, 2, 3) != round_seed(2, 2, 3)


def test_max_examples_is_shared_out_between_the_workers() -> None:
    shares = [plan(max_examples=10).share(i) for i in range(3)]
    assert shares == [4, 3, 3]
    assert plan().share(0) is None


def test_a_round_never_runs_far_past_the_deadline() -> None:
    first = _round_size(plan(), 0, 0.0)
    assert 1 <= first <= 50
    # 100 scenarios/s and half a second left: about 50 more, not a full round.
    assert _round_size(plan(), 1000, 10.0, time.monotonic() + 0.5) <= 52
    assert _round_size(plan(), 1000, 10.0) == 100  # about a second's worth


def test_a_seeded_search_records_its_failure_only_when_it_keeps_the_database() -> None:
    # Why `kvcheck check --seed` never writes the database: Hypothesis's `@seed` sets
    # `database=None`; a campaign's workers keep it (`seeded_database=True`).
    target = load_target("builtin:seed-prefix")
    kept, dropped = InMemoryExampleDatabase(), InMemoryExampleDatabase()
    found = search(target, convention="preclaim", seed=3, database=kept, seeded_database=True)
    assert found.failure is not None
    assert kept.data, "the seeded search wrote nothing to its database"
    search(target, convention="preclaim", seed=3, database=dropped)
    assert not dropped.data
    # And the next seeded search replays the saved failure first.
    again = search(target, convention="preclaim", seed=99, database=kept, seeded_database=True)
    assert again.examples_to_failure == 1


def test_reuse_off_does_not_replay_the_saved_failure_first() -> None:
    target = load_target("builtin:seed-prefix")
    database = InMemoryExampleDatabase()
    search(target, convention="preclaim", seed=3, database=database, seeded_database=True)
    runs: list[object] = []
    search(
        target,
        convention="preclaim",
        seed=4,
        database=database,
        seeded_database=True,
        reuse=False,
        max_examples=1,
        on_run=runs.append,
    )
    assert len(runs) == 1


@pytest.mark.parametrize("generator", ["random", "hypothesis"])
def test_a_worker_reports_progress_a_shrunk_failure_and_its_end(
    tmp_path: Path, generator: str
) -> None:
    # The worker's loop in this process (tests/quality/test_fuzz.py runs it in processes).
    messages: queue.Queue[WorkerMessage] = queue.Queue()
    database = str(tmp_path / "db")
    seeded = plan(target="builtin:seed-prefix", database=database, generator=generator)
    _work(1, messages, threading.Event(), seeded)
    received = [messages.get_nowait() for _ in range(messages.qsize())]
    kinds = [type(m) for m in received]
    assert kinds[-2:] == [_Progress, _Done] and kinds.count(_FailureFound) == 1
    (failure,) = [m for m in received if isinstance(m, _FailureFound)]
    counterexample = loads(failure.counterexample_json)
    assert counterexample.violation is not None and counterexample.target == "builtin:seed-prefix"
    assert len(counterexample.scenario.events) <= 6  # shrunk
    assert failure.worker == 1 and failure.examples_to_failure >= 1
    assert any((tmp_path / "db").iterdir()), "the seeded rounds wrote nothing to the database"
    final = received[-2]
    assert isinstance(final, _Progress) and final.examples >= failure.examples_to_failure


def test_a_random_workers_failure_is_the_next_workers_first_scenario(tmp_path: Path) -> None:
    database = str(tmp_path / "db")
    firsts = []
    for worker in (0, 1):
        messages: queue.Queue[WorkerMessage] = queue.Queue()
        _work(
            worker,
            messages,
            threading.Event(),
            plan(target="builtin:seed-prefix", database=database, seed=2),
        )
        received = [messages.get_nowait() for _ in range(messages.qsize())]
        firsts.append(next(m for m in received if isinstance(m, _FailureFound)))
    assert firsts[0].examples_to_failure > 1 and firsts[1].examples_to_failure == 1
    first, second = (loads(f.counterexample_json) for f in firsts)
    assert second.scenario == first.scenario


@pytest.mark.parametrize("generator", ["random", "hypothesis"])
def test_a_worker_stops_at_its_share_of_max_examples(generator: str) -> None:
    messages: queue.Queue[WorkerMessage] = queue.Queue()
    _work(0, messages, threading.Event(), plan(max_examples=90, workers=2, generator=generator))
    received = [messages.get_nowait() for _ in range(messages.qsize())]
    assert received[-1] == _Done(0)
    final = received[-2]
    assert isinstance(final, _Progress) and final.examples == 45
