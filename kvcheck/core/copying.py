"""Deep copies of engine and model states, fast enough for the exhaustive search to branch.

`copy.deepcopy` spends most of its time in generic machinery. This is the same deep copy,
specialised for what kvcheck's states are made of (plain objects, attrs classes, lists, dicts,
tuples), about six times faster on an engine: each class gets its copier once (`_COPIERS`, one
dict look-up per object after that), an attrs class a copier written out for its fields, a
plain object a C-level copy of its `__dict__` whose values are then copied where they need it.
Functions and immutable values (frozen attrs instances and tuples whose contents need no copy,
and without a walk instances of classes that promise immutability with `SHARED_IN_COPIES`) are
shared; an object with a `__deepcopy__` copies itself (as `copy.deepcopy` has it do); anything
else goes to `copy.deepcopy`. tests/unit/core/test_copying.py checks that it behaves exactly
like `copy.deepcopy` on engines and models, tests/unit/search/test_exhaust_copies.py that what a
target writes on the fakes in one branch of a search never reaches another.
"""

from __future__ import annotations

import copy
import operator
import types
from collections.abc import Callable, Iterable
from typing import Any, Final

import attrs

# Types whose instances are kept as they are. Classes that opt in with `SHARED_IN_COPIES` join
# on first sight, so that later instances are kept without a call.
_SHARED: Final[set[type]] = set(
    {
        int,
        float,
        complex,
        str,
        bytes,
        bool,
        type(None),
        type,
        range,
        types.FunctionType,
        types.BuiltinFunctionType,
    }
)


# The class attribute a class sets to True to have its instances shared by copies instead of
# walked: a promise that they are immutable all the way down (frozen, and every field a str,
# int, bool, None, or a tuple or shared record of those). Records that may hold what a target
# wrote (a tensor) must not set it.
SHARED_IN_COPIES: Final = "kvcheck_shared_in_copies"


def deep_copy(value: Any, share: Iterable[Any] = ()) -> Any:
    """A deep copy of `value` that keeps functions, immutable values and the objects in `share`
    (e.g. a resolver, whatever it is) as they are."""
    memo: dict[int, Any] = {id(item): item for item in share}
    return _copy(value, memo)


# Marks a memo miss (a memo holds any object, None included).
_MISSING: Final = object()


def _copy(value: Any, memo: dict[int, Any]) -> Any:
    cls = type(value)
    if cls in _SHARED:
        return value
    if cls is tuple:
        # Most tuples in a state hold only immutable values (row ids, accept lengths): kept
        # as they are, before any memo look-up (they are never memoised).
        for v in value:
            if type(v) not in _SHARED:
                break
        else:
            return value
    key = id(value)
    found = memo.get(key, _MISSING)
    if found is not _MISSING:
        return found
    # One dict look-up picks the copier of a class seen before (the exhaustive search copies
    # the same few classes millions of times): cheaper than testing the kinds in turn.
    return (_COPIERS.get(cls) or _copier_of(cls))(value, memo, key)


def _copier_of(cls: type) -> _Copier:
    """The copier of a class seen for the first time, kept for the next instances."""
    copier = _COPIERS[cls] = _copier_for(cls)
    return copier


# The containers' and plain objects' copiers look each value up themselves (shared, memoised,
# else its copier) instead of calling `_copy` for it: one Python call less per object copied.


def _copy_list(value: list[Any], memo: dict[int, Any], key: int) -> Any:
    shared, copiers, missing = _SHARED, _COPIERS, _MISSING
    new_list = value.copy()
    memo[key] = new_list  # before the items: a list may hold itself
    for index, v in enumerate(new_list):
        cls = type(v)
        if cls in shared:
            continue
        ident = id(v)
        found = memo.get(ident, missing)
        if found is missing:
            found = (copiers.get(cls) or _copier_of(cls))(v, memo, ident)
        new_list[index] = found
    return new_list


def _copy_dict(value: dict[Any, Any], memo: dict[int, Any], key: int) -> Any:
    shared, copiers, missing = _SHARED, _COPIERS, _MISSING
    new_dict = value.copy()
    memo[key] = new_dict
    for name, v in new_dict.items():
        cls = type(v)
        if cls in shared:
            continue
        ident = id(v)
        found = memo.get(ident, missing)
        if found is missing:
            found = (copiers.get(cls) or _copier_of(cls))(v, memo, ident)
        new_dict[name] = found
    return new_dict


def _copy_tuple(value: Any, memo: dict[int, Any], key: int) -> Any:
    shared = _SHARED
    for v in value:
        if type(v) not in shared:
            break
    else:
        return value  # nothing inside needs a copy
    items = [v if type(v) in shared else _copy(v, memo) for v in value]
    same = all(a is b for a, b in zip(items, value, strict=True))
    memo[key] = result = value if same else type(value)(items)
    return result


def _copy_set(value: set[Any], memo: dict[int, Any], key: int) -> Any:
    shared = _SHARED
    memo[key] = new_set = {v if type(v) in shared else _copy(v, memo) for v in value}
    return new_set


def _copy_method(value: Any, memo: dict[int, Any], key: int) -> Any:
    return types.MethodType(value.__func__, _copy(value.__self__, memo))


def _copy_plain(value: Any, memo: dict[int, Any], key: int) -> Any:
    """An object with a plain __dict__: a new instance with a copy of the dict, whose values
    are then copied in place where they need it (a C-level dict copy and a loop in this frame
    cost less than building the dict item by item)."""
    shared, copiers, missing = _SHARED, _COPIERS, _MISSING
    new = object.__new__(type(value))
    memo[key] = new  # before the fields: a field may lead back here (req.kv -> req)
    fields = value.__dict__.copy()
    for name, v in fields.items():
        cls = type(v)
        if cls in shared:
            continue
        ident = id(v)
        found = memo.get(ident, missing)
        if found is missing:
            found = (copiers.get(cls) or _copier_of(cls))(v, memo, ident)
        fields[name] = found
    new.__dict__.update(fields)
    return new


def _copy_shared(value: Any, memo: dict[int, Any], key: int) -> Any:
    return value


def _copy_other(value: Any, memo: dict[int, Any], key: int) -> Any:
    return copy.deepcopy(value, memo)


def _copy_by_method(value: Any, memo: dict[int, Any], key: int) -> Any:
    """What `copy.deepcopy` does with an object that has a `__deepcopy__` (the fakes' constants
    return themselves; a tensor copies itself), without its generic look-ups first."""
    result = value.__deepcopy__(memo)
    if result is not value:
        memo[key] = result
        memo.setdefault(id(memo), []).append(value)  # copy.deepcopy keeps the original alive
    return result


_Copier = Callable[[Any, dict[int, Any], int], Any]
# Per class, its copier (`_copier_for`).
_COPIERS: dict[type, _Copier] = {
    list: _copy_list,
    dict: _copy_dict,
    tuple: _copy_tuple,
    frozenset: _copy_tuple,
    set: _copy_set,
    types.MethodType: _copy_method,
}


def _copier_for(cls: type) -> _Copier:
    how = _HOW.get(cls)
    if how is None:
        how = _HOW[cls] = _how_to_copy(cls)
    if how == "shared":
        return _copy_shared
    if how == "plain":
        return _copy_plain
    if how in ("attrs", "frozen-attrs"):
        return _attrs_copier(cls, frozen=how == "frozen-attrs")
    if callable(getattr(cls, "__deepcopy__", None)):
        return _copy_by_method
    return _copy_other


def _attrs_copier(cls: type, *, frozen: bool) -> _Copier:
    """The copier of a slotted attrs class, written out field by field for this class (no
    tuple of values, no zip, no loop): records are the most numerous objects in a state.

    A frozen record whose fields all stay as they are is itself kept (as `copy.deepcopy`
    would return an equal record, nothing can tell them apart); else a new instance gets the
    copied fields through `object.__setattr__`, past attrs' frozen and on-setattr hooks."""
    names = _FIELDS[cls]
    if not names:
        return _copy_shared if frozen else _copy_empty_record
    lines = ["def copier(value, memo, key):"]
    lines += [f"    v{i} = value.{name}" for i, name in enumerate(names)]
    checks = " and ".join(f"type(v{i}) in shared" for i in range(len(names)))
    if frozen:
        lines.append(f"    if {checks}:")
        lines.append("        return value")
    lines += [
        f"    n{i} = v{i} if type(v{i}) in shared else copy_(v{i}, memo)" for i in range(len(names))
    ]
    if frozen:
        same = " and ".join(f"n{i} is v{i}" for i in range(len(names)))
        lines.append(f"    if {same}:")
        lines.append("        memo[key] = value")
        lines.append("        return value")
        lines.append("    new = new_(cls)")
        lines.append("    memo[key] = new")
    else:
        # As for a frozen one, the fields are copied before the record is made and memoised.
        lines.append("    new = new_(cls)")
        lines.append("    memo[key] = new")
    if not frozen and getattr(cls, "__setattr__", None) is object.__setattr__:
        # No hook to pass by: a plain store (a slot write the interpreter specialises).
        lines += [f"    new.{name} = n{i}" for i, name in enumerate(names)]
    else:
        lines += [f"    set_(new, {name!r}, n{i})" for i, name in enumerate(names)]
    lines.append("    return new")
    namespace: dict[str, Any] = {
        "shared": _SHARED,
        "copy_": _copy,
        "new_": object.__new__,
        "set_": object.__setattr__,
        "cls": cls,
    }
    exec("\n".join(lines), namespace)  # code made here from the class's own field names
    copier: _Copier = namespace["copier"]
    return copier


def _copy_empty_record(value: Any, memo: dict[int, Any], key: int) -> Any:
    memo[key] = new = object.__new__(type(value))
    return new


# How instances of a class are copied: "plain" (its __dict__), "attrs" / "frozen-attrs" (slotted
# attrs fields), or "deepcopy" (anything else: a __deepcopy__, a custom __reduce__, a tensor).
_HOW: dict[type, str] = {}
_OBJECT_REDUCE_EX: Final = object.__reduce_ex__
_OBJECT_REDUCE: Final = object.__reduce__
_FIELDS: dict[type, tuple[str, ...]] = {}


def _how_to_copy(cls: type) -> str:
    if cls.__dict__.get(SHARED_IN_COPIES) is True:
        _SHARED.add(cls)
        return "shared"
    if hasattr(cls, "__deepcopy__"):
        return "deepcopy"
    if attrs.has(cls) and "__slots__" in cls.__dict__:
        _FIELDS[cls] = tuple(field.name for field in attrs.fields(cls))
        return "frozen-attrs" if _frozen(cls) else "attrs"
    if (
        "__dict__" in dir(cls)
        and "__slots__" not in cls.__dict__
        and getattr(cls, "__reduce_ex__", None) is _OBJECT_REDUCE_EX
        and getattr(cls, "__reduce__", None) is _OBJECT_REDUCE
    ):
        return "plain"
    return "deepcopy"


def _frozen(cls: type) -> bool:
    params = getattr(cls, "__attrs_props__", None)
    if params is not None:
        return bool(params.is_frozen)
    try:
        instance_setattr = cls.__setattr__
    except AttributeError:
        return False
    return getattr(instance_setattr, "__name__", "") == "_frozen_setattrs"


# --- checkpoints: branching in place ------------------------------------------------------------


class Checkpoint:
    """The contents of every mutable object of a state, to put back after an event changed the
    state in place (`restore`): what lets the exhaustive search try a child on its parent's own
    objects and copy it only when it keeps it, instead of copying the parent for every child.

    It reaches what `deep_copy` would copy (lists, dicts, sets, plain objects, attrs instances,
    the objects under tuples, frozen records and bound methods) and records each one's contents
    (a shallow copy); `restore` writes them back into the same objects, so that the state is the
    one checkpointed again, object for object: what an event added is dropped, what it replaced
    or changed is as it was. A frozen record or a tuple cannot change, but what it holds can, and
    is recorded. tests/unit/core/test_copying.py checks restored states against copies made
    before the events, tests/unit/search/test_exhaust_copies.py that a search branching in place
    lets no write of a target reach another branch.
    """

    __slots__ = ("_attrs", "_collections", "_dicts", "_objects")

    def __init__(
        self,
        objects: list[tuple[Any, dict[str, Any]]],
        dicts: list[tuple[dict[Any, Any], dict[Any, Any]]],
        collections: list[tuple[Any, Any]],
        attrs_records: list[tuple[Any, _Fields, tuple[str, ...], tuple[Any, ...]]],
    ) -> None:
        self._objects = objects
        self._dicts = dicts
        self._collections = collections
        self._attrs = attrs_records

    def restore(self) -> None:
        """Put every recorded object's contents back (the state is again as checkpointed)."""
        for value, fields in self._objects:
            # The object's current dict: a target may have replaced it as a whole.
            current = value.__dict__
            current.clear()
            current.update(fields)
        for held, items in self._dicts:
            held.clear()
            held.update(items)
        for held, items in self._collections:
            if type(held) is list:
                held[:] = items
            else:
                held.clear()
                held.update(items)
        setter, same = object.__setattr__, operator.is_
        for record, read, names, values in self._attrs:
            # Written back only when a field was rebound (most records are left alone).
            if not all(map(same, read(record), values)):
                for name, field_value in zip(names, values, strict=True):
                    setter(record, name, field_value)


def checkpoint(value: Any, share: Iterable[Any] = ()) -> Checkpoint | None:
    """A `Checkpoint` of `value` and everything it reaches, but what `share` names (kept as it is,
    as `deep_copy` keeps it); None when it reaches an object whose contents it cannot record:
    one that copies itself (a tensor) or one of a class `deep_copy` hands to `copy.deepcopy`
    (the caller then copies instead). Objects that `deep_copy` shares are skipped, as are the
    constants whose `__deepcopy__` returns themselves."""
    shared = _SHARED
    seen: set[int] = {id(item) for item in share}
    objects: list[tuple[Any, dict[str, Any]]] = []
    dicts: list[tuple[dict[Any, Any], dict[Any, Any]]] = []
    collections: list[tuple[Any, Any]] = []
    attrs_records: list[tuple[Any, _Fields, tuple[str, ...], tuple[Any, ...]]] = []
    pending = [value]
    pop, push, extend = pending.pop, pending.append, pending.extend
    while pending:
        item = pop()
        cls = type(item)
        if cls in shared:
            continue
        key = id(item)
        if key in seen:
            continue
        seen.add(key)
        if cls is dict:
            dicts.append((item, item.copy()))
            extend([v for v in item.values() if type(v) not in shared])
        elif cls is list:
            collections.append((item, item.copy()))
            extend([v for v in item if type(v) not in shared])
        elif cls is tuple or cls is frozenset:
            extend([v for v in item if type(v) not in shared])
        elif cls is set:
            collections.append((item, item.copy()))
            extend([v for v in item if type(v) not in shared])
        elif cls is types.MethodType:
            push(item.__self__)
        else:
            how = _HOW.get(cls)
            if how is None:
                _copier_of(cls)  # classifies it (`_HOW`), as the first copy would
                how = _HOW[cls]
            if cls in shared or how == "shared":
                continue
            if how == "plain":
                fields = item.__dict__
                objects.append((item, fields.copy()))
                extend([v for v in fields.values() if type(v) not in shared])
            elif how in ("attrs", "frozen-attrs"):
                read = _reader(cls)
                values = read(item)
                if how == "attrs":
                    attrs_records.append((item, read, _FIELDS[cls], values))
                extend([v for v in values if type(v) not in shared])
            elif not _copies_as_itself(item):
                return None
    return Checkpoint(objects, dicts, collections, attrs_records)


# Reads an attrs record's fields as one tuple, in field order (`operator.attrgetter`).
_Fields = Callable[[Any], tuple[Any, ...]]
_READERS: dict[type, _Fields] = {}


def _reader(cls: type) -> _Fields:
    """The reader of a slotted attrs class's fields (made once per class); a record of one
    field, or none, is read as a tuple too."""
    read = _READERS.get(cls)
    if read is None:
        names = _FIELDS[cls]
        if len(names) > 1:
            read = operator.attrgetter(*names)
        else:
            getters = [operator.attrgetter(name) for name in names]
            read = lambda record: tuple(get(record) for get in getters)  # noqa: E731
        _READERS[cls] = read
    return read


def _copies_as_itself(value: Any) -> bool:
    """Whether `deep_copy` keeps `value` as it is: a constant whose `__deepcopy__` returns it."""
    method = getattr(value, "__deepcopy__", None)
    if not callable(method):
        return False
    try:
        return method({}) is value
    except Exception:
        return False
