"""The release's own allocation path on a real wheel (issue 21): 0.5.23's decode launch and
release run over kvcheck's fakes; a single-line bug injected into a copy of its tree shows."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from kvcheck.core.run import run_scenario
from kvcheck.core.scenario import Scenario
from kvcheck.errors import KvcheckUsageError, TargetLoadError
from kvcheck.families.sglang.fakes import FakeReq, FinishLength
from kvcheck.families.sglang.real.path import release_allocation_factory
from kvcheck.families.sglang.scenario import Admit, Config, Step
from kvcheck.targets.loading import load_target


def _tree(version: str) -> Path:
    try:
        from kvcheck.families.sglang.real.tree import allocation_tree

        return allocation_tree(version)
    except KvcheckUsageError as exc:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"SGLang {version}'s wheel cannot be fetched here: {exc}")


def _run(root: Path) -> tuple[list[int], list[str]]:
    path = release_allocation_factory(root)(Config(allocation="0.5.16", page_size=4, stride=3))
    reqs = [FakeReq("a", 5, 10), FakeReq("b", 3, 10)]
    if not path.owns_admission_lengths:  # the engine's assignment before 0.5.19
        for req in reqs:
            req.kv_committed_len = req.kv_allocated_len = len(req.origin_input_ids)
    path.admit(reqs)
    assert [(r.kv_committed_len, r.kv_allocated_len) for r in reqs] == [(5, 5), (3, 3)]
    path.prepare_decode(reqs, 3)
    allocated = [req.kv_allocated_len for req in reqs]
    reqs[0].output_ids += [1, 2]
    reqs[0].kv_committed_len += 2
    reqs[0].finished_reason, reqs[0].finished_len = FinishLength(2), 2
    path.release(reqs[0])
    path.retract(reqs[1])
    kinds = [fault.kind for fault in path.pool.state().faults]
    assert path.pool.owner == {} or kinds
    return allocated, kinds


def test_0_5_23_sizes_and_releases_with_its_own_code() -> None:
    allocated, kinds = _run(_tree("0.5.23"))
    assert allocated == [12, 12]  # ceil_page(C + 2 * 3) for C = 5 and 3, page 4
    assert kinds == []


@pytest.mark.parametrize(
    ("file", "line", "mutated", "fault"),
    [
        (  # the tail never freed
            "sglang/srt/mem_cache/common.py",
            "    _release_overallocated_kv_indices(\n"
            "        req, owned_kv_len, req.kv.kv_allocated_len, tree_cache\n    )\n",
            "",
            "leak",
        ),
        (  # page rounding down
            "sglang/srt/mem_cache/allocation_sizing.py",
            "(r.kv.kv_committed_len + reserve + page_size - 1) // page_size * page_size,",
            "(r.kv.kv_committed_len + reserve) // page_size * page_size,",
            None,
        ),
        (  # the tail freed from the committed length, unaligned: the release's own
            # `free_segments` asserts page-aligned starts, so its code raises (a `pool` fault)
            "sglang/srt/mem_cache/common.py",
            "    if page_size > 1:\n        start_p = ceil_align(start_p, page_size)\n",
            "",
            "pool",
        ),
    ],
)
def test_single_line_bugs_in_a_copy_of_the_tree_show(
    tmp_path: Path, file: str, line: str, mutated: str, fault: str | None
) -> None:
    copy = tmp_path / "tree"
    shutil.copytree(_tree("0.5.23"), copy)
    target = copy / file
    text = target.read_text()
    assert line in text
    target.write_text(text.replace(line, mutated, 1))
    allocated, kinds = _run(copy)
    if fault is None:
        assert allocated != [12, 12]
    else:
        assert fault in kinds


def test_0_5_16_sizes_and_releases_with_its_own_code() -> None:
    allocated, kinds = _run(_tree("0.5.16"))
    assert allocated == [12, 12]  # the same sizing, inline in its eagle_prepare_for_decode
    assert kinds == []


def test_configs_no_release_runs_keep_kvcheck_model() -> None:
    from kvcheck.families.sglang.allocation import RuleAllocation
    from kvcheck.families.sglang.real.path import ReleaseAllocation

    code = release_allocation_factory(_tree("0.5.23"))
    adaptive = {"allocation": "0.5.16", "adaptive": True, "max_stride": 6, "stride": 3}
    # SGLang switches strides for EAGLE and EAGLE3 only (adaptive_spec_params.py:61).
    assert isinstance(code(Config(algorithm="eagle3", **adaptive)), ReleaseAllocation)  # type: ignore[arg-type]
    assert type(code(Config(algorithm="dflash", **adaptive))) is RuleAllocation  # type: ignore[arg-type]
    assert isinstance(code(Config(algorithm="dflash", allocation="0.5.16")), ReleaseAllocation)


# Memory pressure with two running requests that the release's order tells apart: equal outputs,
# so 0.5.17+ keeps the shorter prompt and retracts r0 (the longest); from the back of the batch,
# or with the sort reversed or its prompt key flipped, r1 goes instead.
PRESSURE = (
    Admit("r0", 50, 60),
    Admit("r1", 30, 60),
    Admit("r2", 40, 60),
    Step(),
    *(Step((3, 3, 3)),) * 14,
)
_ORDER_SORT = (
    "        sorted_indices.sort(\n"
    "            key=lambda i: length_key(reqs[i]),\n"
    "            reverse=True,\n"
    "        )\n"
)


def _pressure(root: Path) -> tuple[str | None, set[str]]:
    config = Config(
        convention="honest",
        global_counters="sglang",
        allocation="0.5.16",
        pool_pages=128,
        allocation_path="release",
        stride=3,
    )
    result = run_scenario(Scenario(config, PRESSURE), load_target(str(root)), record=True)
    retracted = {
        r.rid for entry in result.trace for r in entry.expected.requests if r.phase == "retracted"
    }
    return (None if result.violation is None else result.violation.invariant), retracted


def test_0_5_23_retracts_in_its_own_order() -> None:
    assert _pressure(_tree("0.5.23") / "sglang") == (None, {"r0"})


def test_the_coverage_names_the_chooser_until_a_scenario_asks_it() -> None:
    """The chooser's lines are named (memory pressure never reached) until a scenario of the
    run asks the release's chooser; from then on they are counted."""
    from kvcheck.families.sglang.real.path import ReleaseAllocationCode

    code = release_allocation_factory(_tree("0.5.23"))
    measured = code.measured_with(lambda function: function)
    chooser = "ScheduleBatch._get_decode_retraction_order"
    config = Config(allocation="0.5.16", page_size=4, stride=3)
    path = measured(config)
    reqs = [FakeReq("a", 5, 10), FakeReq("b", 3, 10)]
    path.admit(reqs)
    side = measured.side_code()
    assert side is not None and "memory-pressure" in side.out_of_scope[chooser]
    assert path.retraction_order(reqs) is not None
    side = measured.side_code()
    assert side is not None and chooser not in side.out_of_scope
    assert isinstance(measured, ReleaseAllocationCode) and not code.chose_retractions


@pytest.mark.parametrize(
    ("line", "mutated"),
    [
        (_ORDER_SORT, ""),  # from the back of the batch, as before 0.5.17
        (_ORDER_SORT, _ORDER_SORT.replace("reverse=True", "reverse=False")),
        (
            "return (len(req.output_ids), -len(req.origin_input_ids))",
            "return (len(req.output_ids), len(req.origin_input_ids))",
        ),
        (  # not an order of the batch: a `pool` fault of the release's code
            _ORDER_SORT + "        return sorted_indices\n",
            _ORDER_SORT + "        return sorted_indices[1:]\n",
        ),
    ],
    ids=["unsorted", "reversed", "shortest-prompt-first", "drops-a-row"],
)
def test_a_wrong_retraction_order_in_the_tree_is_caught(
    tmp_path: Path, line: str, mutated: str
) -> None:
    copy = tmp_path / "tree"
    shutil.copytree(_tree("0.5.23"), copy)
    target = copy / "sglang/srt/managers/schedule_batch.py"
    text = target.read_text()
    assert text.count(line) == 1
    target.write_text(text.replace(line, mutated))
    invariant, _ = _pressure(copy / "sglang")
    assert invariant is not None


# The flat layout of 0.5.11 (C, Al and the row on `Req`, the launch a draft-input method that
# pre-claims C itself), judged with kvcheck's reference resolver (0.5.11's own fails on
# `committed-finished-frozen`, a resolver bug) under 0.5.11's rule, 0.5.6.
FLAT_BUGS = {
    "tail-never-freed": (
        "sglang/srt/mem_cache/common.py",
        "        tree_cache.token_to_kv_pool_allocator.free(indices_to_free)\n",
        "        pass\n",
    ),
    "no-preclaim": (
        "sglang/srt/speculative/eagle_info_v2.py",
        "            r.kv_committed_len += 1\n",
        "",
    ),
    "allocation-base-committed": (
        "sglang/srt/speculative/eagle_info_v2.py",
        "            cur_kv_lens_cpu.append(r.kv_allocated_len)\n",
        "            cur_kv_lens_cpu.append(r.kv_committed_len)\n",
    ),
}


def _flat_verdict(root: Path) -> str | None:
    import attrs

    from kvcheck.search.check import check

    reference = load_target("builtin:reference")
    target = attrs.evolve(
        reference,
        allocation=release_allocation_factory(root),
        shape=attrs.evolve(reference.shape, allocation_rules=("0.5.6",)),
    )
    verdict = check(
        target,
        seed=1,
        max_examples=150,
        measure_coverage=False,
        convention="preclaim",
        allocation_path="release",
    )
    return None if verdict.violation is None else verdict.violation.invariant


def test_0_5_11_flat_layout_runs_its_own_code_and_passes() -> None:
    code = release_allocation_factory(_tree("0.5.11"))
    assert code.functions().flat
    assert _flat_verdict(_tree("0.5.11")) is None


@pytest.mark.parametrize("name", sorted(FLAT_BUGS))
def test_0_5_11_single_line_bugs_are_caught(tmp_path: Path, name: str) -> None:
    file, line, mutated = FLAT_BUGS[name]
    copy = tmp_path / "tree"
    shutil.copytree(_tree("0.5.11"), copy)
    target = copy / file
    text = target.read_text()
    assert text.count(line) == 1
    target.write_text(text.replace(line, mutated))
    assert _flat_verdict(copy) is not None, name


def test_0_5_12_to_0_5_14_keep_kvchecks_model() -> None:
    with pytest.raises(TargetLoadError, match="clamps its sizing"):
        release_allocation_factory(_tree("0.5.12"))


# Exhaustive search on the release path: an engine branched with `Engine.clone` shares the
# compiled release (`ReleaseFunctions.__deepcopy__`) and copies its fakes. Small bounds: one
# stride, overlap on, outputs of one token.
_EXHAUST_BOUNDS = {
    "events": 4,
    "allocations": ("0.5.16",),
    "overlap": (True,),
    "strides": (3,),
    "kinds": ("admit", "step", "retract", "abort"),
    "max_new": (1,),
}


def _exhaust(root: Path, allocation_path: str) -> tuple[str, int, str | None]:
    from kvcheck.families.sglang.search import Bounds
    from kvcheck.search.exhaust import exhaust

    result = exhaust(
        load_target(str(root)),
        Bounds(**_EXHAUST_BOUNDS),  # type: ignore[arg-type]
        convention="honest",
        global_counters="sglang",
        allocation_path=allocation_path,
        measure_coverage=False,
    )
    violation = None if result.violation is None else result.violation.invariant
    return result.verdict, result.states, violation


def test_exhaust_branches_the_release_path_as_the_model_path(tmp_path: Path) -> None:
    from kvcheck.families.sglang.builtins import reference
    from kvcheck.families.sglang.engine import Engine
    from kvcheck.families.sglang.real.path import ReleaseAllocation

    root = _tree("0.5.23") / "sglang"
    released = _exhaust(root, "release")
    assert released == _exhaust(root, "model")
    assert released[0] == "pass"
    # A branch's fakes are its own; the compiled release is shared.
    config = Config(allocation="0.5.16", allocation_path="release", stride=3)
    path = release_allocation_factory(_tree("0.5.23"))(config)
    engine = Engine(config, reference, not_judged=frozenset(), allocation=path)
    engine.apply(Admit("r0", 5, 4))
    engine.apply(Step())
    twin = engine.clone()
    twin_path = twin.allocation
    assert isinstance(path, ReleaseAllocation) and isinstance(twin_path, ReleaseAllocation)
    assert twin_path.functions is path.functions
    assert twin_path.rows.req_to_token is not path.rows.req_to_token
    assert twin_path.rows._allocator is twin_path.allocator  # one copy of each fake
    assert twin_path.view(twin.reqs["r0"])._req is twin.reqs["r0"]
    twin.apply(Step((3,)))
    assert path.rows.req_to_token.count_nonzero() < twin_path.rows.req_to_token.count_nonzero()
    # The tail never freed in a copy of the tree: the search on its own path catches it.
    copy = tmp_path / "tree"
    shutil.copytree(_tree("0.5.23"), copy)
    common = copy / "sglang/srt/mem_cache/common.py"
    tail = (
        "    _release_overallocated_kv_indices(\n"
        "        req, owned_kv_len, req.kv.kv_allocated_len, tree_cache\n    )\n"
    )
    text = common.read_text()
    assert text.count(tail) == 1
    common.write_text(text.replace(tail, ""))
    assert _exhaust(copy / "sglang", "release") == ("fail", 5, "kv-released-once")


def test_a_launch_pool_fault_is_reported_before_the_same_steps_delivery(tmp_path: Path) -> None:
    """An estimate in tokens where pages are meant (a copy of 0.5.23's tree) lets the engine
    keep r1 where the model retracts it; at event 5 its launch runs out of memory inside the
    release's code, and the delivery after it, judged against the model's retraction, offers
    r1's grammar a token. The launch's fault comes first: it is the cause."""
    from kvcheck.families.sglang.scenario import Grammar

    copy = tmp_path / "tree"
    shutil.copytree(_tree("0.5.23"), copy)
    batch = copy / "sglang/srt/managers/schedule_batch.py"
    text = batch.read_text()
    estimate = "total += ceil_align(nxt, page_size) - ceil_align(cur, page_size)"
    assert text.count(estimate) == 1
    batch.write_text(text.replace(estimate, "total += nxt - cur"))
    config = Config(
        convention="honest",
        stride=5,
        adaptive=True,
        page_size=4,
        global_counters="sglang",
        allocation="0.5.16",
        max_stride=8,
        pool_pages=32,
        allocation_path="release",
    )
    events = (
        Admit("r0", 52, 7),
        Admit("r1", 34, 5, grammar=Grammar("accept")),
        Step(),
        Step((5, 3)),
        Step(),
        Step(),
    )
    result = run_scenario(Scenario(config, events), load_target(str(copy / "sglang")))
    found = [(v.event_index, v.invariant) for v in result.violations]
    assert found[0] == (5, "kv-pool-conserved")
    assert (5, "grammar-stale-untouched") in found  # the delivery's, after it


def test_members_only_code_kvcheck_does_not_drive_reads_are_not_compiled() -> None:
    """A member is compiled (and its coverage counted) where the driven code reaches it: 0.5.17's
    `free_segments` only its radix caches call, 0.5.19's `swa_dead_lo` only SWA eviction and its
    `output_ids_through_stop` only detokenization; 0.5.23's `free_kv_row` and `owned_kv_len`
    read the latter two."""
    old = release_allocation_factory(_tree("0.5.17")).functions()
    assert hasattr(old.allocator_members, "free_segment")
    assert not hasattr(old.allocator_members, "free_segments")
    middle = release_allocation_factory(_tree("0.5.19")).functions()
    assert hasattr(middle.allocator_members, "free_segments")
    assert not hasattr(middle.kv_members, "swa_dead_lo")
    assert not hasattr(middle.req_members, "output_ids_through_stop")
    new = release_allocation_factory(_tree("0.5.23")).functions()
    assert hasattr(new.kv_members, "swa_dead_lo")
    assert hasattr(new.req_members, "output_ids_through_stop")
