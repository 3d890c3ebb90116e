"""docs/invariants.md's table of invariants is the one generated from the records."""

from __future__ import annotations

from pathlib import Path

from kvcheck.families.sglang.invariants import INVARIANTS, invariants_table

DOC = Path(__file__).resolve().parents[2] / "docs" / "invariants.md"


def _doc_table() -> str:
    """The first Markdown table under the doc's "## Invariants" heading."""
    lines = DOC.read_text().split("## Invariants\n", 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return "\n".join(lines[start:end])


def test_the_doc_holds_exactly_the_generated_table() -> None:
    assert _doc_table() == invariants_table(), (
        "docs/invariants.md's invariant table is stale: paste the output of "
        "`python -c 'from kvcheck.families.sglang.invariants import invariants_table as t; "
        "print(t())'`"
    )


def test_the_table_lists_every_invariant_in_checking_order() -> None:
    rows = invariants_table().splitlines()[2:]
    assert [row.split("`")[1] for row in rows] == list(INVARIANTS)
