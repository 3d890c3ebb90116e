"""Stand-ins for the SGLang names a resolver's file imports, where kvcheck can be faithful.

A resolver read from source (`kvcheck.targets.source`) may use names its file imports from
SGLang, which cannot be imported here. The ones below are small value types whose constructors
take what SGLang's take (docs/semantics.md §1.4): a finish reason set on an abort path, the abort
request a scheduler method receives. They carry the values they were given and nothing else; a
name not listed here still fails at load (or, with `--allow-unavailable-imports`, when used).
"""

from __future__ import annotations

from typing import Any, Final

import attrs


@attrs.define
class FinishAbort:
    """`FINISH_ABORT(message=None, status_code=None, err_type=None)`: a request aborted by the
    scheduler (0.5.16+ resolvers set it as `req.to_finish` when a grammar rejects a token)."""

    message: str | None = None
    status_code: Any = None
    err_type: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The finish reason as SGLang reports it to clients."""
        return {
            "type": "abort",
            "message": self.message or "Aborted",
            "status_code": self.status_code,
            "err_type": self.err_type,
        }


@attrs.define
class FinishLength:
    """`FINISH_LENGTH(length)`: a request that reached its length limit."""

    length: int

    def to_json(self) -> dict[str, Any]:
        """The finish reason as SGLang reports it to clients."""
        return {"type": "length", "length": self.length}


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
    ("sglang.srt.managers.schedule_batch", "FINISH_ABORT"): FinishAbort,
    ("sglang.srt.managers.schedule_batch", "FINISH_LENGTH"): FinishLength,
    ("sglang.srt.managers.io_struct", "AbortReq"): AbortRequest,
}
