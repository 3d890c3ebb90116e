"""SGLang's spec-v2 resolvers as a kvcheck engine family (`FAMILY`, registered as "sglang")."""

from kvcheck.core.family import Family
from kvcheck.families.sglang.judge import SglangJudge
from kvcheck.families.sglang.mutants import SglangMutants
from kvcheck.families.sglang.scenario import SglangScenarios

FAMILY = Family(
    name="sglang", scenarios=SglangScenarios(), judge=SglangJudge(), mutants=SglangMutants()
)
