"""How SGLang's runs are judged (`kvcheck.core.family.Judge`): the reference model, the engine
around a target, the checks after every event, and which convention a replay judges by."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import attrs

from kvcheck.core.target import Target
from kvcheck.families.sglang.engine import Engine
from kvcheck.families.sglang.invariants import INVARIANTS, check_event
from kvcheck.families.sglang.judging import SglangJudging, judging
from kvcheck.families.sglang.model import ReferenceModel
from kvcheck.families.sglang.scenario import CONVENTIONS, Config, Convention
from kvcheck.families.sglang.target import allocation_path, allocation_rules

# What a replay may choose (docs/replay.md): the committed-length convention, besides "auto" (the
# file's for its saved target, the target's own, from its probed API shape, for another one) and
# "file" (always the file's).
REPLAY_CHOICES: Final[Mapping[str, tuple[str, ...]]] = {"convention": CONVENTIONS}


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


def judging_of(config: Config) -> SglangJudging:
    """The options a scenario of `config` is judged by: they are its config's."""
    return SglangJudging(config.convention, config.global_counters, config.adaptive, config.overlap)


def rejudged(
    config: Config, requested: Mapping[str, str], target: Target, saved_target: bool
) -> tuple[Config, str | None]:
    """The config a replay against `target` runs (the file's, under the convention `requested`
    gives) and what to tell the user about it (None: nothing). Judging another resolver by the
    file's convention would fail a correct one whose release follows the other (issue 23, item
    4); a file's allocation rule outside the other target's generations is said too."""
    choice = requested["convention"]
    notes = []
    used: Convention = config.convention
    if choice in CONVENTIONS:
        used = choice
        if used != config.convention:
            notes.append(
                f"judged by the {used} convention as given; the file was judged by "
                f"{config.convention}"
            )
    elif choice == "auto" and not saved_target:
        shape = target.shape
        if shape.convention != config.convention:
            used = shape.convention
            notes.append(
                f"{target.spec} follows the {used} convention ({shape.convention_reason}); the "
                f"file was judged by {config.convention}, so this replay judges by {used} "
                "(--convention file keeps the file's)"
            )
    if not saved_target and config.allocation not in allocation_rules(target):
        notes.append(
            f"the file's allocation rule {config.allocation} is not one {target.spec} is "
            f"judged under ({target.shape.allocation_reason})"
        )
    if notes and not saved_target:
        notes.append(f"global counters {config.global_counters}, as the file")
    if used != config.convention:
        config = attrs.evolve(config, convention=used)
    return config, "; ".join(notes) or None


class SglangJudge:
    """SGLang's model, engine and checks."""

    invariants: Final = INVARIANTS
    model = staticmethod(ReferenceModel)
    engine = staticmethod(engine_for)
    check_event = staticmethod(check_event)
    judging = staticmethod(judging)
    judging_of = staticmethod(judging_of)
    replay_choices: Final = REPLAY_CHOICES
    rejudged = staticmethod(rejudged)
