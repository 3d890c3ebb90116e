"""Reading resolvers from source files whose modules cannot be imported here.

The fixtures under tests/fixtures/sglang/ mirror SGLang's layout for each resolver API generation
(index.json lists them). Every fixture imports packages that are not installed, so a normal import
fails; `load_from_source` must still produce callable resolvers, and the buggy resolver of each
generation must differ from the correct one exactly in what its invariant watches.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap
import traceback
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from kvcheck.errors import TargetLoadError
from kvcheck.targets.source import LoadedSource, load_from_source
from tests.helpers import SGLANG_FIXTURES

FIXTURES = SGLANG_FIXTURES
GENERATIONS: list[dict[str, Any]] = json.loads((FIXTURES / "index.json").read_text())["generations"]
GEN_IDS = [g["generation"] for g in GENERATIONS]

# One delivered result of four rows: live, finished (stale), retracted (stale), live.
STRIDE = 4
ROWS = ("live", "finished", "retracted", "live")
ACCEPT = (2, 3, 4, 1)
START_C = {"live": 20, "finished": 30, "retracted": 0}


def token(row: int, col: int) -> int:
    return 100 * (row + 1) + col


def padded_tokens(rows: int, stride: int) -> torch.Tensor:
    return torch.tensor(
        [token(r, c) for r in range(rows) for c in range(stride)], dtype=torch.int64
    )


# --------------------------------------------------------------------------------------------
# Hand-built stand-ins for SGLang's objects, with every spelling any generation uses.


def make_req(state: str) -> SimpleNamespace:
    committed = START_C[state]
    req = SimpleNamespace(
        kv_committed_len=committed,
        kv=SimpleNamespace(kv_committed_len=committed),
        is_retracted=state == "retracted",
        grammar=None,
        spec_verify_ct=0,
        spec_accepted_tokens=0,
        spec_accepted_drafts=0,
        spec_num_correct_drafts=0,
        spec_num_block_accept_tokens=0,
        spec_num_cap_tokens=0,
        histogram=[],
        cap_histogram=[],
    )
    req.finished = lambda: state == "finished"
    req.update_spec_acceptance_histogram = req.histogram.append
    req.update_spec_correct_drafts_histogram = req.histogram.append
    req.update_spec_cap_lens_histogram = req.cap_histogram.append
    return req


class ModelWorker:
    def __init__(self) -> None:
        self.feeds: list[tuple[list[int], int | None]] = []

    def on_verify_complete_cpu(self, per_req: list[int], batch_size: int | None = None) -> None:
        self.feeds.append((list(per_req), batch_size))


def make_self(loaded: LoadedSource, worker_stride: int) -> SimpleNamespace:
    snapshots: list[int] = []
    obj = SimpleNamespace(
        draft_worker=SimpleNamespace(speculative_num_draft_tokens=worker_stride),
        model_worker=ModelWorker(),
        metrics_reporter=SimpleNamespace(
            snapshot_spec_decode_metrics=lambda batch, result: snapshots.append(1)
        ),
        snapshots=snapshots,
    )
    for name, function in loaded.self_methods.items():  # as the engine binds them
        setattr(obj, name, function.__get__(obj, type(obj)))
    return obj


def make_result(accept: tuple[int, ...], stride: int, **extra: Any) -> SimpleNamespace:
    fields: dict[str, Any] = {
        "next_token_ids": padded_tokens(len(accept), stride),
        "accept_lens": torch.tensor(accept, dtype=torch.int32),
        "speculative_num_draft_tokens": stride,
        "speculative_output_stride": None,
        "num_non_draft_tokens_per_req": 1,
        "block_accept_lens": None,
        "cap_lens": None,
        "grammar_advanced": False,
        "grammar_retained_tokens": None,
    }
    fields.update(extra)
    return SimpleNamespace(**fields)


def make_batch(reqs: list[SimpleNamespace]) -> SimpleNamespace:
    eagle = SimpleNamespace(is_dflash=lambda: False, is_none=lambda: False)
    return SimpleNamespace(reqs=reqs, batch_size=lambda: len(reqs), spec_algorithm=eagle)


def load(gen: dict[str, Any], which: str) -> LoadedSource:
    return load_from_source(str(FIXTURES / gen["path"]), gen[which])


def committed(gen: dict[str, Any], req: SimpleNamespace) -> int:
    holder = req.kv if gen["api"]["committed"] == "req.kv.kv_committed_len" else req
    return int(holder.kv_committed_len)


def observe(gen: dict[str, Any], loaded: LoadedSource, worker_stride: int) -> dict[str, Any]:
    """Run the resolver once on the four-row result; return what each invariant watches."""
    reqs = [make_req(state) for state in ROWS]
    self_obj = make_self(loaded, worker_stride)
    result = make_result(ACCEPT, STRIDE)
    runs = loaded.resolver(self_obj, result, make_batch(reqs))
    api = gen["api"]
    drafts = [getattr(r, api["req_drafts"]) for r in reqs]
    per_req = api["result_drafts_per_req"]
    return {
        "runs-aligned": runs,
        "committed-live": [committed(gen, reqs[i]) for i, s in enumerate(ROWS) if s == "live"],
        "committed-finished-frozen": committed(gen, reqs[1]),
        "committed-retracted-zero": committed(gen, reqs[2]),
        "no-negative": min(committed(gen, r) for r in reqs) < 0,
        "stats-verify-count": [r.spec_verify_ct for r in reqs],
        "stats-accepted-drafts": drafts,
        "stats-histogram": [r.histogram for r in reqs],
        "global-counters": (
            getattr(result, api["result_drafts_total"]),
            getattr(result, per_req) if per_req else None,
        ),
        "_controller": self_obj.model_worker.feeds,
        "_snapshots": len(self_obj.snapshots),
    }


def expected(gen: dict[str, Any]) -> dict[str, Any]:
    """What a correct resolver of this generation does to the four-row result."""
    preclaim = gen["convention"] == "preclaim"
    api = gen["api"]
    live = [i for i, s in enumerate(ROWS) if s == "live"]
    drafts = [a - 1 for a in ACCEPT]
    applied = [s == "live" for s in ROWS]
    has_hist = api["req_histogram"] is not None
    if api["controller"] is None:
        controller: list[Any] = []
    else:
        controller = [(drafts, len(ROWS) if "batch_size" in api["controller"] else None)]
    return {
        "runs-aligned": [[token(i, c) for c in range(a)] for i, a in enumerate(ACCEPT)],
        "committed-live": [START_C["live"] + ACCEPT[i] - (1 if preclaim else 0) for i in live],
        "committed-finished-frozen": START_C["finished"] - (1 if preclaim else 0),
        "committed-retracted-zero": 0,
        "no-negative": False,
        "stats-verify-count": [int(a) for a in applied],
        "stats-accepted-drafts": [d if a else 0 for d, a in zip(drafts, applied, strict=True)],
        "stats-histogram": [
            [d] if a and has_hist else [] for d, a in zip(drafts, applied, strict=True)
        ],
        "global-counters": (sum(drafts), drafts if api["result_drafts_per_req"] else None),
        "_controller": controller,
        "_snapshots": 1 if api["metrics_snapshot"] else 0,
    }


def worker_stride_for(gen: dict[str, Any]) -> int:
    # From 0.5.12 the launch-time stride is on the result: give the worker a different (switched)
    # value, which a correct resolver must ignore. Before that the worker's value is the stride.
    return STRIDE if gen["api"]["stride"].startswith("self.draft_worker") else 2


# --------------------------------------------------------------------------------------------
# The fixtures.


def test_index_covers_every_fixture_file() -> None:
    listed = {FIXTURES / g["path"] for g in GENERATIONS}
    on_disk = set(FIXTURES.rglob("*.py"))
    assert listed == on_disk
    assert len(GEN_IDS) == len(set(GEN_IDS))
    for gen in GENERATIONS:
        assert gen["convention"] in {"preclaim", "honest"}
        assert gen["buggy"] != gen["correct"]


@pytest.mark.parametrize("gen", GENERATIONS, ids=GEN_IDS)
def test_fixture_module_cannot_be_imported(gen: dict[str, Any]) -> None:
    path = FIXTURES / gen["path"]
    name = f"_kvcheck_fixture_{gen['generation']}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with pytest.raises(ImportError):
        spec.loader.exec_module(module)
    assert name not in sys.modules


@pytest.mark.parametrize("gen", GENERATIONS, ids=GEN_IDS)
def test_correct_resolver_from_source(gen: dict[str, Any]) -> None:
    loaded = load(gen, "correct")
    assert loaded.description.startswith(f"{gen['correct']} from ")
    assert gen["path"].rpartition("/")[2] in loaded.description
    assert observe(gen, loaded, worker_stride_for(gen)) == expected(gen)


@pytest.mark.parametrize("gen", GENERATIONS, ids=GEN_IDS)
def test_buggy_resolver_differs_where_its_invariant_looks(gen: dict[str, Any]) -> None:
    observed = observe(gen, load(gen, "buggy"), worker_stride_for(gen))
    want = expected(gen)
    differing = {key for key in want if not key.startswith("_") and observed[key] != want[key]}
    assert gen["buggy_invariant"] in differing
    assert differing <= {gen["buggy_invariant"], *gen["buggy_also_trips"]}


def test_nothing_from_the_fixtures_lands_in_sys_modules() -> None:
    for gen in GENERATIONS:
        load(gen, "correct")
        load(gen, "buggy")
    assert not {"sglang", "triton", "sgl_kernel"} & set(sys.modules)


@pytest.mark.parametrize("gen", GENERATIONS, ids=GEN_IDS)
def test_self_methods_are_the_siblings_the_resolver_reaches(gen: dict[str, Any]) -> None:
    grammar = gen["api"]["grammar"]
    want = set()
    if grammar:
        want.add("_accept_grammar_tokens")
    if grammar and grammar.startswith("memoised"):
        want.add("advance_grammar")
    assert set(load(gen, "correct").self_methods) == want


def _gen(name: str) -> dict[str, Any]:
    return next(g for g in GENERATIONS if g["generation"] == name)


def test_grammar_truncation_goes_through_the_bound_sibling() -> None:
    class StopAfterFirst:
        def __init__(self) -> None:
            self.accepted: list[int] = []

        def accept_token(self, tok: int) -> None:
            self.accepted.append(tok)

        def is_terminated(self) -> bool:
            return True

    for name, commit in (("v0_5_14", 0), ("v0_5_19", 1)):  # preclaim: len(R) - 1; honest: len(R)
        gen = _gen(name)
        loaded = load(gen, "correct")
        req = make_req("live")
        req.grammar = StopAfterFirst()
        result = make_result((3,), STRIDE)
        runs = loaded.resolver(make_self(loaded, STRIDE), result, make_batch([req]))
        assert runs == [[token(0, 0)]]
        assert req.grammar.accepted == [token(0, 0)]
        assert committed(gen, req) == START_C["live"] + commit
        assert req.spec_num_correct_drafts == 2  # stats use the raw accept length


def test_uno_stride_and_non_draft_tokens() -> None:
    gen = _gen("v0_5_20")
    loaded = load(gen, "correct")
    reqs = [make_req("live"), make_req("live")]
    result = make_result((2, 5), 5, speculative_output_stride=5, num_non_draft_tokens_per_req=2)
    result.speculative_num_draft_tokens = 4
    runs = loaded.resolver(make_self(loaded, 4), result, make_batch(reqs))
    assert runs == [[token(0, 0), token(0, 1)], [token(1, c) for c in range(5)]]
    assert [r.spec_num_correct_drafts for r in reqs] == [0, 3]
    assert [r.histogram for r in reqs] == [[0], [3]]
    assert result.num_correct_drafts == 3


def test_block_and_cap_statistics() -> None:
    gen = _gen("v0_5_16")
    loaded = load(gen, "correct")
    reqs = [make_req("live"), make_req("finished")]
    block = torch.tensor([3, 5], dtype=torch.int32)
    cap = torch.tensor([1, 2], dtype=torch.int32)
    result = make_result((2, 2), STRIDE, block_accept_lens=block, cap_lens=cap)
    loaded.resolver(make_self(loaded, STRIDE), result, make_batch(reqs))
    assert (reqs[0].spec_num_block_accept_tokens, reqs[0].spec_num_cap_tokens) == (3, 1)
    assert reqs[0].cap_histogram == [1]
    assert (reqs[1].spec_num_block_accept_tokens, reqs[1].cap_histogram) == (0, [])
    assert (result.num_block_accept_tokens, result.num_cap_tokens) == (8, 3)


def test_traceback_points_at_the_fixture_file() -> None:
    gen = _gen("v0_5_20")
    path = FIXTURES / gen["path"]
    loaded = load(gen, "correct")
    result = make_result((1,), STRIDE, speculative_num_draft_tokens=None)
    with pytest.raises(ValueError, match="no usable output stride") as info:
        loaded.resolver(make_self(loaded, STRIDE), result, make_batch([make_req("live")]))
    frame = traceback.extract_tb(info.tb)[-1]
    assert frame.filename == str(path)
    assert frame.name == "_get_speculative_output_stride"
    assert frame.lineno is not None
    assert "raise ValueError" in path.read_text().splitlines()[frame.lineno - 1]


# --------------------------------------------------------------------------------------------
# Loading rules and errors, on small files written for each case.


def write(tmp_path: Path, source: str, name: str = "target.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


RESOLVER = """
    class Mixin:
        def resolve(self, result, batch):
            return [[1]]
"""


def load_error(path: Path | str, qualname: str) -> str:
    with pytest.raises(TargetLoadError) as info:
        load_from_source(str(path), qualname)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_missing_file(tmp_path: Path) -> None:
    message = load_error(tmp_path / "nope.py", "Mixin.resolve")
    assert "nope.py does not exist" in message


def test_directory_is_not_a_file(tmp_path: Path) -> None:
    assert "is a directory" in load_error(tmp_path, "Mixin.resolve")


def test_invalid_python_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "x = 1\n\ndef broken(:\n    pass\n")
    message = load_error(path, "broken")
    assert "is not valid Python" in message
    assert "(line 3)" in message


def test_unknown_qualname_suggests_close_names(tmp_path: Path) -> None:
    path = write(tmp_path, RESOLVER)
    assert "did you mean Mixin.resolve" in load_error(path, "Mixin.resolv")
    assert "did you mean Mixin.resolve" in load_error(path, "Mixn.resolve")
    message = load_error(path, "Completely.different")
    assert "no Completely.different in" in message
    assert "Mixin.resolve" in message


def test_target_must_be_a_function(tmp_path: Path) -> None:
    path = write(tmp_path, RESOLVER + "\n    LIMIT = 3\n")
    assert "is not a function" in load_error(path, "LIMIT")
    assert "is a class, not a function" in load_error(path, "Mixin")


def test_wrong_signature_names_the_expected_one(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        class Mixin:
            def resolve(self, result, batch, extra):
                return []

            def keyword(self, result, *, batch):
                return []

            @staticmethod
            def static(self, result, batch):
                return []

        async def coroutine(self, result, batch):
            return []
        """,
    )
    message = load_error(path, "Mixin.resolve")
    assert "has signature (self, result, batch, extra)" in message
    assert "must accept exactly (self, result, batch)" in message
    assert "(self, result, *, batch)" in load_error(path, "Mixin.keyword")
    assert "@staticmethod" in load_error(path, "Mixin.static")
    assert "async" in load_error(path, "coroutine")


def test_module_level_function_target(tmp_path: Path) -> None:
    path = write(tmp_path, "def resolve(self, result, batch):\n    return [[len(batch)]]\n")
    loaded = load_from_source(str(path), "resolve")
    assert loaded.resolver(None, None, [1, 2]) == [[2]]
    assert dict(loaded.self_methods) == {}
    assert loaded.description == f"resolve from {path} (line 1)"


UNPROVIDABLE = """
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.server_args import get_global_server_args

    class Mixin:
        def touches(self, result, batch):
            return [[get_global_server_args()]]

        def untouched(self, result: ScheduleBatch, batch: "ScheduleBatch") -> list[list[int]]:
            return [[1]]

        def _helper(self):
            return get_global_server_args

        def via_helper(self, result, batch):
            return [[self._helper()]]
"""


def test_touched_unprovidable_name_is_a_load_error(tmp_path: Path) -> None:
    path = write(tmp_path, UNPROVIDABLE)
    assert load_error(path, "Mixin.touches") == (
        "target uses 'get_global_server_args' (imported from sglang.srt.server_args), which "
        "kvcheck cannot provide without importing that module"
    )
    message = load_error(path, "Mixin.via_helper")
    assert "'get_global_server_args' (used by Mixin._helper)" in message


def test_untouched_unprovidable_name_is_fine(tmp_path: Path) -> None:
    path = write(tmp_path, UNPROVIDABLE)
    loaded = load_from_source(str(path), "Mixin.untouched")
    assert loaded.resolver(None, None, None) == [[1]]


def test_allow_unavailable_defers_the_error_to_run_time(tmp_path: Path) -> None:
    path = write(tmp_path, UNPROVIDABLE)
    loaded = load_from_source(str(path), "Mixin.touches", allow_unavailable=True)
    with pytest.raises(TargetLoadError, match=r"'get_global_server_args'.*\(reached at run time\)"):
        loaded.resolver(None, None, None)


def test_other_unprovidable_names(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        from typing import TYPE_CHECKING

        from .sibling import helper

        if TYPE_CHECKING:
            from sglang.srt.managers.scheduler import Scheduler

        class Mixin:
            def type_checking(self, result, batch):
                return [[Scheduler]]

            def relative(self, result, batch):
                return [[helper()]]

            def undefined(self, result, batch):
                return [[not_defined_anywhere]]

            def uses_super(self, result, batch):
                return super().resolve(result, batch)
        """,
    )
    assert "only under TYPE_CHECKING" in load_error(path, "Mixin.type_checking")
    assert "relative import from .sibling" in load_error(path, "Mixin.relative")
    message = load_error(path, "Mixin.undefined")
    assert "'not_defined_anywhere', which is not defined in" in message
    assert "super()" in load_error(path, "Mixin.uses_super")


def test_module_level_dependencies_are_provided(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        import dataclasses
        import logging
        import math
        from typing import cast

        import torch
        from sglang.srt.managers.schedule_batch import Req, ScheduleBatch

        try:
            from sgl_kernel import fast_path
        except ImportError:
            fast_path = None

        logger = logging.getLogger(__name__)
        SCALE: int = 2


        @dataclasses.dataclass
        class Row:
            req: Req
            width: int = SCALE


        def _width(result: ScheduleBatch) -> int:
            return math.ceil(result.width / SCALE) * SCALE


        class Mixin:
            def resolve(self, result, batch: ScheduleBatch) -> list[list[int]]:
                reqs = cast(list[Req], batch)
                rows = [Row(r) for r in reqs]
                logger.debug("fast path: %s", fast_path)
                return [[_width(result), row.width, int(torch.tensor(3))] for row in rows]
        """,
    )
    loaded = load_from_source(str(path), "Mixin.resolve")
    assert loaded.resolver(None, SimpleNamespace(width=3), ["r"]) == [[4, 2, 3]]


def test_self_methods_static_class_and_property(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        class Mixin:
            @staticmethod
            def _double(x):
                return 2 * x

            @classmethod
            def _name(cls):
                return cls.__name__

            @property
            def width(self):
                return 4

            def _plain(self, x):
                return self._double(x) + 1

            def resolve(self, result, batch):
                return [[self._plain(result)], [self._name()]]

            def with_property(self, result, batch):
                return [[self.width]]
        """,
    )
    loaded = load_from_source(str(path), "Mixin.resolve")
    assert set(loaded.self_methods) == {"_plain", "_double", "_name"}

    class Fake:
        pass

    fake = Fake()
    for name, function in loaded.self_methods.items():
        setattr(fake, name, function.__get__(fake, Fake))
    assert loaded.resolver(fake, 5, None) == [[11], ["Fake"]]
    assert "self.width, a property" in load_error(path, "Mixin.with_property")


def test_failure_while_preparing_names_the_line(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        RATIO = 1 / 0

        def resolve(self, result, batch):
            return [[RATIO]]
        """,
    )
    message = load_error(path, "resolve")
    assert "(line 2)" in message
    assert "ZeroDivisionError" in message


def test_relative_and_home_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, RESOLVER)
    monkeypatch.chdir(tmp_path)
    assert load_from_source("target.py", "Mixin.resolve").resolver(None, None, None) == [[1]]
    monkeypatch.setenv("HOME", str(tmp_path))
    assert load_from_source("~/target.py", "Mixin.resolve").description.startswith(
        "Mixin.resolve from ~/target.py"
    )


def test_loaded_resolver_is_an_ordinary_function(tmp_path: Path) -> None:
    path = write(tmp_path, RESOLVER)
    resolver: Callable[..., Any] = load_from_source(str(path), "Mixin.resolve").resolver
    assert resolver.__qualname__ == "Mixin.resolve"
    assert resolver.__code__.co_filename == str(path)
    assert resolver.__code__.co_firstlineno == 3


def test_numpy_is_a_real_import_as_in_sglangs_own_files(tmp_path: Path) -> None:
    # SGLang 0.5.23's batch_result_processor.py imports numpy at module level.
    path = write(
        tmp_path,
        """
        import numpy as np

        class Mixin:
            def resolve(self, result, batch):
                return [[int(np.int64(1))]]
        """,
    )
    loaded = load_from_source(str(path), "Mixin.resolve")
    assert loaded.resolver(None, None, None) == [[1]]
