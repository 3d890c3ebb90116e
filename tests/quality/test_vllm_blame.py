"""Who is blamed when a vLLM release target raises: a fault inside kvcheck's own adapter or
strict fakes (`kvcheck/families/vllm/real/`) is kvcheck's (one line, exit 2, no verdict), while an
exception raised by the release's own compiled code is the target's (`vllm-no-exception`).

Both directions run the release's real code (0.33.0 from the cached wheel): skipped when the
wheel cannot be had, a failure under CI=true.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from kvcheck.cli.main import main
from kvcheck.errors import TargetLoadError
from kvcheck.families.vllm.real import fakes
from kvcheck.families.vllm.real.adapter import ReleaseScheduler
from kvcheck.families.vllm.real.release import release_package

VERSION = "0.33.0"
FEW = ["--max-examples", "20", "--seed", "0", "--no-save"]


@pytest.fixture
def package() -> Path:
    try:
        return release_package(VERSION)
    except TargetLoadError as exc:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"vLLM {VERSION} cannot be had here: {exc}")


def _internal_error(capsys: pytest.CaptureFixture[str], where: str) -> None:
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.startswith("kvcheck: error:")]
    assert len(lines) == 1, captured.err
    assert "kvcheck's own code raised" in lines[0] and where in lines[0]
    assert "not a verdict on the target" in lines[0]
    assert "Traceback" not in captured.err
    assert "vllm-no-exception" not in captured.out


def test_a_fault_in_a_strict_fake_is_kvchecks_not_the_releases(
    package: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A bug in the fake block pool: its block size is text, so its own arithmetic raises
    # (inside `BlockPool._blocks_for`, which the release's `allocate_slots` call reaches).
    made = fakes.BlockPool.create.__func__  # type: ignore[attr-defined]

    def broken_create(cls: type[fakes.BlockPool], *args: object, **kwargs: object) -> object:
        pool = made(cls, *args, **kwargs)
        pool.block_size = str(pool.block_size)
        return pool

    monkeypatch.setattr(fakes.BlockPool, "create", classmethod(broken_create))
    assert main(["check", f"vllm=={VERSION}", *FEW]) == 2
    _internal_error(capsys, "fakes.py:")


def test_a_fault_in_the_adapter_is_kvchecks_not_the_releases(
    package: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A bug in the adapter: it calls one of its own methods with the wrong arguments while it
    # builds the runner's output for the release.
    monkeypatch.setattr(ReleaseScheduler, "_sampled_row", ReleaseScheduler.request_ids)
    assert main(["check", f"vllm=={VERSION}", *FEW]) == 2
    _internal_error(capsys, "adapter.py:")


def test_an_exception_of_the_releases_own_code_is_its_verdict(
    package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The release's own `check_stop` raises (a copy of the package, one line added), and so
    # the target raised: `vllm-no-exception`, a verdict.
    copy = tmp_path / "vllm"
    shutil.copytree(package, copy)
    utils = copy / "v1/core/sched/utils.py"
    text = utils.read_text(encoding="utf-8")
    marker = "    assert not request.pooling_params\n"
    assert marker in text
    utils.write_text(
        text.replace(marker, marker + "    raise RuntimeError('the release raised')\n", 1),
        encoding="utf-8",
    )
    assert main(["check", str(copy), *FEW, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["verdict"] == "fail"
    assert report["violation"]["invariant"] == "vllm-no-exception"
    assert "RuntimeError: the release raised" in report["violation"]["observed"]
