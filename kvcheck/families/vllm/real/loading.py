"""The vLLM targets that are a release's own code (the family's loader asks this module first
for every spec it does not know itself: `kvcheck.families.vllm.loading`).

The forms:
- `vllm==VERSION`: that release's scheduler, fetched from the package index into kvcheck's
  cache (`kvcheck.families.vllm.real.release`); 0.11.1 and later, the releases with async
  scheduling and speculative decoding together (docs/vllm-generations.md);
- `path/to/vllm` (a checkout root or the `vllm` package directory): its scheduler;
- `path/to/file.py::Qualname`, the file inside a `vllm` package: the class run in place of
  the package's own (`Scheduler` replaces the package's `Scheduler`; any other class is the
  async scheduler, over the package's `Scheduler`), the rest from that package.

Every failure is a one-line `TargetLoadError` (exit 2).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

from kvcheck.core.target import Target
from kvcheck.errors import TargetLoadError
from kvcheck.families.vllm.real import generations, release
from kvcheck.families.vllm.real.adapter import ReleaseScheduler, grammar_support
from kvcheck.families.vllm.real.compiled import CompiledRelease, compile_release
from kvcheck.families.vllm.scenario import RUNNERS, Runner
from kvcheck.families.vllm.target import SchedulerSettings, SchedulerUnderTest
from kvcheck.targets.wheels import normalize_version, version_key

# What marks a directory as a `vllm` package kvcheck can run: the scheduler and the request.
_MARKERS: Final = (
    "v1/core/sched/scheduler.py",
    "v1/core/sched/async_scheduler.py",
    "v1/request.py",
)
_VERSION: Final = re.compile(r"^\d+(\.\d+)*(\.post\d+)?$")


def is_package(path: Path) -> bool:
    """Whether `path` is a `vllm` package directory with the scheduler's files."""
    return all((path / marker).is_file() for marker in _MARKERS)


def package_dir(path: Path) -> Path | None:
    """The `vllm` package of a checkout root or the package itself; None when neither."""
    for candidate in (path, path / "vllm"):
        if is_package(candidate):
            return candidate
    return None


def enclosing_package(file: Path) -> Path | None:
    """The `vllm` package directory `file` lies in (its nearest ancestor that is one)."""
    for parent in file.resolve().parents:
        if is_package(parent):
            return parent
    return None


def _path(text: str) -> Path:
    return Path(text).expanduser()


def claims(spec: str) -> bool:
    """Whether `spec` names a vLLM release, a vLLM package on disk, or a class in a file
    inside one."""
    spec = spec.strip()
    if spec.startswith(release.SPEC_PREFIX):
        return True
    try:
        if "::" in spec:
            file = _path(spec.partition("::")[0])
            return file.is_file() and enclosing_package(file) is not None
        return _path(spec).is_dir() and package_dir(_path(spec)) is not None
    except OSError:
        return False


def spec_path(spec: str) -> str | None:
    """The file or directory `spec` reads its target from, as written (None for `vllm==`)."""
    spec = spec.strip()
    if spec.startswith(release.SPEC_PREFIX):
        return None
    if "::" in spec:
        return spec.partition("::")[0] or None
    return spec


def parse_spec(spec: str) -> str:
    """The version of a `vllm==VERSION` spec, normalized; one-line errors when it is malformed
    or older than the first release with async scheduling and speculative decoding."""
    version = normalize_version(spec.strip().removeprefix(release.SPEC_PREFIX)) or ""
    if not _VERSION.match(version):
        raise TargetLoadError(
            f"malformed vLLM release {spec!r}; expected vllm==VERSION, e.g. vllm==0.33.0"
        )
    if version_key(version) < version_key(release.OLDEST):
        raise TargetLoadError(
            f"vLLM {version} cannot run async scheduling with speculative decoding; kvcheck "
            f"checks vLLM {release.OLDEST} and later"
        )
    return version


class ReleaseFactory:
    """A compiled release as the family's `SchedulerFactory`: a fresh scheduler per scenario."""

    def __init__(self, compiled: CompiledRelease, runners: tuple[Runner, ...] = RUNNERS) -> None:
        self.compiled = compiled
        # The runners the release can run behind (`distribution.space_for` reads it): a
        # release before 0.23.0 pipelines two batches only (`generations.runners_of`).
        self.runners = runners
        # Whether the release validates drafts against a grammar (0.14.0 on) and finishes a
        # request its grammar rejects (0.20.0 on): the search draws grammars, and rejections,
        # only where it does (`distribution.space_for`).
        self.structured_output = grammar_support(compiled)
        self.grammar_errors_finish = self.structured_output and compiled.grammar_errors_finish
        # Whether the release drafts by batch size (dynamic SD, 0.24.0 on): its `__init__`
        # sets `dynamic_sd_lookup`. The search draws tables, and the engine passes one on,
        # only where it does (`distribution.space_for`, `VllmEngine`).
        self.dynamic_sd = "dynamic_sd_lookup" in compiled.init_values

    def __call__(self, settings: SchedulerSettings) -> SchedulerUnderTest:
        """A fresh `ReleaseScheduler` built with `settings`."""
        return ReleaseScheduler(self.compiled, settings)


def load(spec: str, *, allow_unavailable: bool, deadline: float | None) -> Target:
    """The target `spec` names (see the module for the forms)."""
    spec = spec.strip()
    file: Path | None = None
    qualname = "AsyncScheduler"
    runners = RUNNERS
    if spec.startswith(release.SPEC_PREFIX):
        version = parse_spec(spec)
        runners = generations.runners_of(version)
        package = release.release_package(version)
        what = f"vLLM {version} (package index)"
    elif "::" in spec:
        written, _, qualname = spec.partition("::")
        if not written or not re.fullmatch(r"[A-Za-z_]\w*", qualname):
            raise TargetLoadError(
                f"malformed target {spec!r}; expected path/to/file.py::Class with the class "
                "defined at the top of a file inside a vllm package"
            )
        file = _path(written)
        if not file.is_file():
            raise TargetLoadError(f"no such file {written!r}")
        found = enclosing_package(file)
        if found is None:
            raise TargetLoadError(
                f"{written!r} is not inside a vllm package (no ancestor directory holds "
                f"{', '.join(_MARKERS)})"
            )
        package = found
        what = f"{qualname} of {written} over the vLLM package at {package}"
    else:
        found = package_dir(_path(spec))
        if found is None:
            raise TargetLoadError(
                f"{spec!r} is not a vLLM package: neither it nor its vllm/ holds "
                f"{', '.join(_MARKERS)}"
            )
        package = found
        what = f"the vLLM package at {spec}"
    compiled = compile_release(package, scheduler_file=file, scheduler_class=qualname)
    return Target(
        spec=spec,
        resolver=ReleaseFactory(compiled, runners),
        description=f"{what}: the V1 scheduler's own code over kvcheck's fakes",
        self_methods={},
        shape=None,
        # The scheduler's code runs in the methods of what the factory builds.
        code=compiled.code,
        code_runs_in_result=True,
        deadline=deadline,
        family="vllm",
    )
