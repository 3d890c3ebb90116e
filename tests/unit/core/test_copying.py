"""Deep copies of engine and model states (`kvcheck.core.copying`), which the exhaustive search
branches on: `deep_copy` on its own, and `clone()` behaving like `copy.deepcopy`."""

from __future__ import annotations

import copy
import random
from typing import TYPE_CHECKING, Any

import attrs
import pytest
import torch

from kvcheck.core.copying import checkpoint, deep_copy
from kvcheck.families.sglang.engine import Engine
from kvcheck.families.sglang.model import ReferenceModel
from kvcheck.families.sglang.scenario import (
    Abort,
    Admit,
    Config,
    Event,
    Retract,
    Step,
    SwitchStride,
)
from kvcheck.targets.loading import load_target

REFERENCE = load_target("builtin:reference")


def _random_events(rng: random.Random, count: int) -> list[Event]:
    events: list[Event] = []
    for _ in range(count):
        roll = rng.random()
        rid = f"r{rng.randrange(3)}"
        if roll < 0.5:
            events.append(Step(tuple(rng.randint(1, 4) for _ in range(rng.randrange(4)))))
        elif roll < 0.7:
            events.append(Admit(rid, rng.randint(1, 9), rng.randint(1, 8), rng.choice([None, 2])))
        elif roll < 0.8:
            events.append(Retract(rid))
        elif roll < 0.9:
            events.append(Abort(rid))
        else:
            events.append(SwitchStride(rng.randint(2, 5)))
    return events


@pytest.mark.parametrize("seed", range(12))
def test_clone_behaves_like_a_generic_deepcopy(seed: int) -> None:
    rng = random.Random(seed)
    config = Config(convention=rng.choice(["preclaim", "honest"]), stride=4, adaptive=True)
    engine = Engine(config, REFERENCE.resolver, not_judged=REFERENCE.shape.not_judged)
    model = ReferenceModel(config)
    for event in _random_events(rng, 10):
        engine.apply(event)
        model.apply(event)
    generic = copy.deepcopy(engine, {id(engine.resolver): engine.resolver})
    copies = [(engine.clone(), model.clone()), (generic, copy.deepcopy(model))]
    before = (engine.state_key(), model.state_key())
    continuation = _random_events(rng, 10)
    outcomes = []
    for copied_engine, copied_model in copies:
        assert copied_engine.resolver is engine.resolver
        seen = []
        for event in continuation:
            observed = copied_engine.apply(event)
            copied_model.apply(event)
            seen.append((observed.requests, copied_engine.state_key(), copied_model.state_key()))
        outcomes.append(seen)
    assert outcomes[0] == outcomes[1]
    # The original is untouched by what its copies went through.
    assert (engine.state_key(), model.state_key()) == before


# --- deep_copy ----------------------------------------------------------------------------------


class Plain:
    """An ordinary object with a __dict__, like the fakes and the engine."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    if TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any: ...
        def __setattr__(self, name: str, value: Any) -> None: ...


@attrs.define
class Mutable:
    items: list[int]
    label: str = "m"


@attrs.frozen
class Frozen:
    value: int
    items: tuple[Any, ...] = ()


class Resolver:
    """Stands for whatever a target is (a callable object, not a function)."""

    def __call__(self, *args: Any) -> None:
        return None


def test_what_share_names_is_kept_and_everything_else_is_copied() -> None:
    resolver = Resolver()
    state = Plain(resolver=resolver, nested=Plain(resolver=resolver, rows=[1, 2]))
    copied = deep_copy(state, share=(resolver,))
    assert copied.resolver is resolver and copied.nested.resolver is resolver
    assert copied is not state and copied.nested is not state.nested
    assert copied.nested.rows == [1, 2] and copied.nested.rows is not state.nested.rows
    # Without `share` the same object is copied like any other.
    alone = deep_copy(state)
    assert alone.resolver is not resolver and isinstance(alone.resolver, Resolver)


def test_functions_and_immutable_values_are_shared() -> None:
    def function() -> None:
        return None

    immutable = (1, "two", None, function, len, int, range(3))
    copied = deep_copy([immutable, function])
    assert copied[0] is immutable and copied[1] is function


def test_nested_containers_are_independent_after_mutation() -> None:
    original: dict[str, Any] = {
        "reqs": {"r0": Plain(committed=3, outputs=[7, 8])},
        "queue": [[1], [2]],
        "flags": {"a", "b"},
        "pair": ([1], 2),
    }
    copied = deep_copy(original)
    assert copied["reqs"]["r0"].__dict__ == original["reqs"]["r0"].__dict__
    copied["reqs"]["r0"].committed = 99
    copied["reqs"]["r0"].outputs.append(9)
    copied["reqs"]["r1"] = Plain()
    copied["queue"][0].append(5)
    copied["flags"].add("c")
    copied["pair"][0].append(3)
    assert original["reqs"]["r0"].committed == 3 and original["reqs"]["r0"].outputs == [7, 8]
    assert set(original["reqs"]) == {"r0"}
    assert original["queue"] == [[1], [2]]
    assert original["flags"] == {"a", "b"}
    assert original["pair"] == ([1], 2)


def test_attrs_instances() -> None:
    mutable = Mutable([1, 2])
    copied = deep_copy(mutable)
    assert copied == mutable and copied is not mutable and copied.items is not mutable.items
    copied.items.append(3)
    assert mutable.items == [1, 2]
    # A frozen instance holding only immutable values is shared; one holding a list is not.
    immutable = Frozen(1, (2, "x"))
    assert deep_copy(immutable) is immutable
    holding = Frozen(1, ([2],))
    again = deep_copy(holding)
    assert again == holding and again is not holding and again.items[0] is not holding.items[0]


def test_aliasing_and_cycles_are_preserved() -> None:
    # One request reachable from two places (the engine's table and a launched batch) stays one.
    req = Plain(committed=1)
    rows = [req]
    state = Plain(reqs={"r0": req}, batch=rows, again=rows)
    copied = deep_copy(state)
    assert copied.reqs["r0"] is copied.batch[0] is copied.again[0]
    assert copied.batch is copied.again and copied.batch is not rows
    assert copied.batch[0] is not req
    # Cycles through plain objects and lists (what engine and model states are made of).
    loop = Plain()
    loop.me = loop
    loop.rows = [loop]
    copied_loop = deep_copy(loop)
    assert copied_loop is not loop
    assert copied_loop.me is copied_loop and copied_loop.rows[0] is copied_loop
    nested: list[Any] = [1]
    nested.append(nested)
    copied_nested = deep_copy(nested)
    assert copied_nested is not nested and copied_nested[1] is copied_nested


def test_bound_methods_follow_their_copied_object() -> None:
    # How the engine binds a resolver's sibling methods onto the fake scheduler.
    def sibling(self: Plain) -> int:
        return int(self.value)

    scheduler = Plain(value=1)
    scheduler.sibling = sibling.__get__(scheduler, Plain)
    copied = deep_copy(scheduler)
    copied.value = 2
    assert copied.sibling.__func__ is sibling
    assert copied.sibling.__self__ is copied
    assert (scheduler.sibling(), copied.sibling()) == (1, 2)


def test_anything_else_goes_through_copy_deepcopy() -> None:
    # A tensor a target stored on a fake: copied, not shared.
    tensor = torch.tensor([1, 2, 3])
    holder = Plain(stored=tensor)
    copied = deep_copy(holder)
    assert copied.stored is not tensor and copied.stored.tolist() == [1, 2, 3]
    copied.stored[0] = 9
    assert tensor.tolist() == [1, 2, 3]

    class Custom:
        def __init__(self) -> None:
            self.calls = 0

        def __deepcopy__(self, memo: dict[int, Any]) -> Custom:
            made = Custom()
            made.calls = self.calls + 1
            return made

    custom = Custom()
    assert deep_copy([custom])[0].calls == 1


# --- classes shared by copies (SHARED_IN_COPIES) -----------------------------------------------


def _immutable_all_the_way_down(value: Any) -> bool:
    if isinstance(value, (str, int, float, bool, type(None))):
        return True
    if type(value) is tuple:
        return all(_immutable_all_the_way_down(v) for v in value)
    if attrs.has(type(value)) and getattr(type(value), "__attrs_props__", None) is not None:
        if not type(value).__attrs_props__.is_frozen:
            return False
    elif not (attrs.has(type(value)) and "__slots__" in type(value).__dict__):
        return False
    return all(
        _immutable_all_the_way_down(getattr(value, f.name)) for f in attrs.fields(type(value))
    )


@pytest.mark.parametrize("seed", range(6))
def test_shared_records_are_immutable_and_kept_as_they_are(seed: int) -> None:
    """Every instance of a class that opts into sharing (reached from an engine and a model after
    random events) is immutable all the way down, so sharing it is observably a deep copy; and
    deep_copy keeps it as it is."""
    from kvcheck.core.copying import SHARED_IN_COPIES

    rng = random.Random(seed)
    config = Config(convention=rng.choice(["preclaim", "honest"]), stride=4, adaptive=True)
    engine = Engine(config, REFERENCE.resolver, not_judged=REFERENCE.shape.not_judged)
    model = ReferenceModel(config)
    found: list[Any] = []

    def walk(value: Any, seen: set[int]) -> None:
        if id(value) in seen or isinstance(value, (str, int, float, type(None), torch.Tensor)):
            return
        seen.add(id(value))
        if type(value).__dict__.get(SHARED_IN_COPIES) is True:
            found.append(value)
        if isinstance(value, dict):
            for v in value.values():
                walk(v, seen)
        elif isinstance(value, (list, tuple, set, frozenset)):
            for v in value:
                walk(v, seen)
        elif attrs.has(type(value)):
            for f in attrs.fields(type(value)):
                walk(getattr(value, f.name), seen)
        elif hasattr(value, "__dict__") and not callable(value):
            for v in vars(value).values():
                walk(v, seen)

    for event in _random_events(rng, 12):
        engine.apply(event)
        model.apply(event)
        walk(engine, set())
        walk(model, set())
    assert {type(v).__name__ for v in found} >= {"Config", "RequestExpectation"}
    for value in found:
        assert _immutable_all_the_way_down(value), value
        assert deep_copy(value) is value
        assert copy.deepcopy(value) == value


def test_only_a_true_opt_in_shares() -> None:
    """A class whose marker is anything but True is walked and copied as before."""
    from kvcheck.core.copying import SHARED_IN_COPIES

    @attrs.define
    class Mutable:
        items: list[int]

    setattr(Mutable, SHARED_IN_COPIES, False)
    value = Mutable([1])
    assert deep_copy(value) is not value and deep_copy(value) == value


# --- checkpoints --------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(12))
def test_a_restored_state_goes_on_as_a_copy_made_at_the_checkpoint(seed: int) -> None:
    """Events applied in place, then `restore`: the engine and the model continue exactly as
    copies made at the checkpoint do, and as the same objects as before."""
    rng = random.Random(seed)
    config = Config(convention=rng.choice(["preclaim", "honest"]), stride=4, adaptive=True)
    engine = Engine(config, REFERENCE.resolver, not_judged=REFERENCE.shape.not_judged)
    model = ReferenceModel(config)
    for event in _random_events(rng, 10):
        engine.apply(event)
        model.apply(event)
    copies = (engine.clone(), model.clone())
    engine_state, model_state = engine.checkpoint(), model.checkpoint()
    assert engine_state is not None and model_state is not None
    reqs, running = dict(engine.reqs), engine.running
    for _ in range(3):  # several branches from the one checkpoint
        for event in _random_events(rng, 6):
            engine.apply(event)
            model.apply(event)
        engine_state.restore()
        model_state.restore()
        assert engine.reqs == reqs and engine.running is running
        assert all(engine.reqs[rid] is req for rid, req in reqs.items())
    continuation = _random_events(rng, 10)
    outcomes = []
    for branch_engine, branch_model in ((engine, model), copies):
        seen = []
        for event in continuation:
            observed = branch_engine.apply(event)
            expected = branch_model.apply(event)
            seen.append(
                (
                    observed.requests,
                    observed.delivery,
                    expected,
                    branch_engine.state_key(),
                    branch_model.state_key(),
                )
            )
        outcomes.append(seen)
    assert outcomes[0] == outcomes[1]


def test_restore_puts_back_contents_bindings_and_fields() -> None:
    resolver = Resolver()
    rows = [1, 2]
    record = Mutable([3])
    frozen = Frozen(1, ([5],))
    state = Plain(
        resolver=resolver, rows=rows, table={"a": 1}, seen={"x"}, record=record, frozen=frozen
    )
    state.self_loop = state
    saved = checkpoint(state, share=(resolver,))
    assert saved is not None
    rows.append(3)
    state.table["b"] = 2
    state.seen.add("y")
    record.items = [9]
    record.label = "changed"
    frozen.items[0].append(6)
    state.added = "new"
    state.rows = ["rebound"]
    saved.restore()
    assert state.rows is rows and rows == [1, 2]
    assert state.table == {"a": 1} and state.seen == {"x"}
    assert record.items == [3] and record.label == "m"
    assert frozen.items[0] == [5]
    assert not hasattr(state, "added") and state.self_loop is state
    assert state.resolver is resolver


def test_what_cannot_be_put_back_gives_no_checkpoint() -> None:
    # A tensor copies itself: its contents are not recorded, so the caller copies instead.
    assert checkpoint(Plain(tally=torch.zeros(1))) is None
    # Constants whose copies are themselves (the fakes' algorithm and modes) need nothing.
    from kvcheck.families.sglang.fakes import ALGORITHM_FAKES

    assert checkpoint(Plain(algorithm=ALGORITHM_FAKES["eagle"])) is not None
