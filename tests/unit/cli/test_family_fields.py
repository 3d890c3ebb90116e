"""Every front door reports a target of any family in that family's terms (issue 20).

`check`, `fuzz`, `exhaust`, `replay` and `mutants` `--json` name the target's `family` and its
judging `options` (`JudgingOptions.to_dict()`); SGLang's own fields (`convention`,
`global_counters`, ...) stay exactly as they were for SGLang targets and are left out for other
families (docs/contracts.md). `fuzz`'s text report says how the campaign judges through the
family's `FrontDoor.campaign_lines`: SGLang's lines are pinned below as the report printed them
before the seam, and the toy's are its own. The campaign itself is a stand-in that returns a
given state (real campaigns: tests/quality/test_fuzz*.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvcheck.core.family import Family, registered
from kvcheck.core.target import Target
from kvcheck.search import campaign
from kvcheck.search.campaign import CampaignPlan, CampaignState, WorkerStatus
from tests.helpers import run_cli
from tests.unit.families import toy

FUZZ = ("--workers", "1", "--no-database", "--max-examples", "40", "--seed", "7", "--no-save")
CHECK = ("--no-database", "--seed", "0", "--max-examples", "20", "--no-save")
# SGLang's fields of `check` and `fuzz` `--json`, which predate `family` and `options`.
SGLANG_FIELDS = (
    "convention",
    "convention_reason",
    "global_counters",
    "adaptive",
    "adaptive_reason",
)


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replace the campaign by one whose single worker ran 40 scenarios in 1 s (2 s in all)."""

    def run_campaign(plan: CampaignPlan, **_: Any) -> CampaignState:
        state = CampaignState(plan, [WorkerStatus(0, state="done", examples=40, seconds=1.0)])
        state.ended = state.started + 2.0
        return state

    monkeypatch.setattr(campaign, "run_campaign", run_campaign)


@pytest.fixture
def registered_toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Family]:
    monkeypatch.chdir(tmp_path)
    with registered(toy.NAME, toy.PATH) as family:
        yield family


# `kvcheck fuzz`'s text report for SGLang targets as it was before the family's front door
# printed it (captured on the tree before the change, with this stand-in): the adaptive
# setting's reason is shown whether the target decided it or it was given.
REFERENCE = "target      builtin:reference  (kvcheck built-in resolver 'reference')"
PRECLAIM = (
    "convention  preclaim  (auto: it gives back one slot on a finished request's stale row "
    "(pre-claim, SGLang 0.5.12-0.5.14))"
)
TAIL = [
    "campaign    1 worker, seed 7, random generator, database none, 40 scenarios",
    "scenarios   40 in 2.0 s: 40/s searching (worker 0 40/s)",
    "labels      0 coverage labels reached",
    "PASS        no violation in 40 scenarios",
]
SGLANG_FUZZ_REPORTS = [
    (
        ("builtin:reference",),
        [
            REFERENCE,
            PRECLAIM,
            "options     global counters ideal, adaptive off (auto: the target never feeds the "
            "adaptive controller)",
        ],
    ),
    (
        ("builtin:reference", "--adaptive"),
        [REFERENCE, PRECLAIM, "options     global counters ideal, adaptive on (given)"],
    ),
    (
        ("builtin:reference-v2", "--no-adaptive", "--convention", "honest"),
        [
            "target      builtin:reference-v2  (kvcheck built-in resolver 'reference-v2')",
            "convention  honest  (convention honest (given))",
            "options     global counters ideal, adaptive off (given)",
        ],
    ),
    (
        ("builtin:reference-v2", "--global-counters", "sglang"),
        [
            "target      builtin:reference-v2  (kvcheck built-in resolver 'reference-v2')",
            "convention  honest  (auto: its spellings (result.num_non_draft_tokens_per_req) are "
            "SGLang 0.5.20+, whose decode launch does not pre-claim a slot)",
            "options     global counters sglang, adaptive on (auto: the target feeds the "
            "adaptive controller)",
        ],
    ),
]


@pytest.mark.parametrize(("argv", "head"), SGLANG_FUZZ_REPORTS)
def test_fuzz_reports_an_sglang_target_byte_for_byte_as_before(
    stand_in: None, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], head: list[str]
) -> None:
    code, out, _ = run_cli(capsys, "fuzz", *argv, *FUZZ)
    assert code == 0
    assert out == "\n".join([*head, *TAIL]) + "\n"


def test_fuzz_json_keeps_sglangs_fields_and_adds_family_and_options(
    stand_in: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(capsys, "fuzz", "builtin:reference", *FUZZ, "--adaptive", "--json")
    assert code == 0
    report = json.loads(out)
    # The fields as they were, in the order they were, after the target.
    keys = list(report)
    assert keys[:3] == ["verdict", "interrupted", "target"]
    assert [k for k in keys if k in SGLANG_FIELDS] == list(SGLANG_FIELDS)
    assert {k: report[k] for k in SGLANG_FIELDS} == {
        "convention": "preclaim",
        "convention_reason": PRECLAIM.split("  (", 1)[1][:-1],
        "global_counters": "ideal",
        "adaptive": True,
        "adaptive_reason": "given",
    }
    assert report["family"] == "sglang"
    assert report["options"] == {
        "convention": "preclaim",
        "global_counters": "ideal",
        "adaptive": True,
        "overlap": None,
        "allocation_path": "model",
    }


def test_check_json_keeps_sglangs_fields_and_adds_family_and_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run_cli(
        capsys, "check", "builtin:reference", *CHECK, "--convention", "honest", "--json"
    )
    report = json.loads(out)
    assert code == 1 and report["verdict"] == "fail"  # a pre-claim resolver judged as honest
    assert {k: report[k] for k in SGLANG_FIELDS} == {
        "convention": "honest",
        "convention_reason": "convention honest (given)",
        "global_counters": "ideal",
        "adaptive": False,
        "adaptive_reason": "auto: the target never feeds the adaptive controller",
    }
    assert report["family"] == "sglang"
    assert report["options"] == {
        "convention": "honest",
        "global_counters": "ideal",
        "adaptive": False,
        "overlap": None,
        "allocation_path": "model",
    }
    assert report["api_shape"]["convention"] == "preclaim"


def test_fuzz_reports_a_toy_target_in_the_toys_terms(
    stand_in: None, registered_toy: Family, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(capsys, "fuzz", "toy:correct", *FUZZ, "--max-limit", "3")
    assert code == 0
    assert out.splitlines()[:3] == [
        "target      toy:correct  (the toy's correct counter)",
        "judged      on limits 1..3 by every worker",  # the toy's `campaign_lines`
        TAIL[0],
    ]
    assert "convention" not in out and "global counters" not in out
    code, out, _ = run_cli(capsys, "fuzz", "toy:correct", *FUZZ, "--json")
    report = json.loads(out)
    assert code == 0
    assert (report["family"], report["options"]) == ("toy", {"max_limit": toy.DEFAULT_MAX_LIMIT})
    assert not set(SGLANG_FIELDS) & set(report)


def test_check_exhaust_replay_and_mutants_json_name_a_toy_targets_family_and_options(
    registered_toy: Family, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(capsys, "check", "toy:correct", *CHECK, "--max-limit", "2", "--json")
    report = json.loads(out)
    assert code == 0 and report["verdict"] == "pass"
    assert (report["family"], report["options"]) == ("toy", {"max_limit": 2})
    assert not set(SGLANG_FIELDS) & set(report)

    code, out, _ = run_cli(capsys, "exhaust", "toy:unclamped", "--json", "--save-dir", "found")
    report = json.loads(out)
    assert code == 1
    assert (report["family"], report["options"]) == ("toy", {"max_limit": 3})
    assert report["max_limit"] == 3  # the family's own fields (`Moves.options_to_dict`) stay

    code, out, _ = run_cli(capsys, "replay", report["counterexample_file"], "--json")
    report = json.loads(out)
    # Replayed as the file's scenario is judged: its limit, 1.
    assert code == 1 and (report["family"], report["options"]) == ("toy", {"max_limit": 1})

    code, out, _ = run_cli(capsys, "mutants", "--list", "--json", "--only", "toy-mutant:unclamped")
    (entry,) = json.loads(out)["entries"]
    assert code == 0
    assert (entry["family"], entry["options"]) == ("toy", {"max_limit": toy.DEFAULT_MAX_LIMIT})


def test_sglangs_mutants_list_json_names_the_family_and_its_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run_cli(capsys, "mutants", "--list", "--json", "--only", "stale-rows-counted")
    (entry,) = json.loads(out)["entries"]
    assert code == 0 and entry["family"] == "sglang"
    # The options besides SGLang's columns, which stay as they were.
    assert entry["options"] == {
        "convention": entry["convention"],
        "global_counters": entry["global_counters"],
        "adaptive": entry["adaptive"],
        "overlap": None,
        "allocation_path": "model",
    }


def test_a_target_must_name_its_family() -> None:
    with pytest.raises(TypeError, match="family"):
        Target("toy:x", toy.correct, "a toy", {}, shape=None)  # type: ignore[call-arg]
    named = Target("toy:x", toy.correct, "a toy", {}, shape=None, family=toy.NAME)
    assert named.family == toy.NAME
