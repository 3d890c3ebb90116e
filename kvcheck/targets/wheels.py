"""Released engine code from the package index, fetched once and kept in kvcheck's cache.

An engine family names what it needs from its releases in a `WheelSource`: the distribution,
the package directory inside the wheel and the files kvcheck reads there. A release is fetched
with pip (`pip download --no-deps`: the wheel only; nothing is installed, nothing of the engine
is imported), kept under `$KVCHECK_CACHE/wheels` and unpacked to
`$KVCHECK_CACHE/<distribution>/<version>/<package>/`, only the listed files.

Unpacking ends by writing `MARKER` with the sha256 of every file unpacked, so an interrupted
unpack is redone, never half used, and a file changed since (a truncated copy, a disk fault, an
edit) is noticed on the next load: it is unpacked again from the cached wheel, or the wheel
fetched again when that is damaged too, saying so on stderr (docs/release-cache.md).

Errors are one `TargetLoadError` line each: no pip, an index pip cannot reach with nothing
cached, a release that is not on the index (naming the ones that are), a cache kvcheck cannot
use (named, with `KVCHECK_CACHE`). pip is called through the `pip` argument every function
takes, so a family (and its tests) decides how.

This module knows no engine: the SGLang and vLLM families each bring their `WheelSource`.
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
from typing import Final, Literal

import attrs

from kvcheck.errors import TargetLoadError
from kvcheck.targets import wheel_members

__all__ = [
    "MARKER",
    "PipRunner",
    "WheelSource",
    "available_versions",
    "cache_dir",
    "normalize_version",
    "release_package",
    "run_pip",
    "unpacked_damage",
    "version_key",
    "write_marker",
]

PipRunner = wheel_members.PipRunner

MARKER: Final = ".complete"
# A final or post release, as `normalize_version` writes it.
VERSION: Final = re.compile(r"^\d+(\.\d+)*(\.post\d+)?$")
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
class WheelSource:
    """What a family reads from an engine's released wheels."""

    distribution: str  # the name on the index and of the wheel: "sglang"
    display: str  # the engine's name in messages: "SGLang"
    package: str  # the top-level package directory inside the wheel: "sglang"
    files: frozenset[str]  # the files unpacked, relative to `package`
    oldest: str  # the oldest release kvcheck checks (`available_versions` lists from there)
    # pip's platform options tried after a plain download fails (a wheel built for another
    # interpreter or platform than the one kvcheck runs on); each a complete set.
    tag_options: tuple[tuple[str, ...], ...] = ()
    # "members": a wheel too large to fetch whole for a few files (vLLM's, 250-470 MB) is read
    # with range requests first, keeping only the listed files (`wheel_members`); "wheel": pip
    # downloads it whole.
    fetch: Literal["wheel", "members"] = "wheel"


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


def release_package(
    source: WheelSource, version: str, *, pip: PipRunner, cache: Path | None = None
) -> Path:
    """The unpacked package of `source`'s release `version`, fetched into the cache on first
    use and verified against the hashes recorded when it was unpacked (see the module)."""
    cache = cache or cache_dir()
    root = cache / source.distribution / version
    try:
        damage = unpacked_damage(source, root)
        if damage is None:
            return root / source.package
        if damage != _NOT_UNPACKED:
            _warn(
                f"the cached {source.display} {version} in {str(root)!r} cannot be trusted "
                f"({damage}); unpacking it again from the release's wheel"
            )
        wheels = cache / "wheels"
        wheel = _download(source, version, wheels, pip)
        try:
            _unpack(source, wheel, root)
        except _DamagedWheel as exc:
            _warn(
                f"the cached wheel {str(wheel)!r} is damaged ({exc}); downloading "
                f"{source.display} {version} again"
            )
            wheel.unlink()
            _unpack(source, _download(source, version, wheels, pip), root)
    except _DamagedWheel as exc:
        raise TargetLoadError(
            f"the wheel of {source.display} {version} in kvcheck's cache {str(cache)!r} is "
            f"damaged even when downloaded again ({exc}); delete {str(cache / 'wheels')!r} and "
            "retry, or set KVCHECK_CACHE to use another cache"
        ) from None
    except OSError as exc:
        raise _unusable_cache(cache, exc) from None
    return root / source.package


def release_wheel(
    source: WheelSource, version: str, *, pip: PipRunner, cache: Path | None = None
) -> Path:
    """The cached wheel of `source`'s release `version`, downloaded when the cache lacks it
    (one whose unpacked package is intact may have lost it: a cleaned `wheels` folder)."""
    cache = cache or cache_dir()
    try:
        return _download(source, version, cache / "wheels", pip)
    except OSError as exc:
        raise _unusable_cache(cache, exc) from None


class _DamagedWheel(Exception):
    """A cached wheel that is not a readable zip, or one of whose files fails its CRC check."""


# What `unpacked_damage` says of a release never unpacked, or whose unpack was interrupted.
_NOT_UNPACKED: Final = "not unpacked"


def unpacked_damage(source: WheelSource, root: Path) -> str | None:
    """What is wrong with the release unpacked under `root` (None: every file it records is
    there with the hash recorded when it was unpacked)."""
    marker = root / MARKER
    if not marker.is_file():
        return _NOT_UNPACKED
    recorded = _read_marker(source, marker)
    if recorded is None:
        return f"{MARKER} records no file hashes (written by an older kvcheck, or damaged)"
    for relative, digest in recorded.items():
        file = root / source.package / relative
        if not file.is_file():
            return f"{relative} is missing"
        if _sha256(file) != digest:
            return f"{relative} does not match the hash recorded when it was unpacked"
    return None


def write_marker(source: WheelSource, root: Path) -> None:
    """Mark the release unpacked under `root` complete, recording the sha256 of each listed
    file it holds (atomically: the marker is there whole or not at all)."""
    lines = [
        f"{_sha256(root / source.package / relative)}  {relative}\n"
        for relative in sorted(source.files)
        if (root / source.package / relative).is_file()
    ]
    temporary = root / f"{MARKER}.{os.getpid()}.tmp"
    temporary.write_text("".join(lines))
    temporary.replace(root / MARKER)


def _read_marker(source: WheelSource, marker: Path) -> dict[str, str] | None:
    """`sha256  path` per line, as `sha256sum` writes them; None when a line is not that."""
    recorded = {}
    for line in marker.read_text(encoding="utf-8", errors="replace").splitlines():
        digest, _, relative = line.partition("  ")
        if not re.fullmatch(r"[0-9a-f]{64}", digest) or relative not in source.files:
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


def _unpack(source: WheelSource, wheel: Path, root: Path) -> None:
    """Unpack the listed files of `wheel` under `root`, then mark it complete (atomically).

    Raises `_DamagedWheel` when the wheel cannot be read; `OSError` when `root` cannot be
    written."""
    root.mkdir(parents=True, exist_ok=True)
    # Gone first: a marker left from a damaged unpack must not vouch for a half-done one.
    (root / MARKER).unlink(missing_ok=True)
    prefix = f"{source.package}/"
    try:
        archive = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, EOFError) as exc:
        raise _DamagedWheel(f"not a readable zip: {exc}") from None
    with archive:
        for name in archive.namelist():
            relative = name.removeprefix(prefix)
            if not (name.startswith(prefix) and relative in source.files):
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
    write_marker(source, root)


def _download(source: WheelSource, version: str, wheels: Path, pip: PipRunner) -> Path:
    """The wheel of the release in `wheels`, downloaded with pip when it is not there."""
    existing = _cached_wheel(source, version, wheels)
    if existing is not None:
        return existing
    wheels.mkdir(parents=True, exist_ok=True)
    if source.fetch == "members":
        prefix = f"{source.package}/"
        members = frozenset(prefix + relative for relative in source.files)
        subset = wheel_members.fetch_members(source.distribution, version, members, wheels, pip)
        if subset is not None:
            return subset
    # The wheel only, no dependencies, nothing built or installed.
    base = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q"]
    errors = ""
    # Into a private folder first, then moved in whole: another process fetching the same release
    # at once never sees a half-written wheel.
    with tempfile.TemporaryDirectory(prefix=".download-", dir=wheels) as private:
        for extra in ((), *source.tag_options):
            done = pip([*base, *extra, f"{source.distribution}=={version}", "-d", private])
            fetched = _cached_wheel(source, version, Path(private))
            if done.returncode == 0 and fetched is not None:
                target = wheels / fetched.name
                os.replace(fetched, target)
                return target
            errors = done.stderr
    raise _fetch_error(source, version, wheels, errors, pip)


# What pip prints when it never reached the index (a proxy, DNS, no route, TLS), as opposed to
# reaching it and finding no such release.
_UNREACHABLE: Final = re.compile(
    r"NewConnectionError|Failed to establish a new connection|Temporary failure in name "
    r"resolution|Name or service not known|Network is unreachable|No route to host|"
    r"Connection refused|ConnectTimeout|Read timed out|ProxyError|SSLError|"
    r"Could not fetch URL|connection broken|Max retries exceeded",
    re.IGNORECASE,
)


def _fetch_error(
    source: WheelSource, version: str, wheels: Path, pip_errors: str, pip: PipRunner
) -> TargetLoadError:
    """Why the release could not be fetched, told apart: no pip, no index, no release."""
    name = source.display
    offline = (
        f"it is not in kvcheck's cache ({str(wheels)!r}; set KVCHECK_CACHE to use another, or put "
        "the wheel there)"
    )
    if "No module named pip" in pip_errors:
        return TargetLoadError(
            f"cannot fetch {name} {version}: pip is not installed for {sys.executable} (install "
            f"it with `{sys.executable} -m ensurepip`), and {offline}"
        )
    if _UNREACHABLE.search(pip_errors):
        return TargetLoadError(
            f"cannot fetch {name} {version}: pip could not reach the package index "
            f"({_pip_reason(pip_errors)}), and {offline}"
        )
    if "(from versions: none)" in pip_errors:
        # The engine has releases on PyPI: an index that lists none is not the one pip should ask.
        return TargetLoadError(
            f"cannot fetch {name} {version}: the package index pip asked lists no {name} release "
            f"at all (unreachable, or a mirror without it: see pip's --index-url), and {offline}"
        )
    if "No matching distribution" in pip_errors or "Could not find a version" in pip_errors:
        known = available_versions(source, pip, pip_errors)
        shown = ", ".join(known) if known else "none found"
        return TargetLoadError(
            f"{name} {version} is not on the package index; releases kvcheck can check: {shown}"
        )
    return TargetLoadError(
        f"cannot fetch {name} {version}: pip could not download it ({_pip_reason(pip_errors)}), "
        f"and {offline}"
    )


def _pip_reason(pip_errors: str) -> str:
    """pip's own reason: its last `ERROR:` line (its warnings are often about something else),
    else its last line."""
    lines = [line.strip() for line in pip_errors.strip().splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR:")]
    return (errors or lines or ["no output"])[-1]


def run_pip(command: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """Run pip (`command` is the whole command line); a pip that cannot run is a failed run."""
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess(list(command), 1, "", f"pip did not run: {exc}")


def _cached_wheel(source: WheelSource, version: str, wheels: Path) -> Path | None:
    """The wheel of the release in `wheels` (a build tag, as in `vllm-0.20.1-1-...`, allowed)."""
    if not wheels.is_dir():
        return None
    names = sorted(wheels.glob(f"{source.distribution}-{version}-*.whl"))
    return names[0] if names else None


def available_versions(source: WheelSource, pip: PipRunner, pip_error: str = "") -> list[str]:
    """Releases on the index that kvcheck can check (`source.oldest` and later), oldest first;
    read from pip's "from versions: ..." message when one is at hand, else asked of
    `pip index`."""
    match = re.search(r"\(from versions: ([^)]*)\)", pip_error)
    if match is None:
        done = pip([sys.executable, "-m", "pip", "index", "versions", source.distribution])
        match = re.search(r"Available versions: (.*)", done.stdout)
    if match is None:
        return []
    versions = {v.strip() for v in match.group(1).split(",") if VERSION.match(v.strip())}
    oldest = version_key(source.oldest)
    return sorted((v for v in versions if version_key(v) >= oldest), key=version_key)
