"""The README opens with exactly two commands, CI runs the second one verbatim, it stays a front
page, and the manual's spellings table is the generated one."""

from __future__ import annotations

import re

from kvcheck.families.sglang.spellings import spellings_table
from tests.helpers import ROOT


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```bash\n(.+?)\n```", text, flags=re.DOTALL)


def test_readme_opens_with_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    first_blocks = text.split("\n\n")[1:3]
    assert all(block.startswith("```bash\n") for block in first_blocks)
    install_and_run, install_and_test = readme_commands()[:2]
    assert "\n" not in install_and_run and "\n" not in install_and_test
    assert install_and_run.endswith(".venv/bin/kvcheck")
    # Both cores, a test file to a worker (module-scoped fixtures are computed once).
    assert install_and_test.endswith(".venv/bin/pytest -q -n 2 --dist loadfile")
    # A bare torch requirement would pull a CUDA build; both commands pin the CPU one.
    assert "torch==2.13.0" in install_and_run and "torch==2.13.0" in install_and_test


def test_ci_runs_the_readme_test_command() -> None:
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert readme_commands()[1] in ci_lines


def test_readme_table_is_the_generated_one() -> None:
    assert spellings_table() in (ROOT / "docs" / "sglang.md").read_text(), (
        "docs/sglang.md's spellings table is stale: paste the output of `kvcheck spellings`"
    )


def test_the_readme_is_a_front_page() -> None:
    """The manual lives in docs/; the README keeps what kvcheck is, the two commands, one real
    run, the main commands and the links (at most 200 lines)."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    for linked in re.findall(r"\]\((docs/[\w.-]+\.md)\)", text):
        assert (ROOT / linked).is_file(), linked
