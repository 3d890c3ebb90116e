"""Targets through the family seam (`kvcheck.core.family.TargetLoader`): a spec goes to the family
that claims it, the default family takes every other one, the loaded target names its family,
a source file gets its family's stand-ins and signature, and a counterexample replays only
against a target of its own family (exit 2 with one line otherwise)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import MappingProxyType
from typing import Any

import attrs
import pytest

from kvcheck.core.family import Family, family, family_for_spec, registered
from kvcheck.core.target import Target
from kvcheck.counterexamples.fileformat import load
from kvcheck.counterexamples.replay import replay
from kvcheck.errors import KvcheckUsageError, TargetLoadError
from kvcheck.targets.loading import absolute_spec, load_target, spec_path
from kvcheck.targets.source import load_from_source
from tests.helpers import COMMITTED_COUNTEREXAMPLES, run_cli
from tests.unit.families import toy

SAVED = str(COMMITTED_COUNTEREXAMPLES / "builtin-reference-runs-aligned-e732f13eccad.kvcheck.json")


class Tally:
    """A stand-in a toy resolver's file imports from its engine's package."""


def correct(state: Any, n: int) -> int:
    return int(state + n)


class ToyTargets:
    """Claims `toyt:NAME` (a resolver of this module) and `*.toy::Qualname` source files."""

    default_specs = ("toyt:correct",)
    correct_builtin = "toyt:correct"
    stand_ins = MappingProxyType({("toy_engine.values", "Tally"): Tally})
    resolver_parameters = ("state", "n")

    @staticmethod
    def claims(spec: str) -> bool:
        return spec.startswith("toyt:") or ".toy::" in spec

    @staticmethod
    def load(spec: str, *, allow_unavailable: bool, deadline: float | None) -> Target:
        if "::" in spec:
            path, _, qualname = spec.partition("::")
            loaded = load_from_source(path, qualname, family_name="toyt")
            resolver: Any = loaded.resolver
        else:
            resolver = globals().get(spec.removeprefix("toyt:"))
            if resolver is None:
                raise TargetLoadError(f"no toy target {spec!r}")
        # Named as the toy's on purpose: the dispatcher names the family that loaded it.
        return Target(spec, resolver, "a toy", {}, shape=None, deadline=deadline, family="toy")

    @staticmethod
    def spec_path(spec: str) -> str | None:
        return spec.partition("::")[0] if "::" in spec else None


# The toy family (tests/unit/families/toy.py) with these targets: every front door asks every
# registered family for its flags, so a family is whole.
FAMILY = attrs.evolve(toy.FAMILY, name="toyt", targets=ToyTargets())


@pytest.fixture
def toy() -> Iterator[Family]:
    with registered("toyt", f"{__name__}:FAMILY") as registered_family:
        yield registered_family


def test_a_spec_goes_to_the_family_that_claims_it(toy: Family) -> None:
    assert family_for_spec("toyt:correct") is toy
    loaded = load_target(" toyt:correct ")
    assert loaded.family == "toyt" and loaded.resolver is correct and loaded.deadline == 0.25
    assert load_target("toyt:correct", deadline=0).deadline is None
    with pytest.raises(TargetLoadError, match="no toy target 'toyt:nope'"):
        load_target("toyt:nope")


def test_every_other_spec_is_the_default_familys(toy: Family) -> None:
    for spec in ("builtin:reference", "kvcheck.mutants:worker_stride", "mutant:x", "a/b.py::f"):
        assert family_for_spec(spec) is family("sglang")
    assert load_target("builtin:reference").family == "sglang"
    with pytest.raises(TargetLoadError, match="malformed target 'nonsense'"):
        load_target("nonsense")


def test_sglang_claims_its_forms_and_loads_a_corpus_entry() -> None:
    targets = family("sglang").targets
    for spec in ("builtin:x", "sglang==0.5.10", "mutant:x", "m.n:Q", "f.py::Q"):
        assert targets.claims(spec), spec
    assert not targets.claims("nonsense")
    entry = load_target("mutant:worker-stride", deadline=3)
    assert (entry.spec, entry.family, entry.deadline) == (
        "kvcheck.mutants:worker_stride",
        "sglang",
        3,
    )
    with pytest.raises(TargetLoadError, match="no corpus entry 'mutant:nope'"):
        load_target("mutant:nope")


def test_paths_come_from_the_claiming_family(
    toy: Family, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert spec_path("counter.toy::count") == "counter.toy"
    assert absolute_spec("counter.toy::count") == f"{tmp_path}/counter.toy::count"
    assert spec_path("toyt:correct") is None


def test_a_source_file_gets_its_familys_stand_ins_and_signature(
    toy: Family, tmp_path: Path
) -> None:
    path = tmp_path / "counter.toy"
    path.write_text(
        "from toy_engine.values import Tally\n\n"
        "def count(state, n):\n    return Tally, state + n\n\n"
        "def wrong(self, result, batch):\n    return Tally\n"
    )
    loaded = load_target(f"{path}::count")
    assert loaded.family == "toyt" and loaded.resolver(1, 2) == (Tally, 3)
    with pytest.raises(TargetLoadError, match=r"must accept exactly \(state, n\) positionally"):
        load_target(f"{path}::wrong")
    # SGLang's source files get SGLang's stand-ins, not the toy's.
    with pytest.raises(TargetLoadError, match=r"imported from toy_engine\.values"):
        load_from_source(str(path), "wrong")


def test_a_counterexample_replays_only_against_its_familys_target(
    toy: Family, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(KvcheckUsageError, match="is a sglang scenario and toyt:correct a toyt"):
        replay(load(SAVED), "toyt:correct")
    for command in ("replay", "regress"):
        code, out, err = run_cli(capsys, command, SAVED, "--target", "toyt:correct")
        assert code == 2 and out == ""
        assert len(err.strip().splitlines()) == 1 and "replay it against a sglang target" in err


def test_a_replay_choice_the_family_does_not_offer_is_a_usage_error() -> None:
    with pytest.raises(KvcheckUsageError, match="has no judging option 'stride'"):
        replay(load(SAVED), stride="4")
