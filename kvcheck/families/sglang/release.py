"""SGLang itself as a target: a release from the package index (`sglang==0.5.23`) or an SGLang
package on disk (a checkout root, or the `sglang` package directory).

A release is fetched once with pip (`pip download --no-deps`, the wheel only: nothing is
installed and nothing of SGLang is imported), kept in kvcheck's cache (`$KVCHECK_CACHE`, default
`~/.cache/kvcheck`) and unpacked there. Either way the resolver is then found the same way: the
known places SGLang has kept it (docs/semantics.md §1.1), newest first, and read from source like
any `file.py::Qualname` target (`kvcheck.targets.source`), with the sibling methods it calls.

The unpacked files are verified against the sha256 recorded when they were unpacked on every
load, and unpacked again (the wheel fetched again if it is damaged too) when they differ
(docs/release-cache.md). Versions are normalized as PEP 440 does (`0.5.011` is `0.5.11`). The
fetching, unpacking and verifying are generic (`kvcheck.targets.wheels`); this module says what
SGLang's wheels hold (`WHEELS`) and where the resolver is in them.

Errors are one line (exit 2): a version that is not on the index or predates the spec-v2
resolver (the message names the ones that exist), no pip, an index pip cannot reach with nothing
cached, a cache kvcheck cannot use (named, with `KVCHECK_CACHE`), a directory that is not an
SGLang package.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import attrs

from kvcheck.errors import TargetLoadError
from kvcheck.targets import wheels
from kvcheck.targets.wheels import MARKER, cache_dir, normalize_version, version_key

SPEC_PREFIX: Final = "sglang=="
# The first release with the spec-v2 overlap resolver kvcheck judges.
OLDEST: Final = "0.5.6"
# Where SGLang has kept the resolver, newest layout first: (file in the `sglang` package, class,
# method). 0.5.13+; 0.5.12; 0.5.6-0.5.11.
RESOLVER_PLACES: Final[tuple[tuple[str, str, str], ...]] = (
    (
        "srt/managers/scheduler_components/batch_result_processor.py",
        "SchedulerBatchResultProcessor",
        "_resolve_spec_v2_tokens",
    ),
    (
        "srt/managers/scheduler_output_processor_mixin.py",
        "SchedulerOutputProcessorMixin",
        "_resolve_spec_overlap_tokens",
    ),
    (
        "srt/managers/scheduler_output_processor_mixin.py",
        "SchedulerOutputProcessorMixin",
        "_resolve_spec_overlap_token_ids",
    ),
)
# What is unpacked from a wheel: the files the resolver can live in (and nothing else).
# Branches of SGLang's resolver file that no faithful spec-v2 decode scenario takes, by the text
# of the line they leave, and the only inputs that take them (docs/semantics.md §1.1). The coverage
# report names the reason beside such a branch when it never ran; the figures still count it.
OUT_OF_SCOPE_BRANCHES: Final[dict[str, str]] = {
    "if stride is None or stride < 1:": (
        "a result without a positive row stride, which every spec-v2 worker records"
    ),
    "if not (is_decode or batch.forward_mode.is_extend()):": (
        "a grammar batch neither decode nor extend: idle batches have no requests, and "
        "disaggregated prebuilt batches are outside kvcheck's scope"
    ),
    "if result.accept_lens is None:": (
        "a decode result without accept lengths: non-speculative decode, which advances its "
        "grammar elsewhere"
    ),
    "if isinstance(tokens, int):": (
        "a single token: non-speculative decode, and from 0.5.17 the prefill grammar step "
        "(before 0.5.17 prefill offers its token to the grammar directly)"
    ),
}
_UNPACKED_FILES: Final = frozenset(place[0] for place in RESOLVER_PLACES)
_VERSION: Final = wheels.VERSION
# From 0.5.11 SGLang publishes CPython 3.11 manylinux wheels, so another interpreter asks for
# those tags explicitly.
WHEELS: Final = wheels.WheelSource(
    distribution="sglang",
    display="SGLang",
    package="sglang",
    files=_UNPACKED_FILES,
    oldest=OLDEST,
    tag_options=(
        (
            "--python-version",
            "3.11",
            "--implementation",
            "cp",
            "--abi",
            "cp311",
            "--platform",
            "manylinux_2_34_x86_64",
        ),
    ),
)
# pip, as the cache calls it (a test replaces it).
_pip = wheels.run_pip

__all__ = [
    "MARKER",
    "OLDEST",
    "OUT_OF_SCOPE_BRANCHES",
    "RESOLVER_PLACES",
    "SPEC_PREFIX",
    "WHEELS",
    "ResolverLocation",
    "available_versions",
    "cache_dir",
    "find_resolver",
    "normalize_version",
    "package_dir",
    "parse_spec",
    "release_package",
    "release_wheel",
    "unpacked_damage",
    "version_key",
    "write_marker",
]


def _run_pip(command: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """`_pip`, looked up when called."""
    return _pip(command)


@attrs.frozen
class ResolverLocation:
    """Where an SGLang package keeps its resolver: the file, the method's qualname, its line."""

    file: Path
    qualname: str
    line: int

    @property
    def spec(self) -> str:
        """The equivalent `file.py::Qualname` target spec."""
        return f"{self.file}::{self.qualname}"


def parse_spec(spec: str) -> str:
    """The version of an `sglang==VERSION` spec, normalized (`normalize_version`);
    `TargetLoadError` when it is malformed or older than the spec-v2 resolver."""
    version = normalize_version(spec.strip().removeprefix(SPEC_PREFIX)) or ""
    if not _VERSION.match(version):
        raise TargetLoadError(
            f"malformed SGLang release {spec!r}; expected sglang==VERSION, e.g. sglang==0.5.23"
        )
    if version_key(version) < version_key(OLDEST):
        raise TargetLoadError(
            f"SGLang {version} has no spec-v2 overlap resolver; kvcheck checks {OLDEST} and later"
        )
    return version


# --- finding the resolver in a package ----------------------------------------------------------


def package_dir(path: Path) -> Path:
    """The `sglang` package directory for a checkout root (`python/sglang`), an unpacked wheel
    (`sglang/`) or the package itself; `TargetLoadError` when there is none."""
    for candidate in (path, path / "sglang", path / "python" / "sglang"):
        if (candidate / "srt" / "managers").is_dir():
            return candidate
    raise TargetLoadError(
        f"{str(path)!r} is not an SGLang package: no srt/managers under it, its sglang/ or its "
        "python/sglang/ (give the checkout root or the sglang package directory)"
    )


# The files a package's `__version__` is assigned in, and the assignment: `__version__ = "..."`,
# or setuptools-scm's `__version__ = version = "..."`.
VERSION_FILES: Final = ("version.py", "_version.py")
_VERSION_ASSIGNMENT: Final = re.compile(
    r"""^__version__\s*=\s*(?:version\s*=\s*)?["']([^"']+)["']""", re.MULTILINE
)


def package_version(package: Path) -> str | None:
    """The release an SGLang package directory says it is, normalized; None when it says none.

    0.5.6 writes `__version__` in `version.py`. From 0.5.7 on `version.py` imports it from
    `_version.py`, which setuptools-scm writes at build time with a chained assignment
    (`__version__ = version = "..."`, 0.5.16 sglang/_version.py), so both files are read. A git
    checkout that was never built has no `_version.py`: its version is unknown."""
    for name in VERSION_FILES:
        try:
            text = (package / name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        match = _VERSION_ASSIGNMENT.search(text)
        if match is not None:
            return normalize_version(match[1])
    return None


def find_resolver(package: Path) -> ResolverLocation:
    """The resolver of the SGLang package at `package` (see `package_dir`)."""
    for relative, cls, method in RESOLVER_PLACES:
        file = package / relative
        if not file.is_file():
            continue
        line = _method_line(file, cls, method)
        if line is not None:
            return ResolverLocation(file, f"{cls}.{method}", line)
    places = ", ".join(f"{r}::{c}.{m}" for r, c, m in RESOLVER_PLACES)
    raise TargetLoadError(
        f"no spec-v2 overlap resolver in the SGLang package at {str(package)!r}; looked for "
        f"{places}"
    )


def _method_line(file: Path, cls: str, method: str) -> int | None:
    """The line of `def method` inside `class cls` in `file`, found without parsing it all."""
    in_class = False
    for number, text in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
        if text.startswith("class "):
            in_class = re.match(rf"class {re.escape(cls)}\b", text) is not None
        elif in_class and re.match(rf"\s+(async\s+)?def {re.escape(method)}\(", text):
            return number
    return None


# --- releases from the package index ------------------------------------------------------------


def release_package(version: str, *, cache: Path | None = None) -> Path:
    """The unpacked `sglang` package of a release, fetched into the cache on first use and
    verified on every load (`kvcheck.targets.wheels.release_package`)."""
    return wheels.release_package(WHEELS, version, pip=_run_pip, cache=cache)


def release_wheel(version: str, *, cache: Path | None = None) -> Path:
    """The release's cached wheel, fetched when missing (`kvcheck.targets.wheels.release_wheel`)."""
    return wheels.release_wheel(WHEELS, version, pip=_run_pip, cache=cache)


def unpacked_damage(root: Path) -> str | None:
    """What is wrong with the release unpacked under `root` (None: nothing)."""
    return wheels.unpacked_damage(WHEELS, root)


def write_marker(root: Path) -> None:
    """Mark the release unpacked under `root` complete, recording its files' hashes."""
    wheels.write_marker(WHEELS, root)


def available_versions(pip_error: str = "") -> list[str]:
    """Releases on the index that kvcheck can check (0.5.6 and later), oldest first."""
    return wheels.available_versions(WHEELS, _run_pip, pip_error)
