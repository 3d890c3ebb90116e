"""How vLLM's runs are judged (`kvcheck.core.family.Judge`): the options record, the model, the
engine around a target, the checks after every event."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from kvcheck.core.family import Judging
from kvcheck.core.target import Target
from kvcheck.errors import KvcheckUsageError
from kvcheck.families.vllm.engine import VllmEngine
from kvcheck.families.vllm.invariants import INVARIANTS, check_event
from kvcheck.families.vllm.judging import VllmJudging
from kvcheck.families.vllm.model import VllmModel
from kvcheck.families.vllm.mutants import MUTANT_PREFIX, MUTANTS
from kvcheck.families.vllm.scenario import SPEC_STATS_MODES, VllmConfig


def judging(requested: Mapping[str, Any], target: Target) -> Judging:
    """The options `target` is judged under: `placeholder_drafts` as asked, else a corpus
    entry's own choice, else off; `spec_stats` as asked, else `excluded`. The reason is a few
    words (`describe` puts it after whether drafts are judged)."""
    unknown = sorted(set(requested) - {"placeholder_drafts", "spec_stats"})
    if unknown:
        raise KvcheckUsageError(
            f"judging option(s) {', '.join(unknown)} are not vLLM's; its are "
            "placeholder_drafts and spec_stats"
        )
    spec_stats = requested.get("spec_stats", "excluded")
    if spec_stats not in SPEC_STATS_MODES:
        raise KvcheckUsageError(
            f"unknown spec_stats mode {spec_stats!r}; choose excluded, included or off"
        )
    if "placeholder_drafts" in requested:
        drafts, reason = bool(requested["placeholder_drafts"]), "given"
    elif _entry_judges_drafts(target.spec):
        drafts, reason = True, "the corpus entry's"
    else:
        drafts, reason = False, "default"
    return Judging(VllmJudging(drafts, spec_stats), reason)


def _entry_judges_drafts(spec: str) -> bool:
    """Whether `spec` is a corpus entry meant to be judged with placeholder drafts."""
    entry = (
        MUTANTS.get(spec.removeprefix(MUTANT_PREFIX)) if spec.startswith(MUTANT_PREFIX) else None
    )
    return entry is not None and entry.placeholder_drafts


def judging_of(config: VllmConfig) -> VllmJudging:
    """The options a scenario of `config` is judged by: its config's."""
    return VllmJudging(config.placeholder_drafts, config.spec_stats)


def rejudged(
    config: VllmConfig, requested: Mapping[str, str], target: Target, saved_target: bool
) -> tuple[VllmConfig, str | None]:
    """A replay judges a stored scenario by its own config: vLLM has no option to re-choose."""
    return config, None


class VllmJudge:
    """vLLM's model, engine and checks."""

    invariants: Final = INVARIANTS
    model = staticmethod(VllmModel)
    engine = staticmethod(VllmEngine)
    check_event = staticmethod(check_event)
    judging = staticmethod(judging)
    judging_of = staticmethod(judging_of)
    replay_choices: Final[Mapping[str, tuple[str, ...]]] = {}
    rejudged = staticmethod(rejudged)
