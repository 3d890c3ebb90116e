"""How SGLang's runs are judged (`kvcheck.core.family.Judge`): the reference model, the engine
around a target, and the checks after every event."""

from __future__ import annotations

from typing import Final

from kvcheck.core.target import Target
from kvcheck.families.sglang.engine import Engine
from kvcheck.families.sglang.invariants import INVARIANTS, check_event
from kvcheck.families.sglang.judging import judging
from kvcheck.families.sglang.model import ReferenceModel
from kvcheck.families.sglang.scenario import Config
from kvcheck.families.sglang.target import allocation_path


def engine_for(config: Config, target: Target) -> Engine:
    """A fresh engine for `config` around `target`, holding it to what its probe showed."""
    return Engine(
        config,
        target.resolver,
        target.self_methods,
        not_judged=target.shape.not_judged,
        allocation=allocation_path(target, config),
        deadline=target.deadline,
    )


class SglangJudge:
    """SGLang's model, engine and checks."""

    invariants: Final = INVARIANTS
    model = staticmethod(ReferenceModel)
    engine = staticmethod(engine_for)
    check_event = staticmethod(check_event)
    judging = staticmethod(judging)
