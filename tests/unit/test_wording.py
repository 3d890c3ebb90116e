"""`plural`: a count with its noun in the right number."""

from __future__ import annotations

from kvcheck.wording import plural


def test_one_is_singular_and_every_other_count_is_plural() -> None:
    assert plural(1, "failure") == "1 failure"
    assert [plural(n, "failure") for n in (0, 2)] == ["0 failures", "2 failures"]


def test_an_irregular_plural_is_given() -> None:
    assert plural(1, "child", "children") == "1 child"
    assert plural(3, "child", "children") == "3 children"
