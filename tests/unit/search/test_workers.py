"""The worker pool that `fuzz` and `exhaust --workers` share: named messages, errors raised by a
worker's body reported as `Refused` / `Crashed`, how a dead worker ended, and every worker ended
and reaped by `close`, whatever it was doing. Real spawned processes, one or two each."""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

from kvcheck.errors import KvcheckUsageError
from kvcheck.search.workers import Crashed, Refused, WorkerMessage, WorkerPool, take_jobs


@dataclasses.dataclass(frozen=True)
class Echo(WorkerMessage):
    said: str


def echo(index: int, messages: Any, stop: Any, word: str, reply: Any) -> None:
    messages.put(Echo(index, f"{word} {index}"))
    reply.put(os.getpid())


def echo_jobs(index: int, messages: Any, stop: Any, jobs: Any) -> None:
    for job in take_jobs(jobs, stop):
        messages.put(Echo(index, job))


def refuse(index: int, messages: Any, stop: Any) -> None:
    raise KvcheckUsageError(f"worker {index} cannot judge this target")


def crash(index: int, messages: Any, stop: Any) -> None:
    raise ZeroDivisionError("kvcheck's own bug")


def exit_early(index: int, messages: Any, stop: Any) -> None:
    os._exit(7)


def ignore_stop(index: int, messages: Any, stop: Any) -> None:
    messages.put(Echo(index, "looping"))
    while True:
        time.sleep(0.05)


def receive_all(pool: WorkerPool, count: int, timeout: float = 60.0) -> list[WorkerMessage]:
    received: list[WorkerMessage] = []
    until = time.monotonic() + timeout
    while len(received) < count and time.monotonic() < until:
        message = pool.receive(0.2)
        if message is not None:
            received.append(message)
    return received


def test_workers_send_named_messages_on_the_shared_queue() -> None:
    pool = WorkerPool("test", 2)
    replies = [pool.queue() for _ in range(2)]
    try:
        pool.start(echo, lambda i: ("hello", replies[i]))
        received = receive_all(pool, 2)
        assert sorted(received, key=lambda m: m.worker) == [Echo(0, "hello 0"), Echo(1, "hello 1")]
        assert {replies[i].get(timeout=30) for i in range(2)} == {p.pid for p in pool.processes}
        assert [p.name for p in pool.processes] == ["kvcheck-test-0", "kvcheck-test-1"]
    finally:
        pool.close()
    assert all(p.exitcode is not None for p in pool.processes)


def test_workers_take_each_job_of_a_job_queue_once() -> None:
    pool = WorkerPool("test", 2)
    jobs = pool.job_queue(f"job {i}" for i in range(5))
    try:
        pool.start(echo_jobs, lambda _: (jobs,))
        received = receive_all(pool, 5)
        for process in pool.processes:  # each ends at its end marker
            process.join(timeout=60)
        assert [p.exitcode for p in pool.processes] == [0, 0]
    finally:
        pool.close()
    assert sorted(m.said for m in received if isinstance(m, Echo)) == [f"job {i}" for i in range(5)]


def test_a_usage_error_is_refused_and_anything_else_crashed() -> None:
    for main, kind, text in (
        (refuse, Refused, "worker 0 cannot judge this target"),
        (crash, Crashed, "ZeroDivisionError: kvcheck's own bug"),
    ):
        pool = WorkerPool("test", 1)
        try:
            pool.start(main, lambda _: ())
            (message,) = receive_all(pool, 1)
        finally:
            pool.close()
        assert message == kind(0, text)


def test_a_dead_worker_says_how_it_ended() -> None:
    pool = WorkerPool("test", 1)
    try:
        assert pool.ended_how(0) is None  # not started
        pool.start(exit_early, lambda _: ())
        pool.processes[0].join(timeout=60)
        assert pool.ended_how(0) == "exited with code 7"
    finally:
        pool.close()


def test_close_ends_a_worker_that_ignores_the_stop_flag() -> None:
    pool = WorkerPool("test", 1)
    try:
        pool.start(ignore_stop, lambda _: ())
        assert receive_all(pool, 1) == [Echo(0, "looping")]
        assert pool.ended_how(0) is None
    finally:
        pool.close()
    assert pool.stop.is_set()
    assert pool.ended_how(0) == "killed by signal 15"
