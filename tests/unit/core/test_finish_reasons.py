"""What the fakes hold once a request finishes (issue 23, items 1 and 2; docs/fakes.md): finish
reasons are objects of kvcheck's stand-ins for SGLang's classes, `finished_len` is set where the
release sets it and nowhere else, and correct resolvers that read them pass while a wrong one
that takes `finished_len` for "finished" fails."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

import pytest

from kvcheck.families.sglang.builtins import reference, reference_v2
from kvcheck.families.sglang.engine import Engine
from kvcheck.families.sglang.fakes import (
    FakeReq,
    FinishAbort,
    FinishedMatchedRegex,
    FinishLength,
    FinishMatchedStr,
    FinishMatchedToken,
    FinishReason,
    UnmodeledAttributeError,
)
from kvcheck.families.sglang.names import STAND_INS
from kvcheck.families.sglang.scenario import Abort, Admit, Config, Event, Grammar, Retract, Step
from kvcheck.families.sglang.search import Bounds
from kvcheck.mutants import BY_NAME
from kvcheck.search.exhaust import exhaust
from tests.helpers import PLUGIN_FAST, TESTS_DIR, run_cli

RESOLVERS = TESTS_DIR / "fixtures" / "fidelity" / "resolvers.py"
SCHEDULE_BATCH = "sglang.srt.managers.schedule_batch"

pytest_plugins = ["pytester"]


def _play(*events: Event, resolver: Any = reference, **config: Any) -> Engine:
    engine = Engine(Config(**config), resolver, not_judged=frozenset())
    for event in events:
        engine.apply(event)
    return engine


def _finish(req: FakeReq) -> tuple[Any, int | None, Any]:
    reason = req.finished_reason
    return type(reason), req.finished_len, None if reason is None else reason.to_json()


# --- what the engine sets -----------------------------------------------------------------------


def test_a_length_finish_is_finish_length_with_finished_len() -> None:
    req = _play(Admit("r0", 4, 3), Step(), Step((3,)), Step()).reqs["r0"]
    assert _finish(req) == (FinishLength, 3, {"type": "length", "length": 3})
    assert req.finished_reason.length == 3 and len(req.output_ids) == 4  # over-shoot kept


def test_an_eos_finish_matches_the_stop_token_with_finished_len() -> None:
    req = _play(Admit("r0", 4, 9, eos_at=2), Step(), Step((3,)), Step()).reqs["r0"]
    stop = req.output_ids[1]
    assert _finish(req) == (FinishMatchedToken, 2, {"type": "stop", "matched": stop})


def test_a_running_abort_is_a_pending_finish_abort_then_the_reason_without_finished_len() -> None:
    engine = _play(Admit("r0", 4, 9), Step(), Step((2,)), Abort("r0"))
    req = engine.reqs["r0"]
    pending = req.to_finish
    assert type(pending) is FinishAbort and req.finished_reason is None
    engine.apply(Step())
    assert req.finished_reason is pending and req.to_finish is None  # SGLang moves the object
    assert _finish(req) == (
        FinishAbort,
        None,
        {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None},
    )


@pytest.mark.parametrize(
    "events",
    [
        (Admit("r0", 4, 9), Abort("r0")),  # never admitted
        (Admit("r0", 4, 9), Step(), Step((2,)), Retract("r0"), Step((2,)), Abort("r0")),
    ],
    ids=["queued", "retracted"],
)
def test_a_waiting_abort_sets_no_finish_reason(events: tuple[Event, ...]) -> None:
    # SGLang pops a waiting request from the queue and leaves its reason unset; kvcheck's own
    # code still knows the scheduler is done with it (the request is observed finished).
    engine = _play(*events)
    req = engine.reqs["r0"]
    assert (req.finished(), req.finished_reason, req.finished_len) == (False, None, None)
    assert req not in engine.waiting and req.to_finish is None
    observed = engine.apply(Step()).requests
    assert [(o.rid, o.finished) for o in observed] == [("r0", True)]


def test_a_grammar_finish_matches_the_last_token_without_finished_len() -> None:
    events = (Admit("r0", 10, 20, grammar=Grammar("terminate", 3)), Step(), Step((4,)), Step())
    req = _play(*events, resolver=reference_v2, convention="honest").reqs["r0"]
    assert _finish(req) == (
        FinishMatchedToken,
        None,
        {"type": "stop", "matched": req.output_ids[-1]},
    )


def test_a_refused_prefill_token_leaves_a_pending_finish_abort() -> None:
    events = (Admit("r0", 10, 20, grammar=Grammar("reject", 1)), Step(), Step())
    req = _play(*events, resolver=reference_v2, convention="honest").reqs["r0"]
    assert type(req.to_finish) is FinishAbort and req.finished_reason is None


def test_a_state_key_holds_a_targets_own_finish_abort() -> None:
    # A 0.5.16+ resolver stores its own FINISH_ABORT in `to_finish`; exhaustive search keys on it.
    engine = _play(Admit("r0", 4, 9), Step())
    engine.reqs["r0"].to_finish = FinishAbort("grammar refused a token")
    hash(engine.state_key())


def test_result_totals_start_at_sglangs_defaults() -> None:
    import torch

    from kvcheck.families.sglang.fakes import FakeResult

    result = FakeResult(torch.zeros(4, dtype=torch.int64), torch.ones(1, dtype=torch.int32), 4)
    totals = ("num_accepted_tokens", "num_accepted_drafts", "num_correct_drafts")
    assert [getattr(result, name) for name in totals] == [0, 0, 0]
    assert (result.num_block_accept_tokens, result.num_cap_tokens) == (0, 0)
    assert result.num_correct_drafts_per_req_cpu is None


@pytest.mark.parametrize("overlap", [True, False])
def test_a_prefill_batch_carries_the_schedulers_overlap_setting(overlap: bool) -> None:
    # SGLang builds every batch with the scheduler's `enable_overlap` (and `copy()` keeps it);
    # a target's own `advance_grammar_fsm` (0.5.17+) is handed the prefill batch.
    seen: list[bool] = []

    def advance_grammar_fsm(self: Any, result: Any, batch: Any) -> None:
        seen.append(batch.enable_overlap)

    config = Config(convention="honest", overlap=overlap)
    engine = Engine(
        config,
        reference_v2,
        {"advance_grammar_fsm": advance_grammar_fsm},
        not_judged=frozenset(),
    )
    for event in (Admit("r0", 4, 9, grammar=Grammar("accept")), Step(), Step()):
        engine.apply(event)
    assert seen and set(seen) == {overlap}


# --- the stand-ins ------------------------------------------------------------------------------


def test_stand_ins_are_the_engines_classes_with_sglangs_constructors() -> None:
    assert STAND_INS[(SCHEDULE_BATCH, "FINISH_ABORT")] is FinishAbort
    assert STAND_INS[(SCHEDULE_BATCH, "FINISH_LENGTH")] is FinishLength
    assert STAND_INS[(SCHEDULE_BATCH, "FINISH_MATCHED_TOKEN")] is FinishMatchedToken
    assert STAND_INS[(SCHEDULE_BATCH, "FINISH_MATCHED_STR")] is FinishMatchedStr
    assert STAND_INS[(SCHEDULE_BATCH, "FINISHED_MATCHED_REGEX")] is FinishedMatchedRegex
    assert STAND_INS[(SCHEDULE_BATCH, "BaseFinishReason")] is FinishReason
    assert FinishAbort().message == "Aborted"  # stored at construction, as SGLang does
    failed = FinishAbort("bad token", HTTPStatus.INTERNAL_SERVER_ERROR, "InternalServerError")
    assert failed.to_json()["status_code"] == 500
    assert FinishMatchedStr(matched="</s>").to_json() == {"type": "stop", "matched": "</s>"}
    assert FinishedMatchedRegex("x+").to_json() == {"type": "stop", "matched": "x+"}
    assert repr(FinishLength(length=8)) == "FINISH_LENGTH(length=8)"
    with pytest.raises(NotImplementedError):
        FinishReason().to_json()


def test_a_member_of_some_releases_only_is_unmodelled() -> None:
    # `is_error` exists in 0.5.6-0.5.12.post1 only: no verdict either way (exit 2).
    with pytest.raises(UnmodeledAttributeError, match=r"reads `req\.finished_reason\.is_error`"):
        _ = FinishAbort().is_error
    assert getattr(FinishLength(3), "is_error", None) is None


# --- resolvers that read them -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["logs_finish_type", "checks_finish_fields", "accumulates_totals"])
def test_correct_resolvers_reading_what_sglang_holds_pass_check(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(
        capsys, "check", f"{RESOLVERS}::{name}", "--max-examples", "200", "--no-coverage"
    )
    assert code == 0 and "PASS" in out, out


def test_a_correct_resolver_reading_finish_reasons_passes_in_the_plugin(
    pytester: pytest.Pytester,
) -> None:
    result = pytester.runpytest("--kvcheck-target", f"{RESOLVERS}::logs_finish_type", *PLUGIN_FAST)
    result.assert_outcomes(passed=1)


def test_a_correct_resolver_reading_finish_reasons_passes_fuzz(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.chdir(tmp_path)  # where a counterexample would be saved
    target = f"{RESOLVERS}::logs_finish_type"
    argv = ("fuzz", target, "--workers", "1", "--duration", "1", "--no-database", "--json")
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0 and '"verdict": "pass"' in out, out


def test_taking_finished_len_for_finished_fails_exhaust() -> None:
    entry = BY_NAME["finished-len-as-finished"]
    result = exhaust(
        entry.target(),
        Bounds(requests=1, events=5, max_new=(4,), eos=(None,), overlap=(True,)),
        convention=entry.convention,
        global_counters=entry.global_counters,
        adaptive=entry.adaptive,
        measure_coverage=False,
    )
    assert result.verdict == "fail"
    assert "committed-finished-frozen" in result.minimal_invariants
