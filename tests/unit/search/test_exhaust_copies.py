"""The exhaustive search's copies of a state are independent: what a target writes on the fakes
in one child never reaches a sibling or the parent (`kvcheck.core.copying`, `Engine.clone`, and
`release`, which breaks the cycles of the states the search drops).

The target here keeps its own books on the fakes, in places a broken copy would share: a list on
each request, a dict on the scheduler (the resolver's `self`), and a tensor on the request that
it adds to in place. Each call checks the books against the request's own counters and raises
when they disagree, which the search reports as `target-raised`. Correct copies: the search
passes. A copy that shares any of them between siblings: a sibling sees another branch's entry,
the search stops on a violation that replaying its scenario does not show, and that is an error.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

from kvcheck.errors import NondeterministicTargetError
from kvcheck.families.sglang import engine as engine_module
from kvcheck.families.sglang.builtins import reference
from kvcheck.families.sglang.search import Bounds
from kvcheck.search.exhaust import exhaust
from kvcheck.targets.loading import load_target

BOUNDS = Bounds(events=5, max_new=(4,), eos=(None,))


def bookkeeping(self: Any, result: Any, batch: Any) -> list[list[int]]:
    """`builtin:reference`, plus books kept on the fakes and checked at every call."""
    books = vars(self).setdefault("_books", {})  # the scheduler's: shared by its requests
    for req in batch.reqs:
        if req.is_retracted or req.finished():
            continue
        calls = getattr(req, "_calls", None)
        if calls is None:
            req._calls = calls = []
            req._tally = torch.zeros(1, dtype=torch.int64)
        # Live rows so far: the request's own verify count, which its copy carries along.
        if not len(calls) == books.get(req.rid, 0) == int(req._tally) == req.spec_verify_ct:
            raise RuntimeError(
                f"books disagree for {req.rid}: {len(calls)} calls, {books.get(req.rid)} "
                f"booked, {int(req._tally)} tallied, {req.spec_verify_ct} verified"
            )
        calls.append(len(req.output_ids))
        books[req.rid] = books.get(req.rid, 0) + 1
        req._tally += 1  # in place: a shared tensor would count every branch
    return reference(self, result, batch)


TARGET = f"{__name__}:bookkeeping"


def test_a_target_writing_on_the_fakes_does_not_leak_between_branches() -> None:
    result = exhaust(load_target(TARGET), BOUNDS, convention="preclaim", measure_coverage=False)
    assert result.verdict == "pass", result.violation
    assert result.states > 100  # many branches, each with its own books


@pytest.mark.parametrize("shared", ["list", "dict", "tensor"])
def test_a_copy_that_shares_the_books_is_caught(
    monkeypatch: pytest.MonkeyPatch, shared: str
) -> None:
    """The same search with a broken clone that hands one of the books on as it is."""
    good = engine_module.Engine.clone

    def leaky_clone(self: engine_module.Engine) -> engine_module.Engine:
        copied = good(self)
        for rid, req in self.reqs.items():
            fields, into = vars(req), vars(copied.reqs[rid])
            if shared == "list" and "_calls" in fields:
                into["_calls"] = fields["_calls"]
            if shared == "tensor" and "_tally" in fields:
                into["_tally"] = fields["_tally"]
        books = vars(self.scheduler).get("_books")
        if shared == "dict" and books is not None:
            vars(copied.scheduler)["_books"] = books
        return copied

    monkeypatch.setattr(engine_module.Engine, "clone", leaky_clone)
    with pytest.raises(NondeterministicTargetError, match="target-raised"):
        exhaust(load_target(TARGET), BOUNDS, convention="preclaim", measure_coverage=False)


def test_the_original_is_untouched_by_its_copies() -> None:
    # The parent side of the same guarantee: a child's writes never reach the state it was
    # copied from (the search reuses a parent's engine for its last child only).
    from kvcheck.families.sglang.judging import SglangJudging
    from kvcheck.families.sglang.scenario import Admit, Step
    from kvcheck.search.exhaust import Plan, Shard

    target = load_target(TARGET)
    shard = Shard(target, Plan("sglang", BOUNDS, SglangJudging("preclaim", "ideal", False)))
    node = shard.frontier[0]
    for event in (Admit("r0", 3, 4, None), Step(()), Step(()), Step(())):
        node.model.apply(event)
        node.engine.apply(event)
    req = node.engine.reqs["r0"]
    before = (
        list(req._calls),
        int(req._tally),
        copy.deepcopy(vars(node.engine.scheduler)["_books"]),
    )
    for accepts in ((), (2,), (3,)):
        child = node.engine.clone()
        child.apply(Step(accepts))
    assert (list(req._calls), int(req._tally), vars(node.engine.scheduler)["_books"]) == before


@pytest.mark.parametrize("released", [True, False])
def test_dropped_states_leave_no_cycles_behind(
    monkeypatch: pytest.MonkeyPatch, released: bool
) -> None:
    """What makes the search's collections cheap: the states it drops are freed by reference
    counting (`release`), so the collection after a level finds nothing; without `release`,
    every dropped engine is a cycle for the collector to find."""
    import gc

    from kvcheck.families.sglang.judging import SglangJudging
    from kvcheck.search import exhaust as exhaust_module
    from kvcheck.search.exhaust import Plan, Shard
    from kvcheck.search.exhaust_parallel import collected_by_hand

    if not released:
        monkeypatch.setattr(exhaust_module, "release", lambda state, drop: None)
    plan = Plan("sglang", Bounds(events=4), SglangJudging("preclaim", "ideal", True))
    shard = Shard(load_target("builtin:reference"), plan)
    found = []
    with collected_by_hand():
        gc.collect()
        for _ in range(4):
            shard.expand(lambda: None)
            shard.merge()
            found.append(gc.collect())
    assert (sum(found) == 0) is released, found


def plain_bookkeeping(self: Any, result: Any, batch: Any) -> list[list[int]]:
    """`bookkeeping` without the tensor: books a checkpoint can put back, so the search tries
    children on their parent's own fakes (`kvcheck.core.copying.checkpoint`)."""
    books = vars(self).setdefault("_books", {})
    for req in batch.reqs:
        if req.is_retracted or req.finished():
            continue
        calls = getattr(req, "_calls", None)
        if calls is None:
            req._calls = calls = []
        if not len(calls) == books.get(req.rid, 0) == req.spec_verify_ct:
            raise RuntimeError(
                f"books disagree for {req.rid}: {len(calls)} calls, {books.get(req.rid)} "
                f"booked, {req.spec_verify_ct} verified"
            )
        calls.append(len(req.output_ids))
        books[req.rid] = books.get(req.rid, 0) + 1
    return reference(self, result, batch)


PLAIN_TARGET = f"{__name__}:plain_bookkeeping"


def _tried_both_ways(target: Any) -> list[tuple[list[Any], list[Any]]]:
    """Every node of the search's third level expanded both ways: its children on copies, and
    (from a copy of the node) in place; per node, each child's events, violation and key."""
    from kvcheck.families.sglang.judging import SglangJudging
    from kvcheck.search.exhaust import Plan, Shard, _Node

    shard = Shard(target, Plan("sglang", BOUNDS, SglangJudging("preclaim", "ideal", False)))
    for _ in range(3):
        shard.expand(lambda: None)
        shard.merge()
    pairs = []
    for node in shard.frontier:
        twin = _Node(node.config, node.engine.clone(), node.model.clone(), node.events, node.steps)
        ways = []
        for branched, in_place in ((node, False), (twin, True)):
            ways.append(
                [
                    (child.events, violation, shard.key(child.owned()))
                    for child, violation in shard.children(branched, in_place)
                ]
            )
        pairs.append((ways[0], ways[1]))
    return pairs


def test_children_tried_in_place_are_the_children_tried_on_copies() -> None:
    pairs = _tried_both_ways(load_target(PLAIN_TARGET))
    assert len(pairs) > 10 and sum(len(copied) for copied, _ in pairs) > 50
    for copied, in_place in pairs:
        assert in_place == copied


@pytest.mark.parametrize("kept", ["list", "dict"])
def test_a_restore_that_misses_the_books_is_caught(
    monkeypatch: pytest.MonkeyPatch, kept: str
) -> None:
    """The same with a restore that leaves one kind of book as the child left it: a later
    sibling tried in place finds the books wrong (the target raises)."""
    from kvcheck.core import copying

    good = copying.Checkpoint.restore

    def is_book(held: Any) -> bool:
        if kept == "list":  # a request's `_calls`: output lengths
            return type(held) is list and bool(held) and all(type(v) is int for v in held)
        # The scheduler's `_books`: calls per rid.
        return (
            type(held) is dict
            and bool(held)
            and all(type(k) is str and type(v) is int for k, v in held.items())
        )

    def leaky_restore(self: copying.Checkpoint) -> None:
        books = [
            (held, held.copy()) for held, _ in (*self._collections, *self._dicts) if is_book(held)
        ]
        good(self)
        for held, contents in books:  # as the child left them
            if type(held) is list:
                held[:] = contents
            else:
                held.clear()
                held.update(contents)

    monkeypatch.setattr(copying.Checkpoint, "restore", leaky_restore)
    pairs = _tried_both_ways(load_target(PLAIN_TARGET))
    assert any(in_place != copied for copied, in_place in pairs)
    assert any(
        violation == "target-raised" for _, in_place in pairs for _, violation, _ in in_place
    )


def test_the_last_level_is_tried_in_place_and_counted_alike(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The bounds' last level is tried in place from a checkpoint and nothing of it is copied
    (`Shard.final_level`): the verdict and counts are those of a search that copies it, and a
    restore that leaves the books as a child left them is caught there (a sibling's books
    disagree, which replaying the scenario does not show)."""
    from kvcheck.core import copying
    from kvcheck.search.exhaust import Shard

    target = load_target(PLAIN_TARGET)
    bounds = Bounds(events=4, max_new=(4,), eos=(None,))

    def searched() -> tuple[str, int, int, int]:
        result = exhaust(target, bounds, convention="preclaim", measure_coverage=False)
        return result.verdict, result.states, result.scenarios, result.depth

    in_place = searched()
    with monkeypatch.context() as patched:
        patched.setattr(Shard, "final_level", property(lambda self: False))
        copied = searched()
    assert in_place == copied and in_place[0] == "pass" and in_place[1] > 100

    good = copying.Checkpoint.restore

    def leaky_restore(self: copying.Checkpoint) -> None:
        books = [
            (held, held.copy())
            for value, _ in self._objects
            if type(held := vars(value).get("_books")) is dict
        ]
        good(self)
        for held, contents in books:  # the scheduler's dict, as the child left it
            held.clear()
            held.update(contents)

    monkeypatch.setattr(copying.Checkpoint, "restore", leaky_restore)
    with pytest.raises(NondeterministicTargetError):
        searched()
