"""The architecture as tests: no import cycles among kvcheck's modules, and the import-linter
contracts in pyproject.toml hold (CI also runs `lint-imports` on its own)."""

from __future__ import annotations

import graphlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

from tests.helpers import ROOT


def _import_graph() -> dict[str, set[str]]:
    """Module -> the kvcheck modules it imports: function-level imports included, and imports
    for type checkers only too (they never run, but a cycle through them is still two modules
    that cannot be read, or split, one without the other)."""
    graph = grimp.build_graph("kvcheck", exclude_type_checking_imports=False)
    return {
        module: {
            imported
            for imported in graph.find_modules_directly_imported_by(module)
            if imported.split(".")[0] == "kvcheck"
        }
        for module in graph.modules
        if module.split(".")[0] == "kvcheck"
    }


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    return None


def test_kvcheck_has_no_import_cycles() -> None:
    assert _cycle(_import_graph()) is None


def test_the_cycle_check_finds_a_cycle() -> None:
    graph = _import_graph()
    graph["kvcheck.families.sglang.scenario"] = graph["kvcheck.families.sglang.scenario"] | {
        "kvcheck.families.sglang.engine"
    }
    cycle = _cycle(graph)
    assert cycle is not None and "kvcheck.families.sglang.engine" in cycle


_needs_import_linter = pytest.mark.skipif(
    shutil.which("lint-imports") is None
    and not Path(sys.executable).with_name("lint-imports").exists(),
    reason="import-linter is not installed (the dev extra has it)",
)


def _lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` on the contracts and the `kvcheck` package of `tree` (a checkout or a copy
    of one), with `tree` first on the path so that its `kvcheck` is the one analysed."""
    command = Path(sys.executable).with_name("lint-imports")
    return subprocess.run(
        [str(command) if command.exists() else "lint-imports", "--no-cache"],
        cwd=tree,
        # Wide enough that no contract's name wraps in the report.
        env=os.environ | {"PYTHONPATH": str(tree), "COLUMNS": "1000"},
        capture_output=True,
        text=True,
        timeout=120,
    )


@_needs_import_linter
def test_import_linter_contracts_hold() -> None:
    done = _lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


# The contracts that must break when the module on the left imports the strategies (which load
# Hypothesis): the strategies are a layer the contracts see, not a name outside them. (No layer
# of the pipeline imports a family's model: the generic layers reach it through the registry.)
_STRATEGIES_FORBIDDEN_IN = {
    "kvcheck/families/sglang/model.py": ("The reference model is written from the semantics",),
    "kvcheck/counterexamples/replay.py": (
        "The pipeline: each layer uses only the layers below it",
        "No Hypothesis in the counterexample, replay and exhaustive paths",
    ),
}


@_needs_import_linter
@pytest.mark.parametrize("module", sorted(_STRATEGIES_FORBIDDEN_IN))
def test_the_contracts_forbid_the_strategies_below_the_search(module: str, tmp_path: Path) -> None:
    shutil.copytree(
        ROOT / "kvcheck", tmp_path / "kvcheck", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    with (tmp_path / module).open("a") as source:
        source.write("\nimport kvcheck.strategies  # noqa: E402\n")
    done = _lint_imports(tmp_path)
    report = done.stdout + done.stderr
    assert done.returncode == 1, report
    broken = {
        name
        for name in _STRATEGIES_FORBIDDEN_IN[module]
        if re.search(f"^{re.escape(name)}.* BROKEN", report, re.MULTILINE)
    }
    assert broken == set(_STRATEGIES_FORBIDDEN_IN[module]), report


def _named_paths(text: str) -> set[str]:
    """Repository paths a document names: `kvcheck/...`, `strategies/...`, `tests/...`,
    `docs/...` (files or folders), and relative Markdown links."""
    named = set(re.findall(r"`((?:kvcheck|strategies|tests|docs|benchmarks)/[\w./-]*)`", text))
    named |= {link for link in re.findall(r"\]\(([\w./-]+\.md)\)", text)}
    return named


@pytest.mark.parametrize(
    "document",
    ["README.md", "CHANGELOG.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))],
)
def test_documents_name_only_paths_that_exist(document: str) -> None:
    path = ROOT / document
    missing = sorted(
        name
        for name in _named_paths(path.read_text())
        if not (path.parent / name).exists() and not (ROOT / name).exists()
    )
    assert not missing, f"{document} names paths that do not exist: {missing}"


def test_every_module_is_on_the_architecture_map() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    modules = {
        path.stem
        for path in (ROOT / "kvcheck").rglob("*.py")
        if path.stem not in ("__init__", "__main__")
    }
    unlisted = sorted(m for m in modules if f"`{m}`" not in text and f"`{m}," not in text)
    assert not unlisted, f"modules missing from docs/architecture.md's module map: {unlisted}"


# Each line the contracts of the family seam must refuse: the module, the import appended to it,
# and the contract that must then break.
_SEAM_BREAKS = {
    "kvcheck/search/shrink.py": (
        "import kvcheck.families.sglang.engine",
        "Generic layers reach a family only through the registry",
    ),
    "kvcheck/core/run.py": (
        "from kvcheck.families.sglang import model",
        "Generic layers reach a family only through the registry",
    ),
    "kvcheck/__init__.py": (
        "import kvcheck.families.sglang.scenario",
        "The public names (kvcheck/__init__.py) reach a family only through the registry",
    ),
    "kvcheck/families/sglang/model.py": (
        "import kvcheck.search.check",
        "A family builds on the generic core only",
    ),
}


@_needs_import_linter
@pytest.mark.parametrize("module", sorted(_SEAM_BREAKS))
def test_the_contracts_keep_families_behind_the_registry(module: str, tmp_path: Path) -> None:
    shutil.copytree(
        ROOT / "kvcheck", tmp_path / "kvcheck", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    line, contract = _SEAM_BREAKS[module]
    with (tmp_path / module).open("a") as source:
        source.write(f"\n{line}  # noqa: E402\n")
    done = _lint_imports(tmp_path)
    report = done.stdout + done.stderr
    assert done.returncode == 1, report
    assert re.search(f"^{re.escape(contract)}.* BROKEN", report, re.MULTILINE), report
