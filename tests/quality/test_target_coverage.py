"""The target's own coverage on real SGLang 0.5.23 (`sglang==0.5.23`, from kvcheck's cache or the
package index): a 300-scenario search runs every line of the per-request accounting, the stale
rows' branch included, UNO's output stride and the block/cap statistics, and what it never runs is
exactly what kvcheck does not generate yet (grammar requests), each for a stated reason. When the
fakes learn grammars, this list shrinks and this test says so.

Without the index (and nothing cached) it skips locally and fails under CI (`CI` set), as
tests/quality/test_real_releases.py does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvcheck.core.target import CodeSpan, Target
from kvcheck.errors import KvcheckUsageError
from kvcheck.search.check import check
from kvcheck.search.target_coverage import TargetCoverage
from kvcheck.targets.loading import load_target

SPEC = "sglang==0.5.23"
BUDGET = {"max_examples": 300, "seed": 0}

# Statements that never run, by the text of their line, and why.
NEVER_RUN = {
    'raise RuntimeError("speculative result is missing a positive output row stride")': (
        "the stride helper's guard: kvcheck's strides are always positive"
    ),
    "accept_tokens = result.grammar_retained_tokens[i]": "no request has a grammar",
}
# Whole functions, or their tails, that never run: the grammar paths.
GRAMMAR_ONLY = "SchedulerBatchResultProcessor._accept_grammar_tokens"
GRAMMAR_GATE = "if result.grammar_advanced or not batch.has_grammar:"  # advance_grammar_fsm
# Lines that must run: the accounting of live rows and the stale rows' branch.
MUST_RUN = (
    "req.kv.kv_committed_len += num_accept_tokens",
    "req.spec_verify_ct += 1",
    "req.update_spec_correct_drafts_histogram(num_correct_drafts)",
    "if req.is_retracted or req.finished():",
    "pass",
    "self.advance_grammar_fsm(result, batch)",
    # Block/cap lengths on the result (0.5.16+), drawn for targets that read them.
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


def test_every_never_run_line_has_a_reason(measured: tuple[Target, TargetCoverage]) -> None:
    target, coverage = measured
    lines = _lines(coverage.file)
    resolver = _span(target, "SchedulerBatchResultProcessor._resolve_spec_v2_tokens")
    helper = _span(target, "_get_speculative_output_stride")
    grammar = _span(target, GRAMMAR_ONLY)
    advance = _span(target, "SchedulerBatchResultProcessor.advance_grammar_fsm")

    expected = {_line(lines, text, helper if "raise" in text else resolver) for text in NEVER_RUN}
    # _accept_grammar_tokens is only called on the grammar paths: none of it runs.
    expected |= {n for n in coverage.statements if n in grammar}
    # advance_grammar_fsm runs its gate and returns: no batch has a grammar.
    gate = _line(lines, GRAMMAR_GATE, advance)
    expected |= {n for n in coverage.statements if n in advance and n > gate + 1}
    assert set(coverage.missed_lines) == expected

    for text in MUST_RUN:
        assert _line(lines, text, resolver) in coverage.executed, text
    # The stride recorded at launch, read when the output stride is unset.
    assert _line(lines, "stride = result.speculative_num_draft_tokens", helper) in coverage.executed


def test_every_never_taken_branch_has_a_reason(measured: tuple[Target, TargetCoverage]) -> None:
    target, coverage = measured
    lines = _lines(coverage.file)
    resolver = _span(target, "SchedulerBatchResultProcessor._resolve_spec_v2_tokens")
    helper = _span(target, "_get_speculative_output_stride")
    grammar = _span(target, GRAMMAR_ONLY)
    advance = _span(target, "SchedulerBatchResultProcessor.advance_grammar_fsm")
    gate = _line(lines, GRAMMAR_GATE, advance)
    outside_grammar = {
        # The missing-stride guard.
        (guard := _line(lines, "if stride is None or stride < 1:", helper), guard + 1),
        # No grammar.
        (grammar_if := _line(lines, "if req.grammar is not None:", resolver), grammar_if + 3),
        # advance_grammar_fsm never gets past its gate.
        (gate, gate + 2),
    }
    # Both ways of the UNO stride branch and of the block/cap branches ran.
    uno = _line(lines, "if stride is None:", helper)
    assert {b for b in coverage.executed_branches if b[0] == uno} == {
        (uno, uno + 1),
        (uno, uno + 2),
    }
    for text in ("if block_accept_lens is not None:", "if cap_lens is not None:"):
        line = _line(lines, text, resolver)
        assert len({b for b in coverage.executed_branches if b[0] == line}) == 2, text
    missed = set(coverage.missed_branches)
    in_grammar = {b for b in missed if b[0] in grammar or (b[0] in advance and b[0] > gate)}
    assert missed - in_grammar == outside_grammar
    # Every branch inside the grammar-only code is missed, none of it taken.
    assert not {b for b in coverage.executed_branches if b[0] in grammar}
    # The stale-row branch and the live-row branch both ran.
    stale = _line(lines, "if req.is_retracted or req.finished():", resolver)
    assert {b for b in coverage.executed_branches if b[0] == stale} == {
        (stale, stale + 3),
        (stale, stale + 5),
    }


def test_the_cli_reports_and_gates_on_it(measured: tuple[Target, TargetCoverage]) -> None:
    _, coverage = measured
    kvcheck = str(Path(sys.executable).with_name("kvcheck"))
    base = [kvcheck, "check", SPEC, "--global-counters", "sglang", "--no-database"]
    base += ["--seed", "0", "--max-examples", "300", "--no-save"]
    percent = coverage.line_percent
    done = subprocess.run(
        [*base, "--json", "--min-coverage", f"{percent + 1:.1f}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"] == "pass" and report["coverage_below_minimum"] is True
    assert report["coverage"]["missed_lines"] == list(coverage.missed_lines)

    done = subprocess.run(
        [*base, "--min-coverage", f"{percent - 1:.1f}"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"coverage    {coverage.summary()}" in done.stdout
    assert "never run   lines" in done.stdout
