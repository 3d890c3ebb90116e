"""vLLM's judging options (`kvcheck.core.family.JudgingOptions`): one record."""

from __future__ import annotations

from typing import Any

import attrs


@attrs.frozen
class VllmJudging:
    """vLLM's one judging option: whether the V1 runner's reading of `-1` draft placeholders
    is judged (`vllm-placeholder-drafts`; docs/vllm.md "Placeholder drafts")."""

    placeholder_drafts: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The option as JSON."""
        return {"placeholder_drafts": self.placeholder_drafts}

    def key_parts(self) -> tuple[str, ...]:
        """The option as it enters an example-database key."""
        return ("vllm", str(self.placeholder_drafts))
