"""vLLM releases' own scheduler code, compiled from the cached wheels and driven over kvcheck's
strict fakes through the family's engine. The survey's sequences (shared/vllm-async-spec.md §4
rows 3 and 4) on the real code: 0.26.0 duplicates a token when a preempted request resumes
before its stale frame returns (depth 3 only), and loses tokens after a reset with drafts in
flight; 0.33.0 is clean on both. Then `kvcheck check` end to end at default options.

Skipped when a wheel cannot be had (no index, nothing cached); under CI=true that is a failure
instead.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import attrs
import pytest

from kvcheck.cli.main import main
from kvcheck.core.run import run_scenario
from kvcheck.core.scenario import Scenario
from kvcheck.core.target import Target
from kvcheck.errors import TargetLoadError
from kvcheck.families.vllm.engine import Observation, VllmEngine
from kvcheck.families.vllm.real import RELEASES, generations
from kvcheck.families.vllm.real.adapter import ReleaseScheduler
from kvcheck.families.vllm.real.compiled import compile_release
from kvcheck.families.vllm.real.release import release_package
from kvcheck.families.vllm.scenario import Add, Drain, Reset, Step, VllmConfig, token_at
from kvcheck.families.vllm.target import FrameOutput, NewRequest, SchedulerSettings
from kvcheck.search.check import check
from kvcheck.targets.loading import load_target
from kvcheck.targets.wheels import version_key
from tests.unit.families.vllm.sequences import PREEMPT_THEN_RESUME, PRESSURE


def _package(version: str) -> Path:
    try:
        return release_package(version)
    except TargetLoadError as exc:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"vLLM {version} cannot be had here: {exc}")


@functools.cache
def _target(version: str) -> Target:
    """The release, loaded once per module: loading compiles its scheduler from the wheel's
    files (about a second), and the per-release tests judge the same target."""
    _package(version)  # skips (or fails under CI) when the wheel cannot be had
    return load_target(f"vllm=={version}")


# vllm#49620 (row 4): a reset that preempts a request with k >= 1 drafts in flight.
ROOMY = VllmConfig(
    num_blocks=32, block_size=4, max_num_scheduled_tokens=32, max_model_len=32, num_spec_tokens=3
)
RESET = (Add("r0", 4, 10), *(Step(0),) * 3, Reset(), *(Step(1),) * 6, Drain(1))


def _first_violation(target: Target, config: VllmConfig, events: tuple[object, ...]) -> str | None:
    result = run_scenario(Scenario(config, events, family="vllm"), target)
    return None if result.violation is None else result.violation.invariant


def _run_unjudged(
    target: Target, config: VllmConfig, events: tuple[object, ...]
) -> list[Observation]:
    """Every observation of the engine, the invariants set aside (to see what the code does
    after the first violation)."""
    engine = VllmEngine(config, target)
    return [engine.apply(event) for event in events]  # type: ignore[arg-type]


def _true_output(rid: str, prompt: int, count: int) -> tuple[int, ...]:
    return tuple(token_at(position, None) for position in range(prompt, prompt + count))


def test_0_26_0_resumes_before_the_stale_frame_returns_and_duplicates_a_token() -> None:
    target = _target("0.26.0")
    # The reservation check fires first: the resumed request was launched with PH 0.
    assert _first_violation(target, PRESSURE, PREEMPT_THEN_RESUME) == "vllm-reservation"
    final = _run_unjudged(target, PRESSURE, PREEMPT_THEN_RESUME)[-1]
    out = final.emitted["r1"]
    assert len(out) > len(set(out)), out  # a position delivered twice
    assert final.finished["r1"] == "length"
    # At depth 2 the stale frame is back before the resume: nothing to see.
    shallow = attrs.evolve(PRESSURE, pp_size=1)
    assert _first_violation(target, shallow, PREEMPT_THEN_RESUME) is None


def test_0_26_0_loses_tokens_after_a_reset_with_drafts_in_flight() -> None:
    target = _target("0.26.0")
    assert _first_violation(target, ROOMY, RESET) == "vllm-exactly-once"
    final = _run_unjudged(target, ROOMY, RESET)[-1]
    out = final.emitted["r0"]
    assert len(out) == len(set(out)) == 10, out  # no duplicate, as many as asked ...
    assert out != _true_output("r0", 4, 10)  # ... but positions skipped: tokens lost
    assert set(out) - set(_true_output("r0", 4, 10)), out


def test_0_33_0_is_clean_on_the_same_sequences() -> None:
    target = _target("0.33.0")
    assert _first_violation(target, PRESSURE, PREEMPT_THEN_RESUME) is None
    assert _first_violation(target, attrs.evolve(PRESSURE, pp_size=1), PREEMPT_THEN_RESUME) is None
    assert _first_violation(target, ROOMY, RESET) is None
    final = _run_unjudged(target, PRESSURE, PREEMPT_THEN_RESUME)[-1]
    assert final.emitted["r1"] == _true_output("r1", 4, 12)


@pytest.mark.parametrize("version", ["0.26.0", "0.33.0"])
def test_the_adapter_reports_preemptions_and_finish_reasons(version: str) -> None:
    target = _target(version)
    observed = _run_unjudged(target, attrs.evolve(PRESSURE, pp_size=1), PREEMPT_THEN_RESUME)
    preempted = [rid for o in observed for f in o.launches for rid in f.launch.preempted]
    assert preempted == ["r1"]  # the release's own schedule() chose r1 under KV pressure
    assert observed[-1].finished == {"r1": "length"}
    assert "r0" not in observed[-1].finished  # aborted: vLLM emits nothing for it
    stop = _run_unjudged(target, ROOMY, (Add("r0", 3, 10, eos_at=2), Drain(3)))[-1]
    assert stop.finished == {"r0": "stop"} and stop.emitted["r0"][-1] == 2  # EOS, then trimmed
    assert len(stop.emitted["r0"]) == 3


def test_the_real_0_26_0_scheduler_runs_a_request_to_its_length_without_the_engine() -> None:
    scheduler = ReleaseScheduler(
        compile_release(_package("0.26.0")),
        SchedulerSettings(
            num_blocks=40,
            block_size=16,
            max_num_scheduled_tokens=64,
            max_num_seqs=8,
            max_model_len=256,
            num_spec_tokens=2,
            async_scheduling=True,
        ),
    )
    scheduler.add_request(NewRequest("a", tuple(range(1, 21)), max_tokens=6))
    in_flight = []
    delivered: list[int] = []
    finished = {}
    for step in range(12):
        if scheduler.has_requests():
            launch = scheduler.schedule()
            in_flight.append(launch)
            view = scheduler.request_view("a")
            if view is not None and launch.scheduled and not view.is_prefill_chunk:
                # The running-request identity C == T + PH - 1 (survey §3.1), on real code.
                assert (
                    view.num_computed_tokens == view.num_tokens + view.num_output_placeholders - 1
                )
        if len(in_flight) >= 2 or (in_flight and not scheduler.has_requests()):
            launch = in_flight.pop(0)
            sampled = {
                r.request_id: (100 + step,) + (200 + step,) * bool(r.spec_token_ids)
                for r in launch.scheduled
            }
            result = scheduler.update_from_output(launch, FrameOutput(launch.step, sampled))
            delivered += result.new_token_ids.get("a", ())
            finished.update(result.finished)
    assert finished == {"a": "length"}
    assert len(delivered) == 6
    assert scheduler.pool_view().free_blocks == 39  # every block back, the null block aside


def test_kvcheck_check_fails_0_26_0_and_passes_0_33_0_at_default_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _package("0.26.0")
    _package("0.33.0")
    saved = ["--no-database", "--save-dir", str(tmp_path)]
    assert main(["check", "vllm==0.26.0", *saved]) == 1
    files = list(tmp_path.glob("*.kvcheck.json"))
    assert len(files) == 1
    data = json.loads(files[0].read_text())
    assert data["family"] == "vllm" and data["target"] == "vllm==0.26.0"
    assert data["violation"]["invariant"] in {
        "vllm-exactly-once",
        "vllm-reservation",
        "vllm-counters",
    }
    assert len(data["events"]) <= 10  # shrunk
    capsys.readouterr()
    assert main(["replay", str(files[0])]) == 1
    assert "REPRODUCED" in capsys.readouterr().out
    assert main(["replay", str(files[0]), "--target", "vllm==0.33.0"]) == 0
    assert main(["check", "vllm==0.33.0", *saved]) == 0
    assert "PASS" in capsys.readouterr().out


# Every vLLM release from 0.11.1, with the verdict `kvcheck check vllm==V` must reach at default
# options and the invariant a FAIL breaks first, as docs/vllm-generations.md reasons them out
# from each release's code (written here, not read from `generations`, which the test checks):
# - 0.11.x: no discard, no reset of running requests, depth 2 only: nothing found;
# - 0.12-0.24: a stale frame's rejected drafts come off the resumed request's PH (vllm#46066);
# - 0.25-0.26: one frame dropped per discarded placeholder, a token lost (vllm#49620);
# - 0.27 on: the stale-output mechanism: nothing found.
_CLEAN: tuple[str, ...] = ("0.11.1", "0.11.2")
_COUNTERS = [
    "0.12.0",
    "0.13.0",
    "0.14.0",
    "0.14.1",
    "0.15.0",
    "0.15.1",
    "0.16.0",
    "0.17.0",
    "0.17.1",
    "0.18.0",
    "0.18.1",
    "0.19.0",
    "0.19.1",
    "0.20.0",
    "0.20.1",
    "0.20.2",
    "0.21.0",
    "0.22.0",
    "0.22.1",
    "0.23.0",
    "0.24.0",
]
_LOST = ("0.25.0", "0.25.1", "0.26.0")
_FIXED = ["0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"]
EXPECTED_VERDICTS: dict[str, str | None] = {
    **dict.fromkeys(_CLEAN + tuple(_FIXED), None),
    **dict.fromkeys(_COUNTERS, "vllm-counters"),
    **dict.fromkeys(_LOST, "vllm-exactly-once"),
}
# A clean release is searched this far (the FAIL ones stop at their first counterexample):
# enough to reach the reset, preemption and resume sequences, and the 11 clean releases stay
# within about 20 s of CPU together.
_CLEAN_EXAMPLES = 80


@pytest.mark.parametrize("version", sorted(EXPECTED_VERDICTS, key=version_key))
def test_every_release_gets_the_verdict_its_generation_predicts(version: str) -> None:
    target = _target(version)
    expected = EXPECTED_VERDICTS[version]
    verdict = check(
        target,
        max_examples=_CLEAN_EXAMPLES if expected is None else 300,
        seed=0,
        database=None,
        measure_coverage=False,
    )
    broken = None if verdict.violation is None else verdict.violation.invariant
    assert broken == expected, (version, verdict.violation)
    # A FAIL is the generation's known bug, never `unexplained`.
    bug = dict(generations.facts(version, broken))["bug"]
    assert (bug == generations.NO_BUG) == (expected is None)
    assert bug != generations.UNEXPLAINED


@pytest.mark.parametrize("version", ["0.11.1", "0.34.0"])
def test_the_oldest_and_newest_run_the_survey_s_sequences_clean(version: str) -> None:
    """0.11.x has no `reset_running_requests` (its reset preempts nothing) and 0.34.0 re-sends a
    resumed request among the new ones: on both, the resume and the reset lose nothing."""
    target = _target(version)
    shallow = attrs.evolve(PRESSURE, runner="v1", pp_size=1)
    assert _first_violation(target, shallow, PREEMPT_THEN_RESUME) is None
    assert _run_unjudged(target, shallow, PREEMPT_THEN_RESUME)[-1].emitted["r1"] == (
        _true_output("r1", 4, 12)
    )
    assert _first_violation(target, ROOMY, RESET) is None


def test_kvcheck_releases_family_vllm_rows_name_generation_and_bug(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for version in ("0.26.0", "0.27.0"):
        _package(version)
    # The index is not asked: the two cached releases are the range.
    monkeypatch.setattr(
        type(RELEASES), "available_versions", staticmethod(lambda: ["0.26.0", "0.27.0"])
    )
    argv = ["releases", "--family", "vllm", "--from", "0.26.0", "--max-examples", "60"]
    argv.append("--no-coverage")
    assert main([*argv, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["releases"]
    assert [(r["version"], r["verdict_vllm"], r["first_broken"], r["bug"]) for r in rows] == [
        ("0.26.0", "fail", "vllm-exactly-once", "vllm#49620"),
        ("0.27.0", "pass", None, "-"),
    ]
    assert [r["generation"] for r in rows] == ["0.25.0-0.26.0", "0.27.0-0.32.0"]
    assert list(rows[0])[list(rows[0]).index("first_broken") + 1 :][:3] == [
        "generation",
        "bug",
        "resolves",
    ]
    assert main(argv) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert header.split()[:4] == ["release", "convention", "api", "shape"]
    assert "generation" in header and "bug" in header
    assert "vllm#49620" in lines[0] and lines[0].split()[0] == "0.26.0"


def test_a_release_reports_its_schedulers_coverage_over_its_three_files(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The scheduler's code runs in the methods of what the factory builds, over scheduler.py,
    async_scheduler.py and utils.py: each is measured, what only out-of-scope inputs reach is
    listed with its reason and not counted, and the rest (issue 22) is at least 90% run.
    --min-coverage holds the release to the same figure: every counted line runs (each
    never-run one is named with its reason, tests/quality/test_vllm_coverage_named.py), so one
    run with the gate at 100% passes and reports what it measured."""
    _package("0.33.0")
    args = ["check", "vllm==0.33.0", "--no-save", "--no-database", "--seed", "0", "--json"]
    assert main([*args, "--min-coverage", "100"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["verdict"] == "pass" and report["coverage_below_minimum"] is False
    coverage = report["coverage"]
    names = [Path(part["file"]).name for part in coverage["files"]]
    assert names == ["scheduler.py", "async_scheduler.py", "utils.py"]
    assert "Scheduler.schedule" in coverage["functions"] and "check_stop" in coverage["functions"]
    assert coverage["line_percent"] >= 90
    assert coverage["lines_total"] == sum(part["lines_total"] for part in coverage["files"])
    scheduler = coverage["files"][0]
    reasons = {entry["reason"] for entry in scheduler["uncounted_lines"]}
    assert any("KV connector" in reason for reason in reasons)
    assert any("encoder" in reason for reason in reasons)
    uncounted = {line for entry in scheduler["uncounted_lines"] for line in entry["lines"]}
    assert not uncounted & set(scheduler["missed_lines"])  # listed once, never counted
    assert coverage["lines_run"] == coverage["lines_total"]


# Speculative statistics (docs/vllm.md "Speculative statistics"): a reset with drafts in flight,
# every draft accepted so that no stale rejection reaches the counters (vllm#46066's path). The
# frame in flight at the reset comes back stale, and each generation drops its output. What its
# statistics do with it, per generation: 0.11.x preempts nothing at a reset (no stale frame);
# 0.12-0.24 drop the frame's tokens after `observe_draft` counted its drafts (the flag, then the
# counter, in `_update_request_with_output`), and 0.22-0.24's counter drops fresh frames too;
# 0.25-0.26 skip its drafts while the discard count
# is pending, and lose a token (the discard is spent per frame); 0.27 on skip drop-mode output
# before the statistics. Judged with the dropped frame excluded, then included.
_ACCEPTING = attrs.evolve(ROOMY, num_spec_tokens=2)
_RESET_ACCEPTING = (Add("r0", 4, 10), *(Step(2),) * 3, Reset(), *(Step(2),) * 6, Drain(2))
EXPECTED_STATS: dict[str, tuple[str | None, str | None]] = {
    **dict.fromkeys(_CLEAN, (None, None)),
    **dict.fromkeys(_COUNTERS[:-4], ("vllm-spec-stats", None)),
    # The discard counter (0.22-0.24) is set in tokens and spent per frame: it drops the
    # resumed request's fresh frames too, and their tokens are lost (vllm#49620's class).
    **dict.fromkeys(_COUNTERS[-4:], ("vllm-spec-stats", "vllm-exactly-once")),
    **dict.fromkeys(_LOST, ("vllm-exactly-once", "vllm-spec-stats")),
    **dict.fromkeys(_FIXED, (None, "vllm-spec-stats")),
}


@pytest.mark.parametrize("version", sorted(EXPECTED_STATS, key=version_key))
def test_each_release_counts_a_dropped_stale_frame_as_its_generation_does(version: str) -> None:
    target = _target(version)
    excluded, included = EXPECTED_STATS[version]
    assert _first_violation(target, _ACCEPTING, _RESET_ACCEPTING) == excluded
    judged_included = attrs.evolve(_ACCEPTING, spec_stats="included")
    assert _first_violation(target, judged_included, _RESET_ACCEPTING) == included
    off = attrs.evolve(_ACCEPTING, spec_stats="off")
    assert _first_violation(target, off, _RESET_ACCEPTING) in (None, "vllm-exactly-once")
