"""vLLM V1's scheduler with async scheduling and speculative decoding, as a kvcheck engine
family (`FAMILY`, registered as "vllm"; manual: docs/vllm.md)."""

from kvcheck.core.family import Family
from kvcheck.families.vllm.distribution import VllmDistribution
from kvcheck.families.vllm.judge import VllmJudge
from kvcheck.families.vllm.loading import VllmTargets
from kvcheck.families.vllm.mutants import VllmMutants
from kvcheck.families.vllm.reporting import VllmReporter
from kvcheck.families.vllm.scenario import NAME, VllmScenarios
from kvcheck.families.vllm.search import VllmMoves

FAMILY = Family(
    name=NAME,
    scenarios=VllmScenarios(),
    judge=VllmJudge(),
    targets=VllmTargets(),
    distribution=VllmDistribution(),
    report=VllmReporter(),
    moves=VllmMoves(),
    mutants=VllmMutants(),
)
