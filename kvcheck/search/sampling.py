"""A fast search without Hypothesis's engine: scenarios drawn from a seeded `random.Random`.

`sample_search` is `kvcheck.search.check.search`'s counterpart for campaigns (`kvcheck fuzz
--generator random`, the default): the same scenario distribution (the family's, written once
against `kvcheck.core.draws.Draws`; `RandomDraws` is its random driver), the same outcome
(`SearchOutcome`), the same
time limits, Ctrl-C, progress and `on_run`, the same determinism checks, and a failure shrunk by
kvcheck's own shrinker (`kvcheck.search.shrink`), which is what shrinks a Hypothesis search's
failure too. Generating a scenario costs tens of microseconds instead of milliseconds.

The example database is Hypothesis's own (`ExampleDatabase`: a directory or Redis, through its
`fetch`/`save`/`delete`): a failure is saved as the shrunk scenario's one-line JSON
(`kvcheck.core.scenario.to_json_line`) under a key naming the target and the judging options
(`kvcheck.search.check.scenarios_key`), and every later search with that key replays the saved
scenarios before it draws any; a saved scenario that no longer fails, or no longer parses, is
deleted, as Hypothesis does with its own entries. Hypothesis's search saves its shrunk failures
there too and replays them first (as explicit examples), so either generator finds first what
the other found; Hypothesis's own entries (choice sequences) only Hypothesis reads.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from typing import Any

from hypothesis.database import ExampleDatabase

from kvcheck.core.deadline import check_time_limit
from kvcheck.core.draws import RandomDraws
from kvcheck.core.family import Distribution, JudgingOptions, distribution_of
from kvcheck.core.run import RunResult, run_scenario
from kvcheck.core.scenario import Scenario
from kvcheck.core.target import Target
from kvcheck.search import DEFAULT_MAX_EXAMPLES
from kvcheck.search.check import (
    SEARCH_STOPS,
    Progress,
    SearchOutcome,
    confirmed_result,
    judged_options,
    save_scenario,
    saved_scenarios,
    scenarios_key,
    shrink_failure,
    stop_name,
)

__all__ = ["sample_search"]


def sample_search(
    target: Target,
    options: JudgingOptions | None = None,
    *,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
    seed: int | None = None,
    database: ExampleDatabase | None = None,
    reuse: bool = True,
    on_run: Callable[[RunResult], None] | None = None,
    progress: Progress | None = None,
    report_interrupt: bool = False,
    **requested: Any,
) -> SearchOutcome:
    """One search of `max_examples` scenarios drawn from `random.Random(seed)` (None: a fresh
    seed), stopping at the first violation, which is shrunk, checked for determinism and saved
    in `database`. Arguments and outcome as `kvcheck.search.check.search`'s (`options`, or the
    `requested` keywords the target's family judges): the scenarios saved in `database` are
    replayed first (and count as scenarios) unless `reuse=False`; a time limit or Ctrl-C ends
    the search early (`stopped`), keeping a failure already found; Ctrl-C is re-raised unless
    `report_interrupt`. Raises `UnsupportedTargetError` and `NondeterministicTargetError` as
    `search` does."""
    options = judged_options(target, options, requested)
    rng = random.Random(seed if seed is not None else random.SystemRandom().getrandbits(64))
    distribution = distribution_of(target.family)
    space = distribution.space(target, options)
    name = distribution.label(options)
    labels = distribution.labels
    key = scenarios_key(target, options)
    reached: set[str] = set()
    stopped: list[str] = []
    examples = 0
    failing: RunResult | None = None
    failing_saved: bytes | None = None
    started = time.perf_counter()
    saved = saved_scenarios(database, key) if database is not None and reuse else []
    # Only scenarios of this space (one saved before the target's allocation rules were kept is
    # not).
    saved = [(entry, s) for entry, s in saved if distribution.fits(space, s)]
    candidates = _candidates(saved, distribution, space, rng, max_examples)
    try:  # Ctrl-C or the time limit may come anywhere: in a run, a draw, a progress report
        for entry, scenario in candidates:
            if examples >= max_examples:
                break
            check_time_limit()
            result = confirmed_result(run_scenario(scenario, target), target)
            examples += 1
            reached.update(labels(scenario, result.reached))
            if on_run is not None:
                on_run(result)
            if progress is not None:
                progress(
                    f"{name}: {examples}/{max_examples} scenarios, "
                    f"{time.perf_counter() - started:.0f} s"
                )
            if result.violation is not None:
                failing, failing_saved = result, entry
                break
            if entry is not None and database is not None:  # saved, but it passes now
                database.delete(key, entry)
    except SEARCH_STOPS as exc:
        stopped.append(stop_name(exc))
    to_failure = time.perf_counter() - started
    final: RunResult | None = None
    shrink_runs = 0
    if failing is not None:
        final, shrink_runs = shrink_failure(failing, target, name, stopped, progress)
        if database is not None:
            save_scenario(database, key, final.scenario, failing_saved)
    if "interrupted" in stopped and not report_interrupt:
        raise KeyboardInterrupt
    return SearchOutcome(
        options=options,
        examples=examples,
        examples_to_failure=examples if failing is not None else None,
        failure=final,
        reached=frozenset(reached),
        seconds=time.perf_counter() - started,
        seconds_to_failure=to_failure if failing is not None else None,
        shrink_runs=shrink_runs,
        stopped=stopped[0] if stopped else None,
    )


def _candidates(
    saved: list[tuple[bytes, Scenario]],
    distribution: Distribution,
    space: Any,
    rng: random.Random,
    max_examples: int,
) -> Iterator[tuple[bytes | None, Scenario]]:
    """The `max_examples` scenarios to run, in order, as `search` tries them: the saved ones,
    the family's first witnesses (SGLang's stride-switch scenario of an adaptive search), draws
    from `rng`, and in the last places of the budget the late witnesses (SGLang's memory
    pressure), which the search reaches only when nothing before them failed."""
    first = [*saved, *((None, witness) for witness in distribution.witnesses(space))]
    late = distribution.late_witnesses(space)
    yield from first
    draw, draws = distribution.draw_scenario, RandomDraws(rng)
    for _ in range(max(1, max_examples - len(late)) - len(first)):
        yield None, draw(draws, space)
    for witness in late:
        yield None, witness
