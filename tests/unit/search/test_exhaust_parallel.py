"""`exhaust(workers=N)` / `kvcheck exhaust --workers N`: the sharded search gives the verdict, the
state count and the counterexample of one process; a target read from source works (its
coverage merged over the workers); a crashed worker is kvcheck's fault (exit 2); bad input is a
usage error. (The reduction's soundness over the mutant corpus: tests/quality/test_exhaust.py.)"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from kvcheck.cli.main import main
from kvcheck.errors import KvcheckInternalError, KvcheckUsageError
from kvcheck.mutants import get as get_entry
from kvcheck.search.exhaust import Bounds, better, exhaust, first_found, owner_of
from kvcheck.targets.loading import load_target

SMALL = Bounds(events=4, kinds=("admit", "step", "abort"), strides=(2,))

RESOLVER = textwrap.dedent(
    """\
    import multiprocessing
    import os

    def resolve(self, result, batch):
        if {crash} and multiprocessing.current_process().name.startswith("kvcheck-exhaust"):
            os._exit(7)
        ids = result.next_token_ids.tolist()
        accepts = result.accept_lens.tolist()
        stride = result.speculative_num_draft_tokens
        for req, accepted in zip(batch.reqs, accepts):
            if req.is_retracted or req.finished():
                continue
            req.kv.kv_committed_len += accepted
            req.spec_verify_ct += 1
            req.spec_num_correct_drafts += accepted - 1
            req.update_spec_correct_drafts_histogram(accepted - 1)
        return [ids[i * stride : i * stride + a] for i, a in enumerate(accepts)]
    """
)


def _source(tmp_path: Path, crash: bool) -> str:
    path = tmp_path / ("crashes.py" if crash else "resolver.py")
    path.write_text(RESOLVER.format(crash=crash))
    return f"{path}::resolve"


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


def test_a_source_target_on_workers_passes_with_merged_coverage(tmp_path: Path) -> None:
    target = load_target(_source(tmp_path, crash=False))
    one = exhaust(target, SMALL, convention="honest", global_counters="sglang")
    two = exhaust(target, SMALL, convention="honest", global_counters="sglang", workers=2)
    assert one.verdict == two.verdict == "pass"
    assert (one.states, one.scenarios) == (two.states, two.scenarios)
    assert one.coverage is not None and two.coverage is not None
    assert two.coverage.executed == one.coverage.executed and two.coverage.lines_run > 0


def test_a_crashed_worker_is_kvchecks_fault(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _source(tmp_path, crash=True)
    with pytest.raises(KvcheckInternalError, match="exhaust worker . ended unexpectedly"):
        exhaust(load_target(spec), SMALL, convention="honest", workers=2)
    code = main(["exhaust", spec, "--requests", "1", "--events", "3", "--workers", "2"])
    err = capsys.readouterr().err
    assert code == 2
    assert "ended unexpectedly" in err and "Traceback" not in err


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
