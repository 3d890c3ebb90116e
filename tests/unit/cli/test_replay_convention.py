"""Issue 23, item 4: `replay --target` and `regress --target` judge another resolver by its own
convention (its probed API shape), say so when that is not the file's, and `--convention file`
keeps the file's (docs/replay.md)."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest

from kvcheck.counterexamples.fileformat import load
from kvcheck.counterexamples.replay import replay
from kvcheck.errors import KvcheckUsageError
from tests.helpers import COMMITTED_COUNTEREXAMPLES, SGLANG_FIXTURES, run_cli

# A pre-claim counterexample of kvcheck's reference resolver, in SGLang's counter mode, and a
# correct honest resolver laid out as in SGLang 0.5.23 (which counts stale rows as SGLang does).
PRECLAIM_FILE = str(
    COMMITTED_COUNTEREXAMPLES / "builtin-reference-runs-aligned-e732f13eccad.kvcheck.json"
)
RELEASE_0_5_23 = (
    f"{SGLANG_FIXTURES / 'v0_5_23' / 'python' / 'sglang' / 'srt' / 'managers'}"
    "/scheduler_components/batch_result_processor.py"
    "::SchedulerBatchResultProcessor._resolve_spec_v2_tokens"
)


def test_the_file_is_pre_claim_and_in_sglang_counter_mode() -> None:
    config = load(PRECLAIM_FILE).scenario.config
    assert (config.convention, config.global_counters) == ("preclaim", "sglang")


def test_replay_judges_another_target_by_its_own_convention_and_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run_cli(capsys, "replay", PRECLAIM_FILE, "--target", RELEASE_0_5_23)
    assert code == 0, out
    assert "NO VIOLATION" in out
    assert "judged:   honest convention (the file's: preclaim" in out
    assert "kvcheck: note:" in err and "follows the honest convention" in err
    assert "global counters sglang, as the file" in err

    code, out, _ = run_cli(capsys, "replay", PRECLAIM_FILE, "--target", RELEASE_0_5_23, "--json")
    data = json.loads(out)
    assert code == 0 and data["verdict"] == "pass"
    assert (data["convention"], data["file_convention"]) == ("honest", "preclaim")
    assert "follows the honest convention" in data["note"]


def test_convention_file_keeps_the_file_convention(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("replay", PRECLAIM_FILE, "--target", RELEASE_0_5_23, "--convention", "file")
    code, out, err = run_cli(capsys, *argv, "--json")
    data = json.loads(out)
    assert code == 1 and data["convention"] == "preclaim" and data["note"] is None
    assert "note:" not in err


def test_the_saved_target_is_judged_by_the_file_convention(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # kvcheck's reference passes its committed regression scenarios.
    code, out, err = run_cli(capsys, "replay", PRECLAIM_FILE, "--json")
    data = json.loads(out)
    assert code == 0 and data["replay"] == "none"
    assert data["convention"] == data["file_convention"] == "preclaim"
    assert data["note"] is None and "note:" not in err
    # A convention given explicitly is used and said, for the saved target too.
    explicit = replay(load(PRECLAIM_FILE), convention="honest")
    assert explicit.convention == "honest" and explicit.note is not None
    assert "as given" in explicit.note


def test_an_unknown_convention_is_a_usage_error() -> None:
    with pytest.raises(KvcheckUsageError, match="unknown convention 'both'"):
        replay(load(PRECLAIM_FILE), convention="both")  # type: ignore[arg-type]


def test_regress_pins_the_target_convention_in_the_generated_test(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_file = tmp_path / "test_regression.py"
    argv = ("regress", PRECLAIM_FILE, "--target", RELEASE_0_5_23, "--out", str(out_file))
    code, _, err = run_cli(capsys, *argv)
    assert code == 0 and "follows the honest convention" in err
    text = out_file.read_text()
    assert "CONVENTION = 'honest'" in text and "convention=CONVENTION" in text
    # The generated test passes: the correct resolver, judged by its own convention.
    namespace = runpy.run_path(str(out_file))
    test = next(value for name, value in namespace.items() if name.startswith("test_"))
    test()

    # --convention file: the test judges by the file's convention, and fails.
    code, _, _ = run_cli(capsys, *argv, "--convention", "file", "--force")
    assert code == 0 and "CONVENTION = 'preclaim'" in out_file.read_text()
    namespace = runpy.run_path(str(out_file))
    test = next(value for name, value in namespace.items() if name.startswith("test_"))
    with pytest.raises(AssertionError, match="committed-finished-frozen"):
        test()
