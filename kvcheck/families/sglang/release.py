"""SGLang itself as a target: a release from the package index (`sglang==0.5.23`) or an SGLang
package on disk (a checkout root, or the `sglang` package directory).

A release is fetched once with pip (`pip download --no-deps`, the wheel only: nothing is
installed and nothing of SGLang is imported), kept in kvcheck's cache (`$KVCHECK_CACHE`, default
`~/.cache/kvcheck`) and unpacked there. Either way the resolver is then found the same way: the
known places SGLang has kept it (docs/semantics.md §1.1), newest first, and read from source like
any `file.py::Qualname` target (`kvcheck.targets.source`), with the sibling methods it calls.

The unpacked files are verified against the sha256 recorded when they were unpacked on every
load, and unpacked again (the wheel fetched again if it is damaged too) when they differ
(docs/release-cache.md). Versions are normalized as PEP 440 does (`0.5.011` is `0.5.11`).

Errors are one line (exit 2): a version that is not on the index or predates the spec-v2
resolver (the message names the ones that exist), no pip, an index pip cannot reach with nothing
cached, a cache kvcheck cannot use (named, with `KVCHECK_CACHE`), a directory that is not an
SGLang package.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile
import zlib
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
# The spellings PEP 440 reads as a final or post release: an optional `v`, release numbers with
# any leading zeros, and a post release as `.post1`, `post1`, `-post1`, `_post.1`, `.rev1`,
# `.r1` or `-1`; letters in any case.
_SPELLED_VERSION: Final = re.compile(
    r"^v?(?P<release>\d+(?:\.\d+)*)"
    r"(?:(?:[-_.]?(?:post|rev|r)[-_.]?(?P<post>\d+))|(?:-(?P<implicit_post>\d+)))?$"
)
# The release numbers a version keeps even when they are zeros (`0.5.0` stays, `0.5.11.0` is
# `0.5.11`, as pip finds it).
_KEPT_RELEASE_PARTS: Final = 3


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


def normalize_version(text: str) -> str | None:
    """`text` in the one spelling PEP 440 normalizes it to, which is also how a release's wheel
    and cache folder are named (`0.5.011` and `0.5.11.0` are `0.5.11`, `0.5.12-POST01` is
    `0.5.12.post1`); None for a version that is not a final or post release."""
    match = _SPELLED_VERSION.match(text.strip().lower())
    if match is None:
        return None
    parts = [int(part) for part in match["release"].split(".")]
    while len(parts) > _KEPT_RELEASE_PARTS and parts[-1] == 0:
        parts.pop()
    post = match["post"] or match["implicit_post"]
    return ".".join(map(str, parts)) + (f".post{int(post)}" if post is not None else "")


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


MARKER: Final = ".complete"


def release_package(version: str, *, cache: Path | None = None) -> Path:
    """The unpacked `sglang` package of a release, fetched into the cache on first use.

    Unpacking ends by writing `MARKER` with the sha256 of every file unpacked, so an interrupted
    unpack is redone, never half used, and a file changed since (a truncated copy, a disk fault,
    an edit) is noticed on the next load: it is unpacked again from the cached wheel, or the wheel
    downloaded again when that is damaged too, saying so on stderr. A cache kvcheck cannot use (a
    file, a folder it may not write) is a one-line `TargetLoadError` naming it and
    `KVCHECK_CACHE`.
    """
    cache = cache or cache_dir()
    root = cache / "sglang" / version
    try:
        damage = unpacked_damage(root)
        if damage is None:
            return root / "sglang"
        if damage != _NOT_UNPACKED:
            _warn(
                f"the cached SGLang {version} in {str(root)!r} cannot be trusted ({damage}); "
                "unpacking it again from the release's wheel"
            )
        wheels = cache / "wheels"
        wheel = _download(version, wheels)
        try:
            _unpack(wheel, root)
        except _DamagedWheel as exc:
            _warn(
                f"the cached wheel {str(wheel)!r} is damaged ({exc}); downloading SGLang "
                f"{version} again"
            )
            wheel.unlink()
            _unpack(_download(version, wheels), root)
    except _DamagedWheel as exc:
        raise TargetLoadError(
            f"the wheel of SGLang {version} in kvcheck's cache {str(cache)!r} is damaged even "
            f"when downloaded again ({exc}); delete {str(cache / 'wheels')!r} and retry, or set "
            "KVCHECK_CACHE to use another cache"
        ) from None
    except OSError as exc:
        raise _unusable_cache(cache, exc) from None
    return root / "sglang"


class _DamagedWheel(Exception):
    """A cached wheel that is not a readable zip, or whose resolver file fails its CRC check."""


# What `unpacked_damage` says of a release never unpacked, or whose unpack was interrupted.
_NOT_UNPACKED: Final = "not unpacked"


def unpacked_damage(root: Path) -> str | None:
    """What is wrong with the release unpacked under `root` (None: every file it records is
    there with the hash recorded when it was unpacked)."""
    marker = root / MARKER
    if not marker.is_file():
        return _NOT_UNPACKED
    recorded = _read_marker(marker)
    if recorded is None:
        return f"{MARKER} records no file hashes (written by an older kvcheck, or damaged)"
    for relative, digest in recorded.items():
        file = root / "sglang" / relative
        if not file.is_file():
            return f"{relative} is missing"
        if _sha256(file) != digest:
            return f"{relative} does not match the hash recorded when it was unpacked"
    return None


def write_marker(root: Path) -> None:
    """Mark the release unpacked under `root` complete, recording the sha256 of each resolver
    file it holds (atomically: the marker is there whole or not at all)."""
    lines = [
        f"{_sha256(root / 'sglang' / relative)}  {relative}\n"
        for relative in sorted(_UNPACKED_FILES)
        if (root / "sglang" / relative).is_file()
    ]
    temporary = root / f"{MARKER}.{os.getpid()}.tmp"
    temporary.write_text("".join(lines))
    temporary.replace(root / MARKER)


def _read_marker(marker: Path) -> dict[str, str] | None:
    """`sha256  path` per line, as `sha256sum` writes them; None when a line is not that."""
    recorded = {}
    for line in marker.read_text(encoding="utf-8", errors="replace").splitlines():
        digest, _, relative = line.partition("  ")
        if not re.fullmatch(r"[0-9a-f]{64}", digest) or relative not in _UNPACKED_FILES:
            return None
        recorded[relative] = digest
    return recorded


def _sha256(file: Path) -> str:
    return hashlib.sha256(file.read_bytes()).hexdigest()


def _warn(message: str) -> None:
    print(f"kvcheck: warning: {message}", file=sys.stderr)


def _unusable_cache(cache: Path, exc: OSError) -> TargetLoadError:
    """The one-line error for a cache kvcheck cannot read or write."""
    where = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(cache) else ""
    return TargetLoadError(
        f"kvcheck's cache {str(cache)!r} is unusable: {exc.strerror or exc}{where}; set "
        "KVCHECK_CACHE to a directory kvcheck may write"
    )


def _unpack(wheel: Path, root: Path) -> None:
    """Unpack the resolver files of `wheel` under `root`, then mark it complete (atomically).

    Raises `_DamagedWheel` when the wheel cannot be read; `OSError` when `root` cannot be
    written."""
    root.mkdir(parents=True, exist_ok=True)
    # Gone first: a marker left from a damaged unpack must not vouch for a half-done one.
    (root / MARKER).unlink(missing_ok=True)
    try:
        archive = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, EOFError) as exc:
        raise _DamagedWheel(f"not a readable zip: {exc}") from None
    with archive:
        for name in archive.namelist():
            relative = name.removeprefix("sglang/")
            if not (name.startswith("sglang/") and relative in _UNPACKED_FILES):
                continue
            try:
                content = archive.read(name)  # checks the member's CRC
            except (zipfile.BadZipFile, EOFError, zlib.error) as exc:
                raise _DamagedWheel(f"{name}: {exc}") from None
            target = root / name
            target.parent.mkdir(parents=True, exist_ok=True)
            # Per process: two runs may unpack the same release at once.
            temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            temporary.write_bytes(content)
            temporary.replace(target)
    write_marker(root)


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
    raise _fetch_error(version, wheels, errors)


# What pip prints when it never reached the index (a proxy, DNS, no route, TLS), as opposed to
# reaching it and finding no such release.
_UNREACHABLE: Final = re.compile(
    r"NewConnectionError|Failed to establish a new connection|Temporary failure in name "
    r"resolution|Name or service not known|Network is unreachable|No route to host|"
    r"Connection refused|ConnectTimeout|Read timed out|ProxyError|SSLError|"
    r"Could not fetch URL|connection broken|Max retries exceeded",
    re.IGNORECASE,
)


def _fetch_error(version: str, wheels: Path, pip_errors: str) -> TargetLoadError:
    """Why `sglang==version` could not be fetched, told apart: no pip, no index, no release."""
    offline = (
        f"it is not in kvcheck's cache ({str(wheels)!r}; set KVCHECK_CACHE to use another, or put "
        "the wheel there)"
    )
    if "No module named pip" in pip_errors:
        return TargetLoadError(
            f"cannot fetch SGLang {version}: pip is not installed for {sys.executable} (install "
            f"it with `{sys.executable} -m ensurepip`), and {offline}"
        )
    if _UNREACHABLE.search(pip_errors):
        return TargetLoadError(
            f"cannot fetch SGLang {version}: pip could not reach the package index "
            f"({_pip_reason(pip_errors)}), and {offline}"
        )
    if "(from versions: none)" in pip_errors:
        # SGLang has releases on PyPI: an index that lists none is not the one pip should ask.
        return TargetLoadError(
            f"cannot fetch SGLang {version}: the package index pip asked lists no SGLang release "
            f"at all (unreachable, or a mirror without it: see pip's --index-url), and {offline}"
        )
    if "No matching distribution" in pip_errors or "Could not find a version" in pip_errors:
        known = available_versions(pip_errors)
        shown = ", ".join(known) if known else "none found"
        return TargetLoadError(
            f"SGLang {version} is not on the package index; releases kvcheck can check: {shown}"
        )
    return TargetLoadError(
        f"cannot fetch SGLang {version}: pip could not download it ({_pip_reason(pip_errors)}), "
        f"and {offline}"
    )


def _pip_reason(pip_errors: str) -> str:
    """pip's own reason: its last `ERROR:` line (its warnings are often about something else),
    else its last line."""
    lines = [line.strip() for line in pip_errors.strip().splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR:")]
    return (errors or lines or ["no output"])[-1]


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
