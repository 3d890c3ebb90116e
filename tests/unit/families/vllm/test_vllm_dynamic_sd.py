"""Dynamic speculative decoding (`VllmConfig.spec_tokens_per_batch_size`, vLLM 0.24.0 on): the
table's reading, the runner drafting what each step asks for, the reference following it, the
`dynamic-sd-fixed-placeholders` mutant caught by `vllm-dynamic-sd`, and the releases driven
only where they have it."""

from __future__ import annotations

import random

import attrs
import pytest

from kvcheck.core.draws import RandomDraws
from kvcheck.core.run import run_scenario
from kvcheck.core.scenario import from_json, to_json
from kvcheck.errors import ScenarioFormatError
from kvcheck.families.vllm.builtins import ReferenceScheduler, builtin_target
from kvcheck.families.vllm.distribution import VllmSpace, draw_scenario, space_for
from kvcheck.families.vllm.engine import VllmEngine
from kvcheck.families.vllm.judging import VllmJudging
from kvcheck.families.vllm.scenario import Add, Drain, Step, Trim, VllmConfig, VllmScenarios
from kvcheck.families.vllm.target import Launch, spec_tokens_for_batch
from kvcheck.targets.loading import load_target
from tests.unit.families.vllm.sequences import first_violation, release_or_skip, scenario

# k 3; a request alone drafts one, two or more draft two.
DYNAMIC = VllmConfig(
    num_blocks=32,
    max_num_scheduled_tokens=32,
    max_num_seqs=4,
    max_model_len=32,
    num_spec_tokens=3,
    spec_tokens_per_batch_size=((1, 1, 1), (2, 4, 2)),
)
# r0 decodes alone, then beside r1; every step accepts every draft it can.
ALONE_THEN_TWO = (Add("r0", 4, 8), Step(3), Step(3), Step(3), Add("r1", 4, 6), Drain(3))


def test_the_table_reads_by_batch_size_carries_forward_and_caps_at_k() -> None:
    table = ((1, 16, 3), (32, 128, 2))
    assert [spec_tokens_for_batch(table, b, 8) for b in (1, 16, 17, 31, 32, 200)] == [
        3,
        3,
        3,
        3,
        2,
        2,
    ]
    assert spec_tokens_for_batch(table, 1, 2) == 2  # never above k
    assert spec_tokens_for_batch((), 5, 3) == 3  # no table: k
    assert spec_tokens_for_batch(((1, 4, 1),), 2, 0) == 0  # no drafting: no table


def test_the_table_round_trips_and_is_checked() -> None:
    s = scenario(DYNAMIC, *ALONE_THEN_TWO)
    assert from_json(to_json(s)) == s
    # A config without a table writes none: its files are those written before.
    assert "spec_tokens_per_batch_size" not in VllmScenarios.config_to_dict(VllmConfig())
    for bad, message in (
        ([[2, 4, 1]], "must start at 1"),
        ([[1, 4, 1], [3, 5, 1]], "must not overlap"),
        ([[1, 0, 1]], "not a range"),
        ([[1, 4]], "integer triples"),
        ("1-4:1", "integer triples"),
    ):
        with pytest.raises(ScenarioFormatError, match=message):
            VllmScenarios.config_from_dict({"spec_tokens_per_batch_size": bad})


def _launches(target: str, config: VllmConfig = DYNAMIC) -> list[tuple[Launch, list[int | None]]]:
    engine = VllmEngine(config, load_target(target))
    out = []
    for event in ALONE_THEN_TWO:
        for frame in engine.apply(event).launches:
            out.append((frame.launch, [entry.drafted for entry in frame.entries]))
    return out


def test_each_step_drafts_the_tables_entry_and_the_reference_follows_it() -> None:
    launches = _launches("builtin:vllm-reference")
    for launch, drafted in launches:
        if launch.scheduled:
            batch = len(launch.scheduled)
            assert launch.num_spec_tokens_to_schedule == (1 if batch == 1 else 2)
            # A request is scheduled no more drafts than the runner proposed for it.
            for item, proposed in zip(launch.scheduled, drafted, strict=True):
                assert proposed is not None and len(item.spec_token_ids) <= proposed
    assert {len(launch.scheduled) for launch, _ in launches} >= {1, 2}
    scheduled_drafts = {
        len(item.spec_token_ids) for launch, _ in launches for item in launch.scheduled
    }
    assert scheduled_drafts >= {1, 2} and 3 not in scheduled_drafts
    # Accepting every draft, the outputs, reservations and statistics stay right.
    assert first_violation("builtin:vllm-reference", scenario(DYNAMIC, *ALONE_THEN_TWO)) is None


def test_the_runner_accepts_only_the_drafts_it_proposed() -> None:
    """The mutant schedules k drafts where the runner proposed one: the two slots beyond hold
    `-1`s it never accepts, so a step accepting every draft returns 1 + 1 tokens, not 1 + 3."""
    engine = VllmEngine(DYNAMIC, load_target("vllm-mutant:dynamic-sd-fixed-placeholders"))
    engine.apply(Add("r0", 4, 20))
    for _ in range(3):
        engine.apply(Step(3))
    frames = [frame for frame in engine.queue if frame.entries]
    entry = frames[-1].entries[0]
    assert (entry.drafts, entry.drafted) == (3, 1)
    assert engine.runner.deliver(frames[-1], 3).sampled["r0"].__len__() == 2


def test_the_fixed_placeholders_mutant_is_exposed_only_by_a_table() -> None:
    mutant = "vllm-mutant:dynamic-sd-fixed-placeholders"
    assert first_violation(mutant, scenario(DYNAMIC, *ALONE_THEN_TWO)) == "vllm-dynamic-sd"
    fixed = attrs.evolve(DYNAMIC, spec_tokens_per_batch_size=())
    assert first_violation(mutant, scenario(fixed, *ALONE_THEN_TWO)) is None
    # Its minimum: a request alone, drained.
    assert first_violation(mutant, scenario(DYNAMIC, Add("r0", 4, 4), Drain(0))) == (
        "vllm-dynamic-sd"
    )


class WrongCount(ReferenceScheduler):
    """Asks the runner for k drafts whatever the batch size (its placeholders follow the
    table): the step's count is not the table's."""

    def schedule(self) -> Launch:
        launch = super().schedule()
        return attrs.evolve(launch, num_spec_tokens_to_schedule=self.settings.num_spec_tokens)


def test_a_step_count_other_than_the_tables_is_caught() -> None:
    target = builtin_target("test:wrong-count", WrongCount, "asks for k drafts")
    result = run_scenario(scenario(DYNAMIC, Add("r0", 4, 8), Drain(0)), target)
    assert result.violation is not None
    assert result.violation.invariant == "vllm-dynamic-sd"
    assert (result.violation.expected, result.violation.observed) == (1, 3)


def test_a_grammar_validates_the_drafts_the_runner_proposed() -> None:
    events = (Add("r0", 4, 10, grammar=True), Add("r1", 4, 10, grammar=True), Trim("r0", 1))
    assert first_violation("builtin:vllm-reference", scenario(DYNAMIC, *events, Drain(2))) is None


def test_the_search_draws_tables_only_where_the_target_has_dynamic_sd() -> None:
    reference = space_for(load_target("builtin:vllm-reference"), VllmJudging())
    assert reference.dynamic_sd

    def tables(space: VllmSpace) -> list[bool]:
        draws = RandomDraws(random.Random(0))
        drawn = [draw_scenario(draws, space).config for _ in range(60)]
        return [bool(config.spec_tokens_per_batch_size) for config in drawn]

    assert any(tables(reference)) and not all(tables(reference))
    assert not any(tables(attrs.evolve(reference, dynamic_sd=False)))


def test_releases_draft_by_the_table_from_0_24_0_on() -> None:
    release_or_skip("0.33.0")
    release_or_skip("0.23.0")
    launches = _launches("vllm==0.33.0")
    counts = {len(launch.scheduled): launch.num_spec_tokens_to_schedule for launch, _ in launches}
    assert counts[1] == 1 and counts[2] == 2
    assert first_violation("vllm==0.33.0", scenario(DYNAMIC, *ALONE_THEN_TWO)) is None
    # 0.23.0 has no dynamic SD: the table is not passed on, the runner drafts k.
    older = VllmEngine(DYNAMIC, load_target("vllm==0.23.0"))
    assert not older.dynamic_sd
    assert not space_for(load_target("vllm==0.23.0"), VllmJudging()).dynamic_sd
