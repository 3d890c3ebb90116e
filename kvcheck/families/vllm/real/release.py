"""vLLM releases from the package index, in kvcheck's cache (`kvcheck.targets.wheels`): what
kvcheck reads of a vLLM wheel."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from kvcheck.targets import wheels

SPEC_PREFIX: Final = "vllm=="
# The first release with async scheduling and speculative decoding together
# (docs/vllm-generations.md).
OLDEST: Final = "0.11.1"
WHEELS: Final = wheels.WheelSource(
    distribution="vllm",
    display="vLLM",
    package="vllm",
    files=frozenset(
        {
            "v1/core/sched/scheduler.py",
            "v1/core/sched/async_scheduler.py",
            "v1/core/sched/utils.py",
            "v1/core/sched/output.py",
            "v1/core/sched/request_queue.py",
            "v1/core/sched/interface.py",
            "v1/request.py",
            "v1/engine/__init__.py",
        }
    ),
    oldest=OLDEST,
    fetch="members",
)


def release_package(version: str, *, cache: Path | None = None) -> Path:
    """The unpacked `vllm` package of a release, fetched into the cache on first use."""
    return wheels.release_package(WHEELS, version, pip=wheels.run_pip, cache=cache)
