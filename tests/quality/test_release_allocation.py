"""The release's own allocation path on a real wheel (issue 21): 0.5.23's decode launch and
release run over kvcheck's fakes; a single-line bug injected into a copy of its tree shows."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from kvcheck.cli.main import main
from kvcheck.core.run import run_scenario
from kvcheck.core.scenario import Scenario
from kvcheck.errors import KvcheckUsageError
from kvcheck.families.sglang.allocation_rules import rule_of_release
from kvcheck.families.sglang.fakes import FakeReq, FinishLength
from kvcheck.families.sglang.real.path import ReleaseAllocation, release_allocation_factory
from kvcheck.families.sglang.scenario import Admit, AllocationRule, Config, Convention, Step
from kvcheck.families.sglang.target import release_path_rules
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


def _pressure(root: Path, rule: AllocationRule = "0.5.17") -> tuple[str | None, set[str]]:
    config = Config(
        convention="honest",
        global_counters="sglang",
        allocation=rule,
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


def test_the_coverage_names_the_retraction_loop_until_a_scenario_runs_it() -> None:
    """The retraction loop's and the chooser's lines are named (memory pressure never reached)
    until a scenario of the run runs the release's loop; from then on they are counted."""
    from kvcheck.families.sglang.real.path import ReleaseAllocationCode

    code = release_allocation_factory(_tree("0.5.23"))
    measured = code.measured_with(lambda function: function)
    chooser = "ScheduleBatch._get_decode_retraction_order"
    config = Config(allocation="0.5.17", page_size=4, stride=3)
    path = measured(config)
    reqs = [FakeReq("a", 5, 10), FakeReq("b", 3, 10)]
    path.admit(reqs)
    loop = "ScheduleBatch.retract_decode"
    side = measured.side_code()
    assert side is not None
    assert all("memory-pressure" in side.out_of_scope[name] for name in (chooser, loop))
    retracted: list[str] = []

    def retract(req: FakeReq) -> None:
        retracted.append(req.rid)
        path.retract(req)

    assert path.retract_for_memory(reqs, retract) == []
    assert retracted == ["a"]  # the longer prompt goes first (0.5.17+)
    side = measured.side_code()
    assert side is not None and not {chooser, loop} & set(side.out_of_scope)
    assert isinstance(measured, ReleaseAllocationCode) and not code.chose_retractions


def test_each_release_is_judged_by_its_own_retraction_order(tmp_path: Path) -> None:
    # 0.5.16 retracts a speculative batch from its back (r2, then r1: r0 stays) and 0.5.23 in
    # its sorted order (r0 alone): each passes under its own rule.
    assert _pressure(_tree("0.5.16") / "sglang", "0.5.16") == (None, {"r1", "r2"})
    assert _pressure(_tree("0.5.23") / "sglang", "0.5.17") == (None, {"r0"})
    # A tree that says it is 0.5.23 runs its own code under its own rule only: under 0.5.16's
    # kvcheck's model stands in (`ReleaseAllocationCode.__call__`), and retracts as that rule
    # does.
    assert _pressure(_tree("0.5.23") / "sglang", "0.5.16") == (None, {"r1", "r2"})
    # One that does not say (a checkout never built) runs its own code under every rule of its
    # generation: 0.5.23's sorted order judged under 0.5.16's rule (the back of the batch) is
    # caught, the release's order not being the rule's.
    assert _pressure(_unversioned("0.5.23", tmp_path / "tree"), "0.5.16")[0] is not None


def _unversioned(version: str, folder: Path) -> Path:
    """A copy of `version`'s tree that does not say its version, as a checkout never built."""
    shutil.copytree(_tree(version), folder)
    for name in ("version.py", "_version.py"):
        (folder / "sglang" / name).unlink()
    return folder / "sglang"


@pytest.mark.parametrize(("version", "rule"), [("0.5.16", "0.5.16"), ("0.5.23", "0.5.17")])
def test_a_tree_that_does_not_say_its_version_is_judged_by_its_own_retraction_order(
    version: str, rule: AllocationRule, tmp_path: Path
) -> None:
    # 0.5.16's spellings fit 0.5.16-0.5.18: of the two rules, only the one retracting in the
    # order its own chooser gives is drawn (under 0.5.17's, 0.5.16 fails `committed-live`).
    target = load_target(str(_unversioned(version, tmp_path / "tree")))
    assert release_path_rules(target) == (rule,)


def test_0_5_15_sorting_a_speculative_batch_in_its_loop_is_caught(tmp_path: Path) -> None:
    # Before the chooser (to 0.5.15), `retract_decode` itself keeps a speculative batch's order
    # (it sorts only without speculation: 0.5.15 managers/schedule_batch.py); kvcheck runs that
    # loop, so a loop that sorts anyway is caught. Before it ran the loop, kvcheck passed it.
    copy = tmp_path / "tree"
    shutil.copytree(_tree("0.5.15"), copy)
    target = copy / "sglang/srt/managers/schedule_batch.py"
    line = "if not server_args.speculative_algorithm:"
    text = target.read_text()
    assert text.count(line) == 1
    assert _pressure(copy / "sglang", "0.5.13") == (None, {"r1", "r2"})
    target.write_text(text.replace(line, "if server_args.speculative_algorithm:"))
    assert _pressure(copy / "sglang", "0.5.13")[0] == "alloc-retraction-order"


def test_0_5_16_sorting_a_speculative_batch_is_caught(tmp_path: Path) -> None:
    # 0.5.16's own chooser runs, told not to sort (`allow_policy_sort=False`); with the early
    # return dropped it sorts as 0.5.17 does and retracts r0, which its rule does not.
    copy = tmp_path / "tree"
    shutil.copytree(_tree("0.5.16"), copy)
    target = copy / "sglang/srt/managers/schedule_batch.py"
    line = "        if not allow_policy_sort:\n            return sorted_indices\n"
    text = target.read_text()
    assert text.count(line) == 1
    target.write_text(text.replace(line, ""))
    assert _pressure(copy / "sglang", "0.5.16")[0] is not None


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


def _flat_verdict(
    root: Path,
    rule: AllocationRule = "0.5.11",
    convention: Convention = "preclaim",
    max_examples: int = 150,
) -> str | None:
    import attrs

    from kvcheck.search.check import check

    # kvcheck's correct resolver of the convention: `reference` pre-claims, `reference-v2`
    # commits honestly.
    reference = load_target(
        "builtin:reference" if convention == "preclaim" else "builtin:reference-v2"
    )
    target = attrs.evolve(
        reference,
        allocation=release_allocation_factory(root),
        shape=attrs.evolve(reference.shape, allocation_rules=(rule,)),
    )
    verdict = check(
        target,
        seed=1,
        max_examples=max_examples,
        measure_coverage=False,
        convention=convention,
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


_EXHAUST_BOUNDS = {
    "events": 4,
    "allocations": ("0.5.17",),
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
    config = Config(allocation="0.5.17", allocation_path="release", stride=3)
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
        allocation="0.5.17",
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


# 0.5.12-0.5.14 (the flat layout, its launch clamped) and 0.5.15 (the same fields on `Req`,
# 0.5.16's launch and retraction functions, an honest launch): each runs its own code under its
# own rule, with the kvcheck reference resolver, and a single-line bug in its tree is caught.
FIELDS_ON_REQ: dict[str, tuple[AllocationRule, Convention, str]] = {
    "0.5.12": ("0.5.12", "preclaim", "sglang/srt/speculative/eagle_info_v2.py"),
    "0.5.13": ("0.5.13", "preclaim", "sglang/srt/speculative/eagle_info_v2.py"),
    "0.5.14": ("0.5.13", "preclaim", "sglang/srt/speculative/eagle_info_v2.py"),
    "0.5.15": ("0.5.13", "honest", "sglang/srt/speculative/eagle_utils.py"),
}
# Each bug: the file (None: the release's launch file), the line and what replaces it.
FIELDS_ON_REQ_BUGS: dict[str, tuple[str | None, str, str]] = {
    "allocation-base-committed": (None, "cur = r.kv_allocated_len\n", "cur = r.kv_committed_len\n"),
    "tail-never-freed": (
        "sglang/srt/mem_cache/common.py",
        "        tree_cache.token_to_kv_pool_allocator.free(indices_to_free)\n",
        "        pass\n",
    ),
}


@pytest.mark.parametrize("version", sorted(FIELDS_ON_REQ))
def test_0_5_12_to_0_5_15_run_their_own_code_and_pass(version: str) -> None:
    rule, convention, _ = FIELDS_ON_REQ[version]
    code = release_allocation_factory(_tree(version))
    assert code.functions().fields_on_req
    assert code.functions().flat == (version != "0.5.15")
    assert _flat_verdict(_tree(version), rule, convention, max_examples=40) is None


@pytest.mark.parametrize("bug", sorted(FIELDS_ON_REQ_BUGS))
@pytest.mark.parametrize("version", ["0.5.12", "0.5.15"])
def test_0_5_12_and_0_5_15_single_line_bugs_are_caught(
    tmp_path: Path, version: str, bug: str
) -> None:
    rule, convention, launch = FIELDS_ON_REQ[version]
    file, line, mutated = FIELDS_ON_REQ_BUGS[bug]
    copy = tmp_path / "tree"
    shutil.copytree(_tree(version), copy)
    target = copy / (file or launch)
    text = target.read_text()
    assert text.count(line) == 1
    target.write_text(text.replace(line, mutated))
    assert _flat_verdict(copy, rule, convention, max_examples=60) is not None, bug


@pytest.mark.parametrize("version", ["0.5.14", "0.5.15"])
def test_dflash_launches_with_its_own_draft_input_from_0_5_14(version: str) -> None:
    # DFLASH's `DFlashDraftInputV2.prepare_for_decode` (0.5.14 dflash_info_v2.py:131) reserves
    # `max(Al, C + 2 * block)` for the launched block and pre-claims nothing, where the EAGLE v2
    # mixin of the flat layout would pre-claim C.
    path = release_allocation_factory(_tree(version))(
        Config(algorithm="dflash", allocation="0.5.13", stride=3)
    )
    reqs = [FakeReq("a", 5, 10)]
    reqs[0].kv_committed_len = reqs[0].kv_allocated_len = 5
    path.admit(reqs)
    path.prepare_decode(reqs, 3)
    assert (reqs[0].kv_committed_len, reqs[0].kv_allocated_len) == (5, 11)
    assert path.pool.state().faults == ()


def _launch(root: Path, rule: AllocationRule) -> str | None:
    """One decode launch at stride 2 with an adaptive maximum of 3, judged under `rule`."""
    config = Config(
        convention="preclaim",
        allocation=rule,
        adaptive=True,
        stride=2,
        max_stride=3,
        overlap=False,
        allocation_path="release",
    )
    reference = load_target("builtin:reference")
    import attrs

    target = attrs.evolve(reference, allocation=release_allocation_factory(root))
    events = (Admit("r0", 4, 20), Step(), Step())
    result = run_scenario(Scenario(config, events), target)
    return None if result.violation is None else result.violation.invariant


def test_0_5_12_reserves_for_the_launched_stride_as_its_rule_says() -> None:
    # 0.5.12 reserves 2 * speculative_num_draft_tokens, the launched stride (managers/utils.py:
    # 229), where 0.5.13 reads max_speculative_num_draft_tokens (mem_cache/common.py:169). Under
    # its own rule 0.5.12 passes; judged under 0.5.13's, it is short of the adaptive maximum's
    # reserve: the failure once seen was the rule's, not the release's.
    assert _launch(_tree("0.5.12"), "0.5.12") is None
    assert _launch(_tree("0.5.12"), "0.5.13") == "alloc-covers-reserve"
    assert _launch(_tree("0.5.13"), "0.5.13") is None


def test_a_tree_whose_allocation_file_does_not_parse_gets_no_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Judged on kvcheck's model, such a checkout passed (exit 0) on code that was not its own.
    root = tmp_path / "tree"
    shutil.copytree(_tree("0.5.23"), root)
    batch = root / "sglang" / "srt" / "managers" / "schedule_batch.py"
    batch.write_text(batch.read_text() + "\ndef broken(:\n")
    spec = str(root / "sglang")
    argv = ["check", spec, "--max-examples", "3", "--no-save", "--global-counters", "sglang"]
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert "cannot be compiled" in error
    assert f"{batch} is not valid Python" in error
    assert "Traceback" not in error
    # Asked for by name, kvcheck's model still judges the resolver of that tree.
    assert main([*argv, "--allocation-path", "model"]) == 0


def test_a_call_a_fake_refuses_is_kvcheck_s_limit_not_a_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The fake `req_to_token_pool.free` is kvcheck's reading of SGLang's: a call it refuses
    # was a `kv-pool-conserved` FAIL blamed on the tree ("SGLang's release_req raised
    # TypeError"). test_allocation_fake_signatures.py holds every release's calls to the fakes.
    root = tmp_path / "tree"
    shutil.copytree(_tree("0.5.23"), root)
    common = root / "sglang" / "srt" / "mem_cache" / "common.py"
    line = "    tree_cache.req_to_token_pool.free(req)\n"
    assert line in common.read_text()
    common.write_text(common.read_text().replace(line, line.replace("req)", "req, True)"), 1))
    argv = ["check", str(root / "sglang"), "--max-examples", "30", "--no-save", "--seed", "0"]
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert "kvcheck's model of `req_to_token_pool.free(req_or_row)` does not accept" in error
    assert "not a verdict on the target" in error
    assert "Traceback" not in error


@pytest.mark.parametrize("version", ["0.5.6", "0.5.7", "0.5.16"])
def test_the_fake_tree_cache_is_a_chunk_cache_to_the_release(version: str) -> None:
    # SGLang's cache with prefix sharing off is its ChunkCache: 0.5.6-0.5.7's
    # `evict_from_tree_cache` returns first for one (mem_cache/common.py:231), and went on to
    # evict from kvcheck's fake when it did not recognise it.
    path = release_allocation_factory(_tree(version))(Config(allocation="0.5.16", page_size=4))
    tree = path.functions.tree
    chunk_cache = tree.binding("sglang.srt.mem_cache.chunk_cache", "ChunkCache")
    assert isinstance(path.tree_cache, chunk_cache)
    if version in ("0.5.6", "0.5.7"):
        evicted: list[object] = []
        path.tree_cache.evict = lambda *request: evicted.append(request)
        tree.function("sglang.srt.mem_cache.common", "evict_from_tree_cache")(
            path.tree_cache, 10**9
        )
        assert evicted == []


@pytest.mark.parametrize(
    ("version", "takes", "refuses"),
    [
        ("0.5.7", {"chunked_req_to_exclude": None}, {"reqs_to_exclude": None}),
        ("0.5.23", {"reqs_to_exclude": None}, {"chunked_req_to_exclude": None}),
    ],
)
def test_the_loop_s_faked_filter_takes_what_the_release_s_own_takes(
    version: str, takes: dict[str, Any], refuses: dict[str, Any]
) -> None:
    # `filter_batch` is faked in the retraction loop; a fake taking less than the release's
    # method would blame kvcheck's `TypeError` on the release (as a fake `check_decode_mem`
    # once did with 0.5.7's `buf_multiplier`), one taking more would hide a call it refuses.
    code = release_allocation_factory(_tree(version))
    path = code(Config(allocation=rule_of_release(version), stride=3))
    assert isinstance(path, ReleaseAllocation)
    batch = path._loop_batch([FakeReq("a", 5, 10), FakeReq("b", 5, 10)])
    batch.filter_batch(keep_indices=[1], **takes)
    assert [view.rid for view in batch.reqs] == ["b"]
    with pytest.raises(TypeError):
        batch.filter_batch(keep_indices=[0], **refuses)
