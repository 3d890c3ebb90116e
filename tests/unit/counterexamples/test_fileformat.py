"""Counterexample files: format, naming, bad input and replay statuses. (The explanations are
tests/unit/reporting/test_explain.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from kvcheck.core.invariant import Violation
from kvcheck.core.run import RunResult, run_scenario
from kvcheck.core.scenario import Scenario
from kvcheck.counterexamples.fileformat import (
    SUFFIX,
    Counterexample,
    SavedViolation,
    load,
    loads,
    save,
)
from kvcheck.counterexamples.replay import from_run, replay, replay_command
from kvcheck.errors import KvcheckUsageError, ScenarioFormatError
from kvcheck.families.sglang.scenario import Admit, Retract, Step
from kvcheck.targets.loading import load_target
from tests.helpers import COMMITTED_COUNTEREXAMPLES, scenario

COMMITTED = COMMITTED_COUNTEREXAMPLES

# docs/semantics.md §3.1 (finish, then the stale row of the launch in flight).
STALE_FINISHED = scenario(Admit("r0", 10, 3), Step(), Step((2,)), Step((3,)), Step(), stride=4)
# docs/semantics.md §3.2 (retraction while a launch is in flight).
STALE_RETRACTED = scenario(Admit("r0", 10, 20), Step(), Step((3,)), Retract("r0"), Step(), stride=4)


def failing_run(s: Scenario = STALE_FINISHED, spec: str = "builtin:seed-prefix") -> RunResult:
    result = run_scenario(s, load_target(spec), record=True)
    assert result.violation is not None
    return result


def test_round_trip_keeps_everything() -> None:
    cx = from_run(failing_run(), "builtin:seed-prefix", convention_reason="given")
    again = loads(cx.to_json())
    assert again == cx
    data = json.loads(cx.to_json())
    assert (data["schema_version"], data["family"]) == (4, "sglang")
    assert data["target"] == "builtin:seed-prefix"
    assert data["kvcheck_version"]
    assert data["violation"]["invariant"] == "committed-finished-frozen"
    assert data["violation"]["event_index"] == 4
    assert data["config"]["stride"] == 4 and len(data["events"]) == 5


def test_same_finding_same_name_and_metadata_does_not_matter(tmp_path: Path) -> None:
    cx = from_run(failing_run(), "builtin:seed-prefix")
    first = save(cx, tmp_path)
    second = save(attrs.evolve(cx, convention_reason="other", kvcheck_version="9.9"), tmp_path)
    assert first == second and first.name.endswith(SUFFIX)
    assert first.stat().st_mode & 0o777 == 0o644
    assert first.name.startswith("builtin-seed-prefix-committed-finished-frozen-")
    assert [p.name for p in tmp_path.iterdir()] == [first.name]
    other_target = save(cx.retarget("builtin:reference"), tmp_path)
    assert other_target != first
    other_scenario = from_run(failing_run(STALE_RETRACTED), "builtin:seed-prefix")
    assert other_scenario.file_name != cx.file_name


@pytest.mark.parametrize(
    ("spec", "start"),
    [
        (
            "/home/alice/projects/serving/resolvers/eagle_overlap_resolver.py::EagleWorker.resolve",
            "eagle-overlap-resolver-eagleworker-resolve-",
        ),
        ("C:\\work\\my_resolver.py::Spec.resolve", "my-resolver-spec-resolve-"),
        ("serving.spec.worker:OverlapResolver.resolve", "worker-overlapresolver-resolve-"),
        ("/opt/checkouts/sglang-main/python/sglang", "python-sglang-"),
        ("builtin:seed-prefix", "builtin-seed-prefix-"),
        ("sglang==0.5.23", "sglang-0-5-23-"),
    ],
)
def test_file_names_keep_the_target_file_and_qualname(spec: str, start: str) -> None:
    cx = attrs.evolve(from_run(failing_run(), "builtin:seed-prefix"), target=spec)
    assert cx.file_name.startswith(start + "committed-finished-frozen-"), cx.file_name


def test_retarget_remembers_where_it_was_found() -> None:
    cx = from_run(failing_run(), "builtin:seed-prefix").retarget("builtin:reference")
    assert (cx.target, cx.found_against) == ("builtin:reference", "builtin:seed-prefix")
    assert loads(cx.to_json()).found_against == "builtin:seed-prefix"
    back = cx.retarget("builtin:seed-prefix")
    assert back.found_against is None


def write(tmp_path: Path, text: str, name: str = "x.kvcheck.json") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def valid_text() -> str:
    return from_run(failing_run(), "builtin:seed-prefix").to_json()


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda t: t[: len(t) // 2], "not valid JSON (corrupt or truncated?)"),
        (lambda t: "", "not valid JSON"),
        (lambda t: "[1, 2]", "must be a JSON object"),
        (
            lambda t: t.replace('"schema_version": 4', '"schema_version": 5'),
            "reads version(s) 1, 2, 3, 4",
        ),
        (lambda t: t.replace('"schema_version": 4,', ""), "unsupported schema_version None"),
        (lambda t: t.replace('"family": "sglang"', '"family": "mamba"'), "unknown engine family"),
        (lambda t: t.replace("kvcheck-counterexample", "something-else"), "format is"),
        (lambda t: t.replace('"event_index": 4', '"event_index": "4"'), "event_index"),
        (lambda t: t.replace('"kind": "step"', '"kind": "teleport"', 1), "unknown event kind"),
        (lambda t: t.replace('"stride": 4', '"stride": 99'), "invalid config"),
    ],
)
def test_bad_files_are_one_clear_line(tmp_path: Path, mutate: object, needle: str) -> None:
    assert callable(mutate)
    path = write(tmp_path, mutate(valid_text()))
    with pytest.raises(ScenarioFormatError) as info:
        load(path)
    message = str(info.value)
    assert needle in message and str(path) in message and "\n" not in message


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(ScenarioFormatError, match="no such counterexample file"):
        load(tmp_path / "nope.kvcheck.json")
    with pytest.raises(ScenarioFormatError, match="is a directory"):
        load(tmp_path)


def test_replay_same_different_and_none() -> None:
    cx = from_run(failing_run(), "builtin:seed-prefix")
    same = replay(cx)
    assert (same.status, same.target) == ("same", "builtin:seed-prefix")
    assert "REPRODUCED" in same.summary()

    fixed = replay(cx, "builtin:reference")
    assert fixed.status == "none" and fixed.violation is None
    assert "NO VIOLATION" in fixed.summary()

    assert cx.violation is not None
    moved = attrs.evolve(cx, violation=attrs.evolve(cx.violation, invariant="stats-histogram"))
    different = replay(moved)
    assert different.status == "different"
    assert "a different invariant than saved" in different.summary()


def test_replay_needs_a_loadable_target() -> None:
    cx = from_run(failing_run(), "builtin:seed-prefix")
    with pytest.raises(ScenarioFormatError, match="names no target"):
        replay(attrs.evolve(cx, target=None))
    with pytest.raises(KvcheckUsageError, match=r"x.kvcheck.json: its saved target"):
        replay(attrs.evolve(cx, target="builtin:gone"), path="x.kvcheck.json")


def test_replay_command_quotes_odd_paths() -> None:
    assert replay_command("a b.kvcheck.json") == "kvcheck replay 'a b.kvcheck.json'"
    assert replay_command("dir/x.kvcheck.json") == "kvcheck replay dir/x.kvcheck.json"


def test_committed_counterexamples_pass_against_the_fix() -> None:
    files = sorted(COMMITTED.glob(f"*{SUFFIX}"))
    assert len(files) >= 3
    for path in files:
        cx = load(path)
        assert cx.found_against is not None and cx.violation is not None
        assert replay(cx).violation is None, path
        # ... and still catch the resolver they were found against.
        assert replay(cx, cx.found_against).status == "same", path


def test_saved_violation_values_are_plain_json() -> None:
    violation = Violation("stats-histogram", 3, "r0", {2: 1}, {1: (2, 3), 4: object()}, "m")
    saved = SavedViolation.from_violation(violation)
    assert saved.expected == {"2": 1}
    assert saved.observed["1"] == [2, 3] and saved.observed["4"].startswith("<object")
    cx = Counterexample(STALE_FINISHED, "builtin:seed-prefix", saved)
    assert loads(cx.to_json()).violation == saved
    assert saved.same_as(violation)
