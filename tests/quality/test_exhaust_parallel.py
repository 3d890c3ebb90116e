"""`kvcheck exhaust --workers N` with a target read from source (loaded by each worker, its
coverage merged), a worker that dies (kvcheck's fault: exit 2, no verdict), and Ctrl-C (exit 130,
no worker left behind)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from kvcheck.cli.main import main
from kvcheck.errors import KvcheckInternalError
from kvcheck.families.sglang.search import Bounds
from kvcheck.search.exhaust import exhaust
from kvcheck.targets.loading import load_target
from tests.quality.test_deadlines_and_stops import _clean, _interrupt, _wait_gone

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
    with pytest.raises(KvcheckInternalError, match=r"exhaust worker \d ended unexpectedly"):
        exhaust(load_target(spec), SMALL, convention="honest", workers=2)
    code = main(["exhaust", spec, "--requests", "1", "--events", "3", "--workers", "2"])
    err = capsys.readouterr().err
    assert code == 2
    assert "ended unexpectedly" in err and "Traceback" not in err


def test_ctrl_c_stops_exhaust_workers_included(tmp_path: Path) -> None:
    argv = [
        "exhaust", "builtin:reference", "--requests", "3", "--events", "12", "--no-save",
        "--workers", "2",
    ]  # fmt: skip
    code, out, err, took, children = _interrupt(tmp_path, argv, " states, ", settle=1.0)
    _clean(out, err)
    assert code == 130
    assert took < 2.5, took
    assert "Ctrl-C stopped the search" in out
    assert children
    assert not _wait_gone(children, 3)
