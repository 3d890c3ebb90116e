"""vLLM's reference model: what the events alone say must hold, whatever the scheduler decides.

The scheduler under test decides what runs when (whom to schedule, how many tokens, whom to
preempt); the model does not guess those choices. What it knows from the events is each
request's true output (tokens are a pure function of position, `scenario.token_at`), whether
and how it must finish (end of sequence or length, `Add.finish_reason`), which requests were
aborted (their output may stop anywhere, but only at a true prefix), and when the engine must be
idle (after a drain). A request with a grammar told to reject its next tokens (`Reject`) may
instead end early with an error, once kvcheck's grammar did reject them.

The invariants (`kvcheck.families.vllm.invariants`) hold the scheduler's
counters and outputs to this, and to kvcheck's own ledger of the frames it launched and
delivered (`kvcheck.families.vllm.engine`), never to the scheduler's own word.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from kvcheck.families.vllm.scenario import (
    Abort,
    Add,
    Drain,
    Reject,
    Reset,
    Step,
    Trim,
    VllmConfig,
    VllmEvent,
)


@attrs.frozen
class Expectation:
    """What must hold after one event."""

    config: VllmConfig
    prompts: Mapping[str, int]
    outputs: Mapping[str, tuple[int, ...]]  # each request's whole true output
    reasons: Mapping[str, str]  # how each must finish ("stop" or "length")
    aborted: frozenset[str]
    # The event was a drain: the engine must now be idle, every request finished.
    quiescent: bool = False
    # The requests with a grammar, and those whose grammar was told to reject their next tokens
    # (they may end early, with an error, once the grammar did).
    grammars: frozenset[str] = frozenset()
    rejects: frozenset[str] = frozenset()


class VllmModel:
    """The reference model of one scenario (`kvcheck.core.family.ReferenceModel`)."""

    def __init__(self, config: VllmConfig) -> None:
        self.config = config
        self.prompts: dict[str, int] = {}
        self.outputs: dict[str, tuple[int, ...]] = {}
        self.reasons: dict[str, str] = {}
        self.aborted: frozenset[str] = frozenset()
        self.grammars: frozenset[str] = frozenset()
        self.trims: dict[str, int] = {}
        self.rejects: frozenset[str] = frozenset()
        self.reached: set[str] = set()

    def apply(self, event: VllmEvent) -> Expectation:
        """What must hold after `event`."""
        if isinstance(event, Add):
            self.prompts = self.prompts | {event.rid: event.prompt_len}
            self.outputs = self.outputs | {
                event.rid: event.expected_output(self.config.max_model_len)
            }
            reason = event.finish_reason(self.config.max_model_len)
            self.reasons = self.reasons | {event.rid: reason}
            self.reached.add(f"finish by {reason}")
            if event.prompt_len > self.config.max_num_scheduled_tokens:
                self.reached.add("chunked prefill")
            if event.grammar:
                self.grammars = self.grammars | {event.rid}
                self.reached.add("grammar")
        elif isinstance(event, Abort) and event.rid in self.outputs:
            self.aborted = self.aborted | {event.rid}
            self.reached.add("abort")
        elif isinstance(event, Trim) and event.rid in self.grammars:
            self.trims = self.trims | {event.rid: event.valid}
            self.reached.add("drafts trimmed")
        elif isinstance(event, Reject) and event.rid in self.grammars:
            self.rejects = self.rejects | {event.rid}
            self.reached.add("grammar rejection")
        elif isinstance(event, Reset):
            self.reached.add("reset")
        elif isinstance(event, Step) and event.accept:
            self.reached.add("drafts accepted")
        return Expectation(
            self.config,
            self.prompts,
            self.outputs,
            self.reasons,
            self.aborted,
            quiescent=isinstance(event, Drain),
            grammars=self.grammars,
            rejects=self.rejects,
        )

    def clone(self) -> VllmModel:
        """An independent copy."""
        twin = VllmModel(self.config)
        # The mappings are replaced, never changed in place, so they may be shared.
        twin.prompts, twin.outputs, twin.reasons = self.prompts, self.outputs, self.reasons
        twin.aborted, twin.reached = self.aborted, set(self.reached)
        twin.grammars, twin.trims, twin.rejects = self.grammars, self.trims, self.rejects
        return twin

    def checkpoint(self) -> None:
        """None: `clone` shares the mappings `apply` replaces; the search clones (its engine's
        state is not checkpointed either)."""
        return None

    def state_key(self, inert: frozenset[str] = frozenset()) -> tuple[object, ...]:
        """The true outputs, the aborted requests and what the grammars were told."""
        return (
            tuple(sorted(self.outputs.items())),
            self.aborted,
            self.grammars,
            tuple(sorted(self.trims.items())),
            self.rejects,
        )
