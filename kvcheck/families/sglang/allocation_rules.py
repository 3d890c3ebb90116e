"""The allocation rules as named features: how a decode launch sizes the allocated length `Al`
and what release does to it (docs/semantics.md §2.3 and §5, docs/allocation-rules.md).

A rule is a row of `RULES`. Its name is what a scenario stores (`Config.allocation`, and the JSON
form of every counterexample file), the first SGLang release that allocated that way; the rest of
the row says what the rule does, and which releases use it. The reference model, the engine's own
allocation path and the searches read the features, never the name, so a rule differs from
another exactly where its row does. Release strings live here only: as names, and as the range of
releases each row covers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final, Literal, TypeAlias

import attrs

AllocationRule: TypeAlias = Literal[
    "off", "0.5.6", "0.5.7", "0.5.9", "0.5.11", "0.5.12", "0.5.13", "0.5.16", "0.5.17"
]
# Where a launch takes the draft count A of its reserve R = 2A: the stride it is launched at, or
# the adaptive candidates' maximum (`Config.max_stride`, else the initial stride).
ReserveFrom: TypeAlias = Literal["launched-stride", "adaptive-max"]
# What the scheduler's decode memory check counts before a launch (docs/release-allocation.md):
# - "next-sizing": per request the pages between `Al` and what the launch sizes it to, the
#   launch's own allocation (0.5.11+ `_new_tokens_required_next_decode_spec_v2`);
# - "draft-bound": `max(steps * topk, draft tokens) * 2` tokens per request, each term rounded
#   up to a page, whatever `Al` holds (0.5.9-0.5.10 `new_tokens_required_next_decode`);
# - "page-count": a page per request whose `seqlen + D + topk * steps` crosses a page boundary
#   (every request at page size 1), times the scheduler's multiplier `D + topk * steps`
#   (0.5.7-0.5.8 `new_page_count_next_decode` through `check_decode_mem`);
# - "page-count-unscaled-loop": the same, but the retraction loop asks without the multiplier
#   (0.5.6).
DecodeEstimate: TypeAlias = Literal[
    "page-count-unscaled-loop", "page-count", "draft-bound", "next-sizing"
]
# Who asks for the estimate: kvcheck's admission (room beside the running batch), the memory
# check before a decode launch, or the retraction loop it starts (0.5.6-0.5.8 ask the last two
# differently).
EstimateAsker: TypeAlias = Literal["admission", "check", "retraction"]


@attrs.frozen
class AllocationFeatures:
    """One allocation rule: its name, the releases that use it, and what it does."""

    name: AllocationRule
    # The first and the last release of the rule (last None: still current; both None for "off").
    first_release: str | None
    last_release: str | None
    # The scheduler allocates and releases KV, and the pool and `alloc-*` invariants judge it;
    # without (rule "off") `kv_allocated_len` is neither modelled nor judged.
    allocates: bool
    # A decode launch never shrinks `Al`: `Al = max(Al, C + R)` rather than `C + R`.
    clamp: bool
    reserve_from: ReserveFrom
    # `C + R` is rounded up to a page; without it the rule is modelled at page size 1 only.
    page_round: bool
    # Release sets `Al = 0` (`req.kv = None`, later `mark_kv_released`); without it `Al` stays.
    zero_on_release: bool
    # Memory-pressure retraction sorts a speculative decode batch (most outputs first, then
    # the shortest prompt) before it retracts from the back; without it, it retracts from the
    # back of the batch as it stands, since releases before 0.5.17 sort only without
    # speculative decoding (docs/release-allocation.md).
    retraction_sorted: bool = False
    decode_estimate: DecodeEstimate = "next-sizing"


OFF: Final = AllocationFeatures(
    name="off",
    first_release=None,
    last_release=None,
    allocates=False,
    clamp=False,
    reserve_from="launched-stride",
    page_round=False,
    zero_on_release=False,
)

# One row per rule, oldest first after "off"; each differs from the one before it in one
# feature, which starts with the release the rule is named after.
RULES: Final[tuple[AllocationFeatures, ...]] = (
    OFF,
    AllocationFeatures(
        name="0.5.6",
        first_release="0.5.6",
        last_release="0.5.6",
        allocates=True,
        clamp=False,
        reserve_from="launched-stride",
        page_round=False,
        zero_on_release=False,
        decode_estimate="page-count-unscaled-loop",
    ),
    AllocationFeatures(
        name="0.5.7",
        first_release="0.5.7",
        last_release="0.5.8",
        allocates=True,
        clamp=False,
        reserve_from="launched-stride",
        page_round=False,
        zero_on_release=False,
        decode_estimate="page-count",
    ),
    AllocationFeatures(
        name="0.5.9",
        first_release="0.5.9",
        last_release="0.5.10",
        allocates=True,
        clamp=False,
        reserve_from="launched-stride",
        page_round=False,
        zero_on_release=False,
        decode_estimate="draft-bound",
    ),
    AllocationFeatures(
        name="0.5.11",
        first_release="0.5.11",
        last_release="0.5.11",
        allocates=True,
        clamp=False,
        reserve_from="launched-stride",
        page_round=False,
        zero_on_release=False,
    ),
    AllocationFeatures(
        name="0.5.12",
        first_release="0.5.12",
        last_release="0.5.12",
        allocates=True,
        clamp=True,
        reserve_from="launched-stride",
        page_round=False,
        zero_on_release=False,
    ),
    AllocationFeatures(
        name="0.5.13",
        first_release="0.5.13",
        last_release="0.5.15",
        allocates=True,
        clamp=True,
        reserve_from="adaptive-max",
        page_round=False,
        zero_on_release=False,
    ),
    AllocationFeatures(
        name="0.5.16",
        first_release="0.5.16",
        last_release="0.5.16",
        allocates=True,
        clamp=True,
        reserve_from="adaptive-max",
        page_round=True,
        zero_on_release=True,
    ),
    AllocationFeatures(
        name="0.5.17",
        first_release="0.5.17",
        last_release=None,
        allocates=True,
        clamp=True,
        reserve_from="adaptive-max",
        page_round=True,
        zero_on_release=True,
        retraction_sorted=True,
    ),
)

ALLOCATION_RULES: Final[tuple[AllocationRule, ...]] = tuple(rule.name for rule in RULES)
# Looked up on every sizing of the model and the engine: one dict read.
_BY_NAME: Final[Mapping[AllocationRule, AllocationFeatures]] = {rule.name: rule for rule in RULES}


def allocation_features(name: AllocationRule) -> AllocationFeatures:
    """The features of the rule named `name` (one of `ALLOCATION_RULES`)."""
    return _BY_NAME[name]


def first_rule_with(**features: object) -> AllocationFeatures:
    """The oldest rule with these feature values, for messages that name where a behaviour
    starts (e.g. `first_rule_with(page_round=True)`)."""
    return next(
        rule
        for rule in RULES
        if all(getattr(rule, field) == value for field, value in features.items())
    )


def draft_steps(draft_tokens: int) -> int:
    """`speculative_num_steps` of a launch drafting `draft_tokens` by a chain (topk 1, the
    only topk kvcheck draws): `draft_tokens = steps + 1`, at least one step."""
    return max(1, draft_tokens - 1)


def decode_estimate_pages(
    rule: AllocationFeatures,
    launch_pages: int,
    *,
    page_size: int,
    draft_tokens: int,
    seq_lens: Iterable[int],
    asked_by: EstimateAsker,
) -> int:
    """The pages `rule`'s scheduler estimates the next decode launch needs, given the pages
    that launch allocates (`launch_pages`) for requests of `seq_lens` (prompt plus outputs,
    read only under a bound) at `draft_tokens`. Under "next-sizing" (0.5.11+) that is the
    launch's pages. Under a bound (0.5.6-0.5.10, `_bound_pages`) admission reads the bound,
    and the memory check and its retraction loop the larger of the bound and the launch's
    pages: a correct scheduler never launches what the pool cannot hold."""
    if rule.decode_estimate == "next-sizing":
        return launch_pages
    bound = _bound_pages(
        rule,
        page_size=page_size,
        draft_tokens=draft_tokens,
        seq_lens=list(seq_lens),
        asked_by=asked_by,
    )
    return bound if asked_by == "admission" else max(bound, launch_pages)


def _bound_pages(
    rule: AllocationFeatures,
    *,
    page_size: int,
    draft_tokens: int,
    seq_lens: Sequence[int],
    asked_by: EstimateAsker,
) -> int:
    """The pages the decode memory check of `rule` asks for when its estimate is a bound
    rather than the next sizing (`decode_estimate` "draft-bound" or "page-count"), for
    requests of `seq_lens` (prompt plus outputs) launched at `draft_tokens`, topk 1. 0.5.6's
    retraction loop drops the multiplier the check and admission apply (0.5.6
    managers/schedule_batch.py:1611, against scheduler.py:1910); 0.5.7-0.5.8 pass it on
    (0.5.7 schedule_batch.py:1754, :1776-1778, scheduler.py:2097)."""
    steps, page = draft_steps(draft_tokens), page_size
    if rule.decode_estimate == "draft-bound":
        # Both terms rounded up to a page at page size > 1 (topk 1), doubled for the v2
        # over-allocation (0.5.9 schedule_batch.py:1819-1831); here in pages.
        per_request = max(-(-steps // page), -(-draft_tokens // page))
        return 2 * per_request * len(seq_lens)
    if rule.decode_estimate in ("page-count", "page-count-unscaled-loop"):
        threshold = draft_tokens + steps  # D + topk * steps (0.5.6 schedule_batch.py:1550)
        if page == 1:
            crossing = len(seq_lens)
        else:
            crossing = sum(1 for seq in seq_lens if (seq + threshold) % page <= threshold)
        # The scheduler's `decode_mem_cache_buf_multiplier` is the same threshold (0.5.6
        # scheduler.py:798-808); the page count is in pages of `page` tokens already.
        unscaled = asked_by == "retraction" and rule.decode_estimate == "page-count-unscaled-loop"
        return crossing * (1 if unscaled else threshold)
    raise ValueError(f"rule {rule.name}'s estimate is the next sizing, not a bound")


def _release_key(version: str) -> tuple[int, ...]:
    # `0.5.12.post1` is a release of 0.5.12's rule: the post part does not move it.
    return tuple(int(part) for part in version.partition(".post")[0].split("."))


def rule_of_release(version: str) -> AllocationRule | None:
    """The rule SGLang `version` allocates by (`0.5.12.post1` as `0.5.12`); None for a
    release no rule covers (before 0.5.6, or not a release number)."""
    try:
        key = _release_key(version)
    except ValueError:
        return None
    for rule in RULES:
        if rule.first_release is None or key < _release_key(rule.first_release):
            continue
        if rule.last_release is None or key <= _release_key(rule.last_release):
            return rule.name
    return None
