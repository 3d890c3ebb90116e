"""How an SGLang target is judged: one record in place of four loose keywords
(`kvcheck.core.family.JudgingOptions`), and how the options asked for become that record for a
target (`judging`: "auto" read from what its probe showed)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs

from kvcheck.core.family import Judging
from kvcheck.core.target import Target
from kvcheck.errors import KvcheckUsageError
from kvcheck.families.sglang.scenario import (
    ALLOCATION_PATHS,
    CONVENTIONS,
    GLOBAL_COUNTER_MODES,
    AllocationPathKind,
    Convention,
    GlobalCounterMode,
)
from kvcheck.families.sglang.target import release_code


@attrs.frozen
class SglangJudging:
    """The committed-length convention the model holds the target to (docs/semantics.md §2),
    how the batch-global counters are judged (`ideal`, `sglang` or `off`), whether strides
    switch between launch and delivery (adaptive speculation), and the overlap setting to draw
    (None: both).

    `adaptive_reason` says why `adaptive` is on or off ("given", or what the target's shape
    showed) for the reports; it is no option: equality, `to_dict` and the database key leave
    it out."""

    convention: Convention
    global_counters: GlobalCounterMode = "ideal"
    adaptive: bool = False
    overlap: bool | None = None
    adaptive_reason: str = attrs.field(default="", eq=False)
    # Whose allocation code runs under an allocation rule (`AllocationPathKind`), and why.
    allocation_path: AllocationPathKind = "model"
    allocation_reason: str = attrs.field(default="", eq=False)

    def to_dict(self) -> dict[str, Any]:
        """The options as JSON, by their command-line names."""
        return attrs.asdict(self, filter=lambda attribute, _: bool(attribute.eq))

    def key_parts(self) -> tuple[str, ...]:
        """In the order example-database keys have always joined them, so databases saved
        before the record existed still hit."""
        parts = (self.convention, self.global_counters, str(self.adaptive), str(self.overlap))
        # kvcheck's own allocation path adds nothing: databases of before the choice still hit.
        return parts if self.allocation_path == "model" else (*parts, self.allocation_path)


# What may be asked for, with what `kvcheck.check()` assumes when it is not: the convention
# detected from the target, ideal global counters, adaptive switching exactly when the target
# feeds the adaptive controller, and both overlap settings.
REQUESTED_DEFAULTS: Final[dict[str, Any]] = {
    "convention": "auto",
    "global_counters": "ideal",
    "adaptive": None,
    "overlap": None,
    "allocation_path": "auto",
}


def other_convention(convention: Convention) -> Convention:
    """The convention a target is judged by when it fails under `convention` (auto's fallback)."""
    return "honest" if convention == "preclaim" else "preclaim"


def judging(requested: Mapping[str, Any], target: Target) -> Judging:
    """The options `target` is judged under when `requested` asks for these (missing ones as
    `REQUESTED_DEFAULTS`), why, and what to try when the search fails under them.

    Convention `auto` judges by the convention the target most plausibly follows first (from
    the SGLang versions its spellings fit, else what a probe saw it do to a row:
    `ApiShape.convention`), with the other one as the fallback; adaptive None switches strides
    exactly when the target feeds the adaptive controller (SGLang 0.5.12+, where adaptive
    speculation runs under overlap). Raises `KvcheckUsageError` for an unknown convention or
    global-counter mode, and `TypeError` for an option SGLang has not."""
    unknown = sorted(set(requested) - set(REQUESTED_DEFAULTS))
    if unknown:
        raise TypeError(
            f"unknown judging option(s) {', '.join(unknown)}; SGLang's are "
            f"{', '.join(REQUESTED_DEFAULTS)}"
        )
    asked = REQUESTED_DEFAULTS | dict(requested)
    convention, global_counters = asked["convention"], asked["global_counters"]
    if convention not in ("auto", *CONVENTIONS):
        raise KvcheckUsageError(
            f"unknown convention {convention!r}; choose auto, preclaim or honest"
        )
    if global_counters not in GLOBAL_COUNTER_MODES:
        raise KvcheckUsageError(
            f"unknown global-counter mode {global_counters!r}; choose ideal, sglang or off"
        )
    shape = target.shape
    adaptive = asked["adaptive"]
    if adaptive is None:
        adaptive = shape.feeds_controller
        adaptive_reason = (
            "auto: the target feeds the adaptive controller"
            if adaptive
            else "auto: the target never feeds the adaptive controller"
        )
    else:
        adaptive_reason = "given"

    allocation_path, allocation_reason = chosen_allocation_path(asked["allocation_path"], target)

    def options(convention: Convention) -> SglangJudging:
        return SglangJudging(
            convention,
            global_counters,
            adaptive,
            asked["overlap"],
            adaptive_reason,
            allocation_path,
            allocation_reason,
        )

    if convention != "auto":
        return Judging(options(convention), f"convention {convention} (given)")
    first: Convention = shape.convention
    second = other_convention(first)
    return Judging(
        options(first), shape.convention_reason, ((options(second), "the other convention"),)
    )


# Why kvcheck's own allocation path judges a target that is no release tree (the usual case, which
# reports leave unsaid).
NO_RELEASE_CODE: Final = "auto: kvcheck's RuleAllocation (the target is no release tree)"


def chosen_allocation_path(asked: str, target: Target) -> tuple[AllocationPathKind, str]:
    """Whose allocation code judges `target` when `asked` (auto, release or model) is asked
    for, and why. Auto: a release tree's own code when it has it (`sglang==V`, a checkout, a
    package directory whose layout kvcheck drives), kvcheck's model otherwise (builtins, single
    functions, the corpus). `KvcheckUsageError` for an unknown choice, and for `release` on a
    target without release code or whose layout kvcheck does not drive yet."""
    if asked not in ("auto", *ALLOCATION_PATHS):
        raise KvcheckUsageError(
            f"unknown allocation path {asked!r}; choose auto, {', '.join(ALLOCATION_PATHS)}"
        )
    if asked == "model":
        return "model", "given"
    code = release_code(target)
    if code is None:
        if asked == "release":
            raise KvcheckUsageError(
                f"{target.description} brings no release allocation code (only a release "
                "tree does: sglang==VERSION, a checkout, a package directory); use "
                "--allocation-path model"
            )
        return "model", NO_RELEASE_CODE
    why_not = code.unavailable()
    if why_not is not None:
        if asked == "release":
            raise KvcheckUsageError(f"--allocation-path release: {why_not}")
        return "model", f"auto: kvcheck's RuleAllocation ({why_not})"
    if asked == "release":
        return "release", "given"
    return "release", f"auto: the release's own allocation code, from {code.where}"
