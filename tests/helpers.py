"""Small shared pieces for the test suite: scenario builders and hand-written resolvers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvcheck.scenario import Config, Event, Scenario
from kvcheck.targets import Target


def scenario(*events: Event, **config: Any) -> Scenario:
    return Scenario(Config(**config), events)


def target(resolver: Callable[..., Any], name: str | None = None) -> Target:
    label = name or resolver.__name__
    return Target(f"test:{label}", resolver, f"test resolver {label}")
