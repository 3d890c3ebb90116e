"""The suite never writes into the working tree: every test that runs kvcheck's commands writes
under `tmp_path` (`--save-dir`, `monkeypatch.chdir`), and this fixture fails a test that left a
counterexample or another new file in the checkout (caches of the tools the suite runs aside)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers import ROOT

# What pytest, Hypothesis and the architecture checks keep in the checkout by design (ignored).
_TOOL_CACHES = frozenset(
    {
        ".hypothesis",
        ".pytest_cache",
        ".grimp_cache",
        ".import_linter_cache",
        ".mypy_cache",
        ".ruff_cache",
        "__pycache__",
    }
)


def _snapshot() -> frozenset[str]:
    """The checkout's top-level names and what is in its `.kvcheck/` counterexample folder."""
    names = {name for name in (p.name for p in ROOT.iterdir()) if name not in _TOOL_CACHES}
    saved = ROOT / ".kvcheck" / "counterexamples"
    if saved.is_dir():
        names |= {f".kvcheck/counterexamples/{p.name}" for p in saved.iterdir()}
    return frozenset(names)


@pytest.fixture(autouse=True)
def _no_progress_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands print no header or progress lines on a non-terminal stderr unless a test asks
    for them (tests/unit/cli/test_deadline_options.py, tests/quality/test_deadlines_and_stops.py):
    the others read stderr for errors and warnings."""
    monkeypatch.setenv("KVCHECK_PROGRESS_SECONDS", "0")


@pytest.fixture(autouse=True)
def _no_writes_into_the_working_tree() -> Iterator[None]:
    before = _snapshot()
    yield
    new = sorted(_snapshot() - before)
    if new:
        pytest.fail(f"the test wrote into the working tree {ROOT}: {', '.join(new)}")
