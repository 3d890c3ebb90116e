"""`kvcheck releases` without the network: a release that cannot be loaded gets a row with its
error while the others keep their verdicts (exit 2 at the end), and an empty range is a usage
error rather than a silent exit 0."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kvcheck.cli.main import main
from kvcheck.core.family import registered
from kvcheck.families.sglang import release as sglang_release
from tests.helpers import SGLANG_FIXTURES

NEWEST = "srt/managers/scheduler_components/batch_result_processor.py"


def seed_cache(cache: Path, version: str, *, damaged: bool = False) -> None:
    """A cached release built from our 0.5.23-style fixture; `damaged` leaves no resolver in it."""
    root = cache / "sglang" / version
    target = root / "sglang" / NEWEST
    target.parent.mkdir(parents=True)
    if damaged:
        target.write_text("this is not python (\n")
    else:
        package = SGLANG_FIXTURES / "v0_5_23" / "python" / "sglang"
        target.write_text((package / NEWEST).read_text())
    sglang_release.write_marker(root)  # recorded as it is: a load failure, not a damaged cache


@pytest.fixture
def three_releases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """0.5.21 and 0.5.23 are fine; 0.5.22's cached resolver does not parse."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("KVCHECK_CACHE", str(cache))
    seed_cache(cache, "0.5.21")
    seed_cache(cache, "0.5.22", damaged=True)
    seed_cache(cache, "0.5.23")
    monkeypatch.setattr(
        sglang_release, "available_versions", lambda: ["0.5.21", "0.5.22", "0.5.23"]
    )


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


FAST = ("--max-examples", "20", "--no-coverage")


@pytest.mark.usefixtures("three_releases")
def test_a_release_that_fails_to_load_keeps_the_others_verdicts_in_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "releases", "--from", "0.5.21", *FAST, "--json")
    assert code == 2
    rows = json.loads(out)["releases"]
    assert [r["version"] for r in rows] == ["0.5.21", "0.5.22", "0.5.23"]
    good = [rows[0], rows[2]]
    assert all(r["error"] is None and r["verdict_ideal"] in ("pass", "fail") for r in good)
    assert rows[1]["error"] and rows[1]["verdict_sglang"] == rows[1]["verdict_ideal"] == "error"
    assert "SGLang 0.5.22" in err and "1 release without a verdict: 0.5.22" in err
    assert "Traceback" not in err


@pytest.mark.usefixtures("three_releases")
def test_a_release_that_fails_to_load_gets_a_text_row(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "releases", "--from", "0.5.21", *FAST)
    assert code == 2
    table, _, allocation = out.partition("\n\n")
    _, *lines = table.splitlines()
    assert [line.split()[0] for line in lines] == ["0.5.21", "0.5.22", "0.5.23"]
    assert lines[1].split()[3:5] == ["error", "error"]
    # The allocation table has a row for each release, the one without a verdict too.
    assert [line.split()[0] for line in allocation.splitlines()[2:]] == [
        "0.5.21",
        "0.5.22",
        "0.5.23",
    ]


@pytest.mark.usefixtures("three_releases")
@pytest.mark.parametrize("as_json", [False, True])
def test_an_empty_range_is_a_usage_error(as_json: bool, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["releases", "--from", "0.5.23", "--to", "0.5.21", *FAST]
    code, out, err = run(capsys, *argv, *(["--json"] if as_json else []))
    assert code == 2
    assert "empty range" in err and "--from 0.5.23" in err
    if as_json:
        assert json.loads(out)["exit_code"] == 2
    else:
        assert out == ""


@pytest.mark.usefixtures("three_releases")
def test_sglang_rows_are_unchanged_by_the_family_columns(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The default family has no columns of its own: its header, text rows and JSON fields are
    the ones `kvcheck releases` printed before `--family` (byte for byte, the times aside)."""
    code, out, _ = run(capsys, "releases", "--to", "0.5.21", "--from", "0.5.21", *FAST)
    explicit, again, _ = run(
        capsys, "releases", "--family", "sglang", "--from", "0.5.21", "--to", "0.5.21", *FAST
    )
    assert code == explicit == 0
    # The mode table is as before; the allocation table (issue 21) comes after it.
    table, _, allocation = out.partition("\n\n")
    assert allocation.startswith("allocation (from the sglang searches above)")
    header, row = table.splitlines()
    assert header == (
        "release       convention api shape     sglang ideal  first broken               "
        "coverage   time  resolver"
    )
    assert again.splitlines()[0] == header
    untimed = re.compile(r" +\d+\.\ds  ")
    assert untimed.sub("|", row) == untimed.sub("|", again.splitlines()[1])
    # Nothing between the time and the resolver's location: no family column.
    assert untimed.sub("|", row).split("|")[1].startswith("SchedulerBatchResultProcessor.")
    _, out, _ = run(capsys, "releases", "--from", "0.5.21", "--to", "0.5.21", *FAST, "--json")
    assert list(json.loads(out)["releases"][0]) == [
        "version",
        "location",
        "convention",
        "api_shape",
        "verdict_sglang",
        "verdict_ideal",
        "first_broken",
        "seconds",
        "coverage",
        "error",
        "allocation",
    ]


def test_a_family_without_releases_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with registered("toy", "tests.unit.families.toy:FAMILY"):
        code = main(["releases", "--family", "toy", *FAST])
    _, err = capsys.readouterr()
    assert code == 2
    assert "engine family 'toy' has no releases to check" in err
