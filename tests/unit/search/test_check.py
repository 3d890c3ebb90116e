"""The property search (`kvcheck.search.check`): `search` and `check`, their verdicts, the
convention fallback, bad options and the example database's keys."""

from __future__ import annotations

from kvcheck.targets.loading import load_target


def test_database_entries_are_keyed_by_target_and_options() -> None:
    from hypothesis.database import InMemoryExampleDatabase

    from kvcheck.search.check import search

    db = InMemoryExampleDatabase()
    outcome = search(load_target("builtin:seed-prefix"), convention="preclaim", database=db)
    assert outcome.failure is not None
    keys = {key for key in db.data if not key.startswith(b".hypothesis")}
    assert b"kvcheck.search.check|builtin:seed-prefix|preclaim|ideal|False|None" in keys
