"""The pytest plugin gives the verdict `kvcheck check` gives for the same target and options
(issue 12, item 6): convention auto with its fallback, adaptive as `check` decides it unless
`--kvcheck-adaptive` says otherwise, `--kvcheck-allow-unavailable-imports`; a zero
`--kvcheck-max-examples` is refused and a textual `--hypothesis-seed` is reproducible. The
comparison over every built-in, fixture and mutant is tests/quality/test_front_doors_agree.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import kvcheck.reporting.timeline
import kvcheck.search.check
from kvcheck.cli.main import main
from tests.helpers import PLUGIN_FAST, TESTS_DIR

pytest_plugins = ["pytester"]

# Loaded here, not first inside a pytester run: pytester drops the modules an inline run imported,
# and importing torch's or Hypothesis's compiled extensions a second time crashes the process.
PRELOADED = (torch, kvcheck.search.check, kvcheck.reporting.timeline)

RESOLVERS = TESTS_DIR / "fixtures" / "verdicts" / "resolvers.py"
CLI_FAST = ["--max-examples", "60", "--seed", "0", "--no-database", "--no-save"]


def cli_verdict(spec: str, *options: str) -> str:
    """`kvcheck check --json`'s verdict, read from the exit code (0 pass, 1 fail)."""
    code = main(["check", spec, *CLI_FAST, "--no-coverage", *options])
    assert code in (0, 1)
    return "pass" if code == 0 else "fail"


def test_seed_fixed_under_sglang_counters_passes_at_both_doors(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_verdict("builtin:seed-fixed", "--global-counters", "sglang") == "pass"
    result = pytester.runpytest(
        "--kvcheck-target",
        "builtin:seed-fixed",
        "--kvcheck-global-counters",
        "sglang",
        *PLUGIN_FAST,
    )
    result.assert_outcomes(passed=1)
    # Adaptive forced on, both doors fail it (the worker's stride after a switch).
    assert cli_verdict("builtin:seed-fixed", "--global-counters", "sglang", "--adaptive") == "fail"
    forced = pytester.runpytest(
        "--kvcheck-target",
        "builtin:seed-fixed",
        "--kvcheck-global-counters",
        "sglang",
        "--kvcheck-adaptive",
        "on",
        *PLUGIN_FAST,
    )
    forced.assert_outcomes(failed=1)
    assert "kvcheck[builtin:seed-fixed][auto-adaptive-on]" in forced.stdout.str()


def test_the_convention_fallback_holds_at_both_doors(pytester: pytest.Pytester) -> None:
    spec = f"{RESOLVERS}::honest_old_spellings"
    assert cli_verdict(spec) == "pass"
    pytester.runpytest("--kvcheck-target", spec, *PLUGIN_FAST).assert_outcomes(passed=1)


SOURCE = """
from sglang.srt.server_args import get_global_server_args


class Processor:
    def resolve(self, result, batch):
        tokens = result.next_token_ids.tolist()
        accepts = result.accept_lens.tolist()
        stride = result.speculative_num_draft_tokens
        for req, accepted in zip(batch.reqs, accepts):
            if req.retraction_count > 100:
                req.to_finish = get_global_server_args()
            if req.is_retracted or req.finished():
                continue
            req.kv_committed_len += accepted - 1
            req.spec_verify_ct += 1
            req.spec_accepted_drafts += accepted - 1
            req.update_spec_acceptance_histogram(accepted - 1)
        return [tokens[i * stride : i * stride + a] for i, a in enumerate(accepts)]
"""


def test_allow_unavailable_imports_is_a_plugin_option(pytester: pytest.Pytester) -> None:
    (pytester.path / "processor.py").write_text(SOURCE)
    spec = f"{pytester.path / 'processor.py'}::Processor.resolve"
    strict = pytester.runpytest("--kvcheck-target", spec, *PLUGIN_FAST)
    assert strict.ret == pytest.ExitCode.USAGE_ERROR
    assert "get_global_server_args" in strict.stderr.str()
    allowed = pytester.runpytest(
        "--kvcheck-target",
        spec,
        "--kvcheck-allow-unavailable-imports",
        "--kvcheck-global-counters",
        "off",
        *PLUGIN_FAST,
    )
    allowed.assert_outcomes(failed=1)  # the finished row's pre-claimed slot is never given back
    saved = list((pytester.path / ".kvcheck" / "counterexamples").iterdir())
    assert json.loads(saved[0].read_text())["allow_unavailable_imports"] is True


def test_zero_max_examples_is_refused(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(
        "--kvcheck-target",
        "builtin:reference",
        "--kvcheck-max-examples",
        "0",
        "-p",
        "no:cacheprovider",
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--kvcheck-max-examples must be at least 1, got 0" in result.stderr.str()


def test_a_textual_hypothesis_seed_is_the_same_in_every_process(tmp_path: Path) -> None:
    code = (
        "from kvcheck.pytest_plugin import seed_from_option as s; "
        "print(s('nightly'), s('12'), s('-3'), s(None))"
    )
    outs = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            env=env,
            check=True,
            cwd=tmp_path,
        )
        outs.add(done.stdout)
    assert len(outs) == 1
    nightly, twelve, minus_three, none = outs.pop().split()
    assert (twelve, minus_three, none) == ("12", "-3", "None") and nightly.isdigit()


def test_a_nesting_bomb_is_a_one_line_collection_error(pytester: pytest.Pytester) -> None:
    (pytester.path / "bomb.kvcheck.json").write_text("[" * 100_000 + "]" * 100_000)
    result = pytester.runpytest("-p", "no:cacheprovider")
    out = result.stdout.str()
    assert "kvcheck: " in out and "nested more than" in out and "RecursionError" not in out


def test_a_file_asking_for_a_billion_tokens_is_a_quick_collection_error(
    pytester: pytest.Pytester,
) -> None:
    # Issue 23, item 8: one such file under the test paths once ran 30 s into a MemoryError.
    committed = sorted((TESTS_DIR / "counterexamples").glob("*.kvcheck.json"))[0]
    data = json.loads(committed.read_text())
    data["events"][0]["prompt_len"] = 10**9
    (pytester.path / "huge.kvcheck.json").write_text(json.dumps(data))
    result = pytester.runpytest("-p", "no:cacheprovider")
    out = result.stdout.str()
    assert "kvcheck: " in out and "'prompt_len' is 1000000000, above the bound 65536" in out
    assert "MemoryError" not in out and result.ret == pytest.ExitCode.INTERRUPTED
