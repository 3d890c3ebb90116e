"""`kvcheck.core.calls`: how every family's engine calls its target. An exception raised in
kvcheck's own code (its core, a family's judging modules) is kvcheck's fault, one raised in a
target a family ships is the target's, and a family's own exceptions mean what it says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import kvcheck
from kvcheck.core.calls import TargetCalls
from kvcheck.errors import KvcheckInternalError, UnsupportedTargetError

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
