"""The target's own coverage on real SGLang 0.5.23 (`sglang==0.5.23`, from kvcheck's cache or the
package index): a 300-scenario search runs every line of the per-request accounting, the stale
rows' branch, UNO's output stride, the block/cap statistics and both grammar paths (the decode
result's in the resolver, the prefill batch's that the engine runs as SGLang's scheduler does):
at least 95% of the lines. What never runs is defensive code real SGLang never reaches (a
missing stride, a batch neither decode nor extend, a decode result without accept lengths), each
named with its reason in the report. Both ways of the copy-event check run: overlap results carry
the event, synchronous ones do not, as in SGLang.

The same search runs the release's own allocation code (issue 21): its coverage comes beside
the resolver's, at least 90% of the lines and branches of the functions driven, and every line
and branch never run is named with its reason (`kvcheck.families.sglang.real.coverage_scope`).

Without the index (and nothing cached) it skips locally and fails under CI (`CI` set), as
tests/quality/test_real_releases.py does.
"""

from __future__ import annotations

import ast
import itertools
import json
import os
import re
from pathlib import Path

import pytest

from kvcheck.core.target import CodeSpan, Target
from kvcheck.errors import KvcheckUsageError
from kvcheck.families.sglang.real.coverage_scope import WRITTEN_FROM
from kvcheck.families.sglang.real.tree import allocation_tree
from kvcheck.search.check import check
from kvcheck.search.target_coverage import TargetCoverage
from kvcheck.targets.loading import load_target
from tests.helpers import run_cli

SPEC = "sglang==0.5.23"
BUDGET = {"max_examples": 300, "seed": 0}

# Where the code kvcheck never drives starts, by the text of a line, and why. Everything else of
# the resolver, the stride helper and both grammar methods runs.
STRIDE_GUARD = "if stride is None or stride < 1:"  # kvcheck's strides are always positive
SINGLE_TOKEN = "if isinstance(tokens, int):"  # a single int: the prefill path, which now runs
NEITHER_MODE = "if not (is_decode or batch.forward_mode.is_extend()):"  # batches are one of both
COPY_DONE = "if result.copy_done is not None:"  # None on synchronous (overlap off) results
PREFILL = "if not is_decode:"  # the prefill branch, run by the engine as SGLang's scheduler does
NO_ACCEPT_LENS = "if result.accept_lens is None:"  # decode results always carry accept lengths
GRAMMAR = "SchedulerBatchResultProcessor._accept_grammar_tokens"
ADVANCE = "SchedulerBatchResultProcessor.advance_grammar_fsm"
# Lines that must run: the accounting of live rows, the stale rows' branch, block/cap
# statistics, and the grammar path of a decode result.
MUST_RUN = (
    "req.kv.kv_committed_len += num_accept_tokens",
    "req.spec_verify_ct += 1",
    "req.update_spec_correct_drafts_histogram(num_correct_drafts)",
    "if req.is_retracted or req.finished():",
    "pass",
    "self.advance_grammar_fsm(result, batch)",
    "accept_tokens = result.grammar_retained_tokens[i]",
    "req.spec_num_block_accept_tokens += block_accept_lens[i]",
    "req.spec_num_cap_tokens += cap_lens[i]",
    "req.update_spec_cap_lens_histogram(cap_lens[i])",
)


def _target() -> Target:
    try:
        return load_target(SPEC)
    except KvcheckUsageError as exc:
        if os.environ.get("CI") or "cannot fetch" not in str(exc):
            raise
        pytest.skip(f"cannot fetch SGLang 0.5.23 (no index, nothing cached): {exc}")


def _lines(file: str) -> list[str]:
    return Path(file).read_text().splitlines()


def _line(lines: list[str], text: str, within: CodeSpan) -> int:
    found = [
        n for n in range(within.first, within.last + 1) if lines[n - 1].strip() == text.strip()
    ]
    assert found, f"{text!r} not in {within.qualname}"
    return found[0]


def _span(target: Target, qualname: str) -> CodeSpan:
    return next(s for s in target.code if s.qualname == qualname)


@pytest.fixture(scope="module")
def measured() -> tuple[Target, TargetCoverage]:
    target = _target()
    verdict = check(target, global_counters="sglang", **BUDGET)  # type: ignore[arg-type]
    assert verdict.passed, verdict.violation
    assert verdict.coverage is not None
    return target, verdict.coverage


def test_the_resolver_its_siblings_and_helper_are_measured(
    measured: tuple[Target, TargetCoverage],
) -> None:
    target, coverage = measured
    assert coverage.functions == (
        "SchedulerBatchResultProcessor._resolve_spec_v2_tokens",
        "_get_speculative_output_stride",
        "SchedulerBatchResultProcessor._accept_grammar_tokens",
        "SchedulerBatchResultProcessor.advance_grammar_fsm",
    )
    assert coverage.file == target.code[0].file
    assert coverage.file.endswith("scheduler_components/batch_result_processor.py")


def _anchors(target: Target, lines: list[str]) -> dict[str, int]:
    helper = _span(target, "_get_speculative_output_stride")
    grammar, advance = _span(target, GRAMMAR), _span(target, ADVANCE)
    return {
        "guard": _line(lines, STRIDE_GUARD, helper),
        "single": _line(lines, SINGLE_TOKEN, grammar),
        "neither": _line(lines, NEITHER_MODE, advance),
        "copy": _line(lines, COPY_DONE, advance),
        "prefill": _line(lines, PREFILL, advance),
        "no_accepts": _line(lines, NO_ACCEPT_LENS, advance),
    }


def test_every_never_run_line_has_a_reason(measured: tuple[Target, TargetCoverage]) -> None:
    target, coverage = measured
    lines = _lines(coverage.file)
    at = _anchors(target, lines)
    expected = {at["guard"] + 1, at["neither"] + 1, at["no_accepts"] + 1}
    assert set(coverage.missed_lines) == expected
    # The prefill branch of advance_grammar_fsm runs: the engine calls the target's own grammar
    # step on prefill batches, as SGLang's scheduler does; so does the single-token case.
    assert {at["prefill"] + 3, at["single"] + 1} <= set(coverage.executed)

    resolver = _span(target, "SchedulerBatchResultProcessor._resolve_spec_v2_tokens")
    for text in MUST_RUN:
        assert _line(lines, text, resolver) in coverage.executed, text
    helper = _span(target, "_get_speculative_output_stride")
    assert _line(lines, "stride = result.speculative_num_draft_tokens", helper) in coverage.executed
    assert coverage.line_percent >= 95


def test_every_never_taken_branch_has_a_reason(measured: tuple[Target, TargetCoverage]) -> None:
    target, coverage = measured
    lines = _lines(coverage.file)
    at = _anchors(target, lines)
    # Only defensive branches real SGLang never takes stay unrun.
    expected = {
        (at["guard"], at["guard"] + 1),
        (at["neither"], at["neither"] + 1),
        (at["no_accepts"], at["no_accepts"] + 1),
    }
    assert set(coverage.missed_branches) == expected
    # Each is named with the out-of-scope input that takes it, and nothing else is missed.
    assert set(coverage.out_of_scope_missed()) == expected
    assert coverage.only_out_of_scope_missed()
    assert coverage.branch_percent >= 92
    # A synchronous result has no copy event: both ways of its check run.
    assert {b for b in coverage.executed_branches if b[0] == at["copy"]} == {
        (at["copy"], at["copy"] + 1),
        (at["copy"], at["copy"] + 2),
    }
    assert (at["prefill"], at["prefill"] + 3) in coverage.executed_branches
    # The UNO stride branch, the block/cap branches and the stale-row branch ran both ways.
    resolver = _span(target, "SchedulerBatchResultProcessor._resolve_spec_v2_tokens")
    helper = _span(target, "_get_speculative_output_stride")
    uno = _line(lines, "if stride is None:", helper)
    assert {b for b in coverage.executed_branches if b[0] == uno} == {
        (uno, uno + 1),
        (uno, uno + 2),
    }
    for text in ("if block_accept_lens is not None:", "if cap_lens is not None:"):
        line = _line(lines, text, resolver)
        assert len({b for b in coverage.executed_branches if b[0] == line}) == 2, text
    stale = _line(lines, "if req.is_retracted or req.finished():", resolver)
    assert {b for b in coverage.executed_branches if b[0] == stale} == {
        (stale, stale + 3),
        (stale, stale + 5),
    }


def test_the_cli_reports_and_gates_on_it(
    measured: tuple[Target, TargetCoverage], capsys: pytest.CaptureFixture[str]
) -> None:
    """The command, in this process (its report and exit code are the point), measures what the
    search above did and gates on it."""
    _, coverage = measured
    base = ["check", SPEC, "--global-counters", "sglang", "--no-database"]
    base += ["--seed", "0", "--max-examples", "300", "--no-save"]
    percent = coverage.line_percent
    code, out, err = run_cli(capsys, *base, "--json", "--min-coverage", f"{percent + 1:.1f}")
    assert code == 1, err
    report = json.loads(out)
    assert report["verdict"] == "pass" and report["coverage_below_minimum"] is True
    assert report["coverage"]["missed_lines"] == list(coverage.missed_lines)

    code, out, err = run_cli(capsys, *base, "--min-coverage", f"{percent - 1:.1f}")
    assert code == 0, out + err
    assert f"coverage    {coverage.summary()}" in out
    assert "never run   lines" in out
    assert "only for a result without a positive row stride" in out
    assert "every other line and branch ran" in out


# The release functions kvcheck drives, each of which must run (docs/release-allocation.md).
ALLOCATION_DRIVEN = (
    "eagle_prepare_for_decode",
    "page_aligned_decode_alloc_lens",
    "alloc_for_spec_decode",
    "alloc_paged_token_slots_extend",
    "release_kv_cache",
    "_release_overallocated_kv_indices",
    "Req.owned_kv_len",
    "ReqKvInfo.mark_kv_released",
    "BasePrefixCache.free_kv_row",
    "BaseTokenToKVPoolAllocator.free_segments",
    "release_req",
    "Req.reset_for_retract",
    "ScheduleBatch._new_tokens_required_next_decode_spec_v2",
)


def test_the_release_allocation_code_is_measured_beside_the_resolver(
    measured: tuple[Target, TargetCoverage],
) -> None:
    _, coverage = measured
    (allocation,) = coverage.beside
    assert allocation.label == "allocation"
    ran = {
        name
        for part in allocation.files
        for name, span in zip(part.functions, _spans_of(part), strict=True)
        if any(line in part.executed for line in range(span[0], span[1] + 1))
    }
    assert set(ALLOCATION_DRIVEN) <= ran, set(ALLOCATION_DRIVEN) - ran
    assert allocation.line_percent >= 90, allocation.summary()
    assert allocation.branch_percent >= 90, allocation.summary()
    for part in allocation.files:
        # Every branch never taken has its reason: counted and listed, or not counted.
        assert set(part.out_of_scope_missed()) == set(part.missed_branches), part.file
        for start, _ in part.uncounted_branches:
            assert start in part.uncounted or start in part.out_of_scope, (part.file, start)
        assert set(part.missed_lines) <= {end for _, end in part.out_of_scope_missed()}


@pytest.mark.parametrize("version", ["0.5.12", "0.5.15"])
def test_older_releases_name_every_allocation_line_left_unrun(version: str) -> None:
    """0.5.12-0.5.15 count every allocation line and branch they run and name the rest, as
    0.5.23 does: their own spellings of a feature kvcheck leaves out, and the paged code, which
    their rules run at page size 1 only (0.5.15: 45 lines were unnamed)."""
    try:
        target = load_target(f"sglang=={version}")
    except KvcheckUsageError as exc:
        if os.environ.get("CI") or "cannot fetch" not in str(exc):
            raise
        pytest.skip(f"cannot fetch SGLang {version}: {exc}")
    verdict = check(target, global_counters="sglang", **BUDGET)  # type: ignore[arg-type]
    assert verdict.passed and verdict.coverage is not None, verdict.violation
    (allocation,) = verdict.coverage.beside
    assert allocation.lines_total > 100, allocation.summary()
    for part in allocation.files:
        assert set(part.out_of_scope_missed()) == set(part.missed_branches), part.file
        assert set(part.missed_lines) <= {end for _, end in part.out_of_scope_missed()}
    reasons = {reason for part in allocation.files for reason in part.uncounted.values()}
    assert any(reason.startswith("page sizes above 1") for reason in reasons), reasons


def _spans_of(part: TargetCoverage) -> list[tuple[int, int]]:
    """Each measured function's lines, by the order of `functions`."""
    tree = ast.parse(Path(part.file).read_text())
    where: dict[str, tuple[int, int]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for member in node.body:
                if isinstance(member, ast.FunctionDef):
                    where[f"{node.name}.{member.name}"] = (member.lineno, member.end_lineno or 0)
        elif isinstance(node, ast.FunctionDef) and node.name not in where:
            where[node.name] = (node.lineno, node.end_lineno or 0)
    return [where[name] for name in part.functions]


def test_the_allocation_reasons_name_the_release_s_own_lines(
    measured: tuple[Target, TargetCoverage],
) -> None:
    """Every line and function `OUT_OF_SCOPE` names from 0.5.23 is in 0.5.23's driven code,
    and every line and function it names from an older release is in that release's
    allocation files: a reason written for a line the release does not have would explain
    nothing."""
    _, coverage = measured
    (allocation,) = coverage.beside
    texts = {line.strip() for part in allocation.files for line in _lines(part.file)}
    # A key may also be a line joined with the next one (an `except` line names its handler).
    texts |= {
        first.strip() + second.strip()
        for part in allocation.files
        for first, second in itertools.pairwise(_lines(part.file))
    }
    functions = {name for part in allocation.files for name in part.functions}
    for key in WRITTEN_FROM["0.5.23"]:
        assert key in texts or key in functions, key
    for version, table in WRITTEN_FROM.items():
        if version == "0.5.23":
            continue
        files = [file.read_text() for file in (allocation_tree(version) / "sglang").rglob("*.py")]
        older = {line.strip() for text in files for line in text.splitlines()}
        for key in table:
            assert key in older or _defines(files, key), (version, key)


def _defines(texts: list[str], name: str) -> bool:
    """Whether one of `texts` defines a function `name` (parsed, so a `def` in a string or a
    comment does not count); only the texts that spell `def name(` are parsed (parsing a whole
    tree took seconds)."""
    spelled = re.compile(rf"\bdef\s+{re.escape(name)}\s*[(\[]")
    return any(
        isinstance(node, ast.FunctionDef) and node.name == name
        for text in texts
        if spelled.search(text)
        for node in ast.walk(ast.parse(text))
    )
