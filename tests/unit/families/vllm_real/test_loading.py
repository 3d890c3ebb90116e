"""The vLLM release targets' spec forms and their one-line errors, without any wheel: a
`vllm==` spec that cannot be one, package directories and `file.py::Class` files."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvcheck.cli.main import main
from kvcheck.core.family import family_for_spec
from kvcheck.errors import TargetLoadError, UnsupportedTargetError
from kvcheck.families.vllm.engine import CALLS
from kvcheck.families.vllm.real import fakes
from kvcheck.families.vllm.real.adapter import ReleaseScheduler
from kvcheck.families.vllm.real.loading import claims, enclosing_package, load, parse_spec


@pytest.fixture
def package(tmp_path: Path) -> Path:
    """A directory shaped like a `vllm` package (the files the loader looks for, empty)."""
    root = tmp_path / "checkout" / "vllm"
    for marker in ("v1/core/sched/scheduler.py", "v1/core/sched/async_scheduler.py"):
        (root / marker).parent.mkdir(parents=True, exist_ok=True)
        (root / marker).write_text("class Scheduler:\n    pass\n")
    (root / "v1/request.py").write_text("")
    return root


def test_release_specs_are_the_familys_and_versions_are_checked() -> None:
    assert family_for_spec("vllm==0.33.0").name == "vllm"
    assert parse_spec("vllm==0.033.0") == "0.33.0"
    with pytest.raises(TargetLoadError, match="malformed vLLM release 'vllm==latest'"):
        parse_spec("vllm==latest")
    with pytest.raises(TargetLoadError, match=r"checks vLLM 0\.11\.1 and later"):
        parse_spec("vllm==0.11.0")


def test_directories_and_files_are_claimed_only_inside_a_vllm_package(
    package: Path, tmp_path: Path
) -> None:
    assert claims(str(package)) and claims(str(package.parent))  # the package or its checkout
    assert not claims(str(tmp_path))
    inside = package / "v1/core/sched/async_scheduler.py"
    assert claims(f"{inside}::AsyncScheduler")
    assert enclosing_package(inside) == package
    outside = tmp_path / "mine.py"
    outside.write_text("class AsyncScheduler:\n    pass\n")
    assert not claims(f"{outside}::AsyncScheduler")
    assert family_for_spec(f"{outside}::AsyncScheduler").name == "sglang"


def test_a_class_the_file_lacks_is_one_line(package: Path) -> None:
    inside = package / "v1/core/sched/async_scheduler.py"
    with pytest.raises(TargetLoadError) as caught:
        load(f"{inside}::Nope", allow_unavailable=True, deadline=None)
    assert "\n" not in str(caught.value)
    with pytest.raises(TargetLoadError, match="malformed target"):
        load(f"{inside}::not a name", allow_unavailable=True, deadline=None)


def test_front_door_errors_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "vllm==0.9.0", "--max-examples", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "kvcheck checks vLLM 0.11.1 and later" in err


def test_an_unmodelled_access_is_no_verdict_even_when_the_code_catches_it() -> None:
    def probes() -> bool:
        # vLLM's code asking `hasattr` of a fake: the error is caught, the run goes on.
        return hasattr(fakes.SamplingParams(), "temperature")

    def calls_a_fake_wrongly() -> object:
        pool = fakes.BlockPool.create(num_blocks=4, block_size=2, max_model_len=8)
        return pool.allocate_slots(object(), 1, not_a_parameter=True)  # type: ignore[call-arg]

    for code in (probes, calls_a_fake_wrongly):
        with pytest.raises(UnsupportedTargetError, match="does not model"):
            # The engine's call into the adapter, which calls into the release.
            CALLS.run(ReleaseScheduler._release, None, code)
