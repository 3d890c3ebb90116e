"""How SGLang's runs are judged (`kvcheck.core.family.Judge`): the reference model, the engine
around a target, the checks after every event, and which convention a replay judges by."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import attrs

from kvcheck.core.target import Target
from kvcheck.errors import KvcheckUsageError
from kvcheck.families.sglang.engine import Engine
from kvcheck.families.sglang.invariants import INVARIANTS, check_event
from kvcheck.families.sglang.judging import SglangJudging, judging
from kvcheck.families.sglang.model import ReferenceModel
from kvcheck.families.sglang.scenario import (
    ALLOCATION_PATHS,
    CONVENTIONS,
    AllocationPathKind,
    Config,
    Convention,
)
from kvcheck.families.sglang.target import allocation_path, allocation_rules, release_code

# What a replay may choose (docs/replay.md): the committed-length convention, besides "auto" (the
# file's for its saved target, the target's own, from its probed API shape, for another one) and
# "file" (always the file's); and whose allocation code runs (auto: the file's when the target
# has it, else kvcheck's model).
REPLAY_CHOICES: Final[Mapping[str, tuple[str, ...]]] = {
    "convention": CONVENTIONS,
    "allocation_path": ALLOCATION_PATHS,
}


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
    return SglangJudging(
        config.convention,
        config.global_counters,
        config.adaptive,
        config.overlap,
        allocation_path=config.allocation_path,
    )


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
    path, path_note = _replayed_allocation_path(config, requested["allocation_path"], target)
    if path_note:
        notes.append(path_note)
    if notes and not saved_target:
        notes.append(f"global counters {config.global_counters}, as the file")
    if used != config.convention or path != config.allocation_path:
        config = attrs.evolve(config, convention=used, allocation_path=path)
    return config, "; ".join(notes) or None


def _replayed_allocation_path(
    config: Config, choice: str, target: Target
) -> tuple[AllocationPathKind, str | None]:
    """Whose allocation code a replay runs (`choice`: auto, file, model or release) and what
    to say about it. Auto keeps the file's, except the release's code on a target without it
    (another target than a release tree's), which runs kvcheck's model and says so; `file` and
    `release` ask for what the target must have (`KvcheckUsageError` otherwise)."""
    if not config.allocation_rule.allocates:
        return config.allocation_path, None
    if choice in ALLOCATION_PATHS:
        wanted: AllocationPathKind = "release" if choice == "release" else "model"
    else:
        wanted = config.allocation_path
    if wanted == "release":
        code = release_code(target)
        why_not = "it is no release tree" if code is None else code.unavailable()
        if why_not is not None:
            if choice == "auto":
                return "model", (
                    f"the file ran the release's own allocation code, which {target.spec} has "
                    f"not ({why_not}): this replay runs kvcheck's model"
                )
            raise KvcheckUsageError(
                f"{target.spec} cannot run a release's own allocation code: {why_not}"
            )
    if wanted != config.allocation_path:
        return wanted, (
            f"allocation by {'the release' if wanted == 'release' else 'kvcheck'}'s code as "
            f"given; the file ran {config.allocation_path}"
        )
    return wanted, None


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
