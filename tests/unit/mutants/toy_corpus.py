"""A family whose corpus is one correct resolver, SGLang's reference, under a column of its own:
enough to show that the kill matrix, `kvcheck mutants --list` and `kvcheck.mutants:NAME` reach a
corpus only through the registry (tests/unit/mutants/test_family_corpora.py registers it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from kvcheck.core.family import NamedCorpus, family
from kvcheck.core.target import Target
from kvcheck.families.sglang.judging import SglangJudging
from kvcheck.targets.loading import load_target

NAME = "toy-corpus"
PATH = "tests.unit.mutants.toy_corpus:FAMILY"


@attrs.frozen
class ToyEntry:
    name: str
    kind: str = "rewrite"
    family: str = NAME
    expect: str | None = None
    origin: str = "correct rewrite"
    summary: str = "SGLang's reference resolver, filed under the toy corpus"
    shrink_note: str = ""

    @property
    def spec(self) -> str:
        return "kvcheck.mutants:" + self.name.replace("-", "_")

    @property
    def short_spec(self) -> str:
        return "toy:" + self.name

    @property
    def options(self) -> SglangJudging:
        return SglangJudging("preclaim")

    def target(self) -> Target:
        return attrs.evolve(load_target("builtin:reference"), spec=self.spec)


ENTRY = ToyEntry("toy-reference")


class ToyMutants:
    spec_prefix = "toy:"
    entries: Sequence[ToyEntry] = (ENTRY,)

    def get(self, name: str) -> ToyEntry | None:
        return ENTRY if name == ENTRY.name else None

    def resolver(self, python_name: str) -> Any | None:
        return ENTRY.target().resolver if python_name == "toy_reference" else None

    def row_columns(self, entry: Any) -> dict[str, Any]:
        return {"flavour": "toy"}

    def list_columns(self, entry: Any) -> dict[str, Any]:
        return {"flavour": "toy", "spec": entry.spec}

    def list_line(self, entry: Any) -> str:
        return f"toy {entry.kind} {entry.name}"

    def minimum_bounds(self, defaults: Any) -> Any:
        return attrs.evolve(defaults, events=2)

    named_corpora: Mapping[str, NamedCorpus] = {}

    def check_flags(self, entry: Any) -> list[str]:
        return []

    def bounds_for(self, target: Target, bounds: Any) -> Any:
        return bounds

    def shrink_gap(
        self,
        shrunk_config: Mapping[str, Any],
        shrunk_events: Sequence[Mapping[str, Any]],
        shortest_config: Mapping[str, Any],
        shortest_events: Sequence[Mapping[str, Any]],
    ) -> str | None:
        return None


_SGLANG = family("sglang")
FAMILY = attrs.evolve(_SGLANG, name=NAME, mutants=ToyMutants())
