"""A vLLM release's own scheduler code as the target (docs/vllm.md, docs/vllm-generations.md).

`compiled.compile_release(package)` compiles the release's scheduler from its files;
`adapter.ReleaseScheduler` drives it behind the family's seam over strict fakes
(`fakes`); `loading` turns the spec forms `vllm==VERSION`, a checkout or `vllm` package
directory, and `path/to/file.py::Class` into targets. The family's loader
(`kvcheck.families.vllm.loading`) reaches them through `claims`, `load`, `spec_path` and
`RELEASES` here.
"""

from __future__ import annotations

from typing import Any, Final

from kvcheck.core.target import Target
from kvcheck.families.vllm.real import generations, release
from kvcheck.families.vllm.real.loading import claims, load, spec_path
from kvcheck.targets import wheels

__all__ = ["RELEASES", "claims", "load", "spec_path"]


class VllmReleases:
    """vLLM's releases on the package index (`kvcheck.core.family.Releases`), each checked at
    the family's default options."""

    engine: Final = "vLLM"
    spec_prefix: Final = release.SPEC_PREFIX
    oldest: Final = release.OLDEST
    modes: Final[tuple[tuple[str, dict[str, Any]], ...]] = (("vllm", {}),)

    @staticmethod
    def available_versions() -> list[str]:
        """The releases `pip index versions vllm` lists from `oldest` on, oldest first."""
        return wheels.available_versions(release.WHEELS, wheels.run_pip)

    @staticmethod
    def version_key(version: str) -> tuple[int, ...]:
        """`version` as a sortable key."""
        return wheels.version_key(version)

    @staticmethod
    def shape_name(target: Target) -> str:
        """vLLM targets have no probed API shape: the scheduler's own code runs as written."""
        return "scheduler"

    @staticmethod
    def facts(version: str, first_broken: str | None) -> tuple[tuple[str, str], ...]:
        """The release's generation, the upstream bug its failure is, and the function that
        resolves its placeholders (`kvcheck.families.vllm.real.generations`)."""
        return generations.facts(version, first_broken)


RELEASES: Final = VllmReleases()
