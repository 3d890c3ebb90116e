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
