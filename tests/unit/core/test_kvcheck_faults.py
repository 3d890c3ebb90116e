"""kvcheck's own faults are never verdicts: a call its fakes do not accept and an exception raised
inside its own code are exit 2 with a message saying so; the target's own exceptions stay
`target-raised`. SGLang names kvcheck can stand in for load without any flag."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvcheck.cli.main import main
from kvcheck.core.run import run_scenario
from kvcheck.errors import KvcheckInternalError
from kvcheck.families.sglang import fakes
from kvcheck.families.sglang.builtins import reference
from kvcheck.families.sglang.engine import UnsupportedTargetError
from kvcheck.families.sglang.fakes import FakeModelWorker
from kvcheck.families.sglang.scenario import Admit, Step
from kvcheck.targets.source import load_from_source
from tests.helpers import scenario, target

EVENTS = (Admit("r0", 4, 8), Step(), Step((2,)), Step((2,)))


def test_a_call_the_fake_does_not_accept_is_kvchecks_limit_not_a_violation() -> None:
    def snapshot_without_arguments(self: Any, result: Any, batch: Any) -> Any:
        self.metrics_reporter.snapshot_spec_decode_metrics()  # SGLang passes (batch, result)
        return reference(self, result, batch)

    with pytest.raises(UnsupportedTargetError) as info:
        target(snapshot_without_arguments)  # the probe already runs it
    message = str(info.value)
    shown = "`self.metrics_reporter.snapshot_spec_decode_metrics(batch, result)`"
    assert f"kvcheck's model of {shown}" in message
    assert "does not accept" in message and "not a verdict" in message


def test_the_real_call_shape_is_accepted() -> None:
    def snapshot_first(self: Any, result: Any, batch: Any) -> Any:
        self.metrics_reporter.snapshot_spec_decode_metrics(batch, result)
        return reference(self, result, batch)

    assert run_scenario(scenario(*EVENTS), target(snapshot_first)).violation is None


def test_an_exception_inside_a_fake_is_a_kvcheck_fault(monkeypatch: pytest.MonkeyPatch) -> None:
    def feeds_controller(self: Any, result: Any, batch: Any) -> Any:
        runs = reference(self, result, batch)
        self.model_worker.on_verify_complete_cpu([len(r) - 1 for r in runs])
        return runs

    checked = target(feeds_controller)
    # A bug inside kvcheck's core: code compiled as if it were in kvcheck/families/sglang/fakes.py.
    namespace: dict[str, Any] = {}
    source = "def broken(self, per_req, batch_size=None):\n    raise RuntimeError('bug')\n"
    exec(compile(source, fakes.__file__, "exec"), namespace)
    monkeypatch.setattr(FakeModelWorker, "on_verify_complete_cpu", namespace["broken"])
    with pytest.raises(KvcheckInternalError, match=r"kvcheck's own code raised RuntimeError"):
        run_scenario(scenario(*EVENTS), checked)


def test_the_targets_own_exception_is_still_a_verdict() -> None:
    def raises(self: Any, result: Any, batch: Any) -> Any:
        raise RuntimeError("the target's own bug")

    result = run_scenario(scenario(*EVENTS), target(raises))
    assert result.violation is not None and result.violation.invariant == "target-raised"


STAND_INS = """
from http import HTTPStatus

from sglang.srt.managers.io_struct import AbortReq
from sglang.srt.managers.schedule_batch import FINISH_ABORT


class Processor:
    def abort_reason(self, result, batch):
        status = HTTPStatus.INTERNAL_SERVER_ERROR
        return FINISH_ABORT("grammar failed", status, "InternalServerError")

    def abort_message(self, result, batch):
        return AbortReq(rid="r7")
"""


def test_sglang_names_kvcheck_stands_in_for_load_without_a_flag(tmp_path: Path) -> None:
    path = tmp_path / "processor.py"
    path.write_text(STAND_INS)
    reason = load_from_source(str(path), "Processor.abort_reason").resolver(None, None, None)
    assert reason.to_json() == {
        "type": "abort",
        "message": "grammar failed",
        "status_code": 500,
        "err_type": "InternalServerError",
    }
    abort = load_from_source(str(path), "Processor.abort_message").resolver(None, None, None)
    assert abort.rid == "r7" and abort.abort_all is False


def test_the_cli_exits_2_for_a_fake_call_it_does_not_accept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.py").write_text(
        "class P:\n"
        "    def resolve(self, result, batch):\n"
        "        self.metrics_reporter.snapshot_spec_decode_metrics(batch)\n"
        "        return []\n"
    )
    assert main(["check", "p.py::P.resolve", "--max-examples", "5", "--no-save"]) == 2
    err = capsys.readouterr().err
    assert "kvcheck's model of" in err and "Traceback" not in err
