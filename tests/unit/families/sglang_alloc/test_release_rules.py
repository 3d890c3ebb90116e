"""A release tree's own allocation code runs under the rule of that release (issue 21): the
release each rule covers, the version a package directory says it is, and the searches on the
release path drawing that rule only."""

from __future__ import annotations

import functools
import zipfile
from pathlib import Path

import attrs
import pytest

from kvcheck.core.target import Target
from kvcheck.errors import KvcheckUsageError
from kvcheck.families.sglang import release as sglang_release
from kvcheck.families.sglang.allocation import RuleAllocation
from kvcheck.families.sglang.allocation_rules import AllocationRule, rule_of_release
from kvcheck.families.sglang.distribution import scenario_space
from kvcheck.families.sglang.judging import SglangJudging
from kvcheck.families.sglang.real.path import ReleaseAllocationCode
from kvcheck.families.sglang.real.tree import allocation_tree
from kvcheck.families.sglang.release import package_version
from kvcheck.families.sglang.scenario import Config
from kvcheck.families.sglang.search import Bounds, check_bounds
from kvcheck.families.sglang.target import release_path_rules
from kvcheck.targets.loading import load_target


@pytest.mark.parametrize(
    ("version", "rule"),
    [
        ("0.5.6", "0.5.6"),
        ("0.5.6.post2", "0.5.6"),
        ("0.5.7", "0.5.7"),
        ("0.5.8.post1", "0.5.7"),
        ("0.5.9", "0.5.9"),
        ("0.5.10.post1", "0.5.9"),
        ("0.5.11", "0.5.11"),
        ("0.5.12.post1", "0.5.12"),
        ("0.5.14", "0.5.13"),
        ("0.5.15.post1", "0.5.13"),
        ("0.5.16", "0.5.16"),
        ("0.5.17", "0.5.17"),
        ("0.5.23", "0.5.17"),
        ("0.5.5", None),
        ("main", None),
    ],
)
def test_each_release_has_the_rule_of_its_row(version: str, rule: str | None) -> None:
    assert rule_of_release(version) == rule


def test_a_package_directory_says_its_version(tmp_path: Path) -> None:
    assert package_version(tmp_path) is None  # a git checkout never built says none
    (tmp_path / "version.py").write_text('__version__ = "0.5.012.post1"\n')
    assert package_version(tmp_path) == "0.5.12.post1"


def test_a_built_package_says_its_version_in_the_file_setuptools_scm_writes(
    tmp_path: Path,
) -> None:
    """0.5.7+: `version.py` takes `__version__` from `_version.py` and only falls back (indented)
    to other sources; `_version.py` assigns it in a chain. Unread, a 0.5.16 package directory
    was judged under 0.5.17's rule too, which retracts in another order: a false FAIL."""
    (tmp_path / "version.py").write_text(
        "try:\n    from ._version import __version__\nexcept ImportError:\n"
        '    __version__ = "0.0.0.dev0"\n'
    )
    assert package_version(tmp_path) is None
    (tmp_path / "_version.py").write_text(
        "__version__: str\nversion: str\n__version__ = version = '0.5.16'\n"
    )
    assert package_version(tmp_path) == "0.5.16"
    (tmp_path / "_version.py").write_text("__version__ = version = '0.5.17.dev4+g1234abc'\n")
    assert package_version(tmp_path) is None  # between releases: no rule is its own


@functools.cache
def _reference() -> Target:
    return load_target("builtin:reference")


def _release_tree(rule: AllocationRule | None) -> Target:
    """kvcheck's reference resolver with the allocation code of a release of `rule` (never
    compiled here: the rules are read off the code object)."""
    reference = _reference()
    code = ReleaseAllocationCode(lambda: Path("/nonexistent"), "a release", rule)
    shape = attrs.evolve(reference.shape, allocation_rules=("off", "0.5.12", "0.5.13"))
    return attrs.evolve(reference, allocation=code, shape=shape)


def test_the_release_path_draws_the_release_rule_only() -> None:
    tree = _release_tree("0.5.12")
    assert release_path_rules(tree) == ("0.5.12",)
    on_release = scenario_space(tree, SglangJudging("preclaim", allocation_path="release"))
    assert on_release.allocation == ("0.5.12",)
    # kvcheck's model judges the resolver under every rule of its generations, as before.
    on_model = scenario_space(tree, SglangJudging("preclaim"))
    assert on_model.allocation == ("off", "0.5.12", "0.5.13")
    # With adaptive switching, 0.5.12's rule runs without overlap only: 0.5.13 stands in for
    # the scenarios switching under overlap, which run kvcheck's model, not the release's code.
    switching = SglangJudging("preclaim", adaptive=True, allocation_path="release")
    assert scenario_space(tree, switching).allocation == ("0.5.12", "0.5.13")
    assert type(_code(tree)(Config(allocation="0.5.13"))) is RuleAllocation
    # A tree of no known release: its generations' rules that allocate.
    assert release_path_rules(_release_tree(None)) == ("0.5.12", "0.5.13")


def _code(tree: Target) -> ReleaseAllocationCode:
    code = tree.allocation
    assert isinstance(code, ReleaseAllocationCode)
    return code


def test_exhaust_refuses_another_rule_on_the_release_path(monkeypatch: pytest.MonkeyPatch) -> None:
    tree = _release_tree("0.5.12")
    monkeypatch.setattr(ReleaseAllocationCode, "unavailable", lambda self: None)
    options = SglangJudging("preclaim", allocation_path="release")
    with pytest.raises(KvcheckUsageError, match=r"under allocation 0\.5\.12 only, not 0\.5\.13"):
        check_bounds(tree, Bounds(allocations=("0.5.13",)), options)
    check_bounds(tree, Bounds(allocations=("0.5.12", "off")), options)


def test_an_unpacked_allocation_tree_says_its_release(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tree `sglang==V`'s own allocation code is compiled from keeps the files that say its
    version, so copies of it (the release-tree corpus) are judged under V's rule; a tree
    unpacked before they were kept is unpacked again."""
    (tmp_path / "wheels").mkdir()
    files = {
        "sglang/version.py": "from sglang._version import __version__\n",
        "sglang/_version.py": "__version__ = version = '0.5.16'\n",
        "sglang/srt/mem_cache/pool.py": "SIZE = 1\n",
        "sglang/srt/models/big.py": "WEIGHTS = 2\n",  # not allocation code: left packed
    }
    with zipfile.ZipFile(tmp_path / "wheels" / "sglang-0.5.16-py3-none-any.whl", "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)
    monkeypatch.setattr(sglang_release, "release_package", lambda version, cache: None)
    root = allocation_tree("0.5.16", cache=tmp_path)
    assert package_version(root / "sglang") == "0.5.16"
    assert (root / "sglang/srt/mem_cache/pool.py").is_file()
    assert not (root / "sglang/srt/models").exists()
    # As unpacked by a kvcheck that kept no version files: unpacked again.
    (root / "sglang" / "version.py").unlink()
    (root / "sglang" / "_version.py").unlink()
    assert package_version(allocation_tree("0.5.16", cache=tmp_path) / "sglang") == "0.5.16"
