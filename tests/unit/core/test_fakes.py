"""The fakes kvcheck hands a resolver (`kvcheck.families.sglang.fakes`): every supported spelling
exists on
them, unmodelled names fail loudly, and `kvcheck spellings` prints the table."""

from __future__ import annotations

from typing import Any

import pytest

from kvcheck.cli.main import main
from kvcheck.families.sglang.fakes import (
    FakeBatch,
    FakeGrammar,
    FakeReq,
    FakeResult,
    FakeScheduler,
    UnmodeledAttributeError,
)
from kvcheck.families.sglang.spellings import SPELLINGS, spellings_table


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _fakes() -> dict[str, Any]:
    import torch

    req = FakeReq("r0", 4, 8)
    req.grammar = FakeGrammar("accept", None)
    result = FakeResult(torch.zeros(4, dtype=torch.int64), torch.ones(1, dtype=torch.int32), 4)
    return {"req": req, "batch": FakeBatch([req]), "result": result, "self": FakeScheduler(4, True)}


@pytest.mark.parametrize("spelling", [s for s in SPELLINGS if "<" not in s.path], ids=str)
def test_every_listed_spelling_exists_on_the_fakes(spelling: Any) -> None:
    owner, *names = spelling.path.split("(", 1)[0].split(".")
    value = _fakes()[owner]
    for name in names:
        value = getattr(value, name)
    assert not spelling.path.endswith(")") or callable(value)


def test_spellings_command_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "spellings")
    assert code == 0 and out.strip() == spellings_table()


def test_unmodelled_names_are_attribute_errors_that_name_the_supported_ones() -> None:
    req = _fakes()["req"]
    with pytest.raises(UnmodeledAttributeError, match=r"target reads `req\.foo`.*spec_verify_ct"):
        _ = req.foo
    assert getattr(req, "foo", None) is None  # hasattr-style version sniffing keeps working
    with pytest.raises(UnmodeledAttributeError, match=r"target writes `req\.spec_verify_count`"):
        req.spec_verify_count = 1


def test_grammar_fake_decides_by_output_position() -> None:
    terminate = FakeGrammar("terminate", 2)
    terminate.accept_token(7)
    assert not terminate.is_terminated()
    terminate.accept_token(8)
    assert terminate.is_terminated()
    with pytest.raises(ValueError, match="terminated"):
        terminate.accept_token(9)
    reject = FakeGrammar("reject", 1)
    with pytest.raises(ValueError, match="position 1"):
        reject.accept_token(7)
    reject.accept_token(8)  # a refused token uses up its position
    assert reject._offered == [7, 8] and not reject.is_terminated()


def test_batch_has_grammar_when_any_request_has_one() -> None:
    plain, constrained = FakeReq("r0", 4, 8), FakeReq("r1", 4, 8)
    assert not FakeBatch([plain]).has_grammar
    constrained.grammar = FakeGrammar("accept", None)
    batch = FakeBatch([plain, constrained])
    assert batch.has_grammar and batch.forward_mode.is_decode()
    assert FakeBatch([plain], "extend").forward_mode.is_extend()


def test_a_fake_is_made_with_modelled_names_only() -> None:
    # The constructors set their attributes unchecked (`StrictFake._set_fields`).
    for fake in _fakes().values():
        names = set(vars(fake)) - set(type(fake).__dict__)
        unmodelled = {n for n in names if not n.startswith("_") and n not in fake._fields}
        assert not unmodelled, (type(fake).__name__, unmodelled)


def test_writes_stay_checked_after_a_name_was_found_writable() -> None:
    req = FakeReq("r0", 4, 8)
    req.kv_committed_len = 3  # cached as writable for FakeReq
    req.kv_committed_len = 4
    with pytest.raises(UnmodeledAttributeError):
        req.not_a_field = 1
    result = _fakes()["result"]
    with pytest.raises(UnmodeledAttributeError):
        result.kv_committed_len = 1  # writable on a request, not on a result
