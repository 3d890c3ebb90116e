"""Schema version 4: documents name their engine family (issue 20, item 3).

kvcheck writes version 4 with `"family": "sglang"` and reads versions 1-4; a version 1-3 document
is SGLang's. Every counterexample file written before version 4 still reads, keeps its name
and replays with the same verdict: the committed ones under tests/counterexamples/ (version 1)
and the files in legacy/, written by the kvcheck before version 4 (versions 2 and 3).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvcheck.cli.main import main
from kvcheck.core.scenario import (
    FAMILIES,
    MAX_ID_CHARS,
    SCHEMA_VERSION,
    SUPPORTED_SCHEMA_VERSIONS,
    from_json,
    legacy_scenario_dict,
    to_json,
)
from kvcheck.core.target import Target
from kvcheck.counterexamples.fileformat import SUFFIX, load, loads
from kvcheck.counterexamples.regress import function_name
from kvcheck.counterexamples.replay import Replay, replay
from kvcheck.errors import ScenarioFormatError
from kvcheck.targets.loading import load_target
from tests.helpers import TESTS_DIR
from tests.unit.counterexamples.test_damaged_files import damaged, saved

COMMITTED = sorted((TESTS_DIR / "counterexamples").glob(f"*{SUFFIX}"))
LEGACY = sorted((Path(__file__).parent / "legacy").glob("*.json"))
FIXTURES = TESTS_DIR / "fixtures" / "sglang"


def _fixture_specs() -> list[str]:
    """Each fixture generation's correct and buggy resolver, as target specs."""
    index = json.loads((FIXTURES / "index.json").read_text())
    return [
        f"{FIXTURES / generation['path']}::{generation[which]}"
        for generation in index["generations"]
        for which in ("correct", "buggy")
    ]


@pytest.fixture(scope="module")
def fixture_targets() -> list[Target]:
    return [load_target(spec) for spec in _fixture_specs()]


def _verdict(replayed: Replay) -> tuple[str, Any]:
    found = replayed.violation
    where = None if found is None else (found.invariant, found.event_index, found.rid)
    return replayed.status, where


def test_the_files_cover_every_version_before_4() -> None:
    versions = {json.loads(path.read_text())["schema_version"] for path in COMMITTED + LEGACY}
    assert versions == {1, 2, 3} == set(SUPPORTED_SCHEMA_VERSIONS) - {SCHEMA_VERSION}


@pytest.mark.parametrize("path", COMMITTED + LEGACY, ids=lambda p: p.name)
def test_a_file_from_before_version_4_reads_as_sglang_and_keeps_its_identity(path: Path) -> None:
    document = json.loads(path.read_text())
    assert "family" not in document
    counterexample = load(path)
    # The scenario's pre-4 form is exactly what the file holds, so its digest is as before.
    assert legacy_scenario_dict(counterexample.scenario) == {
        key: document[key] for key in ("schema_version", "config", "events")
    }
    # Committed files carry the name they were saved under; the legacy copies were renamed.
    if path in COMMITTED:
        assert counterexample.file_name == path.name
    assert function_name(counterexample).endswith(counterexample.digest)
    rewritten = json.loads(counterexample.to_json())
    assert (rewritten["schema_version"], rewritten["family"]) == (SCHEMA_VERSION, "sglang")
    again = loads(counterexample.to_json())
    assert again == counterexample and again.file_name == counterexample.file_name


@pytest.mark.parametrize("path", COMMITTED + LEGACY, ids=lambda p: p.name)
def test_a_file_from_before_version_4_replays_as_its_version_4_rewrite(
    path: Path, fixture_targets: list[Target]
) -> None:
    old = load(path)
    new = loads(old.to_json(), source=str(path))
    # Against the saved target: a committed file points at the fix (no violation), a legacy
    # one at the target it was found against (the saved finding again).
    saved_verdict = _verdict(replay(old, path=path))
    assert saved_verdict[0] == ("none" if old.found_against else "same")
    assert _verdict(replay(new, path=path)) == saved_verdict
    for target in fixture_targets:
        assert _verdict(replay(new, target)) == _verdict(replay(old, target)), target.spec


def test_files_and_scenarios_are_written_as_version_4(tmp_path: Path) -> None:
    path = saved(tmp_path)
    data = json.loads(path.read_text())
    assert list(data)[:3] == ["format", "schema_version", "family"]
    assert (data["schema_version"], data["family"]) == (4, "sglang") and tuple(FAMILIES) == (
        "sglang",
        "vllm",
    )
    scenario = load(path).scenario
    assert json.loads(to_json(scenario))["family"] == "sglang"
    assert from_json(to_json(scenario)) == scenario


def _without_family(data: dict[str, Any]) -> None:
    del data["family"]


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (_without_family, "a schema_version 4 document must name its engine 'family' (known: "),
        (lambda d: d.update(family=None), "'family' must be a string naming an engine family"),
        (lambda d: d.update(family=4), "(known: sglang, vllm), got int"),
        (lambda d: d.update(family=["sglang"]), "(known: sglang, vllm), got list"),
        (lambda d: d.update(family="mamba"), "unknown engine family 'mamba'; this kvcheck knows: "),
        (lambda d: d.update(family="SGLang"), "unknown engine family 'SGLang'"),
        (lambda d: d.update(family="x" * 100_000), f"more than the bound {MAX_ID_CHARS}"),
        # Versions 1-3 predate the field: one there must say SGLang too.
        (lambda d: d.update(schema_version=3, family="mamba"), "unknown engine family 'mamba'"),
        (lambda d: d.update(schema_version=5), "reads version(s) 1, 2, 3, 4, as integers"),
    ],
)
def test_a_bad_family_or_a_newer_schema_is_one_line_and_exit_2(
    tmp_path: Path, change: Any, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = damaged(tmp_path, change)
    with pytest.raises(ScenarioFormatError) as info:
        load(path)
    assert needle in str(info.value) and str(path) in str(info.value)
    for command in (["replay", str(path)], ["regress", str(path)]):
        assert main(command) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and "Traceback" not in captured.err
        lines = captured.err.splitlines()
        assert len(lines) == 1 and needle in lines[0] and lines[0].startswith("kvcheck: error:")
    # The bare scenario document (a database entry) refuses it the same way.
    document = json.loads(path.read_text())
    with pytest.raises(ScenarioFormatError) as bare:
        from_json(json.dumps({k: document[k] for k in document if k != "violation"}))
    assert needle in str(bare.value)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_versions_1_to_3_read_without_a_family(tmp_path: Path, version: int) -> None:
    def as_old(data: dict[str, Any]) -> None:
        del data["family"]
        data["schema_version"] = version

    assert load(damaged(tmp_path, as_old)).scenario == load(saved(tmp_path)).scenario
