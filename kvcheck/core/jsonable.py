"""Plain JSON data from kvcheck's values (violations' expected/observed, attrs records)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def jsonable(value: Any) -> Any:
    """`value` as plain JSON data: tuples become lists, mapping keys strings, the rest a repr."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return repr(value)


def type_name(value: Any) -> str:
    """A value's type as reports name it: `int`, `float`, `torch.Tensor`, `numpy.int64`."""
    kind = type(value)
    module = kind.__module__
    if module == "builtins":
        return kind.__name__
    return f"{module.split('.')[0]}.{kind.__qualname__}"


def only_type_differs(expected: Any, observed: Any) -> bool:
    """Whether two values of different types look alike (`0` and `tensor(0)`, `2` and `2.0`,
    `20000` and `"20000"`), so a report must name the types to show the difference."""
    if type(expected) is type(observed):
        return False
    try:
        if bool(expected == observed):
            return True
    except Exception:
        pass
    text = str(observed)
    return text == str(expected) or text.removeprefix("tensor(").removesuffix(")") == str(expected)


def show(value: Any, other: Any) -> str:
    """`repr(value)`, with its type named when it differs from `other`'s only in type."""
    text = repr(value)
    return f"{text} ({type_name(value)})" if only_type_differs(value, other) else text
