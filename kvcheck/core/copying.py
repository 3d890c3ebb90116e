"""Deep copies of engine and model states, fast enough for the exhaustive search to branch.

`copy.deepcopy` spends most of its time in generic machinery. This is the same deep copy,
specialised for what kvcheck's states are made of (plain objects, attrs classes, lists, dicts,
tuples), about four times faster on an engine. Functions and immutable values (frozen attrs
instances and tuples whose contents need no copy, and without a walk instances of classes that
promise immutability with `SHARED_IN_COPIES`) are shared; anything else, such as a tensor a
target stored on a fake, goes to `copy.deepcopy`. tests/unit/core/test_copying.py checks that it
behaves exactly like `copy.deepcopy` on engines and models.
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


def _copy(value: Any, memo: dict[int, Any]) -> Any:
    cls = type(value)
    if cls in _SHARED:
        return value
    key = id(value)
    if key in memo:
        return memo[key]
    shared = _SHARED
    if cls is list:
        new_list: list[Any] = []
        memo[key] = new_list
        new_list.extend([v if type(v) in shared else _copy(v, memo) for v in value])
        return new_list
    if cls is dict:
        new_dict = {k: v if type(v) in shared else _copy(v, memo) for k, v in value.items()}
        memo[key] = new_dict
        return new_dict
    if cls is tuple or cls is frozenset:
        for v in value:
            if type(v) not in shared:
                break
        else:
            return value  # nothing inside needs a copy
        items = [v if type(v) in shared else _copy(v, memo) for v in value]
        same = all(a is b for a, b in zip(items, value, strict=True))
        memo[key] = result = value if same else cls(items)
        return result
    if cls is set:
        memo[key] = new_set = {v if type(v) in shared else _copy(v, memo) for v in value}
        return new_set
    if cls is types.MethodType:
        return types.MethodType(value.__func__, _copy(value.__self__, memo))
    how = _HOW.get(cls)
    if how is None:
        how = _HOW[cls] = _how_to_copy(cls)
    if how == "shared":
        return value
    if how == "plain":
        new = object.__new__(cls)
        memo[key] = new
        new.__dict__.update(
            {k: v if type(v) in shared else _copy(v, memo) for k, v in value.__dict__.items()}
        )
        return new
    if how == "attrs" or how == "frozen-attrs":
        names = _FIELDS[cls]
        olds = _GETTERS[cls](value)
        if how == "frozen-attrs":
            for v in olds:
                if type(v) not in shared:
                    break
            else:
                return value  # every field is kept as it is: so is the record
        news = [v if type(v) in shared else _copy(v, memo) for v in olds]
        if how == "frozen-attrs" and all(a is b for a, b in zip(news, olds, strict=True)):
            memo[key] = value
            return value
        new = object.__new__(cls)
        memo[key] = new
        for name, item in zip(names, news, strict=True):
            object.__setattr__(new, name, item)
        return new
    return copy.deepcopy(value, memo)


# How instances of a class are copied: "plain" (its __dict__), "attrs" / "frozen-attrs" (slotted
# attrs fields), or "deepcopy" (anything else: a __deepcopy__, a custom __reduce__, a tensor).
_HOW: dict[type, str] = {}
_OBJECT_REDUCE_EX: Final = object.__reduce_ex__
_OBJECT_REDUCE: Final = object.__reduce__
_FIELDS: dict[type, tuple[str, ...]] = {}
# Per attrs class, a getter of its field values as a tuple.
_GETTERS: dict[type, Callable[[Any], tuple[Any, ...]]] = {}


def _how_to_copy(cls: type) -> str:
    if cls.__dict__.get(SHARED_IN_COPIES) is True:
        _SHARED.add(cls)
        return "shared"
    if hasattr(cls, "__deepcopy__"):
        return "deepcopy"
    if attrs.has(cls) and "__slots__" in cls.__dict__:
        _FIELDS[cls] = names = tuple(field.name for field in attrs.fields(cls))
        _GETTERS[cls] = _getter(names)
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


def _getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    if len(names) > 1:
        many: Callable[[Any], tuple[Any, ...]] = operator.attrgetter(*names)
        return many
    if names:
        one = operator.attrgetter(names[0])
        return lambda value: (one(value),)
    return lambda value: ()
