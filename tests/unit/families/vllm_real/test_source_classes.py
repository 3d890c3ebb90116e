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


class _Request:
    def __init__(self, computed: int = 0, tokens: int = 0) -> None:
        self.request_id = "r"
        self.num_computed_tokens = computed
        self.num_tokens = tokens


def test_the_pool_runs_out_and_frees_in_reverse() -> None:
    # Block 0 is the null block.
    pool = fakes.BlockPool.create(num_blocks=4, block_size=2, max_model_len=64)
    assert pool.allocate_slots(_Request(), 4) is not None
    assert pool.owned == {"r": [1, 2]}
    assert pool.allocate_slots(_Request(), 8) is None  # needs 4 blocks, 1 left
    pool.free(_Request())
    assert pool.free_ids == [1, 2, 3] and pool.ref == {}


def test_the_pool_caps_slots_at_max_model_len_as_vllm_does() -> None:
    pool = fakes.BlockPool.create(num_blocks=4, block_size=2, max_model_len=6)
    # 4 computed + 1 new + 3 lookahead = 8 slots, capped at 6: 3 blocks, which fit.
    assert pool.allocate_slots(_Request(computed=0), 5, num_lookahead_tokens=3) is not None
    assert pool.owned == {"r": [1, 2, 3]}
    pool.free(_Request())
    # Asked to, it refuses unless the whole sequence fits (8 tokens, capped at 6: it fits;
    # with max_model_len 64 it would need 4 blocks of 3).
    big = fakes.BlockPool.create(num_blocks=4, block_size=2, max_model_len=64)
    assert big.allocate_slots(_Request(tokens=8), 2, full_sequence_must_fit=True) is None
    assert big.allocate_slots(_Request(tokens=6), 2, full_sequence_must_fit=True) is not None


def test_a_deferred_free_hands_the_blocks_back_later() -> None:
    pool = fakes.BlockPool.create(num_blocks=4, block_size=2, max_model_len=64)
    pool.allocate_slots(_Request(), 4)
    blocks = pool.pop_blocks_for_free(_Request())
    assert blocks == [1, 2] and pool.owned == {} and pool.ref == {1: 1, 2: 1}
    pool.block_pool.free_blocks(reversed(blocks))
    assert pool.ref == {} and sorted(pool.free_ids) == [1, 2, 3]


def test_building_a_fake_with_a_field_it_lacks_is_kvchecks_fault() -> None:
    fakes.UNMODELLED.clear()
    record = fakes.record_type("EngineCoreOutput", ("request_id",))
    with pytest.raises(fakes.UnmodelledAccess, match="new_field"):
        record(request_id="r", new_field=1)
    assert fakes.UNMODELLED == ["builds EngineCoreOutput with ['new_field']"]
