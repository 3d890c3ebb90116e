"""Damaged or mistyped counterexample files are one clear line (exit 2), never read as something
else: JSON's `true` is not the integer 1, `8.0` is not 8, and a nesting bomb is refused before
anything recurses into it (issue 12, item 4)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvcheck.cli.main import main
from kvcheck.core.run import run_scenario
from kvcheck.core.scenario import MAX_JSON_DEPTH, from_json
from kvcheck.counterexamples.fileformat import load, save
from kvcheck.counterexamples.replay import from_run
from kvcheck.errors import ScenarioFormatError
from kvcheck.families.sglang.scenario import Admit, Step
from kvcheck.targets.loading import load_target
from tests.helpers import scenario

STALE_FINISHED = scenario(Admit("r0", 10, 3), Step(), Step((2,)), Step((3,)), Step(), stride=4)


def saved(tmp_path: Path) -> Path:
    result = run_scenario(STALE_FINISHED, load_target("builtin:seed-prefix"), record=True)
    return save(from_run(result, "builtin:seed-prefix"), tmp_path)


def damaged(tmp_path: Path, change: Any) -> Path:
    path = saved(tmp_path)
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    return path


def _set_event(index: int, key: str, value: Any) -> Any:
    def change(data: dict[str, Any]) -> None:
        data["events"][index][key] = value

    return change


def _set_config(key: str, value: Any) -> Any:
    def change(data: dict[str, Any]) -> None:
        data["config"][key] = value

    return change


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (_set_event(0, "prompt_len", True), "'prompt_len' must be an integer, got True (bool)"),
        (_set_event(0, "prompt_len", 10.0), "'prompt_len' must be an integer, got 10.0 (float)"),
        (_set_event(0, "max_new_tokens", "3"), "'max_new_tokens' must be an integer, got '3'"),
        (_set_event(0, "eos_at", False), "'eos_at' must be an integer or null"),
        (_set_event(0, "rid", 0), "'rid' must be a string, got 0 (int)"),
        (_set_event(2, "accepts", [2.0]), "'accepts' must be a list of integers"),
        (_set_event(2, "accepts", [True]), "'accepts' must be a list of integers"),
        (_set_event(2, "accepts", "22"), "'accepts' must be a list of integers"),
        (_set_config("stride", 4.0), "'stride' must be an integer, got 4.0 (float)"),
        (_set_config("stride", True), "'stride' must be an integer, got True (bool)"),
        (_set_config("overlap", 1), "'overlap' must be true or false, got 1 (int)"),
        (_set_config("convention", None), "'convention' must be a string"),
        (_set_event(0, "grammar", {"kind": "reject", "at": 1.0}), "'at' must be an integer"),
        (_set_event(0, "grammar", [1]), "'grammar' must be an object or null"),
    ],
)
def test_a_mistyped_field_is_one_line_naming_it(
    tmp_path: Path, change: Any, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = damaged(tmp_path, change)
    with pytest.raises(ScenarioFormatError) as info:
        load(path)
    assert needle in str(info.value) and str(path) in str(info.value)
    # Every command that reads the file: exit 2, one line, no traceback.
    for command in (["replay", str(path)], ["regress", str(path), "--out", str(tmp_path)]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert needle in err and "Traceback" not in err and err.count("\n") == 1


def test_the_scenario_form_refuses_the_same(tmp_path: Path) -> None:
    text = json.dumps(
        {"schema_version": 1, "config": {}, "events": [{"kind": "switch_stride", "stride": 2.5}]}
    )
    with pytest.raises(ScenarioFormatError, match=r"'stride' must be an integer, got 2\.5"):
        from_json(text)


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 100_000])
def test_a_nesting_bomb_is_one_line(
    tmp_path: Path, depth: int, capsys: pytest.CaptureFixture[str]
) -> None:
    bomb = tmp_path / f"bomb{depth}.kvcheck.json"
    bomb.write_text("[" * depth + "]" * depth)
    with pytest.raises(ScenarioFormatError, match="nested more than"):
        load(bomb)
    with pytest.raises(ScenarioFormatError, match="nested more than"):
        from_json(bomb.read_text())
    # Deep inside an otherwise valid file: the saved violation's observed value.
    path = damaged(tmp_path, lambda d: d["violation"].update(observed=json.loads(bomb_text(60))))
    load(path)  # 60 levels under the top: still readable
    deep = damaged(
        tmp_path, lambda d: d["violation"].update(observed={"x": json.loads(bomb_text(70))})
    )
    for command in (["replay", str(bomb)], ["regress", str(deep), "--out", str(tmp_path)]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert "nested more than" in err and "Traceback" not in err


def bomb_text(depth: int) -> str:
    return "[" * depth + "]" * depth
