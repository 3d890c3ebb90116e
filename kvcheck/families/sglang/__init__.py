"""SGLang's spec-v2 resolvers as a kvcheck engine family (`FAMILY`, registered as "sglang")."""

from kvcheck.core.family import Family
from kvcheck.families.sglang.distribution import SglangDistribution
from kvcheck.families.sglang.judge import SglangJudge
from kvcheck.families.sglang.loading import SglangTargets
from kvcheck.families.sglang.mutants import SglangMutants
from kvcheck.families.sglang.reporting import SglangReporter
from kvcheck.families.sglang.scenario import FAMILY_NAME, SglangScenarios
from kvcheck.families.sglang.search import SglangMoves

FAMILY = Family(
    name=FAMILY_NAME,
    scenarios=SglangScenarios(),
    judge=SglangJudge(),
    targets=SglangTargets(),
    distribution=SglangDistribution(),
    report=SglangReporter(),
    moves=SglangMoves(),
    mutants=SglangMutants(),
)
