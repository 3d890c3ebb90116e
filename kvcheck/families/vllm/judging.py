"""vLLM's judging options (`kvcheck.core.family.JudgingOptions`): one record."""

from __future__ import annotations

from typing import Any

import attrs

from kvcheck.families.vllm.scenario import SpecStatsMode


@attrs.frozen
class VllmJudging:
    """vLLM's judging options: whether the V1 runner's reading of `-1` draft placeholders is
    judged (`vllm-placeholder-drafts`; docs/vllm.md "Placeholder drafts"), and how the
    speculative statistics are (`vllm-spec-stats`: a dropped stale frame `excluded`, the
    default, or `included`, or `off`; docs/vllm.md "Speculative statistics")."""

    placeholder_drafts: bool = False
    spec_stats: SpecStatsMode = "excluded"

    def to_dict(self) -> dict[str, Any]:
        """The options as JSON."""
        return {"placeholder_drafts": self.placeholder_drafts, "spec_stats": self.spec_stats}

    def key_parts(self) -> tuple[str, ...]:
        """The options as they enter an example-database key (the default statistics mode
        adds nothing, so the keys saved before it existed still match)."""
        stats = () if self.spec_stats == "excluded" else (f"spec-stats-{self.spec_stats}",)
        return ("vllm", str(self.placeholder_drafts), *stats)
