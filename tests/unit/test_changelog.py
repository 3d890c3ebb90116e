"""CHANGELOG.md stays a list of short entries that point into docs/, and docs/contracts.md, the
reference those entries point to, names what the code has.

An entry is a `- ` line and the two-space-indented lines after it; it may be 1 to 3 lines of
at most 100 characters (issue 20). Every `docs/*.md` the two pages name, as a link or in plain
text, must exist, and so must every `docs/semantics.md §N` section they cite."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import kvcheck
import kvcheck.counterexample
from kvcheck.families.sglang.invariants import INVARIANTS
from kvcheck.pytest_plugin import pytest_addoption
from tests.helpers import ROOT

CHANGELOG = ROOT / "CHANGELOG.md"
CONTRACTS = ROOT / "docs" / "contracts.md"
MAX_ENTRY_LINES = 3
MAX_LINE_CHARS = 100


def entries(text: str) -> list[list[str]]:
    """The list entries of a Markdown text: a `- ` line and its indented continuation lines."""
    found: list[list[str]] = []
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("- "):
            current = [line]
            found.append(current)
        elif current is not None and line.startswith("  ") and line.strip():
            current.append(line)
        else:
            current = None
    return found


def long_entries(text: str) -> list[str]:
    """The first line of each entry longer than `MAX_ENTRY_LINES` lines, with its length."""
    return [
        f"{len(entry)} lines: {entry[0]}" for entry in entries(text) if len(entry) > MAX_ENTRY_LINES
    ]


def long_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if len(line) > MAX_LINE_CHARS]


def named_docs(text: str, page: Path) -> set[str]:
    """The docs pages a text names: Markdown links to a `.md` file (relative to `page`) and plain
    `docs/NAME.md` mentions (relative to the repository root), as repository paths."""
    named = {
        (page.parent / link).resolve().relative_to(ROOT.resolve()).as_posix()
        for link in re.findall(r"\]\(([\w./-]+\.md)\)", text)
        if (page.parent / link).resolve().is_relative_to(ROOT.resolve())
    }
    named |= set(re.findall(r"(?<![\w/.])(docs/[\w.-]+\.md)", text))
    return named


def missing_docs(text: str, page: Path) -> list[str]:
    return sorted(name for name in named_docs(text, page) if not (ROOT / name).is_file())


def missing_sections(text: str) -> list[str]:
    """`docs/semantics.md §N[.M]` citations whose section heading does not exist."""
    headings = (ROOT / "docs" / "semantics.md").read_text()
    return sorted(
        f"§{number}"
        for number in set(re.findall(r"semantics\.md\)? §(\d+(?:\.\d+)*)", text))
        if not re.search(rf"^#+ {re.escape(number)}\.? ", headings, re.MULTILINE)
    )


def version_sections(text: str) -> dict[str, str]:
    """Each `## [version]` section's text, by version."""
    parts = re.split(r"^## \[([^\]]+)\][^\n]*\n", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


# --- the checks, on the real pages ---------------------------------------------------------


def test_every_changelog_entry_is_at_most_three_lines() -> None:
    too_long = long_entries(CHANGELOG.read_text())
    assert not too_long, (
        "CHANGELOG.md entries longer than 3 lines (say what changed for a user and point to the "
        f"doc with the detail; move the detail there): {too_long}"
    )


def test_changelog_lines_are_at_most_100_characters() -> None:
    assert not long_lines(CHANGELOG.read_text())


def test_the_changelog_has_entries_under_keep_a_changelog_headings() -> None:
    text = CHANGELOG.read_text()
    assert len(entries(text)) > 50
    headings = set(re.findall(r"^### (.+)$", text, re.MULTILINE))
    assert headings <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"} | {
        "Unchanged on purpose"
    }


def test_the_first_release_points_to_the_contracts_page() -> None:
    first = version_sections(CHANGELOG.read_text())["0.1.0"]
    assert "(docs/contracts.md)" in first
    assert len(first.strip().splitlines()) <= MAX_ENTRY_LINES


@pytest.mark.parametrize("page", [CHANGELOG, CONTRACTS], ids=lambda page: page.name)
def test_every_docs_page_named_exists(page: Path) -> None:
    text = page.read_text()
    assert named_docs(text, page), f"{page.name} names no docs page at all"
    assert not missing_docs(text, page), f"{page.name} names missing pages"


@pytest.mark.parametrize("page", [CHANGELOG, CONTRACTS], ids=lambda page: page.name)
def test_every_semantics_section_cited_exists(page: Path) -> None:
    assert not missing_sections(page.read_text())


def test_every_invariant_id_is_in_the_contracts_page_or_the_changelog() -> None:
    # The contracts page lists the ids up to c656ecb with their commits; a later id is named by
    # the CHANGELOG entry that adds it (a commit cannot name its own hash).
    text = CONTRACTS.read_text() + CHANGELOG.read_text()
    assert [name for name in INVARIANTS if f"`{name}`" not in text] == []


@pytest.mark.parametrize(
    "module", [kvcheck, kvcheck.counterexample], ids=lambda module: module.__name__
)
def test_the_contracts_page_names_every_public_name(module: Any) -> None:
    text = CONTRACTS.read_text()
    assert [name for name in module.__all__ if f"`{name}`" not in text] == []


class _RecordedOption:
    def __init__(self, names: tuple[str, ...]) -> None:
        self._names = names

    def names(self) -> list[str]:
        return list(self._names)


class _OptionRecorder:
    """Stands in for pytest's parser and option group: records the option names added (and
    offers them as `options`, which the plugin reads to share an option between families)."""

    def __init__(self) -> None:
        self.options: list[_RecordedOption] = []

    @property
    def names(self) -> list[str]:
        return [name for option in self.options for name in option.names()]

    def getgroup(self, *args: Any, **kwargs: Any) -> _OptionRecorder:
        return self

    def addoption(self, *names: str, **kwargs: Any) -> None:
        self.options.append(_RecordedOption(names))


def test_the_contracts_page_names_every_plugin_option() -> None:
    recorder = _OptionRecorder()
    pytest_addoption(recorder)  # type: ignore[arg-type]
    text = CONTRACTS.read_text()
    assert len(recorder.names) >= 10
    assert [name for name in recorder.names if f"`{name}" not in text] == []


# --- the checks can fail -------------------------------------------------------------------


def test_a_four_line_entry_is_found() -> None:
    text = "### Added\n\n- one\n  two\n  three\n- fine\n  two\n- four\n  b\n  c\n  d\nafter\n"
    assert long_entries(text) == ["4 lines: - four"]


def test_a_long_line_is_found() -> None:
    assert long_lines("- " + "x" * 99) == ["- " + "x" * 99]


def test_a_missing_page_is_found_as_a_link_and_as_text() -> None:
    text = "see [x](docs/cli.md), [y](docs/nowhere.md) and docs/gone.md"
    assert missing_docs(text, CHANGELOG) == ["docs/gone.md", "docs/nowhere.md"]
    relative = "see [z](cli.md) and [w](../docs/absent.md)"
    assert missing_docs(relative, CONTRACTS) == ["docs/absent.md"]


def test_a_missing_section_is_found() -> None:
    assert missing_sections("docs/semantics.md §5.6 and docs/semantics.md §99.1") == ["§99.1"]
