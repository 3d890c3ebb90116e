"""`exhaust(workers=N)` / `kvcheck exhaust --workers N`: the sharded search gives the verdict, the
state count and the counterexample of one process; bad input is a usage error. (Targets read
from source, crashed workers and Ctrl-C: tests/quality/test_exhaust_parallel.py; the reduction's
soundness over the mutant corpus: tests/quality/test_exhaust.py.)"""

from __future__ import annotations

import json

import attrs
import pytest

from kvcheck.cli.main import main
from kvcheck.core.family import registered
from kvcheck.errors import KvcheckUsageError
from kvcheck.families.sglang import FAMILY
from kvcheck.families.sglang.search import Bounds
from kvcheck.mutants import get as get_entry
from kvcheck.search.exhaust import better, exhaust, first_found, owner_of
from kvcheck.targets.loading import load_target

SMALL = Bounds(events=4, kinds=("admit", "step", "abort"), strides=(2,))
# SGLang's family under another name, registered only while a test runs (as a test's own family
# is): spawned workers know it from the parent's registrations alone.
RENAMED = attrs.evolve(FAMILY, name="sglang-renamed")


def test_two_workers_give_one_process_verdict_counts_and_counterexample() -> None:
    entry = get_entry("mutant:finished-no-giveback")
    options = {
        "convention": entry.convention,
        "global_counters": entry.global_counters,
        "adaptive": entry.adaptive,
    }
    one = exhaust(entry.target(), Bounds(events=5), **options)
    two = exhaust(entry.target(), Bounds(events=5), workers=2, **options)
    assert one.verdict == two.verdict == "fail"
    assert (one.states, one.scenarios, one.depth) == (two.states, two.scenarios, two.depth)
    assert one.counterexample == two.counterexample
    assert one.violation == two.violation
    assert one.minimal_invariants == two.minimal_invariants
    assert two.workers == 2 and one.workers == 1


def test_workers_know_a_family_registered_at_run_time() -> None:
    with registered("sglang-renamed", f"{__name__}:RENAMED"):
        target = attrs.evolve(load_target("builtin:seed-prefix"), family="sglang-renamed")
        one = exhaust(target, SMALL, convention="preclaim")
        two = exhaust(target, SMALL, convention="preclaim", workers=2)
    assert one.family == two.family == "sglang-renamed"
    assert (one.verdict, one.states, one.scenarios) == (two.verdict, two.states, two.scenarios)
    assert one.counterexample == two.counterexample
    if one.counterexample is not None:
        assert one.counterexample.family == "sglang-renamed"


@pytest.mark.parametrize("workers", [0, -1])
def test_workers_below_one_are_a_usage_error(
    workers: int, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(KvcheckUsageError, match="workers must be >= 1"):
        exhaust(load_target("builtin:reference"), SMALL, workers=workers)
    code = main(["exhaust", "builtin:reference", "--workers", str(workers)])
    err = capsys.readouterr().err
    assert code == 2 and "--workers" in err and len(err.strip().splitlines()) == 1


def test_cli_json_reports_the_workers(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["exhaust", "builtin:reference", "--requests", "1", "--events", "3", "--json"]
    assert main([*argv, "--workers", "2"]) == 0
    two = json.loads(capsys.readouterr().out)
    assert main(argv) == 0
    one = json.loads(capsys.readouterr().out)
    assert two["workers"] == 2 and one["workers"] == 1
    assert two["states"] == one["states"] and two["verdict"] == one["verdict"] == "pass"


def test_ownership_and_the_stable_order() -> None:
    key = bytes(range(16))
    assert owner_of(key, 1) == 0
    assert {owner_of(bytes([i]) * 16, 3) for i in range(30)} == {0, 1, 2}
    assert owner_of(key, 4) == owner_of(key, 4)
    # Fewer steps win; then the first start config; then the events' text.
    assert better(1, 5, (), (2, 0, (), None))
    assert not better(2, 0, (), (1, 5, (), None))
    assert better(1, 0, (), (1, 1, (), None))
    found = [(1, (), "b"), (0, (), "c"), (0, (), "a")]
    assert first_found(found)[0] == 0
