"""Scenarios as data: exact JSON round trips and clear errors for bad documents."""

from __future__ import annotations

import json

import pytest
from hypothesis import given

from kvcheck.core.scenario import (
    SCHEMA_VERSION,
    Scenario,
    from_json,
    legacy_scenario_dict,
    scenario_to_dict,
    to_json,
)
from kvcheck.errors import ScenarioFormatError
from kvcheck.families.sglang.scenario import ALGORITHMS, Admit, Config, Step
from kvcheck.strategies import scenarios


@given(
    scenarios(adaptive=True)
    | scenarios(convention="honest", global_counters="sglang")
    | scenarios(convention="honest", algorithms=ALGORITHMS, block_cap=True, grammar=True)
)
def test_json_round_trips_exactly(scenario: Scenario) -> None:
    assert from_json(to_json(scenario)) == scenario


def test_json_form_is_versioned_and_readable() -> None:
    scenario = Scenario(Config(), (Admit("r0", 3, 2, eos_at=1), Step((2, 3))))
    data = scenario_to_dict(scenario)
    assert list(data) == ["schema_version", "family", "config", "events"]
    assert data["schema_version"] == SCHEMA_VERSION == 4 and data["family"] == "sglang"
    # Nothing of version 2 is used: its form before version 4 is version 1.
    assert legacy_scenario_dict(scenario)["schema_version"] == 1
    assert set(data["config"]) == {
        "convention",
        "overlap",
        "stride",
        "adaptive",
        "page_size",
        "global_counters",
    }
    assert data["events"] == [
        {"kind": "admit", "rid": "r0", "prompt_len": 3, "max_new_tokens": 2, "eos_at": 1},
        {"kind": "step", "accepts": [2, 3]},
    ]


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("{", "not valid JSON"),
        ("[]", "must be a JSON object"),
        (
            json.dumps({"schema_version": 99, "config": {}, "events": []}),
            "unsupported schema_version 99",
        ),
        (
            json.dumps({"schema_version": 1, "config": {}, "events": [{"kind": "jump"}]}),
            "unknown event kind 'jump'",
        ),
        (
            json.dumps(
                {"schema_version": 1, "config": {}, "events": [{"kind": "step", "accepts": [0]}]}
            ),
            "invalid step event",
        ),
        (
            json.dumps({"schema_version": 1, "config": {"stride": 0}, "events": []}),
            "invalid config",
        ),
        (json.dumps({"schema_version": 1, "config": {}, "events": "x"}), "'events' must be a list"),
    ],
)
def test_bad_documents_are_one_line_errors(document: str, message: str) -> None:
    with pytest.raises(ScenarioFormatError) as caught:
        from_json(document)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_algorithms_and_block_cap_lengths_are_schema_version_2() -> None:
    scenario = Scenario(
        Config(algorithm="uno", block_cap=True), (Admit("r0", 3, 2), Step((2,), (1,), (3,)))
    )
    data = scenario_to_dict(scenario)
    assert legacy_scenario_dict(scenario)["schema_version"] == 2
    assert data["config"]["algorithm"] == "uno" and data["config"]["block_cap"] is True
    assert data["events"][1] == {"kind": "step", "accepts": [2], "blocks": [1], "caps": [3]}
    assert from_json(to_json(scenario)) == scenario
    only_lengths = Scenario(Config(), (Step((), (1,)),))
    assert legacy_scenario_dict(only_lengths)["schema_version"] == 2


def test_events_validate_at_the_boundary() -> None:
    with pytest.raises(ValueError):
        Admit("r0", prompt_len=0, max_new_tokens=1)
    with pytest.raises(ValueError):
        Config(convention="sideways")  # type: ignore[arg-type]
