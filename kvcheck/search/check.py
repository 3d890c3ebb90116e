"""`kvcheck.check()` lives here: search for a scenario on which a target breaks an invariant.

Hypothesis draws scenarios (`kvcheck.strategies`), each is replayed by `kvcheck.core.run`, and the
first violation is shrunk to a minimal scenario. The counterexample is re-run deterministically
without Hypothesis, so what is reported is exactly what `replay` reproduces.

Convention `auto` judges the target under the convention it most plausibly follows first (a
probe of how it treats a live row), then under the other one if that fails; it passes when either
gives no violation and says which.

For a target read from source, the verdict carries the target's own line and branch coverage over
every scenario the searches ran, shrinking included (`kvcheck.search.target_coverage`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final, Literal

import attrs
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.database import ExampleDatabase
from hypothesis.errors import Flaky
from hypothesis.reporting import with_reporter
from hypothesis.strategies import SearchStrategy

from kvcheck.core.deadline import TimeLimitReached, check_time_limit, time_limit
from kvcheck.core.invariant import Violation
from kvcheck.core.isolation import isolated, resumed_scenario
from kvcheck.core.run import RunResult, run_scenario
from kvcheck.core.scenario import Scenario, from_json, to_json_line
from kvcheck.core.target import Target
from kvcheck.counterexamples.fileformat import Counterexample
from kvcheck.counterexamples.replay import from_run
from kvcheck.errors import KvcheckUsageError, NondeterministicTargetError, ScenarioFormatError
from kvcheck.families.sglang.allocation_rules import allocation_features
from kvcheck.families.sglang.scenario import (
    ALLOCATION_RULES,
    CONVENTIONS,
    GLOBAL_COUNTER_MODES,
    Admit,
    AllocationRule,
    Config,
    Convention,
    GlobalCounterMode,
    Step,
    SwitchStride,
    adaptive_allocation_problem,
)
from kvcheck.families.sglang.target import ApiShape, allocation_rules
from kvcheck.search import DEFAULT_MAX_EXAMPLES
from kvcheck.search.shrink import shrink
from kvcheck.search.target_coverage import TargetCoverage, meter_for
from kvcheck.strategies import (
    ScenarioSpace,
    adaptive_stand_in,
    label_run,
    scenarios_of,
    space_of,
)
from kvcheck.targets.loading import load_target

ConventionChoice = Literal["auto", "preclaim", "honest"]

# docs/semantics.md §3.4: two live rows and a stride switch between a launch and its delivery.
# Random generation reaches it only now and then (the switch must land while a launch of two or more
# rows is in flight), so every adaptive search tries this witness first.
STRIDE_SWITCH_WITNESS: Final = (
    Admit("r0", prompt_len=8, max_new_tokens=16),
    Admit("r1", prompt_len=8, max_new_tokens=16),
    Step(),
    Step((2, 3)),
    SwitchStride(2),
    Step((2, 2)),
    Step(),
)


@attrs.frozen
class SearchOutcome:
    """One Hypothesis search under one convention.

    Scenarios run and how many until the first failure, the shrunk failing run (None: passed),
    coverage labels reached, wall time and the replays spent shrinking.
    """

    convention: Convention
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

    `passed` is true when the search under `convention` found no violation; with convention
    `auto` that is the detected convention, or the other one when only it passes
    (`convention_reason` says which). `other_outcomes` are the searches tried besides it.
    """

    target: str
    description: str
    passed: bool
    convention: Convention
    convention_reason: str
    global_counters: GlobalCounterMode
    adaptive: bool
    examples: int
    seconds: float
    # The search that produced the verdict (the failing one when failed); others tried before.
    outcome: SearchOutcome
    other_outcomes: tuple[SearchOutcome, ...] = ()
    # Why adaptive stride switching was on or off, and the API shape the verdict assumed.
    adaptive_reason: str = ""
    api_shape: ApiShape | None = None
    # The target's own code that the searches ran; None for a target not read from source or
    # when not measured.
    coverage: TargetCoverage | None = None

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


def scenarios_key(
    target: Target,
    convention: Convention,
    global_counters: GlobalCounterMode,
    adaptive: bool,
    overlap: bool | None,
) -> bytes:
    """The example-database key of the saved failing scenarios of a search: the target and the
    judging options, so one target's failures are never replayed against another or under
    other options."""
    parts = (SCENARIOS_KEY_PREFIX, target.spec, convention, global_counters, adaptive, overlap)
    return "|".join(str(p) for p in parts).encode()


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
    *,
    convention: Convention,
    global_counters: GlobalCounterMode = "ideal",
    adaptive: bool = False,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
    seed: int | None = None,
    database: ExampleDatabase | None = None,
    overlap: bool | None = None,
    seeded_database: bool = False,
    reuse: bool = True,
    on_run: Callable[[RunResult], None] | None = None,
    progress: Progress | None = None,
    report_interrupt: bool = False,
) -> SearchOutcome:
    """One Hypothesis search under one convention. Raises `UnsupportedTargetError`.

    `overlap` pins the overlap axis (the pytest plugin makes one item per value); None varies it.

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
    failures: list[RunResult] = []
    reached: set[str] = set()
    unsupported: list[Exception] = []
    stopped: list[str] = []
    counter = {"examples": 0, "to_failure": 0}
    started = time.perf_counter()

    # The explicit stride-switch witness counts as one of the `max_examples` scenarios.
    with_witness = adaptive and overlap is not False

    @settings(
        max_examples=max(1, max_examples - 1) if with_witness else max_examples,
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
    @given(_scenarios(convention, global_counters, adaptive, overlap, target))
    def property_holds(scenario: Scenario) -> None:
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
                f"{convention}: {counter['examples']}/{max_examples} scenarios, "
                f"{time.perf_counter() - started:.0f} s"
            )
        if result.violation is not None:
            if not failures:  # Hypothesis runs the failing scenario once more to report it
                counter["to_failure"] = counter["examples"]
            failures.append(result)
            raise _ViolationFound(result.violation.invariant)

    # The example database is in use unless a seed turned it off (as Hypothesis's `@seed` does).
    saving = database is not None and (seed is None or seeded_database)
    saved_key = scenarios_key(target, convention, global_counters, adaptive, overlap)
    if saving and reuse and database is not None:
        rules = allocation_rules(target)
        for _, saved in reversed(saved_scenarios(database, saved_key)):
            if saved.config.allocation not in rules:  # saved before the target's rules were kept
                continue
            property_holds = example(with_overlap(saved, overlap, rules))(property_holds)
    resumed = resumed_scenario()
    if resumed is not None:
        # The scenario in which a call of the target never returned, before this process
        # started again isolated (kvcheck.core.isolation): the first one tried.
        stuck = from_json(resumed)
        stuck_rules = allocation_rules(target)
        if stuck.config.convention == convention and stuck.config.allocation in stuck_rules:
            property_holds = example(with_overlap(stuck, overlap, stuck_rules))(property_holds)
    if with_witness:
        witness = stride_switch_witness(convention, global_counters, allocation_rules(target))
        property_holds = example(witness)(property_holds)
    if seed is not None and seeded_database:
        # What `@seed` does, less its `database=None` (hypothesis.core.seed).
        property_holds._hypothesis_internal_use_seed = seed  # type: ignore[attr-defined]
    elif seed is not None:
        property_holds = hypothesis_seed(seed)(property_holds)
    # A key that names the search rather than hashing this function's source, so saved failures
    # survive edits of this module and one target's failures are not replayed against another.
    key = f"kvcheck.search.check|{target.spec}|{convention}|{global_counters}|{adaptive}|{overlap}"
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
    to_failure = time.perf_counter() - started
    if unsupported:
        raise unsupported[0]
    final: RunResult | None = None
    shrink_runs = 0
    if failures:
        final, shrink_runs = shrink_failure(failures[0], target, convention, stopped, progress)
        if saving and database is not None:
            save_scenario(database, saved_key, final.scenario)
    if "interrupted" in stopped and not report_interrupt:
        raise KeyboardInterrupt
    return SearchOutcome(
        convention=convention,
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
    convention: Convention,
    stopped: list[str],
    progress: Progress | None,
) -> tuple[RunResult, int]:
    """The failure a search found, shrunk (with the shrinker's run count), each end checked for
    determinism unless the search was stopped; a shrinker stopped early adds its reason to
    `stopped`. Raises `NondeterministicTargetError`."""
    if progress is not None:
        progress(f"{convention}: shrinking a counterexample")
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


def _scenarios(
    convention: Convention,
    global_counters: GlobalCounterMode,
    adaptive: bool,
    overlap: bool | None,
    target: Target,
) -> SearchStrategy[Scenario]:
    space = scenario_space(target, convention, global_counters, adaptive, overlap)
    strategy: SearchStrategy[Scenario] = scenarios_of(space)
    if overlap is None:
        return strategy
    return strategy.map(lambda s: with_overlap(s, overlap, space.allocation))


def scenario_space(
    target: Target,
    convention: Convention,
    global_counters: GlobalCounterMode,
    adaptive: bool,
    overlap: bool | None = None,
) -> ScenarioSpace:
    """The scenarios a search of `target` draws (with either generator): what its API shape
    supports, under the allocation rules of the SGLang generations it fits, or of its own
    allocation path if it brings one (`kvcheck.families.sglang.target.allocation_rules`): a
    scenario of
    another generation's rule would show it states its release never has. Raises
    `KvcheckUsageError` when adaptive switching (under `overlap`) meets none of them that can
    run it."""
    shape = target.shape
    rules = allocation_rules(target)
    # Without a pinned overlap, rule 0.5.12 runs adaptive switching with overlap off.
    pinned_on = overlap is True
    problems = [
        adaptive_allocation_problem(rule, adaptive=adaptive, overlap=pinned_on) for rule in rules
    ]
    if rules and all(problems):
        raise KvcheckUsageError(
            f"{target.description} is judged under allocation {', '.join(rules)} only "
            f"({shape.allocation_reason}), and {problems[0]}"
        )
    space: ScenarioSpace = space_of(
        convention=convention,
        global_counters=global_counters,
        adaptive=adaptive,
        algorithms=shape.algorithms,
        block_cap=shape.block_cap,
        grammar=shape.grammar,
        allocation=rules,
    )
    return space


def stride_switch_witness(
    convention: Convention, global_counters: GlobalCounterMode, rules: tuple[AllocationRule, ...]
) -> Scenario:
    """`STRIDE_SWITCH_WITNESS` under overlap, without allocation when `rules` (the target's)
    allow that, else under the first of them that runs adaptive switching with overlap (the
    witness switches below the initial stride, which those rules reserve for)."""
    rule: AllocationRule = "off"
    if "off" not in rules:
        rule = adaptive_stand_in(rules, overlap=True) or "off"
    config = Config(
        convention,
        True,
        4,
        True,
        global_counters=global_counters,
        allocation=rule,
        max_stride=4 if allocation_features(rule).allocates else None,
    )
    return Scenario(config, STRIDE_SWITCH_WITNESS)


def with_overlap(
    scenario: Scenario,
    overlap: bool | None,
    rules: tuple[AllocationRule, ...] = ALLOCATION_RULES,
) -> Scenario:
    """`scenario` (drawn by either generator) with the overlap axis pinned to `overlap`
    (None: as it is). The 0.5.12 allocation rule under adaptive switching runs without overlap
    only (`kvcheck.families.sglang.scenario.adaptive_allocation_problem`), so pinned on, it becomes
    the
    first of `rules` (the target's) that can (`kvcheck.strategies.adaptive_stand_in`: 0.5.13,
    reserving for the largest stride the scenario switches to, then 0.5.16, then off)."""
    config = scenario.config
    if overlap is None or config.overlap == overlap:
        return scenario
    if not (
        overlap
        and adaptive_allocation_problem(config.allocation, adaptive=config.adaptive, overlap=True)
    ):
        return attrs.evolve(scenario, config=attrs.evolve(config, overlap=overlap))
    rule = adaptive_stand_in(rules, overlap=True)
    if rule is None or not allocation_features(rule).allocates:
        # `scenario_space` refuses a space where no rule can run; "off" models no allocation.
        plain = attrs.evolve(
            config, overlap=True, allocation="off", page_size=1, max_stride=None, pool_pages=0
        )
        return attrs.evolve(scenario, config=plain)
    strides = [e.stride for e in scenario.events if isinstance(e, SwitchStride)]
    maximum = max([config.max_stride or config.stride, *strides])
    pages = config.pool_pages
    page = config.page_size if allocation_features(rule).page_round else 1
    evolved = attrs.evolve(
        config, overlap=True, allocation=rule, max_stride=maximum, page_size=page, pool_pages=pages
    )
    return attrs.evolve(scenario, config=evolved)


def detect_convention(target: Target) -> tuple[Convention, str]:
    """Which convention the target follows, and why: from the SGLang versions its spellings
    fit, else from what it does to a finished request's stale row, else to a live row
    (`kvcheck.families.sglang.probe`). Raises `UnsupportedTargetError` for a target kvcheck cannot
    judge."""
    return target.shape.convention, target.shape.convention_reason


def check(
    target: str | Target,
    *,
    convention: ConventionChoice = "auto",
    global_counters: GlobalCounterMode = "ideal",
    adaptive: bool | None = None,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
    seed: int | None = None,
    database: ExampleDatabase | None = None,
    overlap: bool | None = None,
    measure_coverage: bool = True,
    time_limit_seconds: float | None = None,
    progress: Progress | None = None,
    report_interrupt: bool = False,
) -> Verdict:
    """Search for a violation by `target` (a spec string or a loaded `Target`).

    `adaptive=None` switches strides between launch and delivery exactly when the target feeds
    the adaptive controller (SGLang 0.5.12+, where adaptive speculation runs under overlap).
    `measure_coverage` measures the coverage of a target read from source (`Verdict.coverage`).
    `time_limit_seconds` stops the searches after that long (a call of the target included) and
    Ctrl-C stops them at once; either way the verdict says what was established
    (`Verdict.stopped`) when `report_interrupt` (else Ctrl-C raises `KeyboardInterrupt`).
    `progress` is called with a status line after every scenario.

    Raises `KvcheckUsageError` (exit 2 material) for bad options or an unloadable or unsupported
    target; never reports such a target as a violation.
    """
    if convention not in ("auto", *CONVENTIONS):
        raise KvcheckUsageError(
            f"unknown convention {convention!r}; choose auto, preclaim or honest"
        )
    if global_counters not in GLOBAL_COUNTER_MODES:
        raise KvcheckUsageError(
            f"unknown global-counter mode {global_counters!r}; choose ideal, sglang or off"
        )
    if max_examples < 1:
        raise KvcheckUsageError(f"max-examples must be at least 1, got {max_examples}")
    loaded = load_target(target) if isinstance(target, str) else target
    shape = loaded.shape
    if adaptive is None:
        adaptive = shape.feeds_controller
        adaptive_reason = (
            "auto: the target feeds the adaptive controller"
            if adaptive
            else "auto: the target never feeds the adaptive controller"
        )
    else:
        adaptive_reason = "given"
    options: dict[str, Any] = {
        "global_counters": global_counters,
        "adaptive": adaptive,
        "max_examples": max_examples,
        "seed": seed,
        "database": database,
        "overlap": overlap,
        "progress": progress,
        "report_interrupt": report_interrupt,
        "adaptive_reason": adaptive_reason,
        "api_shape": shape,
    }
    # Isolated (a call of the target never returned: kvcheck.core.isolation), every run is in a
    # child process, whose coverage data dies with it: not measured rather than under-counted.
    meter = meter_for(loaded, enabled=measure_coverage and not isolated())
    with time_limit(time_limit_seconds):
        if meter is None:
            return _search_conventions(loaded, convention, options)
        verdict = _search_conventions(meter.instrument(loaded), convention, options)
    return attrs.evolve(verdict, coverage=meter.result())


def _search_conventions(
    loaded: Target, convention: ConventionChoice, options: dict[str, Any]
) -> Verdict:
    if convention != "auto":
        outcome = search(loaded, convention=convention, **_search_options(options))
        return _verdict(loaded, outcome, (), f"convention {convention} (given)", options)

    first, reason = loaded.shape.convention, loaded.shape.convention_reason
    outcome = search(loaded, convention=first, **_search_options(options))
    if outcome.failure is None or outcome.stopped:
        return _verdict(loaded, outcome, (), reason, options)
    second: Convention = "honest" if first == "preclaim" else "preclaim"
    other = search(loaded, convention=second, **_search_options(options))
    if other.failure is None and other.stopped:
        why = f"{reason}; the search under {second} was stopped ({other.stopped}) before it passed"
        return _verdict(loaded, outcome, (other,), why, options)
    if other.failure is None:
        why = f"{reason}, but it fails under {first}; it passes under {second}"
        return _verdict(loaded, other, (outcome,), why, options)
    why = f"{reason}; it also fails under {second}"
    return _verdict(loaded, outcome, (other,), why, options)


def _search_options(options: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in options.items() if k not in ("adaptive_reason", "api_shape")}


def _verdict(
    target: Target,
    outcome: SearchOutcome,
    others: tuple[SearchOutcome, ...],
    reason: str,
    options: dict[str, Any],
) -> Verdict:
    everything = (outcome, *others)
    return Verdict(
        target=target.spec,
        description=target.description,
        passed=outcome.failure is None,
        convention=outcome.convention,
        convention_reason=reason,
        global_counters=options["global_counters"],
        adaptive=options["adaptive"],
        examples=sum(o.examples for o in everything),
        seconds=sum(o.seconds for o in everything),
        outcome=outcome,
        other_outcomes=others,
        adaptive_reason=options["adaptive_reason"],
        api_shape=options["api_shape"],
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
