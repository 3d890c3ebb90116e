"""How an SGLang target is judged: one record in place of four loose keywords
(`kvcheck.core.family.JudgingOptions`)."""

from __future__ import annotations

from typing import Any

import attrs

from kvcheck.families.sglang.scenario import Convention, GlobalCounterMode


@attrs.frozen
class SglangJudging:
    """The committed-length convention the model holds the target to (docs/semantics.md §2),
    how the batch-global counters are judged (`ideal`, `sglang` or `off`), whether strides
    switch between launch and delivery (adaptive speculation), and the overlap setting to draw
    (None: both)."""

    convention: Convention
    global_counters: GlobalCounterMode = "ideal"
    adaptive: bool = False
    overlap: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        """The options as JSON, by their command-line names."""
        return attrs.asdict(self)

    def key_parts(self) -> tuple[str, ...]:
        """In the order example-database keys have always joined them, so databases saved
        before the record existed still hit."""
        return (self.convention, self.global_counters, str(self.adaptive), str(self.overlap))
