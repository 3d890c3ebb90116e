"""The target's own coverage (`kvcheck.search.target_coverage`): measured on the resolver read
from source, its siblings and helpers, over the scenarios only (never the probe), by line and
branch, and never blamed on the target when measuring fails."""

from __future__ import annotations

import copy
import textwrap
from pathlib import Path
from typing import Any

import attrs
import pytest

from kvcheck.core.run import run_scenario
from kvcheck.core.target import CodeSpan, Target
from kvcheck.errors import KvcheckUsageError
from kvcheck.families.sglang.release import OUT_OF_SCOPE_BRANCHES
from kvcheck.families.sglang.scenario import Admit, Step
from kvcheck.families.sglang.search import Bounds
from kvcheck.search.check import check
from kvcheck.search.exhaust import exhaust
from kvcheck.search.target_coverage import (
    CoverageMeter,
    TargetCoverage,
    format_lines,
    meter_for,
)
from kvcheck.targets.loading import load_target
from tests.helpers import scenario

# A correct honest resolver (SGLang 0.5.19+ spellings) with a helper, a sibling method, a branch
# only scenarios with a stale row reach, one no scenario reaches (SGLang's stride check,
# word for word), and one only the probe (the very first call, at load time) reaches.
SOURCE = textwrap.dedent(
    """\
    _calls = []


    def _runs(ids, accepts, stride):
        return [ids[i * stride : i * stride + a] for i, a in enumerate(accepts)]


    class Processor:
        def unrelated(self):
            return "never compiled"

        def _commit(self, req, accepted):
            req.kv.kv_committed_len += accepted
            req.spec_verify_ct += 1
            req.spec_num_correct_drafts += accepted - 1
            req.update_spec_correct_drafts_histogram(accepted - 1)

        def resolve(self, result, batch):
            if not _calls:
                first_call = True  # PROBE ONLY
            _calls.append(1)
            ids = result.next_token_ids.tolist()
            accepts = result.accept_lens.tolist()
            stride = result.speculative_num_draft_tokens
            if stride is None or stride < 1:
                raise RuntimeError("no such stride")  # NEVER
            for req, accepted in zip(batch.reqs, accepts):
                if req.is_retracted or req.finished():
                    continue  # STALE
                self._commit(req, accepted)
            return _runs(ids, accepts, stride)
    """
)


GUARD = "if stride is None or stride < 1:"


def line_of(marker: str) -> int:
    return next(n for n, text in enumerate(SOURCE.splitlines(), 1) if marker in text)


@pytest.fixture
def target(tmp_path: Path) -> Target:
    path = tmp_path / "processor.py"
    path.write_text(SOURCE)
    return load_target(f"{path}::Processor.resolve")


# Without overlap no row is ever stale; with it, r0 finishes (max_new_tokens 2) while its next
# decode is in flight, whose row is stale when it arrives.
NO_STALE = scenario(
    Admit("r0", 4, 3), Step(), Step(), Step(), Step(), overlap=False, convention="honest"
)
STALE = scenario(
    Admit("r0", 4, 2), Step(), Step(), Step(), Step(), overlap=True, convention="honest"
)


def test_a_branch_only_some_scenarios_reach_is_run_once_one_of_them_runs(target: Target) -> None:
    meter = meter_for(target)
    assert meter is not None
    measured = meter.instrument(target)
    stale = line_of("# STALE")
    assert run_scenario(NO_STALE, measured).violation is None
    before = meter.result()
    assert stale in before.missed_lines
    assert (stale - 1, stale) in before.missed_branches
    assert line_of("req.kv.kv_committed_len") in before.executed  # the sibling ran

    assert run_scenario(STALE, measured).violation is None
    after = meter.result()
    assert stale not in after.missed_lines
    assert (stale - 1, stale) not in after.missed_branches
    assert (stale - 1, stale) in after.executed_branches
    assert after.executed > before.executed  # measurements accumulate


def test_a_check_lists_the_never_reached_lines_and_branches(target: Target) -> None:
    verdict = check(target, global_counters="sglang", max_examples=60, seed=0)
    assert verdict.passed, verdict.violation
    coverage = verdict.coverage
    assert coverage is not None
    never = line_of("# NEVER")
    assert never in coverage.missed_lines
    assert (never - 1, never) in coverage.missed_branches
    assert line_of("# STALE") in coverage.executed
    assert coverage.functions == ("Processor.resolve", "_runs", "Processor._commit")
    # Only the spans' statements count: not the unrelated method, not the module level.
    assert line_of('return "never compiled"') not in coverage.statements
    assert line_of("_calls = []") not in coverage.statements
    assert line_of("def resolve") not in coverage.statements
    # Every line of the three bodies is one statement.
    bodies = [("return [ids", "return [ids"), ("req.kv.kv", "update_spec"), ("if not", "return _")]
    expected = {n for a, b in bodies for n in range(line_of(a), line_of(b) + 1)}
    assert coverage.statements == expected and coverage.lines_total == len(expected) == 18
    assert coverage.missed_lines == (line_of("# PROBE ONLY"), never)
    # The stride check is a known out-of-scope branch: named with its reason; the probe-only
    # branch is not, so not everything missed is explained.
    assert coverage.out_of_scope_missed() == {(never - 1, never): OUT_OF_SCOPE_BRANCHES[GUARD]}
    assert not coverage.only_out_of_scope_missed()
    assert f"{never - 1}->{never}: only for a result without" in "\n".join(coverage.report_lines())
    assert coverage.to_dict()["out_of_scope_missed"] == [
        {"branch": [never - 1, never], "reason": OUT_OF_SCOPE_BRANCHES[GUARD]}
    ]


def test_the_probe_is_not_counted(target: Target) -> None:
    """The probe at load time is the resolver's first call, the only one that takes the
    `first_call` branch; the search's coverage must not show it run."""
    assert target.resolver.__globals__["_calls"], "the probe called the resolver"
    verdict = check(target, global_counters="sglang", max_examples=20, seed=0)
    assert verdict.coverage is not None
    probe_only = line_of("# PROBE ONLY")
    assert probe_only in verdict.coverage.missed_lines
    assert (probe_only - 1, probe_only) in verdict.coverage.missed_branches


def test_exhaustive_search_measures_the_same_code(target: Target) -> None:
    bounds = Bounds(requests=1, events=5, strides=(2,), kinds=("admit", "step"))
    result = exhaust(target, bounds, convention="honest", global_counters="sglang")
    assert result.verdict == "pass"
    assert result.coverage is not None
    assert line_of("# STALE") in result.coverage.executed
    assert line_of("# NEVER") in result.coverage.missed_lines


def test_builtin_and_imported_targets_have_no_coverage() -> None:
    assert check("builtin:reference", max_examples=5, seed=0).coverage is None
    entry = load_target("kvcheck.mutants:worker_stride")
    assert check(entry, max_examples=5, seed=0).coverage is None
    assert exhaust(load_target("builtin:reference"), Bounds(events=3)).coverage is None
    assert meter_for(load_target("builtin:reference")) is None


def test_coverage_can_be_turned_off(target: Target) -> None:
    assert check(target, max_examples=5, seed=0, measure_coverage=False).coverage is None
    bounds = Bounds(requests=1, events=2)
    assert exhaust(target, bounds, measure_coverage=False).coverage is None


def test_a_target_that_raises_is_still_measured_up_to_the_raise(tmp_path: Path) -> None:
    path = tmp_path / "raises.py"
    path.write_text("def resolve(self, result, batch):\n    x = 1\n    raise ValueError(x)\n")
    verdict = check(load_target(f"{path}::resolve"), max_examples=20, seed=0)
    assert verdict.violation is not None and verdict.violation.invariant == "target-raised"
    assert verdict.coverage is not None and verdict.coverage.missed_lines == ()


def test_a_failure_to_measure_is_kvchecks_not_the_targets(
    target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    meter = meter_for(target)
    assert meter is not None

    def broken() -> None:
        raise RuntimeError("tracer unavailable")

    monkeypatch.setattr(meter._coverage, "start", broken)
    with pytest.raises(KvcheckUsageError, match=r"measuring the coverage of .* tracer unavailable"):
        run_scenario(STALE, meter.instrument(target))


def test_a_vanished_file_is_an_error_of_kvchecks(target: Target) -> None:
    meter = meter_for(target)
    assert meter is not None
    Path(target.code[0].file).unlink()
    with pytest.raises(KvcheckUsageError, match="cannot measure the coverage of"):
        meter.result()


def test_code_measured_under_another_name_is_an_error_of_kvchecks(
    target: Target, tmp_path: Path
) -> None:
    """Spans naming a copy of the file: the calls run, coverage.py sees none of it, and kvcheck
    says so instead of reporting 0% against the target."""
    copy = tmp_path / "copy.py"
    copy.write_text(SOURCE)
    spans = tuple(attrs.evolve(span, file=str(copy)) for span in target.code)
    meter = CoverageMeter(spans)
    assert run_scenario(STALE, meter.instrument(target)).violation is None
    with pytest.raises(KvcheckUsageError, match=r"recorded nothing of .*copy\.py"):
        meter.result()


# Code in two files that runs in the methods of what the resolver builds (as a vLLM release's
# scheduler does): `make` builds a session whose `step` calls a helper of another file.
SESSION = """\
def make(settings):
    return Session()


class Session:
    def step(self, x):
        total = helper(x)
        return total
"""
HELPER = """\
def helper(x):
    if x > 0:
        return 1
    return 2  # NEGATIVE ONLY
"""


def two_file_target(tmp_path: Path, *, runs_in_result: bool) -> Target:
    from kvcheck.core.target import CodeSpan

    session, helper = tmp_path / "session.py", tmp_path / "helper.py"
    session.write_text(SESSION)
    helper.write_text(HELPER)
    helpers: dict[str, object] = {}
    exec(compile(HELPER, str(helper), "exec"), helpers)
    names: dict[str, object] = {"helper": helpers["helper"]}
    exec(compile(SESSION, str(session), "exec"), names)
    return Target(
        spec=f"{session}::make",
        resolver=names["make"],  # type: ignore[arg-type]
        description="two files",
        self_methods={},
        shape=None,
        code=(
            CodeSpan(file=str(session), qualname="Session.step", def_line=6, first=7, last=8),
            CodeSpan(file=str(helper), qualname="helper", def_line=1, first=2, last=4),
        ),
        code_runs_in_result=runs_in_result,
        family="sglang",
    )


def test_a_meter_measures_several_files_in_the_calls_of_what_the_resolver_built(
    tmp_path: Path,
) -> None:
    target = two_file_target(tmp_path, runs_in_result=True)
    meter = CoverageMeter(target.code, {"if x > 0:": "negative inputs"})
    built = meter.instrument(target).resolver(None)
    assert built.step(3) == 1
    coverage = meter.result()
    assert [Path(part.file).name for part in coverage.files] == ["session.py", "helper.py"]
    assert (coverage.lines_run, coverage.lines_total) == (4, 5)
    assert (coverage.branches_run, coverage.branches_total) == (1, 2)
    assert coverage.others[0].missed_lines == (4,)
    assert coverage.report_lines() == [
        "coverage    4/5 lines (80%), 1/2 branches (50%) in 2 files",
        "            2/2 lines (100%), 0/0 branches (100%) in session.py: step",
        "            2/3 lines (67%), 1/2 branches (50%) in helper.py: helper",
        "never run   lines 4",
        "            branches 2->4",
        "            2->4: only for negative inputs",
        "            every other line and branch ran",
    ]
    data = coverage.to_dict()
    assert (data["lines_run"], data["lines_total"]) == (4, 5)
    assert [part["missed_lines"] for part in data["files"]] == [[], [4]]
    assert data["functions"] == ["Session.step", "helper"]
    assert coverage.below(80.1) and not coverage.below(80)
    # Measurements of the same code merge file by file; a copy of what was built (the
    # exhaustive search copies its states) is measured too.
    assert copy.deepcopy(built).step(-1) == 2
    assert coverage.union(meter.result()).lines_run == 5


def test_what_only_out_of_scope_inputs_reach_is_listed_not_counted_until_it_runs(
    tmp_path: Path,
) -> None:
    """A family that leaves out-of-scope code out of its figures (vLLM): the arm the untaken
    branch leads into is listed with its reason; measurements where it did run merge into one
    that counts it (two fuzz workers)."""
    target = two_file_target(tmp_path, runs_in_result=True)
    scope = {"if x > 0:": "negative inputs"}
    positive = CoverageMeter(target.code, scope, uncounted_out_of_scope=True)
    assert positive.instrument(target).resolver(None).step(3) == 1
    first = positive.result()
    assert first.others[0].uncounted == {4: "negative inputs"}
    assert (first.lines_run, first.lines_total) == (4, 4) and not first.below(100)
    # The branch into the arm only out-of-scope inputs take is not counted either.
    assert (first.branches_run, first.branches_total) == (1, 1)
    assert first.report_lines()[-2:] == [
        "not counted branches 2->4, lines 4: only for negative inputs",
        "            every other line and branch ran",
    ]
    assert first.to_dict()["files"][1]["uncounted_lines"] == [
        {"lines": [4], "reason": "negative inputs"}
    ]
    assert first.to_dict()["files"][1]["uncounted_branches"] == [
        {"branches": [[2, 4]], "reason": "negative inputs"}
    ]
    negative = CoverageMeter(target.code, scope, uncounted_out_of_scope=True)
    assert negative.instrument(target).resolver(None).step(-1) == 2
    second = negative.result()
    assert second.others[0].uncounted == {3: "negative inputs"}
    both = first.union(second)
    assert both.others[0].uncounted == {}
    assert (both.lines_run, both.lines_total) == (5, 5)
    assert (both.branches_run, both.branches_total) == (2, 2)


def test_code_that_runs_in_what_the_resolver_built_is_only_seen_when_the_target_says_so(
    tmp_path: Path,
) -> None:
    """Measuring only the resolver's own call sees none of the session's code: kvcheck says so
    rather than report 0% against the target."""
    target = two_file_target(tmp_path, runs_in_result=False)
    meter = CoverageMeter(target.code)
    assert meter.instrument(target).resolver(None).step(3) == 1
    with pytest.raises(KvcheckUsageError, match=r"recorded nothing of .*session\.py, .*helper\.py"):
        meter.result()


# --- the figures ------------------------------------------------------------------------------


def figures(executed: set[int], taken: set[tuple[int, int | None]]) -> TargetCoverage:
    return TargetCoverage(
        file="/x/processor.py",
        functions=("Processor.resolve", "_runs"),
        statements=frozenset({10, 11, 12, 13, 15, 20}),
        executed=frozenset(executed),
        branches=frozenset({(11, 12), (11, 13), (13, 15), (13, None)}),
        executed_branches=frozenset(taken),
    )


def test_figures_and_missed_lists() -> None:
    coverage = figures({10, 11, 12, 20}, {(11, 12), (13, None)})
    assert (coverage.lines_run, coverage.lines_total) == (4, 6)
    assert (coverage.branches_run, coverage.branches_total) == (2, 4)
    assert coverage.missed_lines == (13, 15)
    assert coverage.missed_branches == ((11, 13), (13, 15))
    assert coverage.summary() == "4/6 lines (67%), 2/4 branches (50%)"
    data = coverage.to_dict()
    assert data["missed_lines"] == [13, 15] and data["missed_branches"] == [[11, 13], [13, 15]]
    for key in ("lines_total", "lines_run", "branches_total", "branches_run", "file"):
        assert key in data
    assert coverage.report_lines() == [
        "coverage    4/6 lines (67%), 2/4 branches (50%) in processor.py: resolve, _runs",
        "never run   lines 13, 15",
        "            branches 11->13, 13->15",
    ]


def test_when_only_out_of_scope_branches_are_missed_the_report_says_so() -> None:
    coverage = attrs.evolve(
        figures({10, 11, 13, 15, 20}, {(11, 13), (13, 15), (13, None)}),
        out_of_scope={11: "a reason"},
    )
    assert coverage.out_of_scope_missed() == {(11, 12): "a reason"}
    assert coverage.only_out_of_scope_missed()
    assert coverage.report_lines()[1:] == [
        "never run   lines 12",
        "            branches 11->12",
        "            11->12: only for a reason",
        "            every other line and branch ran",
    ]
    # A branch that was taken is not listed; a missed line elsewhere spoils it.
    assert not attrs.evolve(
        coverage, executed=frozenset({10, 11, 12, 20})
    ).only_out_of_scope_missed()


def test_a_branch_leaving_the_function_is_written_exit() -> None:
    coverage = figures({10, 11, 12, 13, 15, 20}, {(11, 12), (11, 13), (13, 15)})
    assert coverage.missed_branches == ((13, None),)
    assert coverage.report_lines()[1:] == ["never run   branches 13->exit"]
    assert coverage.to_dict()["missed_branches"] == [[13, None]]


def test_below_compares_exactly() -> None:
    coverage = figures({10, 11, 12, 20}, set())  # 4/6 = 66.666...%
    assert coverage.below(66.7) and not coverage.below(66.6) and not coverage.below(0)
    full = figures({10, 11, 12, 13, 15, 20}, set())
    assert not full.below(100)


def test_union_of_two_measurements_of_the_same_code() -> None:
    one = figures({10, 11}, {(11, 12)})
    two = figures({10, 13}, {(13, None)})
    both = one.union(two)
    assert both.executed == {10, 11, 13}
    assert both.executed_branches == {(11, 12), (13, None)}
    with pytest.raises(ValueError, match="different code"):
        one.union(TargetCoverage("/y.py", (), frozenset(), frozenset(), frozenset(), frozenset()))


def test_format_lines_joins_runs() -> None:
    assert format_lines([30, 12, 15, 16, 17]) == "12, 15-17, 30"
    assert format_lines([]) == ""


# The same resolver, decorated at definition time (a logging decorator and a decorator factory)
# and with its accounting in a module-level helper class.
DECORATED = textwrap.dedent(
    """\
    import functools

    _decorated = []


    def logged(function):
        _decorated.append(function.__name__)  # LOAD
        @functools.wraps(function)
        def wrapper(self, result, batch):
            return function(self, result, batch)  # WRAPPER
        return wrapper  # LOAD


    def tagged(label):
        def decorate(function):
            function.label = label  # LOAD
            return function  # LOAD
        return decorate  # LOAD


    class Ledger:
        LIMIT = 1 << 20  # LOAD

        def __init__(self, req):
            self.req = req  # HELPER

        def commit(self, accepted):
            self.req.kv.kv_committed_len += accepted  # HELPER
            self.req.spec_verify_ct += 1
            self.req.spec_num_correct_drafts += accepted - 1
            self.req.update_spec_correct_drafts_histogram(accepted - 1)


    class Processor:
        @tagged("spec-v2")
        @logged
        def resolve(self, result, batch):
            ids = result.next_token_ids.tolist()
            accepts = result.accept_lens.tolist()
            stride = result.speculative_num_draft_tokens
            for req, accepted in zip(batch.reqs, accepts):
                if req.is_retracted or req.finished():
                    continue
                Ledger(req).commit(accepted)
            return [ids[i * stride : i * stride + a] for i, a in enumerate(accepts)]
    """
)


def test_load_time_lines_are_left_out_and_helper_classes_measured(tmp_path: Path) -> None:
    path = tmp_path / "decorated.py"
    path.write_text(DECORATED)
    target = load_target(f"{path}::Processor.resolve")
    meter = meter_for(target)
    assert meter is not None
    measured = meter.instrument(target)
    assert run_scenario(NO_STALE, measured).violation is None
    assert run_scenario(STALE, measured).violation is None
    coverage = meter.result()

    def marked(marker: str) -> set[int]:
        lines = DECORATED.splitlines()
        return {n for n, text in enumerate(lines, 1) if text.endswith(f"# {marker}")}

    assert marked("LOAD") and not marked("LOAD") & coverage.statements
    assert marked("HELPER") | marked("WRAPPER") <= coverage.executed
    assert {"Ledger.__init__", "Ledger.commit", "logged.<locals>.wrapper"} <= set(
        coverage.functions
    )
    assert not {"logged", "tagged"} & set(coverage.functions)
    # Everything that can run per call ran: no load-time line is held against the target.
    assert coverage.missed_lines == () and coverage.line_percent == 100


MULTI_LINE_CONDITION = textwrap.dedent(
    """\
    def decide(x, feature=False):
        if (
            feature
            and x > 0
        ):
            return "feature"
        return "plain"
    """
)


def _function_target(file: Path, source: str, name: str, *, last: int) -> Target:
    """`source` written to `file` and compiled, its function `name` (lines 2 to `last`, its
    `def` on line 1) as a target read from source."""
    file.write_text(source)
    namespace: dict[str, Any] = {}
    exec(compile(file.read_text(), str(file), "exec"), namespace)
    span = CodeSpan(file=str(file), qualname=name, def_line=1, first=2, last=last)
    return Target(
        spec=file.stem,
        resolver=namespace[name],
        description="",
        self_methods={},
        shape=None,
        code=(span,),
        family="sglang",
    )


def test_a_condition_over_several_lines_is_named_by_its_first_two(tmp_path: Path) -> None:
    """`if (` alone names nothing: an out-of-scope table names such a line by its text joined
    with the next line's, and its never-taken branch is listed with that reason."""
    target = _function_target(tmp_path / "multi.py", MULTI_LINE_CONDITION, "decide", last=7)
    reason = "a feature kvcheck does not model"
    for table, named in (({"if (feature": reason}, True), ({"if (other": reason}, False)):
        meter = CoverageMeter(target.code, table)
        measured = meter.instrument(target)
        assert measured.resolver(1) == "plain"
        found = meter.result()
        assert (2, 6) in found.missed_branches
        assert (found.out_of_scope_missed() == {(2, 6): reason}) is named


def test_a_named_line_that_never_ran_explains_neither_of_its_branches() -> None:
    """A named line explains the way only the feature takes once the line ran; a line never
    reached took neither way, so both stay missed (counted), not hidden under the reason."""
    reason = "a feature kvcheck does not model"
    ran = TargetCoverage(
        file="f.py",
        functions=("decide",),
        statements=frozenset({2, 6, 7}),
        executed=frozenset({2, 7}),
        branches=frozenset({(2, 6), (2, 7)}),
        executed_branches=frozenset({(2, 7)}),
        out_of_scope={2: reason},
    )
    assert ran.out_of_scope_missed() == {(2, 6): reason}
    unreached = attrs.evolve(ran, executed=frozenset(), executed_branches=frozenset())
    assert unreached.out_of_scope_missed() == {}
    assert set(unreached.missed_branches) == {(2, 6), (2, 7)}


GUARDED = textwrap.dedent(
    """\
    def grow(pool, n):
        taken = pool.take(n)
        try:
            pool.grow_aux(n)
        except Exception:
            pool.give_back(taken)
            raise
        try:
            pool.note(n)
        except Exception:
            pool.forget(n)
        return taken
    """
)


def test_a_named_except_line_leaves_its_never_run_handler_uncounted(tmp_path: Path) -> None:
    """No branch enters a handler: an `except` line, named with the line after it (the
    handler's first), leaves its whole handler uncounted while it never runs; an unnamed
    handler stays counted as never run."""
    target = _function_target(tmp_path / "guarded.py", GUARDED, "grow", last=12)

    class Pool:
        def take(self, n: int) -> list[int]:
            return list(range(n))

        def grow_aux(self, n: int) -> None:
            pass

        def note(self, n: int) -> None:
            pass

    reason = "an auxiliary cache failing to grow, which kvcheck does not model"
    for table, uncounted in (
        ({"except Exception:pool.give_back(taken)": reason}, {5: reason, 6: reason, 7: reason}),
        ({"except Exception:": reason}, {5: reason, 6: reason, 7: reason, 10: reason, 11: reason}),
        ({"except Exception:pool.forget(taken)": reason}, {}),
    ):
        meter = CoverageMeter(target.code, table, uncounted_out_of_scope=True)
        measured = meter.instrument(target)
        assert measured.resolver(Pool(), 2) == [0, 1]
        found = meter.result()
        assert found.uncounted == uncounted
        assert set(found.missed_lines) == {5, 6, 7, 10, 11} - uncounted.keys()


# --- code beside the resolver (a release's allocation path) ---------------------------------

SIDE = textwrap.dedent(
    """\
    def reserve(n, page):
        if page > 1:
            return -(-n // page) * page
        if n < 0:
            raise ValueError("negative")  # OUT OF SCOPE
        return n
    """
)


class _SideCode:
    """A `MeasurableSideCode` over one file: `build(config)` gives its function, each call of
    which goes through the wrapper the meter gave (as `ReleaseAllocation._call` does)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.compiled: dict[str, object] | None = None
        self.wrap = None

    def __call__(self, config: object) -> object:
        if self.compiled is None:  # compiled on first use, as a release's code is
            self.path.write_text(SIDE)
            self.compiled = {}
            exec(compile(SIDE, str(self.path), "exec"), self.compiled)
        function = self.compiled["reserve"]
        return function if self.wrap is None else self.wrap(function)

    def measured_with(self, wrap: object) -> _SideCode:
        copied = copy.copy(self)
        copied.wrap = wrap
        return copied

    def side_code(self) -> object:
        from kvcheck.core.target import CodeSpan, SideCode

        if self.compiled is None:
            return None
        span = CodeSpan(file=str(self.path), qualname="reserve", def_line=1, first=2, last=6)
        scope = {"if n < 0:": "negative lengths"}
        return SideCode(
            label="allocation", include=str(self.path), code=(span,), out_of_scope=scope
        )


def test_code_beside_the_resolver_is_measured_beside_it_under_the_same_rules(
    target: Target, tmp_path: Path
) -> None:
    """The engine calls the side code itself: its coverage comes beside the resolver's (named
    by its label, never in the resolver's figures), what only out-of-scope inputs reach listed
    with the reason and not counted, and `--min-coverage` holds it to the same minimum."""
    side = _SideCode(tmp_path / "alloc.py")
    with_side = attrs.evolve(target, allocation=side)
    meter = meter_for(with_side)
    assert meter is not None
    measured = meter.instrument(with_side)
    assert run_scenario(NO_STALE, measured).violation is None
    alone = meter.result()
    assert alone.beside == ()  # the side code never ran: nothing beside
    path = measured.allocation(None)
    assert path(5, 1) == 5
    coverage = meter.result()
    resolver_lines = coverage.lines_total
    (beside,) = coverage.beside
    assert beside.label == "allocation" and beside.functions == ("reserve",)
    assert (beside.lines_run, beside.lines_total) == (3, 4)  # `raise` not counted
    assert (beside.branches_run, beside.branches_total) == (2, 3)  # nor the way into it
    assert beside.missed_lines == (3,) and beside.uncounted == {5: "negative lengths"}
    assert coverage.lines_total == resolver_lines  # the resolver's figures are its own
    text = coverage.report_lines()
    figures = "allocation: 3/4 lines (75%), 2/3 branches (67%) in alloc.py: reserve"
    assert f"coverage    {figures}" in text
    assert "not counted branches 4->5, lines 5: only for negative lengths" in text
    assert coverage.to_dict()["allocation"]["lines_run"] == 3
    assert coverage.parts_below(80)[-1:] == (beside,) and coverage.parts_below(60) == ()
    assert path(5, 2) == 6
    both = meter.result()
    assert both.beside[0].lines_run == 4 and not both.beside[0].below(100)
    # Two measurements merge beside code by label; one where it never ran keeps the other's.
    assert alone.union(both).beside == both.beside
    assert both.union(alone).beside[0].lines_run == 4


def test_two_measurements_of_side_code_that_compiled_different_parts_merge() -> None:
    """Two fuzz workers each compile what their scenarios reached of a release's tree: their
    allocation coverages merge file by file, every function either measured, rather than
    failing as two different codes would (the resolver's code never differs)."""
    first = TargetCoverage(
        file="/t/a.py",
        functions=("f",),
        statements=frozenset({2, 3}),
        executed=frozenset({2}),
        branches=frozenset({(2, 3), (2, None)}),
        executed_branches=frozenset({(2, None)}),
        functions_run=("f",),
        label="allocation",
    )
    second = TargetCoverage(
        file="/t/a.py",
        functions=("f", "g"),
        statements=frozenset({2, 3, 8}),
        executed=frozenset({2, 3}),
        branches=frozenset({(2, 3), (2, None)}),
        executed_branches=frozenset({(2, 3)}),
        uncounted={9: "SWA"},
        functions_run=("f",),
        label="allocation",
        others=(attrs.evolve(first, file="/t/b.py", functions=("h",), label="allocation"),),
    )
    both = first.union(second)
    assert [part.file for part in both.files] == ["/t/a.py", "/t/b.py"]
    assert both.functions == ("f", "g") and both.functions_run == ("f",)
    assert (both.files[0].lines_run, both.files[0].lines_total) == (2, 3)  # 8 never ran
    assert both.files[0].uncounted == {9: "SWA"}  # only the second measured it
    assert (both.files[0].branches_run, both.files[0].branches_total) == (2, 2)
    with pytest.raises(ValueError, match="different code"):
        attrs.evolve(first, label="").union(attrs.evolve(second, label="", others=()))
