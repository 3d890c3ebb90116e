"""The quality tier: acceptance measurements (the mutant kill matrix, the exhaustive proof,
strategy coverage, every SGLang generation end to end, the browser, end-to-end processes).

A test's tier is where its file lives: every test collected under tests/quality/ gets the
`quality` marker here, so `pytest -m "not quality"` is the fast unit tier.
"""

from __future__ import annotations

from pathlib import Path

import pytest

QUALITY_DIR = Path(__file__).resolve().parent


# tryfirst: the marker must be on the items before `-m` deselects by it. A conftest's
# pytest_collection_modifyitems sees every collected item, not only this directory's.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.resolve().is_relative_to(QUALITY_DIR):
            item.add_marker(pytest.mark.quality)
