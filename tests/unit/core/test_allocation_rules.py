"""The allocation rules as named features (issue 20.5): the table, and the model, the engine's
own path and the config's refusals deciding by a rule's features, never by its name."""

from __future__ import annotations

import itertools
import re

import attrs
import pytest
from packaging.version import Version

from kvcheck.core.run import run_scenario
from kvcheck.core.scenario import Scenario
from kvcheck.families.sglang import allocation_rules, distribution
from kvcheck.families.sglang.allocation import RuleAllocation
from kvcheck.families.sglang.allocation_rules import (
    ALLOCATION_RULES,
    RULES,
    AllocationFeatures,
    AllocationRule,
    ReserveFrom,
    allocation_features,
)
from kvcheck.families.sglang.builtins import reference
from kvcheck.families.sglang.distribution import adaptive_stand_in
from kvcheck.families.sglang.model import ReferenceModel
from kvcheck.families.sglang.scenario import Admit, Config, Retract, Step
from tests.helpers import ROOT, target

REFERENCE = target(reference)


def test_rule_names_stay_what_scenario_files_store() -> None:
    # `Config.allocation` and every counterexample file store these names.
    assert ALLOCATION_RULES == (
        "off",
        "0.5.6",
        "0.5.7",
        "0.5.9",
        "0.5.11",
        "0.5.12",
        "0.5.13",
        "0.5.16",
        "0.5.17",
    )
    assert [allocation_features(name).name for name in ALLOCATION_RULES] == list(ALLOCATION_RULES)


def test_the_rules_follow_the_releases_in_order() -> None:
    off, *used = RULES
    assert (off.allocates, off.first_release, off.last_release) == (False, None, None)
    assert all(rule.allocates and rule.first_release == rule.name for rule in used)
    for older, newer in itertools.pairwise(used):
        assert older.first_release is not None and older.last_release is not None
        assert newer.first_release is not None
        assert Version(older.first_release) <= Version(older.last_release)
        assert Version(older.last_release) < Version(newer.first_release)
        # Each row differs from the one before it: a rule is a change of features.
        assert _features(older) != _features(newer)
    assert used[-1].last_release is None  # the newest rule is still current


def _features(rule: AllocationFeatures) -> tuple[object, ...]:
    return (
        rule.allocates,
        rule.clamp,
        rule.reserve_from,
        rule.page_round,
        rule.zero_on_release,
        rule.retraction_sorted,
        rule.decode_estimate,
    )


def test_adaptive_stand_ins_keep_their_order() -> None:
    """The stand-ins are derived from the features: the adaptive-maximum rules oldest first,
    then the clamped rule without overlap, then none."""
    assert distribution._ADAPTIVE_STAND_INS == ("0.5.13", "0.5.16", "0.5.17", "0.5.12", "off")
    every = ALLOCATION_RULES
    assert adaptive_stand_in(every, overlap=True) == "0.5.13"
    assert adaptive_stand_in(("0.5.16", "0.5.12", "off"), overlap=True) == "0.5.16"
    assert adaptive_stand_in(("0.5.6", "0.5.12", "off"), overlap=True) == "off"
    assert adaptive_stand_in(("0.5.6", "0.5.12", "off"), overlap=False) == "0.5.12"
    assert adaptive_stand_in(("0.5.6",), overlap=False) is None


# Every combination of the features, installed under an existing rule's name: the name must not
# matter, only the row.
COMBINATIONS: list[tuple[bool, ReserveFrom, bool, bool]] = list(
    itertools.product(
        (False, True), ("launched-stride", "adaptive-max"), (False, True), (False, True)
    )
)


@pytest.mark.parametrize("name", ["0.5.6", "0.5.16"])
@pytest.mark.parametrize(
    ("clamp", "reserve_from", "page_round", "zero_on_release"),
    COMBINATIONS,
    ids=["-".join(str(part) for part in combination) for combination in COMBINATIONS],
)
def test_model_and_engine_follow_the_features_not_the_name(
    monkeypatch: pytest.MonkeyPatch,
    name: AllocationRule,
    clamp: bool,
    reserve_from: ReserveFrom,
    page_round: bool,
    zero_on_release: bool,
) -> None:
    features = AllocationFeatures(
        name=name,
        first_release=name,
        last_release=name,
        allocates=True,
        clamp=clamp,
        reserve_from=reserve_from,
        page_round=page_round,
        zero_on_release=zero_on_release,
    )
    monkeypatch.setitem(allocation_rules._BY_NAME, name, features)
    page = 4 if page_round else 1
    config = Config(convention="preclaim", stride=4, allocation=name, page_size=page, max_stride=7)
    assert config.allocation_rule == features

    # Sizing: C = 10 at the first decode launch, R = 2A with A = 4 or the maximum 7, rounded
    # up to pages of 4 with page rounding (hand-computed, not read from the code).
    expected = {
        ("launched-stride", False): 18,
        ("launched-stride", True): 20,
        ("adaptive-max", False): 24,
        ("adaptive-max", True): 24,
    }[(reserve_from, page_round)]
    model = ReferenceModel(config)
    for event in (Admit("r0", 10, 50), Step(), Step()):
        model.apply(event)
    assert model.requests["r0"].allocated == expected
    path = RuleAllocation(config)
    assert path.sized(_Req(committed=10, allocated=10), path.reserve(4)) == expected
    # The clamp: an Al above the target is kept, or replaced by the target.
    assert path.sized(_Req(committed=10, allocated=100), path.reserve(4)) == (
        100 if clamp else expected
    )

    # Release: Al zeroed or kept; engine and model agree on a run that finishes, retracts and
    # re-admits (every alloc-* and kv-* invariant is judged along it).
    finish = (Admit("r0", 10, 1), Step(), Step())
    finished = ReferenceModel(config)
    for event in finish:
        finished.apply(event)
    assert finished.requests["r0"].allocated == (0 if zero_on_release else expected)
    events = (*finish, Admit("r1", 5, 30), Step(), Step((2,)), Retract("r1"), Step(), Step())
    result = run_scenario(Scenario(config, events), REFERENCE)
    assert result.violation is None, result.violation

    # Adaptive switching: refused without the clamp at all, and under overlap unless the
    # reserve is for the adaptive maximum.
    for overlap in (False, True):
        refused = not clamp or (overlap and reserve_from == "launched-stride")
        if refused:
            with pytest.raises(ValueError, match=re.escape(f"allocation rule {name} with")):
                attrs.evolve(config, adaptive=True, overlap=overlap)
        else:
            attrs.evolve(config, adaptive=True, overlap=overlap)


@attrs.define
class _Req:
    """The two lengths `RuleAllocation.sized` reads."""

    committed: int
    allocated: int

    @property
    def kv_committed_len(self) -> int:
        return self.committed

    @property
    def kv_allocated_len(self) -> int:
        return self.allocated


def test_the_docs_table_says_what_the_rows_say() -> None:
    """docs/allocation-rules.md's table gives every rule's releases and features as `RULES`."""
    text = (ROOT / "docs" / "allocation-rules.md").read_text()
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 9 and cells[0].startswith("`") and cells[0] != "`off`":
            rows[cells[0].strip("`")] = cells[1:8]
    yes = {"yes": True, "no": False}
    for rule in RULES[1:]:
        releases, clamp, reserve_from, page_round, zero_on_release, sorted_, estimate = rows.pop(
            rule.name
        )
        last = rule.last_release or "on"
        shown = rule.name if last == rule.name else f"{rule.first_release}-{last}"
        assert releases == shown.replace("-on", " on"), rule.name
        assert (
            yes[clamp],
            reserve_from,
            yes[page_round],
            yes[zero_on_release],
            yes[sorted_],
            estimate,
        ) == (
            rule.clamp,
            rule.reserve_from,
            rule.page_round,
            rule.zero_on_release,
            rule.retraction_sorted,
            rule.decode_estimate,
        ), rule.name
    assert not rows, f"rows of no rule: {sorted(rows)}"
