"""The generic source loader's class form (`load_methods`, `load_definitions`) and the strict
fakes the vLLM release target runs on."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvcheck.errors import TargetLoadError
from kvcheck.families.vllm.real import fakes
from kvcheck.targets.source import load_definitions, load_methods

ENGINE = """
import enum
from engine.records import Outside

class Status(enum.IntEnum):
    WAITING = 1
    RUNNING = 2

LIMIT = 3

class Base:
    def step(self):
        self.count += 1
        return self._helper()

    def _helper(self):
        return Status.RUNNING if self.count < LIMIT else Status.WAITING

    def unused(self):
        return Outside()

class Child(Base):
    def step(self):
        return ("child", super().step())
"""


@pytest.fixture
def engine(tmp_path: Path) -> Path:
    file = tmp_path / "engine.py"
    file.write_text(ENGINE)
    return file


def test_methods_reach_their_siblings_and_super_reaches_the_given_base(engine: Path) -> None:
    base = load_methods(engine, "Base", ["step"], stand_ins={}, allow_unavailable=True)
    assert {"_helper", "step"} <= set(vars(base.cls))
    assert "unused" not in vars(base.cls)
    child = load_methods(engine, "Child", ["step"], stand_ins={}, base=base.cls)
    obj = child.cls()
    obj.count = 0
    assert obj.step() == ("child", 2)  # Status.RUNNING, through super()
    assert [span.qualname for span in base.code] == ["Base.step", "Base._helper"]


def test_super_without_a_base_is_refused_in_one_line(engine: Path) -> None:
    with pytest.raises(TargetLoadError, match="uses super"):
        load_methods(engine, "Child", ["step"], stand_ins={})


def test_definitions_are_the_files_own_objects(engine: Path) -> None:
    loaded = load_definitions(engine, ["Status", "LIMIT"], stand_ins={})
    assert loaded["Status"].RUNNING == 2 and loaded["LIMIT"] == 3


def test_an_unknown_method_is_one_line(engine: Path) -> None:
    with pytest.raises(TargetLoadError, match=r"no method Base\.nope"):
        load_methods(engine, "Base", ["nope"], stand_ins={})


def test_a_strict_fake_refuses_what_it_does_not_model() -> None:
    fakes.UNMODELLED.clear()
    params = fakes.SamplingParams(max_tokens=3)
    assert params.max_tokens == 3 and params.min_tokens is None
    with pytest.raises(fakes.UnmodelledAccess, match=r"SamplingParams\.temperature"):
        _ = params.temperature
    with pytest.raises(fakes.UnmodelledAccess):
        params.temperature = 1.0
    assert fakes.UNMODELLED == [
        "reads SamplingParams.temperature",
        "writes SamplingParams.temperature",
    ]


def test_the_pool_runs_out_and_frees_in_reverse() -> None:
    pool = fakes.BlockPool.create(num_blocks=4, block_size=2)  # block 0 is the null block

    class Req:
        request_id = "r"
        num_computed_tokens = 0

    assert pool.allocate_slots(Req(), 4) is not None
    assert pool.owned == {"r": [1, 2]}
    assert pool.allocate_slots(Req(), 8) is None  # needs 4 blocks, 1 left
    pool.free(Req())
    assert pool.free_ids == [1, 2, 3] and pool.ref == {}
