"""The API-shape probe (`kvcheck.targets.api_shape`): versions from spellings, the convention,
what a target is held to, and errors during the probe run."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kvcheck.targets.loading import load_target
from tests.helpers import SGLANG_FIXTURES

FIXTURES = SGLANG_FIXTURES
GENERATIONS: list[dict[str, Any]] = json.loads((FIXTURES / "index.json").read_text())["generations"]
GEN_IDS = [g["generation"] for g in GENERATIONS]


def spec(gen: dict[str, Any], kind: str) -> str:
    return f"{FIXTURES / gen['path']}::{gen[kind]}"


@pytest.mark.parametrize("gen", GENERATIONS, ids=GEN_IDS)
def test_spellings_place_the_resolver_in_its_versions(gen: dict[str, Any]) -> None:
    """The versions the probe reads off the correct resolver include its generation."""
    loaded = load_target(spec(gen, "correct"))
    shape = loaded.shape
    assert shape.mixed is None

    def v(text: str) -> tuple[int, ...]:
        return tuple(int(p) for p in text.split("."))

    assert v(shape.first) <= v(gen["first_version"])
    assert shape.last is None or v(gen["last_version"]) <= v(shape.last)
