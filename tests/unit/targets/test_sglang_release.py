"""SGLang as a target without the network: checkout and package directories, releases from a
seeded cache or a stand-in pip, and every way a release spec can be wrong."""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from kvcheck.cli.main import main
from kvcheck.errors import TargetLoadError
from kvcheck.families.sglang import release as sglang_release
from kvcheck.search.check import check
from kvcheck.targets.loading import load_target
from tests.helpers import SGLANG_FIXTURES

# Fixture folders are laid out like checkout roots: vX/python/sglang/srt/managers/...
TODAY = SGLANG_FIXTURES / "v0_5_23"
NEWEST_FILE = "srt/managers/scheduler_components/batch_result_processor.py"


@pytest.mark.parametrize(
    ("fixture", "method"),
    [
        ("v0_5_23", "SchedulerBatchResultProcessor._resolve_spec_v2_tokens"),
        ("v0_5_12", "SchedulerOutputProcessorMixin._resolve_spec_overlap_tokens"),
        ("v0_5_6", "SchedulerOutputProcessorMixin._resolve_spec_overlap_token_ids"),
    ],
)
def test_a_checkout_root_is_a_target_whose_resolver_is_found(fixture: str, method: str) -> None:
    target = load_target(str(SGLANG_FIXTURES / fixture))
    assert f"{method} (" in target.description
    assert target.spec == str(SGLANG_FIXTURES / fixture)


def test_the_package_directory_is_a_target_too() -> None:
    from_root = load_target(str(TODAY))
    from_package = load_target(str(TODAY / "python" / "sglang"))
    assert from_root.description.split(": ", 1)[1] == from_package.description.split(": ", 1)[1]
    assert check(from_package, global_counters="sglang", max_examples=50, seed=0).passed


def test_a_directory_that_is_not_sglang_is_a_load_error(tmp_path: Path) -> None:
    with pytest.raises(TargetLoadError, match="is not an SGLang package"):
        load_target(str(tmp_path))


def test_a_package_without_the_resolver_names_the_places_it_looked(tmp_path: Path) -> None:
    (tmp_path / "sglang" / "srt" / "managers").mkdir(parents=True)
    with pytest.raises(TargetLoadError, match=r"no spec-v2 overlap resolver.*_resolve_spec_v2"):
        load_target(str(tmp_path))


def _fake_wheel(directory: Path, version: str) -> Path:
    """A wheel holding our 0.5.23 fixture file where SGLang keeps the resolver."""
    wheel = directory / f"sglang-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.write(TODAY / "python" / "sglang" / NEWEST_FILE, f"sglang/{NEWEST_FILE}")
        archive.writestr("sglang/srt/other.py", "raise SystemExit('never unpacked')\n")
    return wheel


class FakePip:
    """Stands in for `python -m pip`: records calls, answers as told."""

    def __init__(self, *, wheel: bool = True, stderr: str = "") -> None:
        self.calls: list[list[str]] = []
        self.wheel = wheel
        self.stderr = stderr

    def __call__(self, command: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(command))
        if self.wheel and "download" in command:
            spec = next(c for c in command if c.startswith("sglang=="))
            _fake_wheel(Path(command[command.index("-d") + 1]), spec.removeprefix("sglang=="))
            return subprocess.CompletedProcess(list(command), 0, "", "")
        return subprocess.CompletedProcess(list(command), 1, "", self.stderr)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KVCHECK_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_release_is_fetched_once_then_read_from_the_cache(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pip = FakePip()
    monkeypatch.setattr(sglang_release, "_pip", pip)
    target = load_target("sglang==0.5.23")
    assert "SGLang 0.5.23 (package index): SchedulerBatchResultProcessor" in target.description
    assert len(pip.calls) == 1 and "--no-deps" in pip.calls[0]
    unpacked = cache / "sglang" / "0.5.23"
    assert (unpacked / ".complete").is_file()
    assert (unpacked / "sglang" / NEWEST_FILE).is_file()
    assert not (unpacked / "sglang" / "srt" / "other.py").exists()  # only resolver files

    load_target("sglang==0.5.23")
    assert len(pip.calls) == 1  # the second load never asks pip


def test_an_interrupted_unpack_is_redone(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    partial = cache / "sglang" / "0.5.23" / "sglang" / "srt"
    partial.mkdir(parents=True)  # no .complete: as if killed while unpacking
    monkeypatch.setattr(sglang_release, "_pip", FakePip())
    assert "SchedulerBatchResultProcessor" in load_target("sglang==0.5.23").description


def test_a_seeded_cache_needs_no_index(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = cache / "sglang" / "0.5.23"
    shutil.copytree(TODAY / "python" / "sglang", root / "sglang")
    sglang_release.write_marker(root)
    monkeypatch.setattr(sglang_release, "_pip", FakePip(wheel=False, stderr="no network"))
    assert "0.5.23" in load_target("sglang==0.5.23").description


def test_a_version_not_on_the_index_names_the_ones_that_are(
    cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stderr = (
        "ERROR: Could not find a version that satisfies the requirement sglang==0.5.99 "
        "(from versions: 0.4.0, 0.5.5, 0.5.6, 0.5.12.post1, 0.5.23)\n"
        "ERROR: No matching distribution found for sglang==0.5.99\n"
    )
    monkeypatch.setattr(sglang_release, "_pip", FakePip(wheel=False, stderr=stderr))
    assert main(["check", "sglang==0.5.99"]) == 2
    err = capsys.readouterr().err
    assert "SGLang 0.5.99 is not on the package index" in err
    assert "0.5.6, 0.5.12.post1, 0.5.23" in err and "0.5.5" not in err


def test_no_index_and_no_cache_says_so(
    cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stderr = "WARNING: Retrying ... NewConnectionError\nERROR: connection refused\n"
    monkeypatch.setattr(sglang_release, "_pip", FakePip(wheel=False, stderr=stderr))
    assert main(["check", "sglang==0.5.23"]) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot fetch SGLang 0.5.23" in err and "KVCHECK_CACHE" in err
    assert "connection refused" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("sglang==latest", "malformed SGLang release"),
        ("sglang==0.5.5", "has no spec-v2 overlap resolver; kvcheck checks 0.5.6 and later"),
        ("sglang==0.4.10", "has no spec-v2 overlap resolver"),
    ],
)
def test_bad_release_specs_are_load_errors(spec: str, message: str) -> None:
    with pytest.raises(TargetLoadError, match=message):
        load_target(spec)


def test_versions_sort_with_post_releases_in_place() -> None:
    versions = ["0.5.13", "0.5.12.post1", "0.5.6", "0.5.12", "0.5.10"]
    assert sorted(versions, key=sglang_release.version_key) == [
        "0.5.6",
        "0.5.10",
        "0.5.12",
        "0.5.12.post1",
        "0.5.13",
    ]


def test_the_cache_location_follows_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KVCHECK_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert sglang_release.cache_dir() == tmp_path / "xdg" / "kvcheck"
    monkeypatch.setenv("KVCHECK_CACHE", str(tmp_path / "mine"))
    assert sglang_release.cache_dir() == tmp_path / "mine"


# --- a damaged or unusable cache (issue 23, items 5 and 16) -------------------------------------


def _loaded_once(cache: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[FakePip, Path]:
    pip = FakePip()
    monkeypatch.setattr(sglang_release, "_pip", pip)
    load_target("sglang==0.5.23")
    return pip, cache / "sglang" / "0.5.23" / "sglang" / NEWEST_FILE


def test_a_damaged_cached_file_is_unpacked_again_from_the_wheel(
    cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pip, unpacked = _loaded_once(cache, monkeypatch)
    whole = unpacked.read_bytes()
    unpacked.write_bytes(whole[: len(whole) // 2])  # truncated, as by a full disk
    assert "SchedulerBatchResultProcessor" in load_target("sglang==0.5.23").description
    assert unpacked.read_bytes() == whole
    assert len(pip.calls) == 1  # from the cached wheel, no download
    err = capsys.readouterr().err
    assert "cached SGLang 0.5.23" in err and str(cache / "sglang" / "0.5.23") in err
    assert f"{NEWEST_FILE} does not match the hash" in err


def test_a_missing_cached_file_is_unpacked_again(
    cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _, unpacked = _loaded_once(cache, monkeypatch)
    unpacked.unlink()
    load_target("sglang==0.5.23")
    assert unpacked.is_file() and f"{NEWEST_FILE} is missing" in capsys.readouterr().err


def test_a_marker_without_hashes_is_not_trusted(
    cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _, unpacked = _loaded_once(cache, monkeypatch)
    marker = cache / "sglang" / "0.5.23" / sglang_release.MARKER
    marker.write_text(NEWEST_FILE + "\n")  # an older kvcheck's marker
    unpacked.write_text("damaged")
    load_target("sglang==0.5.23")
    assert unpacked.read_text() != "damaged"
    assert sglang_release.unpacked_damage(marker.parent) is None
    assert "records no file hashes" in capsys.readouterr().err


def test_a_damaged_wheel_is_downloaded_again(
    cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pip, unpacked = _loaded_once(cache, monkeypatch)
    unpacked.write_text("damaged")
    (wheel,) = (cache / "wheels").glob("*.whl")
    wheel.write_bytes(wheel.read_bytes()[:100])
    assert "SchedulerBatchResultProcessor" in load_target("sglang==0.5.23").description
    assert len(pip.calls) == 2
    err = capsys.readouterr().err
    assert f"the cached wheel {str(wheel)!r} is damaged" in err


def test_a_wheel_damaged_even_when_downloaded_again_names_the_cache(
    cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken_pip(command: Sequence[str]) -> subprocess.CompletedProcess[str]:
        (Path(command[command.index("-d") + 1]) / "sglang-0.5.23-py3-none-any.whl").write_text("")
        return subprocess.CompletedProcess(list(command), 0, "", "")

    monkeypatch.setattr(sglang_release, "_pip", broken_pip)
    assert main(["check", "sglang==0.5.23"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "damaged even when downloaded again" in err
    assert str(cache) in err and "KVCHECK_CACHE" in err and "kvcheck bug" not in err


@pytest.mark.parametrize("where", ["a file", "under a file"])
def test_an_unusable_cache_is_named_with_the_variable(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    where: str,
) -> None:
    file = tmp_path / "not-a-folder"
    file.write_text("")
    cache = file if where == "a file" else file / "cache"
    monkeypatch.setenv("KVCHECK_CACHE", str(cache))
    monkeypatch.setattr(sglang_release, "_pip", FakePip())
    assert main(["check", "sglang==0.5.23"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "kvcheck bug" not in err
    assert f"kvcheck's cache {str(cache)!r} is unusable" in err and "KVCHECK_CACHE" in err


def test_a_cache_kvcheck_may_not_write_is_named(
    cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refused(self: Path, *args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied", str(self))

    # As a read-only folder behaves for a user other than root (the tests may run as root).
    monkeypatch.setattr(Path, "mkdir", refused)
    monkeypatch.setattr(sglang_release, "_pip", FakePip())
    assert main(["check", "sglang==0.5.23"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"kvcheck's cache {str(cache)!r} is unusable: Permission denied" in err
    assert "KVCHECK_CACHE" in err and "kvcheck bug" not in err


# --- what pip says, told apart (issue 23, messages) ---------------------------------------------


@pytest.mark.parametrize(
    ("spelled", "normal"),
    [
        ("0.5.011", "0.5.11"),
        ("0.5.11.0", "0.5.11"),
        ("v0.5.12-POST01", "0.5.12.post1"),
        ("0.5.12post1", "0.5.12.post1"),
        ("0.5.12-1", "0.5.12.post1"),
        (" 0.5.23 ", "0.5.23"),
    ],
)
def test_versions_are_normalized_as_pep_440_does(spelled: str, normal: str) -> None:
    assert sglang_release.parse_spec(f"sglang=={spelled}") == normal


def test_a_leading_zero_finds_the_wheel_pip_fetched(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def real_pip(command: Sequence[str]) -> subprocess.CompletedProcess[str]:
        # pip normalizes the requirement: `sglang==0.5.011` fetches the 0.5.11 wheel.
        _fake_wheel(Path(command[command.index("-d") + 1]), "0.5.11")
        return subprocess.CompletedProcess(list(command), 0, "", "WARNING: unrelated\n")

    monkeypatch.setattr(sglang_release, "_pip", real_pip)
    target = load_target("sglang==0.5.011")
    assert "SGLang 0.5.11 (package index)" in target.description


UNREACHABLE = (
    "WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) "
    "after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection."
    "HTTPSConnection object>: Failed to establish a new connection: [Errno 101] Network is "
    "unreachable')': /simple/sglang/\n"
    "ERROR: Could not find a version that satisfies the requirement sglang==0.5.23 (from "
    "versions: none)\n"
    "ERROR: No matching distribution found for sglang==0.5.23\n"
)


@pytest.mark.parametrize(
    ("stderr", "needle"),
    [
        (UNREACHABLE, "pip could not reach the package index"),
        (
            "ERROR: Could not find a version that satisfies the requirement sglang==0.5.23 "
            "(from versions: none)\nERROR: No matching distribution found for sglang==0.5.23\n",
            "lists no SGLang release at all",
        ),
        ("/usr/bin/python3: No module named pip\n", "pip is not installed for"),
        (
            "ERROR: HTTP error 500 while getting https://files/sglang.whl\n"
            "WARNING: You are using pip version 21.0; however, version 24.0 is available.\n",
            "(ERROR: HTTP error 500 while getting https://files/sglang.whl)",
        ),
    ],
)
def test_why_a_release_could_not_be_fetched_is_told_apart(
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    stderr: str,
    needle: str,
) -> None:
    monkeypatch.setattr(sglang_release, "_pip", FakePip(wheel=False, stderr=stderr))
    assert main(["check", "sglang==0.5.23"]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1
    assert "not on the package index" not in err and "KVCHECK_CACHE" in err


def test_the_allocation_tree_fetches_a_wheel_the_cache_lost(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The resolver's entry intact, its wheel deleted: the allocation tree fetched nothing and
    # `auto` judged the release by kvcheck's model ("the wheel ... is not in ...").
    from kvcheck.families.sglang.real.tree import allocation_tree

    pip = FakePip()
    monkeypatch.setattr(sglang_release, "_pip", pip)
    load_target("sglang==0.5.23")
    for wheel in (cache / "wheels").glob("*.whl"):
        wheel.unlink()
    root = allocation_tree("0.5.23")
    assert len(pip.calls) == 2 and "download" in pip.calls[1]
    assert (root / sglang_release.MARKER).is_file()
