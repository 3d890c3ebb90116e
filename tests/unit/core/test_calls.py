"""`kvcheck.core.calls`: how every family's engine calls its target. An exception raised in
kvcheck's own code (its core, a family's judging modules) is kvcheck's fault, one raised in a
target a family ships is the target's, and a family's own exceptions mean what it says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import kvcheck
from kvcheck.core.calls import TargetCalls
from kvcheck.core.run import run_scenario
from kvcheck.errors import KvcheckInternalError, UnsupportedTargetError
from kvcheck.families.sglang.builtins import reference
from kvcheck.families.sglang.scenario import Admit, Step
from kvcheck.families.sglang.search import Bounds
from kvcheck.search.exhaust import exhaust
from tests.helpers import scenario, target

KVCHECK = Path(kvcheck.__file__).resolve().parent
SGLANG = KVCHECK / "families" / "sglang"


def raising_in(path: Path, exc: BaseException) -> Any:
    """A function that raises `exc` from code compiled as if it lived at `path`."""
    namespace: dict[str, Any] = {"exc": exc}
    exec(compile("def raises():\n    raise exc\n", str(path), "exec"), namespace)
    return namespace["raises"]


SGLANG_CALLS = TargetCalls(
    shipped_targets=(str(SGLANG / "builtins.py"), str(SGLANG / "mutants") + "/")
)


@pytest.mark.parametrize(
    "path",
    [KVCHECK / "core" / "run.py", SGLANG / "fakes.py", SGLANG / "invariants.py"],
    ids=["core", "fakes", "judging"],
)
def test_an_exception_in_kvchecks_own_code_is_its_fault(path: Path) -> None:
    with pytest.raises(KvcheckInternalError, match=rf"\({path.name}:2\)"):
        SGLANG_CALLS.run(raising_in(path, RuntimeError("bug")))


@pytest.mark.parametrize(
    "path",
    [SGLANG / "builtins.py", SGLANG / "mutants" / "corpus.py", Path("/elsewhere/resolver.py")],
    ids=["builtin", "mutant", "user"],
)
def test_an_exception_in_a_target_is_its_violation(path: Path) -> None:
    returned, error = SGLANG_CALLS.run(raising_in(path, RuntimeError("its bug")))
    assert returned is None and error == "RuntimeError: its bug"


def test_a_familys_own_exceptions_say_what_it_declares() -> None:
    class Unmodelled(AttributeError):
        pass

    class Refusal(ValueError):
        pass

    calls = TargetCalls(outside_model=(Unmodelled,), not_faults=(Refusal,))
    fake = KVCHECK / "families" / "sglang" / "fakes.py"
    with pytest.raises(UnsupportedTargetError, match="not modelled"):
        calls.run(raising_in(fake, Unmodelled("not modelled")))
    assert calls.run(raising_in(fake, Refusal("token refused"))) == (
        None,
        "Refusal: token refused",
    )
    # Without the declaration, the same exception in a fake is kvcheck's fault.
    with pytest.raises(KvcheckInternalError):
        TargetCalls().run(raising_in(fake, Refusal("token refused")))


def test_a_family_outside_kvcheck_names_its_own_code(tmp_path: Path) -> None:
    fake = tmp_path / "toy_fakes.py"
    assert TargetCalls().run(raising_in(fake, RuntimeError("x")))[1] == "RuntimeError: x"
    with pytest.raises(KvcheckInternalError):
        TargetCalls(own_code=(str(tmp_path) + "/",)).run(raising_in(fake, RuntimeError("x")))


def test_what_the_target_prints_goes_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    assert TargetCalls().run(lambda: print("chatty") or 7) == (7, None)
    out, err = capsys.readouterr()
    assert out == "" and err == "chatty\n"


@pytest.mark.parametrize("search", ["run", "exhaust"])
def test_runs_compute_on_one_torch_thread_and_give_the_setting_back(search: str) -> None:
    """A run (and an exhaustive search) keeps torch on one thread, whose OpenMP threads would
    otherwise spin after every large fill, and gives the caller's setting back after."""
    import torch

    threads: list[int] = []

    def counting(self: Any, result: Any, batch: Any) -> Any:
        threads.append(torch.get_num_threads())
        return reference(self, result, batch)

    judged = target(counting)
    threads.clear()  # the probe's call is not a run
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        if search == "run":
            events = (Admit("r0", 10, 20), Step(), Step((2, 2)), Step((1, 3)))
            assert run_scenario(scenario(*events, stride=4), judged).violation is None
        else:
            assert exhaust(judged, Bounds(events=3), measure_coverage=False).verdict == "pass"
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)
    assert threads and set(threads) == {1}
