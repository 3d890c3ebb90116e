"""A target written as a directory path: `~` expands, and a path that names no directory says
what is there instead of calling the spec malformed (issue 23, messages)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kvcheck.cli.main import main
from kvcheck.errors import TargetLoadError
from kvcheck.targets.loading import absolute_spec, load_target, spec_path
from tests.helpers import SGLANG_FIXTURES


def _refusal(spec: str) -> str:
    with pytest.raises(TargetLoadError) as info:
        load_target(spec)
    message = str(info.value)
    assert "malformed target" not in message and "\n" not in message
    return message


def test_a_directory_under_home_is_found_with_a_tilde(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    shutil.copytree(SGLANG_FIXTURES / "v0_5_23", tmp_path / "sglang")
    target = load_target("~/sglang")
    assert "SchedulerBatchResultProcessor._resolve_spec_v2_tokens" in target.description
    assert spec_path("~/sglang") == "~/sglang"
    assert absolute_spec("~/sglang") == str(tmp_path / "sglang")


@pytest.mark.parametrize("spec", ["{tmp}/no-such-checkout", "./no-such-checkout", "~/nowhere"])
def test_a_missing_directory_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: str
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    spec = spec.format(tmp=tmp_path)
    assert f"no such directory {spec!r}" in _refusal(spec)


def test_a_symlink_loop_is_named(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    message = _refusal(str(tmp_path / "a"))
    assert f"cannot read the directory {str(tmp_path / 'a')!r}" in message
    assert "symbolic links" in message


def test_a_file_given_as_a_directory_says_how_to_name_a_resolver_in_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "resolver.py"
    file.write_text("")
    assert main(["check", str(file)]) == 2
    err = capsys.readouterr().err
    assert "is a file, not a directory" in err and "path/to/file.py::Qualname" in err


def test_a_word_that_is_no_path_is_still_malformed() -> None:
    with pytest.raises(TargetLoadError, match="malformed target 'nothing'"):
        load_target("nothing")
