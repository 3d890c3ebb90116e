"""`kvcheck.check()` lives here: search for a scenario on which a target breaks an invariant.

Hypothesis draws scenarios (`kvcheck.strategies`), each is replayed by `kvcheck.core.run`, and the
first violation is shrunk to a minimal scenario. The counterexample is re-run deterministically
without Hypothesis, so what is reported is exactly what `replay` reproduces.

What a target is judged under comes from its family (`kvcheck.core.family.Judge.judging`): the
options asked for (SGLang's convention `auto`, say: the convention the target most plausibly
follows first, from its probe) and the options to try next when the search fails under them
(SGLang's other convention); it passes when any of them gives no violation and says which.

For a target read from source, the verdict carries the target's own line and branch coverage over
every scenario the searches ran, shrinking included (`kvcheck.search.target_coverage`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

import attrs
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.database import ExampleDatabase
from hypothesis.errors import Flaky
from hypothesis.reporting import with_reporter

from kvcheck.core.deadline import TimeLimitReached, check_time_limit, time_limit
from kvcheck.core.family import Judging, JudgingOptions, distribution_of, family
from kvcheck.core.invariant import Violation
from kvcheck.core.isolation import isolated, resumed_scenario
from kvcheck.core.run import RunResult, run_scenario
from kvcheck.core.scenario import Scenario, from_json, to_json_line
from kvcheck.core.target import Target
from kvcheck.counterexamples.fileformat import Counterexample
from kvcheck.counterexamples.replay import from_run
from kvcheck.errors import KvcheckUsageError, NondeterministicTargetError, ScenarioFormatError
from kvcheck.search import DEFAULT_MAX_EXAMPLES
from kvcheck.search.shrink import shrink
from kvcheck.search.target_coverage import TargetCoverage, meter_for
from kvcheck.strategies import label_run, scenarios_of
from kvcheck.targets.loading import load_target


@attrs.frozen
class SearchOutcome:
    """One Hypothesis search under one set of judging options.

    Scenarios run and how many until the first failure, the shrunk failing run (None: passed),
    coverage labels reached, wall time and the replays spent shrinking.
    """

    options: JudgingOptions
    examples: int
    examples_to_failure: int | None
    failure: RunResult | None
    reached: frozenset[str]
    seconds: float
    # Wall time until the first failing scenario, and replays spent shrinking it.
    seconds_to_failure: float | None = None
    shrink_runs: int = 0
    # Why the search ended before its budget: `time limit` (--time-limit) or `interrupted`
    # (Ctrl-C); None when it ran its course. A failure found before still stands.
    stopped: str | None = None


@attrs.frozen
class Verdict:
    """What `check()` concludes about a target, and the searches behind it.

    `passed` is true when the search under `judging`'s options found no violation, or, when
    that failed, the search under one of its fallbacks (SGLang's convention `auto`: the other
    convention); `reason` says which and why. `outcome` is the search that gave the verdict,
    `other_outcomes` the searches tried besides it.
    """

    target: str
    description: str
    passed: bool
    judging: Judging
    reason: str
    examples: int
    seconds: float
    # The search that produced the verdict (the failing one when failed); others tried before.
    outcome: SearchOutcome
    other_outcomes: tuple[SearchOutcome, ...] = ()
    # What the target's probe showed (its family's: SGLang's `ApiShape`).
    api_shape: Any = None
    # The target's own code that the searches ran; None for a target not read from source or
    # when not measured.
    coverage: TargetCoverage | None = None
    # The engine family of the target (`kvcheck.core.family`), whose front door describes it;
    # required, as `Target.family` is, so a verdict is never described as another family's.
    family: str = attrs.field(kw_only=True)

    @property
    def options(self) -> JudgingOptions:
        """The options of the search that gave the verdict."""
        return self.outcome.options

    def _field(self, name: str) -> Any:
        """Its family's own `--json` field `name` (`FrontDoor.report_fields`); None for a
        family that reports none so named."""
        front = distribution_of(self.family).front
        return front.report_fields(self.options, self.reason).get(name)

    # SGLang's fields of the `--json` report, kept by name for the library's callers (None, or
    # "" for a reason, on a target of a family without them).
    @property
    def convention(self) -> Any:
        """The convention of the search that gave the verdict."""
        return self._field("convention")

    @property
    def convention_reason(self) -> str:
        """Why the verdict is judged under its options (`reason`; a counterexample file keeps
        it under this name, which predates families)."""
        return self.reason

    @property
    def global_counters(self) -> Any:
        """How the batch-global counters were judged."""
        return self._field("global_counters")

    @property
    def adaptive(self) -> Any:
        """Whether strides switched between launch and delivery."""
        return self._field("adaptive")

    @property
    def adaptive_reason(self) -> str:
        """Why adaptive switching was on or off."""
        return str(self._field("adaptive_reason") or "")

    @property
    def allocation_path(self) -> Any:
        """Whose allocation code ran: the target's release (`release`) or kvcheck's model."""
        return self._field("allocation_path")

    @property
    def allocation_reason(self) -> str:
        """Why that allocation code ran."""
        return str(self._field("allocation_reason") or "")

    @property
    def stopped(self) -> str | None:
        """`time limit` or `interrupted` when a search was cut short (what it established still
        stands: a violation found, or none in the scenarios run); None when every search ran."""
        return next((o.stopped for o in (self.outcome, *self.other_outcomes) if o.stopped), None)

    @property
    def violation(self) -> Violation | None:
        """The shrunk counterexample's violation; None when the target passed."""
        return self.outcome.failure.violation if self.outcome.failure else None

    @property
    def counterexample(self) -> Scenario | None:
        """The shrunk failing scenario; None when the target passed."""
        return self.outcome.failure.scenario if self.outcome.failure else None

    @property
    def verdict(self) -> str:
        """`pass` or `fail`: the `verdict` field of `--json` reports."""
        return "pass" if self.passed else "fail"


class _ViolationFound(Exception):
    """Raised inside the property so Hypothesis shrinks; one type keeps it 'one bug'."""


class _Stopped(Exception):
    """Raised inside the property to end the search at a time limit or Ctrl-C."""


Progress = Callable[[str], None]

# What stops a search early, and the name `SearchOutcome.stopped` gives it.
SEARCH_STOPS: Final = (KeyboardInterrupt, TimeLimitReached)


def stop_name(exc: BaseException) -> str:
    """The name `SearchOutcome.stopped` gives what stopped a search (one of `SEARCH_STOPS`)."""
    return "interrupted" if isinstance(exc, KeyboardInterrupt) else "time limit"


# Failures as scenarios in the example database: the shrunk failing scenario's one-line JSON under
# a key naming the target and the judging options. Both searches save there and replay what is
# there first (the fast search, kvcheck.search.sampling, and this one as explicit examples), so
# a failure one generator found is the first thing the other tries; Hypothesis's own entries
# (choice sequences, under `kvcheck.search.check|...`) only Hypothesis can read.
SCENARIOS_KEY_PREFIX: Final = "kvcheck.search.sampling"


def scenarios_key(target: Target, options: JudgingOptions) -> bytes:
    """The example-database key of the saved failing scenarios of a search: the target and the
    judging options (`JudgingOptions.key_parts`), so one target's failures are never replayed
    against another or under other options."""
    return "|".join((SCENARIOS_KEY_PREFIX, target.spec, *options.key_parts())).encode()


def judged_options(
    target: Target, options: JudgingOptions | None, requested: dict[str, Any]
) -> JudgingOptions:
    """`options`, or when none are given the options `target`'s family judges it under for the
    `requested` ones (`Judge.judging`, its first choice: a search tries no fallback)."""
    if options is not None:
        if requested:
            raise TypeError(f"judging options given twice: {options!r} and {requested!r}")
        return options
    return family(target.family).judge.judging(requested, target).options


def saved_scenarios(database: ExampleDatabase, key: bytes) -> list[tuple[bytes, Scenario]]:
    """The scenarios saved under `key` with their entries; an entry that does not parse as a
    scenario (damaged, or written by an older format) is deleted, and one written in an older
    schema version is saved again in today's form, so that one scenario is one entry (a search
    saving it anew would otherwise add a second, and every later search replay it twice)."""
    saved: dict[bytes, Scenario] = {}
    for value in sorted(database.fetch(key)):
        try:
            scenario = from_json(value.decode("utf-8"))
        except (UnicodeDecodeError, ScenarioFormatError, ValueError, TypeError):
            database.delete(key, value)
            continue
        current = to_json_line(scenario).encode("utf-8")
        if current != value:
            database.save(key, current)
            database.delete(key, value)
        saved[current] = scenario
    return sorted(saved.items(), key=lambda item: item[0])


def save_scenario(
    database: ExampleDatabase, key: bytes, scenario: Scenario, replaced: bytes | None = None
) -> None:
    """Save a shrunk failing scenario under `key`; `replaced`, the saved entry it was shrunk
    from, if any, is deleted when it differs."""
    value = to_json_line(scenario).encode("utf-8")
    database.save(key, value)
    if replaced is not None and replaced != value:
        database.delete(key, replaced)


def search(
    target: Target,
    options: JudgingOptions | None = None,
    *,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
    seed: int | None = None,
    database: ExampleDatabase | None = None,
    seeded_database: bool = False,
    reuse: bool = True,
    on_run: Callable[[RunResult], None] | None = None,
    progress: Progress | None = None,
    report_interrupt: bool = False,
    **requested: Any,
) -> SearchOutcome:
    """One Hypothesis search under one set of judging `options` (or, without them, the options
    the target's family judges it under for the `requested` keywords: SGLang's `convention`,
    `global_counters`, `adaptive`, `overlap`, with no fallback). Raises
    `UnsupportedTargetError`.

    Hypothesis's `@seed` turns the example database off, so a seeded search normally neither
    replays nor records failures; `seeded_database` keeps `database` for a seeded search (the
    workers of a fuzz campaign: distinct seeds, one shared database). `reuse=False` records
    failures in `database` without replaying the ones already there first. `on_run` sees every
    scenario's run (progress reports).

    `progress` is called with a short status line after every scenario. A time limit
    (`kvcheck.core.deadline.time_limit`) or Ctrl-C ends the search early (`stopped`), keeping a
    failure already found (shrunk as far as it got). Ctrl-C is re-raised as `KeyboardInterrupt`
    (after Hypothesis is silenced) unless `report_interrupt`, when the outcome says
    `interrupted` instead.
    """
    options = judged_options(target, options, requested)
    distribution = distribution_of(target.family)
    space = distribution.space(target, options)
    name = distribution.label(options)
    failures: list[RunResult] = []
    reached: set[str] = set()
    unsupported: list[Exception] = []
    stopped: list[str] = []
    counter = {"examples": 0, "to_failure": 0}
    started = time.perf_counter()

    # The family's witnesses count among the `max_examples`: those tried first (SGLang's
    # stride-switch scenario) and those tried last when the draws found nothing (its memory
    # pressure), which take the last places of the budget.
    witnesses = distribution.witnesses(space)
    late = distribution.late_witnesses(space)
    drawn = max(1, max_examples - len(witnesses) - len(late))

    def one_scenario(scenario: Scenario) -> None:
        if unsupported:
            return
        if stopped:
            raise _Stopped
        if failures:  # Hypothesis replays the failing example once more: it is known already
            raise _ViolationFound(failures[0].violation)
        counter["examples"] += 1
        try:
            check_time_limit()
            result = confirmed_result(run_scenario(scenario, target), target)
        except KvcheckUsageError as exc:
            unsupported.append(exc)
            return
        except SEARCH_STOPS as exc:
            counter["examples"] -= 1
            stopped.append(stop_name(exc))
            raise _Stopped from None
        reached.update(label_run(scenario, result.reached))
        if on_run is not None:
            on_run(result)
        if progress is not None:
            progress(
                f"{name}: {counter['examples']}/{max_examples} scenarios, "
                f"{time.perf_counter() - started:.0f} s"
            )
        if result.violation is not None:
            if not failures:  # Hypothesis runs the failing scenario once more to report it
                counter["to_failure"] = counter["examples"]
            failures.append(result)
            raise _ViolationFound(result.violation.invariant)

    # The property Hypothesis drives; a late witness runs `one_scenario` directly.
    settled = settings(
        max_examples=drawn,
        deadline=None,
        database=database,
        derandomize=False,
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
        print_blob=False,
        # kvcheck shrinks the scenario itself (kvcheck.search.shrink): much faster than replaying
        # draws.
        phases=(Phase.explicit, Phase.reuse, Phase.generate)
        if reuse
        else (Phase.explicit, Phase.generate),
    )
    property_holds = settled(given(scenarios_of(space, target.family))(one_scenario))

    # The example database is in use unless a seed turned it off (as Hypothesis's `@seed` does).
    saving = database is not None and (seed is None or seeded_database)
    saved_key = scenarios_key(target, options)
    if saving and reuse and database is not None:
        for _, saved in reversed(saved_scenarios(database, saved_key)):
            if not distribution.fits(space, saved):  # e.g. saved before the target's rules
                continue
            property_holds = example(distribution.pinned(space, saved))(property_holds)
    resumed = resumed_scenario()
    if resumed is not None:
        # The scenario in which a call of the target never returned, before this process
        # started again isolated (kvcheck.core.isolation): the first one tried.
        stuck = from_json(resumed)
        if stuck.family == target.family and distribution.fits(space, stuck):
            property_holds = example(distribution.pinned(space, stuck))(property_holds)
    for witness in witnesses:
        property_holds = example(witness)(property_holds)
    if seed is not None and seeded_database:
        # What `@seed` does, less its `database=None` (hypothesis.core.seed).
        property_holds._hypothesis_internal_use_seed = seed  # type: ignore[attr-defined]
    elif seed is not None:
        property_holds = hypothesis_seed(seed)(property_holds)
    # A key that names the search rather than hashing this function's source, so saved failures
    # survive edits of this module and one target's failures are not replayed against another.
    key = "|".join(("kvcheck.search.check", target.spec, *options.key_parts()))
    property_holds._hypothesis_internal_database_key = key.encode()  # type: ignore[attr-defined]
    started = time.perf_counter()
    # Hypothesis's own reports (its "add @seed" note on an interrupted run) are not kvcheck's:
    # what the search found is reported by the caller.
    with with_reporter(lambda _: None):
        try:
            property_holds()
        except (_ViolationFound, _Stopped):
            pass
        except Flaky:
            # Hypothesis replayed the failing scenario and it passed this time.
            if not failures:
                raise
            raise _nondeterministic(failures[0].scenario, failures[0].violation, None) from None
        except SEARCH_STOPS as exc:  # between scenarios, inside Hypothesis
            stopped.append(stop_name(exc))
        for scenario in late:
            if failures or stopped or unsupported or counter["examples"] >= max_examples:
                break
            try:
                one_scenario(scenario)
            except (_ViolationFound, _Stopped):
                pass
            except SEARCH_STOPS as exc:
                stopped.append(stop_name(exc))
    to_failure = time.perf_counter() - started
    if unsupported:
        raise unsupported[0]
    final: RunResult | None = None
    shrink_runs = 0
    if failures:
        final, shrink_runs = shrink_failure(failures[0], target, name, stopped, progress)
        if saving and database is not None:
            save_scenario(database, saved_key, final.scenario)
    if "interrupted" in stopped and not report_interrupt:
        raise KeyboardInterrupt
    return SearchOutcome(
        options=options,
        examples=counter["examples"],
        examples_to_failure=counter["to_failure"] if failures else None,
        failure=final,
        reached=frozenset(reached),
        seconds=time.perf_counter() - started,
        seconds_to_failure=to_failure if failures else None,
        shrink_runs=shrink_runs,
        stopped=stopped[0] if stopped else None,
    )


def shrink_failure(
    failing: RunResult,
    target: Target,
    name: str,
    stopped: list[str],
    progress: Progress | None,
) -> tuple[RunResult, int]:
    """The failure a search found, shrunk (with the shrinker's run count), each end checked for
    determinism unless the search was stopped; a shrinker stopped early adds its reason to
    `stopped`. `name` names the search's options in progress lines (`Distribution.label`).
    Raises `NondeterministicTargetError`."""
    if progress is not None:
        progress(f"{name}: shrinking a counterexample")
    if not stopped:
        require_deterministic(failing, target)
    shrunk = shrink(failing, target)
    final = shrunk.result
    if shrunk.stopped and not stopped:
        stopped.append(shrunk.stopped)
    if final.violation is None:  # shrinking kept it failing, its recorded replay passed
        raise _nondeterministic(final.scenario, failing.violation, None, "shrinking")
    if not stopped:
        require_deterministic(final, target)
    return final, shrunk.runs


def require_deterministic(found: RunResult, target: Target) -> None:
    """Replay the scenario of a failing run: `NondeterministicTargetError` naming it when the
    target now gives another result (kvcheck judges a resolver by replaying what it did, so a
    target that answers the same scenario two ways gets no verdict)."""
    again = run_scenario(found.scenario, target)
    first, second = found.violation, again.violation
    if first is not None and second is not None and first.invariant == second.invariant:
        return
    raise _nondeterministic(found.scenario, first, second)


def _nondeterministic(
    scenario: Scenario,
    first: Violation | None,
    second: Violation | None,
    during: str = "",
) -> NondeterministicTargetError:
    first_text = (
        f"{first.invariant} while {during}" if first is not None and during else _what(first)
    )
    return NondeterministicTargetError(
        f"the target gave two different results on the same scenario: first "
        f"{first_text}, then {_what(second)}; kvcheck judges deterministic resolvers only, "
        f"so no verdict. The scenario: {to_json_line(scenario)}"
    )


def _what(violation: Violation | None) -> str:
    if violation is None:
        return "no violation"
    return f"{violation.invariant} at event {violation.event_index}"


def confirmed_result(result: RunResult, target: Target) -> RunResult:
    """`result`, or when it broke `target-deadline` a second run of its scenario: a call that
    ran past its deadline only because the machine stalled once (a busy CI runner) must not
    become a verdict. A real hang costs one deadline more."""
    if result.violation is None or result.violation.invariant != "target-deadline":
        return result
    return run_scenario(result.scenario, target)


def detect_convention(target: Target) -> tuple[str, str]:
    """What the target is judged under when nothing is asked for, in a word, and why (SGLang:
    the convention it follows, from the SGLang versions its spellings fit, else from what it
    does to a finished request's stale row, else to a live row: `kvcheck.families.sglang.probe`).
    Raises `UnsupportedTargetError` for a target kvcheck cannot judge."""
    judging = family(target.family).judge.judging({}, target)
    return distribution_of(target.family).label(judging.options), judging.reason


def check(
    target: str | Target,
    *,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
    seed: int | None = None,
    database: ExampleDatabase | None = None,
    measure_coverage: bool = True,
    time_limit_seconds: float | None = None,
    progress: Progress | None = None,
    report_interrupt: bool = False,
    **requested: Any,
) -> Verdict:
    """Search for a violation by `target` (a spec string or a loaded `Target`).

    `requested` are the judging options asked for, by the names of the target's family
    (SGLang's: `convention` "auto" (default), "preclaim" or "honest"; `global_counters`
    "ideal" (default), "sglang" or "off"; `adaptive`, None (default) to switch strides between
    launch and delivery exactly when the target feeds the adaptive controller, SGLang 0.5.12+;
    `overlap`, None (default) for both): the family turns them into the options searched under
    and the ones to try when that search fails (`kvcheck.core.family.Judge.judging`).
    `measure_coverage` measures the coverage of a target read from source (`Verdict.coverage`).
    `time_limit_seconds` stops the searches after that long (a call of the target included) and
    Ctrl-C stops them at once; either way the verdict says what was established
    (`Verdict.stopped`) when `report_interrupt` (else Ctrl-C raises `KeyboardInterrupt`).
    `progress` is called with a status line after every scenario.

    Raises `KvcheckUsageError` (exit 2 material) for bad options or an unloadable or unsupported
    target; never reports such a target as a violation.
    """
    if max_examples < 1:
        raise KvcheckUsageError(f"max-examples must be at least 1, got {max_examples}")
    loaded = load_target(target) if isinstance(target, str) else target
    judging = family(loaded.family).judge.judging(requested, loaded)
    budget: dict[str, Any] = {
        "max_examples": max_examples,
        "seed": seed,
        "database": database,
        "progress": progress,
        "report_interrupt": report_interrupt,
    }
    # Isolated (a call of the target never returned: kvcheck.core.isolation), every run is in a
    # child process, whose coverage data dies with it: not measured rather than under-counted.
    meter = meter_for(loaded, enabled=measure_coverage and not isolated())
    with time_limit(time_limit_seconds):
        if meter is None:
            return _search_judging(loaded, judging, budget)
        verdict = _search_judging(meter.instrument(loaded), judging, budget)
    return attrs.evolve(verdict, coverage=meter.result())


def _search_judging(target: Target, judging: Judging, budget: dict[str, Any]) -> Verdict:
    """The search under `judging`'s options, then, while it fails, under each fallback: the
    first that passes gives the verdict (a search stopped early gives it as it stands)."""
    label = distribution_of(target.family).label
    outcome = search(target, judging.options, **budget)
    reason = judging.reason
    if outcome.failure is None or outcome.stopped or not judging.fallbacks:
        return _verdict(target, judging, outcome, (), reason)
    first = label(judging.options)
    failed: list[SearchOutcome] = [outcome]
    for options, _why in judging.fallbacks:
        other = search(target, options, **budget)
        name = label(options)
        if other.failure is None and other.stopped:
            why = (
                f"{reason}; the search under {name} was stopped ({other.stopped}) before it passed"
            )
            return _verdict(target, judging, outcome, (*failed[1:], other), why)
        if other.failure is None:
            why = f"{reason}, but it fails under {first}; it passes under {name}"
            return _verdict(target, judging, other, tuple(failed), why)
        failed.append(other)
        reason = f"{reason}; it also fails under {name}"
    return _verdict(target, judging, outcome, tuple(failed[1:]), reason)


def _verdict(
    target: Target,
    judging: Judging,
    outcome: SearchOutcome,
    others: tuple[SearchOutcome, ...],
    reason: str,
) -> Verdict:
    everything = (outcome, *others)
    return Verdict(
        target=target.spec,
        description=target.description,
        passed=outcome.failure is None,
        judging=judging,
        reason=reason,
        examples=sum(o.examples for o in everything),
        seconds=sum(o.seconds for o in everything),
        outcome=outcome,
        other_outcomes=others,
        api_shape=target.shape,
        family=target.family,
    )


def from_verdict(
    verdict: Verdict, *, allow_unavailable_imports: bool = False
) -> Counterexample | None:
    """The counterexample of a failing verdict; None when it passed."""
    failure = verdict.outcome.failure
    if failure is None or failure.violation is None:
        return None
    return from_run(
        failure,
        verdict.target,
        convention_reason=verdict.convention_reason,
        allow_unavailable_imports=allow_unavailable_imports,
    )
