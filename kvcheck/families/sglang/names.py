"""Stand-ins for the SGLang names a resolver's file imports, where kvcheck can be faithful.

A resolver read from source (`kvcheck.targets.source`) may use names its file imports from
SGLang, which cannot be imported here. The ones below are small value types whose constructors
take what SGLang's take (docs/semantics.md §1.4, docs/fakes.md): the finish reasons, the very
classes whose instances the engine sets on `req.finished_reason` (so `isinstance` answers as in
SGLang), and the abort request a scheduler method receives. They carry the values they were
given and nothing else; a name not listed here still fails at load (or, with
`--allow-unavailable-imports`, when used).
"""

from __future__ import annotations

from typing import Any, Final

import attrs

from kvcheck.families.sglang.fakes import (
    FinishAbort,
    FinishedMatchedRegex,
    FinishLength,
    FinishMatchedStr,
    FinishMatchedToken,
    FinishReason,
)


@attrs.define(kw_only=True)
class AbortRequest:
    """`AbortReq(rid=..., ...)`: the message a resolver's grammar path (0.5.14-0.5.15) passes
    to `self.abort_request`."""

    rid: str = ""
    abort_all: bool = False
    finished_reason: dict[str, Any] | None = None
    abort_message: str | None = None


# (module, name) as a resolver file imports it -> the stand-in.
STAND_INS: Final[dict[tuple[str, str], object]] = {
    ("sglang.srt.managers.schedule_batch", "BaseFinishReason"): FinishReason,
    ("sglang.srt.managers.schedule_batch", "FINISH_ABORT"): FinishAbort,
    ("sglang.srt.managers.schedule_batch", "FINISH_LENGTH"): FinishLength,
    ("sglang.srt.managers.schedule_batch", "FINISH_MATCHED_TOKEN"): FinishMatchedToken,
    ("sglang.srt.managers.schedule_batch", "FINISH_MATCHED_STR"): FinishMatchedStr,
    ("sglang.srt.managers.schedule_batch", "FINISHED_MATCHED_REGEX"): FinishedMatchedRegex,
    ("sglang.srt.managers.io_struct", "AbortReq"): AbortRequest,
}
