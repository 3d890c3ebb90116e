"""The thing under test: a resolver, how it was found, and the API shape a probe run showed.

A `Target` is built once, when a spec is loaded (`kvcheck.targets`), and carries its `ApiShape`,
so what a target is held to is decided in one place and every run of it (search, replay,
exhaustive mode, the pytest plugin) judges it the same way. The engine never runs the target
outside the scenario it is given.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

import attrs

from kvcheck.core.target import CodeSpan as CodeSpan
from kvcheck.core.target import Target as Target
from kvcheck.errors import KvcheckUsageError
from kvcheck.families.sglang.allocation import AllocationPath
from kvcheck.families.sglang.allocation_rules import allocation_features
from kvcheck.families.sglang.real.path import ReleaseAllocationCode
from kvcheck.families.sglang.scenario import (
    ALLOCATION_RULES,
    Algorithm,
    AllocationRule,
    Config,
    Convention,
)
from kvcheck.families.sglang.spellings import version_range

# Parts of SGLang's API a resolver maintains only in some generations, with a one-line description.
# A probe run decides which of them a target is not held to (`ApiShape.not_judged`); an invariant
# finding that belongs to one of those is dropped (`kvcheck.families.sglang.invariants`).
ASPECTS: Final[dict[str, str]] = {
    "histogram": "acceptance histogram",
    "result-drafts-total": "result draft total",
    "result-drafts-per-row": "result per-row drafts",
    "controller-feed": "adaptive-controller feed",
    "controller-routing": "adaptive-controller batch_size default (0.5.13+)",
    "result-block-cap": "result block/cap totals",
}


@attrs.frozen
class ApiShape:
    """What a probe run showed about a target (`kvcheck.families.sglang.probe` says how it is
    read)."""

    spellings: tuple[str, ...]  # modelled spelling keys it touched, sorted
    first: str  # the SGLang versions those spellings fit
    last: str | None
    mixed: str | None  # why no single version fits, when none does
    stride_source: str | None
    not_judged: frozenset[str]  # ASPECTS keys
    not_judged_why: tuple[tuple[str, str], ...]
    feeds_controller: bool
    convention: Convention
    convention_reason: str
    probe_error: str | None = None
    # What its scenarios may draw: the algorithms its API generation runs through this resolver
    # and whether results carry block/cap lengths (it reads them).
    algorithms: tuple[Algorithm, ...] = ("eagle",)
    block_cap: bool = False
    # Whether its scenarios may draw grammar requests: it consults the grammar (0.5.14+).
    grammar: bool = False
    # The allocation rules its scenarios may draw: those of the SGLang generations its spellings
    # fit, and "off" only when it never touches `kv_allocated_len` (without a rule the fakes
    # refuse it), with why (`kvcheck.families.sglang.probe`).
    allocation_rules: tuple[AllocationRule, ...] = ALLOCATION_RULES
    allocation_reason: str = ""

    @property
    def versions(self) -> str:
        """The SGLang releases all touched spellings fit; `mixed` when no one release does."""
        if self.mixed:
            return "mixed"
        return version_range(self.first, self.last)

    def summary(self) -> str:
        """One line for the text report."""
        if self.mixed:
            where = f"spellings of several SGLang generations ({self.mixed})"
        else:
            where = f"SGLang {self.versions} spellings"
        parts = [where]
        if self.stride_source:
            parts.append(f"stride from {self.stride_source}")
        if self.not_judged_why:
            held = "; ".join(f"{ASPECTS[a]} ({why})" for a, why in self.not_judged_why)
            parts.append(f"not held to: {held}")
        if self.probe_error:
            parts.append(f"the probe run raised {self.probe_error}")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """The `api_shape` object of `--json` reports: the versions and spellings, what the target
        is held to and not (with why), and how its convention was decided.
        """
        return {
            "versions": self.versions,
            "mixed": self.mixed,
            "spellings": list(self.spellings),
            "stride_source": self.stride_source,
            "feeds_controller": self.feeds_controller,
            "held_to": [a for a in ASPECTS if a not in self.not_judged],
            "not_held_to": {a: why for a, why in self.not_judged_why},
            "convention": self.convention,
            "convention_reason": self.convention_reason,
            "probe_error": self.probe_error,
            "algorithms": list(self.algorithms),
            "block_cap": self.block_cap,
            "grammar": self.grammar,
            "allocation_rules": list(self.allocation_rules),
            "allocation_reason": self.allocation_reason,
            "summary": self.summary(),
        }


def release_code(target: Target) -> ReleaseAllocationCode | None:
    """The release's own allocation code `target` was read with (a release tree's), else None
    (builtins, single functions, the corpus)."""
    code = target.allocation
    return code if isinstance(code, ReleaseAllocationCode) else None


def allocation_path(target: Target, config: Config) -> AllocationPath | None:
    """The allocation path the engine runs for `config` (None: the engine's default, kvcheck's
    own `RuleAllocation`): when the config names an allocation rule, the release's own code for
    `allocation_path="release"`, a path the target brings (the corpus's broken ones) otherwise.
    `KvcheckUsageError` when the config asks for a release's code `target` does not have."""
    if not config.allocation_rule.allocates:
        return None
    code = release_code(target)
    if config.allocation_path == "release":
        if code is None:
            raise KvcheckUsageError(
                f"{target.description} brings no release allocation code (only release trees "
                "do); judge it with --allocation-path model"
            )
        return code(config)
    if target.allocation is None or code is not None:
        return None
    path: AllocationPath = target.allocation(config)
    return path


def allocation_rules(target: Target) -> tuple[AllocationRule, ...]:
    """The allocation rules `target` may be judged under: those its own allocation path
    implements when it brings one (that path is what the `alloc-*` invariants judge), else
    those of the SGLang generations its API shape fits (`ApiShape.allocation_rules`)."""
    own: tuple[AllocationRule, ...] | None = getattr(target.allocation, "rules", None)
    return tuple(own) if own is not None else target.shape.allocation_rules


def release_path_rules(target: Target) -> tuple[AllocationRule, ...]:
    """The allocation rules a search of `target` runs the release's own code under: the rule of
    the release the tree is where kvcheck knows its version (`ReleaseAllocationCode.rule`; the
    model judging that code must allocate as that release does, e.g. retract in its order), else
    `allocation_rules`' rules that allocate (with "off" the release's code would stay idle)
    whose retraction order is the tree's own: a 0.5.16 checkout never built fits the spellings
    of 0.5.16-0.5.18, and judged by 0.5.17's sorted order it failed `committed-live` falsely."""
    code = release_code(target)
    if code is not None and code.rule is not None:
        return (code.rule,)
    rules = allocation_rules(target)
    allocating = tuple(rule for rule in rules if allocation_features(rule).allocates) or rules
    if code is None:
        return allocating
    sorted_by_tree = code.retraction_sorted()
    fitting = tuple(
        rule for rule in allocating if allocation_features(rule).retraction_sorted == sorted_by_tree
    )
    return fitting or allocating


def refuse_other_allocation_rules(target: Target, rules: Iterable[AllocationRule]) -> None:
    """`KvcheckUsageError` when `rules` name one `target` may not be judged under: a scenario
    of another generation's rule shows it states its own release never has (issue 23). A
    target bringing its own allocation path (kvcheck's corpus) runs under any rule named: that
    path, a `RuleAllocation` variant, is what is judged, and it implements every rule."""
    if target.allocation is not None and release_code(target) is None:
        return
    allowed = allocation_rules(target)
    outside = [rule for rule in dict.fromkeys(rules) if rule not in allowed]
    if not outside:
        return
    why = f": {target.shape.allocation_reason}" if target.shape.allocation_reason else ""
    raise KvcheckUsageError(
        f"{target.description} is judged under allocation "
        f"{', '.join(allowed) or 'rule none'} only, not {', '.join(outside)}{why}"
    )
