"""Judging options as one record, asked for by name and chosen by the family (`Judge.judging`),
and the distribution reached only through the registry."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given

import kvcheck
from kvcheck.core.family import family
from kvcheck.errors import KvcheckUsageError
from kvcheck.families.sglang import scenario as sglang_scenario
from kvcheck.families.sglang.judging import SglangJudging, judging
from kvcheck.families.sglang.scenario import Config, Step
from kvcheck.search.check import detect_convention, scenarios_key
from kvcheck.strategies import configs, event_lists
from kvcheck.targets.loading import load_target
from tests.helpers import ROOT

REFERENCE = load_target("builtin:reference")


def test_import_kvcheck_loads_no_family() -> None:
    code = (
        "import sys, kvcheck\n"
        "print(sorted(m for m in sys.modules if m.startswith('kvcheck.families')))\n"
        "print(kvcheck.Step.__module__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out == ["[]", "kvcheck.families.sglang.scenario"]


def test_the_public_scenario_names_are_sglangs() -> None:
    assert kvcheck.Step is Step and kvcheck.Config is Config
    assert kvcheck.SwitchStride is sglang_scenario.SwitchStride
    with pytest.raises(AttributeError):
        kvcheck.NoSuchName  # noqa: B018


def test_example_database_keys_stay_what_they_were() -> None:
    options = SglangJudging("preclaim", "ideal", False, None, adaptive_reason="given")
    key = b"kvcheck.search.sampling|builtin:reference|preclaim|ideal|False|None"
    assert scenarios_key(REFERENCE, options) == key
    pinned = SglangJudging("honest", "sglang", True, False)
    assert scenarios_key(REFERENCE, pinned).endswith(b"|honest|sglang|True|False")


def test_the_release_allocation_path_has_its_own_database_key() -> None:
    # kvcheck's model adds nothing to the key (above); the release's own code is another search.
    release = SglangJudging("honest", "sglang", True, False, allocation_path="release")
    assert scenarios_key(REFERENCE, release).endswith(b"|honest|sglang|True|False|release")


def test_a_builtin_is_judged_on_kvcheck_allocation_model() -> None:
    chosen = judging({}, REFERENCE).options
    assert chosen.allocation_path == "model"
    assert chosen.allocation_reason.startswith("auto: kvcheck's RuleAllocation")
    with pytest.raises(KvcheckUsageError, match="brings no release allocation code"):
        judging({"allocation_path": "release"}, REFERENCE)
    with pytest.raises(KvcheckUsageError, match="unknown allocation path 'mine'"):
        judging({"allocation_path": "mine"}, REFERENCE)


def test_the_allocation_path_is_recorded_only_when_it_is_the_release() -> None:
    model = Config(allocation="0.5.16", page_size=2)
    release = Config(allocation="0.5.16", page_size=2, allocation_path="release")
    assert "allocation_path" not in sglang_scenario.config_to_dict(model)
    saved = sglang_scenario.config_to_dict(release)
    assert saved["allocation_path"] == "release"
    assert sglang_scenario.config_from_dict(saved) == release
    assert "the release's own allocation code" in sglang_scenario.describe_config(release)


def test_the_reason_is_no_option() -> None:
    given_ = SglangJudging("preclaim", adaptive_reason="given")
    assert given_ == SglangJudging("preclaim") and hash(given_) == hash(SglangJudging("preclaim"))
    assert given_.to_dict() == {
        "convention": "preclaim",
        "global_counters": "ideal",
        "adaptive": False,
        "overlap": None,
        "allocation_path": "model",
    }


def test_auto_judges_by_the_probed_convention_with_the_other_as_fallback() -> None:
    chosen = judging({}, REFERENCE)
    assert chosen.options == SglangJudging(REFERENCE.shape.convention, "ideal", False)
    assert chosen.reason == REFERENCE.shape.convention_reason
    (fallback, _why), *more = chosen.fallbacks
    assert not more and fallback.convention != chosen.options.convention
    assert chosen.options.adaptive_reason == "auto: the target never feeds the adaptive controller"
    assert detect_convention(REFERENCE) == (REFERENCE.shape.convention, chosen.reason)
    assert family("sglang").judge.judging({}, REFERENCE) == chosen


def test_given_options_are_judged_as_given() -> None:
    chosen = judging(
        {"convention": "honest", "global_counters": "off", "adaptive": True, "overlap": True},
        REFERENCE,
    )
    assert chosen.options == SglangJudging("honest", "off", True, True)
    assert chosen.reason == "convention honest (given)" and chosen.fallbacks == ()
    assert chosen.options.adaptive_reason == "given"


def test_bad_options_are_refused() -> None:
    with pytest.raises(KvcheckUsageError, match="unknown convention 'bogus'"):
        judging({"convention": "bogus"}, REFERENCE)
    with pytest.raises(KvcheckUsageError, match="unknown global-counter mode 'x'"):
        judging({"global_counters": "x"}, REFERENCE)
    with pytest.raises(TypeError, match="unknown judging option"):
        judging({"stride": 4}, REFERENCE)


@given(configs(convention="honest", allocation=True), event_lists(adaptive=True, max_events=5))
def test_the_parts_of_a_scenario_stay_hypothesis_strategies(
    config: Config, events: tuple[object, ...]
) -> None:
    assert isinstance(config, Config) and config.convention == "honest"
    kinds = tuple(sglang_scenario.EVENT_TYPES.values())
    assert len(events) <= 5 + 6 and all(isinstance(e, kinds) for e in events)
