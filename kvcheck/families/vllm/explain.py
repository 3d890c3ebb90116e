"""How a vLLM violation came about, for the reports (each invariant record names `explain`)."""

from __future__ import annotations

from typing import Any, Final

from kvcheck.core.invariant import Violation

_WHY: Final = {
    "vllm-no-exception": "the scheduler's own code raised (vLLM 0.26.0's `assert PH >= 0` is "
    "vllm#48245's crash)",
    "vllm-launch": "the launch itself was malformed",
    "vllm-counters": "a counter went below zero: a roll-back or a resolution was applied to "
    "state it did not belong to (vllm#46066's class)",
    "vllm-in-flight": "the in-flight count no longer matches the frames kvcheck launched",
    "vllm-reservation": "the scheduler's chunk decision and the runner's launch-time sample "
    "decision disagree, so a returned token has no placeholder (vllm#48245, #57562's class)",
    "vllm-dynamic-sd": "the step's draft count and the placeholders its launch reserved no "
    "longer follow the dynamic SD table (`num_speculative_tokens_per_batch_size`)",
    "vllm-identity": "C - (T + PH) moved: some event changed C without T or PH",
    "vllm-exactly-once": "a position was delivered twice or never (vllm#48245's duplicates, "
    "vllm#49620's lost tokens)",
    "vllm-pool": "the block pool's ledger does not add up",
    "vllm-grammar": "the scheduler's validated drafts no longer match what its placeholders "
    "reserved, or a request its grammar rejected was not finished with an error",
    "vllm-spec-stats": "the step's speculative statistics count other frames or drafts than "
    "the ones it applied (grammar-invalidated drafts are not proposals)",
    "vllm-placeholder-drafts": "`-1` drafts survived a step the request sat out "
    "(vllm#37159/#40768/#46899)",
    "vllm-quiescence": "the engine did not end empty with every block free",
}


def explain(facts: Any, violation: Violation) -> str:
    """The violation's sentence and what it means in vLLM's terms."""
    why = _WHY.get(violation.invariant, "")
    return f"{violation.message}; {why}" if why else violation.message
