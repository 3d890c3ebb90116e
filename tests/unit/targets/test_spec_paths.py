"""Which part of a target spec is a path (`spec_path`), and the spec with it made absolute
(`absolute_spec`, what counterexample files record)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvcheck.targets.loading import absolute_spec, spec_path


@pytest.mark.parametrize(
    "spec",
    [
        "builtin:reference",
        "sglang==0.5.11",
        "kvcheck.families.sglang.builtins:reference",
        "mutant:x",
    ],
)
def test_specs_without_a_path_are_kept(spec: str) -> None:
    assert spec_path(spec) is None
    assert absolute_spec(spec) == spec


def test_a_source_spec_gets_an_absolute_normalised_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert spec_path("sub/../r.py::R.resolve") == "sub/../r.py"
    assert absolute_spec("sub/../r.py::R.resolve") == f"{tmp_path}/r.py::R.resolve"
    assert absolute_spec(f"{tmp_path}/r.py::f") == f"{tmp_path}/r.py::f"
    home = Path("~").expanduser()
    assert absolute_spec("~/r.py::f") == f"{home}/r.py::f"


def test_a_checkout_directory_gets_an_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sglang").mkdir()
    monkeypatch.chdir(tmp_path)
    assert spec_path("sglang") == "sglang"
    assert absolute_spec("sglang") == str(tmp_path / "sglang")
    assert spec_path("not-a-directory") is None
