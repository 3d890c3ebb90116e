"""Recording proxies for a probe run (`kvcheck.families.sglang.probe`): `traced()` wraps the fakes
so
that every read, write and call a target makes is logged by spelling key. Which spellings a
target touches tells which SGLang API generation it was written for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from kvcheck.families.sglang.fakes import StrictFake


@attrs.define
class AccessLog:
    """What a target touched on the fakes, by spelling key (`req.kv.kv_committed_len`)."""

    reads: set[str] = attrs.field(factory=set)
    writes: set[str] = attrs.field(factory=set)
    calls: set[str] = attrs.field(factory=set)
    # One proxy per fake, so identity comparisons inside the target keep working.
    _proxies: dict[int, Any] = attrs.field(factory=dict)

    @property
    def touched(self) -> set[str]:
        """Every spelling key the target read, wrote or called."""
        return self.reads | self.writes | self.calls

    def forget_proxies(self) -> None:
        """Drop the proxies once the target has run: they hold the fakes, and a proxy does not
        unpickle (a probe in a child process sends its log back: `kvcheck.core.isolation`)."""
        self._proxies.clear()

    def wrap(self, value: Any) -> Any:
        """`value` behind a recording proxy when it is a fake or a list of fakes (`batch.reqs`).

        A fake always gets the same proxy; anything else is returned unchanged.
        """
        if isinstance(value, StrictFake):
            proxy = self._proxies.get(id(value))
            if proxy is None:
                proxy = self._proxies[id(value)] = _Traced(value, self)
            return proxy
        if isinstance(value, list) and value and all(isinstance(v, StrictFake) for v in value):
            return [self.wrap(v) for v in value]
        return value


class _Traced:
    """Forwards to one fake and records each read, write and call in an `AccessLog`."""

    __slots__ = ("_kvcheck_log", "_kvcheck_obj")

    def __init__(self, obj: StrictFake, log: AccessLog) -> None:
        object.__setattr__(self, "_kvcheck_obj", obj)
        object.__setattr__(self, "_kvcheck_log", log)

    def __getattr__(self, name: str) -> Any:
        obj: StrictFake = object.__getattribute__(self, "_kvcheck_obj")
        log: AccessLog = object.__getattribute__(self, "_kvcheck_log")
        value = getattr(obj, name)
        key = f"{obj._owner}.{name}"
        if callable(value) and hasattr(value, "__self__") and value.__self__ is obj:
            function = value.__func__
            if name in obj.__dict__:  # a source-loaded method: run it on the proxy
                return _record_call(log, key, function.__get__(self, type(obj)), unwrap=False)
            return _record_call(log, key, value, unwrap=True)
        log.reads.add(key)
        return log.wrap(value)

    def __setattr__(self, name: str, value: Any) -> None:
        obj: StrictFake = object.__getattribute__(self, "_kvcheck_obj")
        log: AccessLog = object.__getattribute__(self, "_kvcheck_log")
        setattr(obj, name, value)
        log.writes.add(f"{obj._owner}.{name}")

    def __repr__(self) -> str:
        return repr(object.__getattribute__(self, "_kvcheck_obj"))


def _unwrap(value: Any) -> Any:
    if isinstance(value, _Traced):
        return object.__getattribute__(value, "_kvcheck_obj")
    if isinstance(value, list) and any(isinstance(v, _Traced) for v in value):
        return [_unwrap(v) for v in value]
    return value


def _record_call(
    log: AccessLog, key: str, function: Callable[..., Any], *, unwrap: bool
) -> Callable[..., Any]:
    """`function`, recording each call; a fake's own method gets the fakes, not the proxies."""

    def call(*args: Any, **kwargs: Any) -> Any:
        log.calls.add(key)
        if kwargs:
            log.calls.add(f"{key}({', '.join(f'{k}=' for k in sorted(kwargs))})")
        if unwrap:
            args = tuple(_unwrap(a) for a in args)
            kwargs = {k: _unwrap(v) for k, v in kwargs.items()}
        return log.wrap(function(*args, **kwargs))

    return call


def traced(log: AccessLog, *objects: Any) -> list[Any]:
    """Recording proxies for `objects` (the resolver's self, result and batch)."""
    return [log.wrap(obj) for obj in objects]
