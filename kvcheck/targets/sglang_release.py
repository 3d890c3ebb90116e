"""SGLang itself as a target: a release from the package index (`sglang==0.5.23`) or an SGLang
package on disk (a checkout root, or the `sglang` package directory).

A release is fetched once with pip (`pip download --no-deps`, the wheel only: nothing is
installed and nothing of SGLang is imported), kept in kvcheck's cache (`$KVCHECK_CACHE`, default
`~/.cache/kvcheck`) and unpacked there. Either way the resolver is then found the same way: the
known places SGLang has kept it (docs/semantics.md §1.1), newest first, and read from source like
any `file.py::Qualname` target (`kvcheck.targets.source`), with the sibling methods it calls.

Errors are one line (exit 2): a version that is not on the index or predates the spec-v2
resolver (the message names the ones that exist), no index and nothing cached, a directory that
is not an SGLang package.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import attrs

from kvcheck.errors import TargetLoadError

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
_VERSION: Final = re.compile(r"^\d+(\.\d+)*(\.post\d+)?$")


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


def cache_dir() -> Path:
    """kvcheck's cache: `$KVCHECK_CACHE`, else `$XDG_CACHE_HOME/kvcheck`, else
    `~/.cache/kvcheck`."""
    explicit = os.environ.get("KVCHECK_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "kvcheck"


def version_key(version: str) -> tuple[int, ...]:
    """A sortable key: `0.5.12.post1` sorts after `0.5.12` and before `0.5.13`."""
    release, _, post = version.partition(".post")
    return (*(int(part) for part in release.split(".")), int(post) if post else -1)


def parse_spec(spec: str) -> str:
    """The version of an `sglang==VERSION` spec; `TargetLoadError` when it is malformed or older
    than the spec-v2 resolver."""
    version = spec.strip().removeprefix(SPEC_PREFIX).strip()
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
    """The unpacked `sglang` package of a release, fetched into the cache on first use.

    Unpacking ends by writing `.complete`, so an interrupted one is redone, never half used.
    """
    root = (cache or cache_dir()) / "sglang" / version
    if not (root / ".complete").is_file():
        _unpack(_download(version, (cache or cache_dir()) / "wheels"), root)
    return root / "sglang"


def _unpack(wheel: Path, root: Path) -> None:
    """Unpack the resolver files of `wheel` under `root`, then mark it complete (atomically)."""
    root.mkdir(parents=True, exist_ok=True)
    written: list[str] = []
    try:
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                relative = name.removeprefix("sglang/")
                if name.startswith("sglang/") and relative in _UNPACKED_FILES:
                    target = root / name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    # Per process: two runs may unpack the same release at once.
                    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
                    temporary.write_bytes(archive.read(name))
                    temporary.replace(target)
                    written.append(relative)
    except (OSError, zipfile.BadZipFile) as exc:
        raise TargetLoadError(f"cannot unpack {wheel.name} into {str(root)!r}: {exc}") from None
    marker = root / f".complete.{os.getpid()}.tmp"
    marker.write_text("\n".join(written) + "\n")
    marker.replace(root / ".complete")


def _download(version: str, wheels: Path) -> Path:
    """The wheel of `sglang==version` in `wheels`, downloaded with pip when it is not there."""
    existing = _cached_wheel(version, wheels)
    if existing is not None:
        return existing
    wheels.mkdir(parents=True, exist_ok=True)
    # The wheel only, no dependencies, nothing built or installed. From 0.5.11 SGLang publishes
    # CPython 3.11 manylinux wheels, so another interpreter asks for those tags explicitly.
    base = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q"]
    tags = [
        "--python-version",
        "3.11",
        "--implementation",
        "cp",
        "--abi",
        "cp311",
        "--platform",
        "manylinux_2_34_x86_64",
    ]
    errors = ""
    # Into a private folder first, then moved in whole: another process fetching the same release
    # at once never sees a half-written wheel.
    with tempfile.TemporaryDirectory(prefix=".download-", dir=wheels) as private:
        for extra in ([], tags):
            done = _pip([*base, *extra, f"sglang=={version}", "-d", private])
            fetched = _cached_wheel(version, Path(private))
            if done.returncode == 0 and fetched is not None:
                target = wheels / fetched.name
                os.replace(fetched, target)
                return target
            errors = done.stderr
    if "No matching distribution" in errors or "Could not find a version" in errors:
        known = available_versions(errors)
        shown = ", ".join(known) if known else "none found"
        raise TargetLoadError(
            f"SGLang {version} is not on the package index; releases kvcheck can check: {shown}"
        )
    last = errors.strip().splitlines()[-1] if errors.strip() else "no output"
    raise TargetLoadError(
        f"cannot fetch SGLang {version}: pip could not download it and it is not in kvcheck's "
        f"cache ({str(wheels)!r}; set KVCHECK_CACHE to use another): {last}"
    )


def _pip(command: Sequence[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess(list(command), 1, "", f"pip did not run: {exc}")


def _cached_wheel(version: str, wheels: Path) -> Path | None:
    if not wheels.is_dir():
        return None
    names = sorted(wheels.glob(f"sglang-{version}-*.whl"))
    return names[0] if names else None


def available_versions(pip_error: str = "") -> list[str]:
    """Releases on the index that kvcheck can check (0.5.6 and later), oldest first; read from
    pip's "from versions: ..." message when one is at hand, else asked of `pip index`."""
    match = re.search(r"\(from versions: ([^)]*)\)", pip_error)
    if match is None:
        done = _pip([sys.executable, "-m", "pip", "index", "versions", "sglang"])
        match = re.search(r"Available versions: (.*)", done.stdout)
    if match is None:
        return []
    versions = {v.strip() for v in match.group(1).split(",") if _VERSION.match(v.strip())}
    return sorted((v for v in versions if version_key(v) >= version_key(OLDEST)), key=version_key)
