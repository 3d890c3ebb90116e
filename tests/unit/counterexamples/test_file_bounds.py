"""Every field of a counterexample file is bounded and exactly typed, and a file an editor
touched (a byte order mark) or that names an unknown field reads as one clear line (issue 23,
items 8 and 19, and the "BOM or unknown field" message)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from kvcheck.cli.main import main
from kvcheck.core.scenario import MAX_DOCUMENT_CHARS, MAX_EVENTS, MAX_ID_CHARS, from_json
from kvcheck.counterexamples.fileformat import load
from kvcheck.errors import KvcheckUsageError, ScenarioFormatError
from kvcheck.families.sglang.scenario import (
    MAX_PAGE_SIZE,
    MAX_POOL_PAGES,
    MAX_REQUEST_TOKENS,
    MAX_ROW_VALUE,
    MAX_ROWS,
)
from kvcheck.families.sglang.search import Bounds
from tests.unit.counterexamples.test_damaged_files import damaged, saved


def _event(index: int, key: str, value: Any) -> Any:
    return lambda data: data["events"][index].__setitem__(key, value)


def _config(**fields: Any) -> Any:
    def change(data: dict[str, Any]) -> None:
        data["schema_version"] = 3
        data["config"].update(fields)

    return change


def _many_steps(data: dict[str, Any]) -> None:
    data["events"] = data["events"] + [{"kind": "step"}] * MAX_EVENTS


ONE_BILLION = 1_000_000_000


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (_event(0, "prompt_len", ONE_BILLION), f"'prompt_len' is {ONE_BILLION}, above the bound"),
        (_event(0, "max_new_tokens", ONE_BILLION), f"above the bound {MAX_REQUEST_TOKENS}"),
        (_event(0, "eos_at", MAX_REQUEST_TOKENS + 1), "'eos_at' is 65537, above the bound"),
        (
            _event(0, "grammar", {"kind": "reject", "at": ONE_BILLION}),
            f"'at' is {ONE_BILLION}, above the bound",
        ),
        (_event(0, "rid", "r" * (MAX_ID_CHARS + 1)), f"more than the bound {MAX_ID_CHARS}"),
        (_event(2, "accepts", [2, ONE_BILLION]), f"'accepts' holds {ONE_BILLION}, above the bound"),
        (_event(2, "caps", [0] * (MAX_ROWS + 1)), f"more than the bound {MAX_ROWS}"),
        (_event(2, "blocks", [MAX_ROW_VALUE + 1]), f"above the bound {MAX_ROW_VALUE}"),
        (
            _config(allocation="0.5.16", pool_pages=ONE_BILLION),
            f"'pool_pages' is {ONE_BILLION}, above the bound {MAX_POOL_PAGES}",
        ),
        (
            _config(allocation="0.5.16", page_size=ONE_BILLION),
            f"'page_size' is {ONE_BILLION}, above the bound {MAX_PAGE_SIZE}",
        ),
        (_many_steps, f"more than the bound {MAX_EVENTS}"),
        (
            lambda d: d["violation"].update(event_index=ONE_BILLION),
            "'violation.event_index' is 1000000000, above the bound",
        ),
    ],
)
def test_a_value_past_its_bound_is_refused_at_once(
    tmp_path: Path, change: Any, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = damaged(tmp_path, change)
    with pytest.raises(ScenarioFormatError) as info:
        load(path)
    assert needle in str(info.value)
    started = time.monotonic()
    assert main(["replay", str(path)]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err
    assert time.monotonic() - started < 5


def test_a_file_at_the_bounds_still_reads(tmp_path: Path) -> None:
    def at_the_bounds(data: dict[str, Any]) -> None:
        _config(allocation="0.5.16", page_size=2, pool_pages=MAX_POOL_PAGES)(data)
        _event(0, "prompt_len", MAX_REQUEST_TOKENS)(data)

    scenario = load(damaged(tmp_path, at_the_bounds)).scenario
    assert scenario.config.pool_pages == MAX_POOL_PAGES
    assert scenario.events[0].prompt_len == MAX_REQUEST_TOKENS  # type: ignore[union-attr]


@pytest.mark.parametrize("version", [True, 1.0, 3.0, "1"])
def test_schema_version_must_be_an_integer(
    tmp_path: Path, version: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path = damaged(tmp_path, lambda d: d.update(schema_version=version))
    assert main(["replay", str(path)]) == 2
    assert "unsupported schema_version" in capsys.readouterr().err
    with pytest.raises(ScenarioFormatError, match="unsupported schema_version"):
        from_json(json.dumps({"schema_version": version, "config": {}, "events": []}))


def test_a_byte_order_mark_is_read_past(tmp_path: Path) -> None:
    path = saved(tmp_path)
    plain = load(path)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert load(path) == plain


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (_config(bogus=1), "invalid config: unknown field(s) 'bogus'; known fields: convention"),
        (_event(0, "colour", "red"), "invalid admit event: unknown field(s) 'colour'"),
        (
            _event(0, "grammar", {"kind": "accept", "when": 1}),
            "invalid admit event grammar: unknown field(s) 'when'",
        ),
        (lambda d: d["events"][0].pop("prompt_len"), "missing field(s) 'prompt_len'"),
        (_event(0, "grammar", {"at": 3}), "invalid admit event grammar: missing field(s) 'kind'"),
    ],
)
def test_an_unknown_or_missing_field_names_it_in_the_domain_words(
    tmp_path: Path, change: Any, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = damaged(tmp_path, change)
    assert main(["replay", str(path)]) == 2
    err = capsys.readouterr().err
    assert needle in err
    assert "__init__" not in err and "keyword argument" not in err and "positional" not in err


def test_a_number_of_thousands_of_digits_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = saved(tmp_path)
    path.write_text(path.read_text().replace('"event_index": ', '"event_index": 1' + "0" * 5000))
    assert main(["replay", str(path)]) == 2
    err = capsys.readouterr().err
    assert "thousands of digits" in err and "kvcheck bug" not in err


@pytest.mark.parametrize(
    "bounds",
    [
        {"prompt_lens": (MAX_REQUEST_TOKENS + 1,)},
        {"max_new": (ONE_BILLION,)},
        {"eos": (None, ONE_BILLION)},
        {"max_accept": MAX_ROW_VALUE + 1},
        {"events": MAX_EVENTS + 1},
    ],
)
def test_exhaust_never_finds_what_a_file_cannot_hold(bounds: dict[str, Any]) -> None:
    with pytest.raises(KvcheckUsageError, match="must be <="):
        Bounds(**bounds)


def test_a_huge_document_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    with pytest.raises(ScenarioFormatError, match="more than the bound"):
        from_json(" " * (MAX_DOCUMENT_CHARS + 1))
    path = tmp_path / "huge.kvcheck.json"
    with path.open("wb") as sparse:  # takes no disk: nothing is written but the size
        sparse.truncate(MAX_DOCUMENT_CHARS * 4 + 1)
    started = time.monotonic()
    with pytest.raises(ScenarioFormatError, match="far more than a counterexample file holds"):
        load(path)
    assert time.monotonic() - started < 1
