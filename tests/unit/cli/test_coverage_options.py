"""The target's own coverage at the front door: `check`, `exhaust` and `releases` report it,
`--min-coverage` turns a PASS below it into exit 1 (the verdict stays `pass`), `--no-coverage`
turns it off, and a gate that cannot be measured is a usage error (exit 2)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from kvcheck.cli import releases
from kvcheck.cli.main import main
from kvcheck.families.sglang import release as sglang_release
from tests.helpers import SGLANG_FIXTURES

# A correct honest resolver: 12 statements, of which the `raise` never runs (11/12 = 91.7%).
SOURCE = textwrap.dedent(
    """\
    def resolve(self, result, batch):
        ids = result.next_token_ids.tolist()
        accepts = result.accept_lens.tolist()
        stride = result.speculative_num_draft_tokens
        if stride > 100:
            raise RuntimeError("no such stride")
        for req, accepted in zip(batch.reqs, accepts):
            if req.is_retracted or req.finished():
                continue
            req.kv.kv_committed_len += accepted
            req.spec_verify_ct += 1
            req.spec_num_correct_drafts += accepted - 1
            req.update_spec_correct_drafts_histogram(accepted - 1)
        return [ids[i * stride : i * stride + a] for i, a in enumerate(accepts)]
    """
)
NEVER = 6
FAST = ["--max-examples", "40", "--seed", "0", "--no-database", "--global-counters", "sglang"]
EXHAUST_FAST = ["--requests", "1", "--events", "4", "--strides", "2", "--no-save"]


@pytest.fixture
def spec(tmp_path: Path) -> str:
    path = tmp_path / "processor.py"
    path.write_text(SOURCE)
    return f"{path}::resolve"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_check_json_has_the_coverage_fields(spec: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", spec, *FAST, "--json")
    assert code == 0
    report = json.loads(out)
    coverage = report["coverage"]
    assert coverage["file"] == spec.partition("::")[0]
    assert coverage["functions"] == ["resolve"]
    assert (coverage["lines_run"], coverage["lines_total"]) == (12, 13)
    assert coverage["missed_lines"] == [NEVER]
    assert coverage["branches_run"] < coverage["branches_total"]
    assert [NEVER - 1, NEVER] in coverage["missed_branches"]
    assert report["min_coverage"] is None and report["coverage_below_minimum"] is False


def test_check_text_lists_what_never_ran(spec: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", spec, *FAST)
    assert code == 0
    assert "coverage    12/13 lines (92%)" in out
    assert f"never run   lines {NEVER}\n" in out
    assert f"{NEVER - 1}->{NEVER}" in out


@pytest.mark.parametrize("command", ["check", "exhaust"])
def test_min_coverage_exits_1_below_and_0_above(
    command: str, spec: str, capsys: pytest.CaptureFixture[str]
) -> None:
    options = FAST if command == "check" else EXHAUST_FAST
    code, out, _ = run(capsys, command, spec, *options, "--min-coverage", "95", "--json")
    report = json.loads(out)
    assert code == 1
    assert report["verdict"] == "pass" and report["coverage_below_minimum"] is True
    assert report["min_coverage"] == 95

    code, out, _ = run(capsys, command, spec, *options, "--min-coverage", "95")
    assert code == 1
    assert "COVERAGE    12/13 lines (92.3%) below --min-coverage 95: exit 1" in out

    code, out, _ = run(capsys, command, spec, *options, "--min-coverage", "92.3", "--json")
    assert code == 0
    assert json.loads(out)["coverage_below_minimum"] is False
    code, out, _ = run(capsys, command, spec, *options, "--min-coverage", "90")
    assert code == 0 and "COVERAGE" not in out


def test_a_failing_target_below_the_minimum_still_exits_1_with_its_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "buggy.py"
    path.write_text(SOURCE.replace("continue", "pass"))  # stale rows applied
    code, out, _ = run(capsys, "check", f"{path}::resolve", *FAST, "--no-save", "--json")
    report = json.loads(out)
    assert code == 1 and report["verdict"] == "fail" and report["coverage"] is not None


def test_builtin_targets_report_no_coverage(capsys: pytest.CaptureFixture[str]) -> None:
    ideal = FAST[:-2]  # builtin:reference keeps the ideal counters
    code, out, _ = run(capsys, "check", "builtin:reference", *ideal, "--json")
    assert code == 0 and json.loads(out)["coverage"] is None
    code, out, _ = run(capsys, "check", "builtin:reference", *ideal)
    assert code == 0 and "\ncoverage " not in out and "never run" not in out
    code, out, _ = run(capsys, "exhaust", "builtin:reference", *EXHAUST_FAST, "--json")
    assert code == 0 and json.loads(out)["coverage"] is None


@pytest.mark.parametrize("command", ["check", "exhaust"])
def test_a_gate_that_cannot_be_measured_is_a_usage_error(
    command: str, spec: str, capsys: pytest.CaptureFixture[str]
) -> None:
    options = FAST if command == "check" else EXHAUST_FAST
    code, out, err = run(capsys, command, "builtin:reference", *options, "--min-coverage", "50")
    assert code == 2 and not out
    assert "--min-coverage needs a target read from source" in err
    code, out, err = run(capsys, command, spec, *options, "--min-coverage", "50", "--no-coverage")
    assert code == 2 and "--no-coverage" in err


def test_no_coverage_turns_it_off(spec: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", spec, *FAST, "--no-coverage", "--json")
    assert code == 0 and json.loads(out)["coverage"] is None
    code, out, _ = run(capsys, "exhaust", spec, *EXHAUST_FAST, "--no-coverage")
    assert code == 0 and "\ncoverage " not in out


@pytest.mark.parametrize("value", ["-1", "101", "lots"])
def test_min_coverage_is_a_percentage(
    value: str, spec: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "check", spec, "--min-coverage", value)
    assert code == 2 and "percentage" in err


def test_releases_has_a_coverage_column(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two releases from a seeded cache (our 0.5.23-style fixture), no index needed."""
    monkeypatch.setenv("KVCHECK_CACHE", str(tmp_path / "cache"))
    newest = "srt/managers/scheduler_components/batch_result_processor.py"
    for version in ("0.5.22", "0.5.23"):
        root = tmp_path / "cache" / "sglang" / version
        (root / "sglang").mkdir(parents=True)
        package = SGLANG_FIXTURES / "v0_5_23" / "python" / "sglang"
        target = root / "sglang" / newest
        target.parent.mkdir(parents=True)
        target.write_text((package / newest).read_text())
        sglang_release.write_marker(root)
    monkeypatch.setattr(sglang_release, "available_versions", lambda: ["0.5.22", "0.5.23"])

    code, out, _ = run(capsys, "releases", "--from", "0.5.22", "--max-examples", "30", "--json")
    assert code == 0
    rows = json.loads(out)["releases"]
    assert [r["version"] for r in rows] == ["0.5.22", "0.5.23"]
    for row in rows:
        coverage = row["coverage"]
        assert 0 < coverage["lines_run"] < coverage["lines_total"]
        assert coverage["missed_lines"]  # kvcheck drives no grammar request

    code, out, _ = run(capsys, "releases", "--from", "0.5.22", "--max-examples", "30")
    header, *lines = out.splitlines()
    assert "coverage" in header
    first = rows[0]["coverage"]
    assert f" {first['lines_run']}/{first['lines_total']} " in lines[0]

    code, out, _ = run(
        capsys, "releases", "--from", "0.5.23", "--max-examples", "30", "--no-coverage", "--json"
    )
    assert all(r["coverage"] is None for r in json.loads(out)["releases"])


def test_a_release_row_without_coverage_shows_a_dash() -> None:
    row = releases.ReleaseRow(
        "0.5.23", "x", "honest", "0.5.23+", (("sglang", "pass"), ("ideal", "fail")), None, 1.0
    )
    assert row.coverage_column == "-"
