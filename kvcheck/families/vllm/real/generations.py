"""vLLM's scheduler generations from 0.11.1 on, as docs/vllm-generations.md reads them from the
wheels, and the upstream bug each invariant's failure is on each generation (survey
`shared/vllm-async-spec.md` §4, confirmed on the wheels where the doc says so).

`kvcheck releases --family vllm` shows a release's generation, the function that resolves its
placeholders on delivery, and the bug its first broken invariant corresponds to. A FAIL the table
does not explain is shown as `unexplained`: a finding to look into (or a fault of kvcheck's
fakes), never silently attributed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import attrs

from kvcheck.families.vllm.scenario import RUNNERS, Runner
from kvcheck.targets.wheels import version_key

# Row 7 of the survey's table: judged only when asked (`--placeholder-drafts`), on every release.
_PLACEHOLDER_DRAFTS: Final = "vllm#37159/#40768/#46899"
# The async override resolves placeholders (`A._update_request_with_output`) through 0.32.0;
# 0.33.0 merges it into the scheduler's own (`S._update_request_with_output(..., is_stale)`).
_OVERRIDE: Final = "A._update_request_with_output"
_MERGED: Final = "S._update_request_with_output"


@attrs.frozen
class Generation:
    """Releases `first`..`last` (inclusive) whose KV accounting reads the same."""

    first: str
    last: str
    # The function that resolves a delivered frame's placeholders.
    resolves: str
    # invariant id -> the upstream bug a failure of it is on this generation.
    bugs: Mapping[str, str]

    @property
    def span(self) -> str:
        """`first-last`, or the one version."""
        return self.first if self.first == self.last else f"{self.first}-{self.last}"

    def holds(self, version: str) -> bool:
        """Whether `version` belongs to this generation."""
        return version_key(self.first) <= version_key(version) <= version_key(self.last)


GENERATIONS: Final = (
    # `PH += 1 + k`, no discard field, no `reset_running_requests` (A:26-34, S:1317 @0.11.1).
    Generation("0.11.1", "0.11.2", _OVERRIDE, {"vllm-placeholder-drafts": _PLACEHOLDER_DRAFTS}),
    # `discard_latest_async_tokens: bool`, set at a reset and spent on one frame
    # (R:100, S:1401, A:48-52 @0.12.0): the next frame is dropped whatever it is (vllm#42043,
    # fixed by #42117's count), and the rejection adjustment runs before the discard check
    # (vllm#46066, S:1325-1329 @0.21.0).
    Generation(
        "0.12.0",
        "0.21.0",
        _OVERRIDE,
        {
            "vllm-counters": "vllm#46066",
            "vllm-exactly-once": "vllm#42043",
            "vllm-placeholder-drafts": _PLACEHOLDER_DRAFTS,
        },
    ),
    # `async_tokens_to_discard: int` = PH at a reset, spent one per frame (R:142, S:1923,
    # A:40-44 @0.22.0); the stale frame's rejected drafts still come off the resumed PH
    # (S:1381-1385 @0.22.0): vllm#46066.
    Generation(
        "0.22.0",
        "0.24.0",
        _OVERRIDE,
        {
            "vllm-counters": "vllm#46066",
            "vllm-exactly-once": "vllm#49620",
            "vllm-placeholder-drafts": _PLACEHOLDER_DRAFTS,
        },
    ),
    # #46066's fix: no rejection adjustment while a discard is pending (S:1586-1591 @0.25.0).
    # The discard still counts frames, not tokens (vllm#49620); preemption leaves PH and marks
    # nothing stale, so a resume before the stale frame returns reserves nothing (vllm#48245).
    Generation(
        "0.25.0",
        "0.26.0",
        _OVERRIDE,
        {
            "vllm-exactly-once": "vllm#49620",
            "vllm-reservation": "vllm#48245",
            "vllm-counters": "vllm#48245",
            "vllm-placeholder-drafts": _PLACEHOLDER_DRAFTS,
        },
    ),
    # #48245's fix: `num_stale_output_tokens`, `is_stale`, the waiting-loop gate (R:154,
    # S:714-717, A:52 @0.27.0).
    Generation("0.27.0", "0.32.0", _OVERRIDE, {"vllm-placeholder-drafts": _PLACEHOLDER_DRAFTS}),
    # The override merged into the scheduler (S:2744-2770 @0.33.0).
    Generation("0.33.0", "0.34.0", _MERGED, {"vllm-placeholder-drafts": _PLACEHOLDER_DRAFTS}),
)

# The first release whose async scheduling runs deeper than two batches: the V2 runner's
# `pp_size + 1` (`config/vllm.py:497-507` @0.23.0). Before, `max_concurrent_batches` is 2 with
# async scheduling and PP 1 (`v1/executor/multiproc_executor.py:412-415` @0.11.1, :475-478
# @0.22.0), and with PP > 1 the V1 runner's PP-deep pipeline, which kvcheck does not model.
DEEPER_PIPELINES: Final = "0.23.0"


def runners_of(version: str) -> tuple[Runner, ...]:
    """The runners kvcheck may put `version` behind: the V1 runner's depth 2 alone before
    0.23.0, both after."""
    if version_key(version) < version_key(DEEPER_PIPELINES):
        return ("v1",)
    return RUNNERS


# The bug column of a release that passed (or has no verdict).
NO_BUG: Final = "-"
# The bug column of a failure the table does not explain.
UNEXPLAINED: Final = "unexplained"


def generation_of(version: str) -> Generation | None:
    """The generation `version` belongs to; None for a release the table does not know (newer
    than its last, or older than 0.11.1)."""
    return next((g for g in GENERATIONS if g.holds(version)), None)


def facts(version: str, first_broken: str | None) -> tuple[tuple[str, str], ...]:
    """A release's own columns in `kvcheck releases`: its generation, the upstream bug its first
    broken invariant is (`-` when none broke, `unexplained` when the table has none), and the
    function that resolves its placeholders."""
    found = generation_of(version)
    if found is None:
        bug = NO_BUG if first_broken is None else UNEXPLAINED
        return (("generation", "unknown"), ("bug", bug), ("resolves", "unknown"))
    bug = NO_BUG if first_broken is None else found.bugs.get(first_broken, UNEXPLAINED)
    return (("generation", found.span), ("bug", bug), ("resolves", found.resolves))
