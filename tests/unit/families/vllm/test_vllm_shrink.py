"""vLLM's shrink moves and exhaustive vocabulary reach the shortest counterexamples: a run of
steps ended by one drain (`search._drained_runs`), and drains that accept drafts
(`VllmBounds.drain_accepts`)."""

from __future__ import annotations

import attrs
import pytest

from kvcheck.core.run import run_scenario
from kvcheck.families.vllm import search
from kvcheck.families.vllm.mutants import MUTANTS
from kvcheck.families.vllm.scenario import Abort, Add, Drain, Reset, Step, VllmConfig
from kvcheck.mutants import BY_NAME
from kvcheck.mutants.matrix import exhaustive_minimum
from kvcheck.search.exhaust import exhaust
from kvcheck.search.shrink import shrink
from kvcheck.targets.loading import load_target
from tests.unit.families.vllm.sequences import scenario

# What `kvcheck mutants --family vllm` (seeds 0-3) shrank token-counted-discard's drawn
# counterexample to before the drain move: stepping on after the reset, where the shortest
# form drains.
STEPPED_CONFIG = VllmConfig(
    num_blocks=32,
    block_size=4,
    max_num_scheduled_tokens=32,
    max_num_seqs=4,
    max_model_len=32,
    num_spec_tokens=1,
)
STEPPED = (Add("r0", 1, 3), Step(0), Step(0), Reset(), Step(0), Step(0), Step(0))


def test_a_run_of_steps_is_ended_by_a_drain_longest_first() -> None:
    events = (Add("r0", 1, 3), Step(0), Step(1), Abort("r0"), Step(0))
    assert list(search._drained_runs(events)) == [
        (Add("r0", 1, 3), Drain(0), Abort("r0"), Step(0)),
        (Add("r0", 1, 3), Drain(1), Abort("r0"), Step(0)),
    ]
    # A lone step is left alone: a drain in its place is no shorter.
    assert list(search._drained_runs((Add("r0", 1, 3), Step(0), Reset(), Step(0)))) == []


def test_the_drain_move_gets_past_the_steps_no_deletion_shortens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    target = load_target("vllm-mutant:token-counted-discard")
    failing = run_scenario(scenario(STEPPED_CONFIG, *STEPPED), target)
    assert failing.violation is not None
    assert failing.violation.invariant == "vllm-exactly-once"

    shrunk = shrink(failing, target).result
    assert shrunk.violation is not None
    assert shrunk.violation.invariant == "vllm-exactly-once"
    # The exhaustive minimum's length and shape: add, two steps, the reset, a drain.
    assert len(shrunk.scenario.events) == 5
    assert isinstance(shrunk.scenario.events[-1], Drain)

    monkeypatch.setattr(search, "_drained_runs", lambda events: iter(()))
    assert len(shrink(failing, target).result.scenario.events) == len(STEPPED)


def test_stop_not_trimmed_is_shortest_with_a_drain_that_accepts_drafts() -> None:
    entry = BY_NAME["stop-not-trimmed"]
    needs = MUTANTS["stop-not-trimmed"].needs
    assert needs.get("drain_accepts") is True
    with_drafts = exhaustive_minimum(entry)
    assert with_drafts.failure is not None
    assert with_drafts.depth == 2
    last = with_drafts.counterexample.events[-1]
    assert isinstance(last, Drain) and last.accept > 0

    plain = search.bounds({k: v for k, v in needs.items() if k != "drain_accepts"})
    assert not plain.drain_accepts
    assert exhaust(entry.target(), plain).depth == 4
    assert "drains that accept drafts" in attrs.evolve(plain, drain_accepts=True).describe()
