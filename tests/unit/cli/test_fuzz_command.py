"""`kvcheck fuzz`'s bad input: exit 2 with one line, before any worker starts (the campaigns
themselves run in tests/quality/test_fuzz.py)."""

from __future__ import annotations

import json

import pytest

from kvcheck.cli import fuzz
from tests.helpers import run_cli


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--workers", "0", "expected a positive integer"),
        ("--workers", "-2", "expected a positive integer"),
        ("--duration", "-5", "expected a positive number of seconds"),
        ("--duration", "0", "expected a positive number of seconds"),
        ("--duration", "soon", "expected seconds"),
        ("--max-examples", "0", "expected a positive integer"),
    ],
)
def test_bad_numbers_are_exit_2(
    capsys: pytest.CaptureFixture[str], option: str, value: str, says: str
) -> None:
    code, out, err = run_cli(capsys, "fuzz", "builtin:reference", option, value)
    assert code == 2
    assert says in err and err.count("\n") == 1
    assert out == ""


def test_an_unreachable_redis_is_exit_2_with_the_url_before_any_worker(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("redis")  # the optional `redis` extra

    def no_campaign(*args: object, **kwargs: object) -> None:
        raise AssertionError("a worker was started")

    monkeypatch.setattr("kvcheck.search.campaign.run_campaign", no_campaign)
    url = "redis://127.0.0.1:1/0"
    code, out, err = run_cli(capsys, "fuzz", "builtin:reference", "--database", url, "--json")
    assert code == 2
    assert f"cannot reach the Redis example database {url}: " in err
    assert json.loads(out)["exit_code"] == 2


def test_an_unloadable_target_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "fuzz", "builtin:nonesuch", "--workers", "1")
    assert code == 2 and "nonesuch" in err


def test_the_default_workers_are_the_usable_cores(capsys: pytest.CaptureFixture[str]) -> None:
    assert fuzz.usable_cores() >= 1
    code, out, _ = run_cli(capsys, "fuzz", "--help")
    assert code == 0
    assert f"here {fuzz.usable_cores()}" in " ".join(out.split())


@pytest.mark.parametrize(
    ("given", "generator"), [((), "random"), (("--generator", "hypothesis"), "hypothesis")]
)
def test_the_generator_is_random_unless_hypothesis_is_asked_for(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    given: tuple[str, ...],
    generator: str,
) -> None:
    from kvcheck.search.campaign import CampaignPlan, CampaignState

    plans: list[CampaignPlan] = []

    def no_campaign(plan: CampaignPlan, **kwargs: object) -> CampaignState:
        plans.append(plan)
        return CampaignState(plan, [])

    monkeypatch.setattr("kvcheck.search.campaign.run_campaign", no_campaign)
    code, out, _ = run_cli(capsys, "fuzz", "builtin:reference", "--no-database", "--json", *given)
    assert code == 0 and plans[0].generator == generator
    assert json.loads(out)["generator"] == generator


def test_an_unknown_generator_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "fuzz", "builtin:reference", "--generator", "numpy")
    assert code == 2 and "invalid choice: 'numpy'" in err and out == ""
