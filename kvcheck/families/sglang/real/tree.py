"""A release's allocation code on disk: the files of its wheel that its own allocation path
compiles (issue 21), unpacked beside the resolver's in kvcheck's cache.

They go to `$KVCHECK_CACHE/sglang-tree/VERSION/`, a folder of their own with its own marker
(`release.MARKER`: `sha256  path` per file), so the resolver's cache entry
(`kvcheck.families.sglang.release`) keeps its format and kvcheck versions sharing a cache do not
unpack each other's entries again. A damaged or half-written tree is unpacked again from the
cached wheel.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path
from typing import Final

from kvcheck.errors import TargetLoadError
from kvcheck.families.sglang import release as sglang_release

# The folders and files of the `sglang` package the allocation path compiles from, and what
# their code imports from its own tree.
ALLOCATION_TREES: Final = (
    "srt/mem_cache/",
    "srt/speculative/",
    "srt/managers/",
    # `retract_decode`'s beam-group helpers (0.5.19+ beam_search/batch_tail.py).
    "srt/beam_search/",
    "srt/runtime_context.py",
    "srt/environ.py",
    "srt/utils/",
    "kernels/ops/memory/",
)


def allocation_tree(version: str, *, cache: Path | None = None) -> Path:
    """The directory holding the `sglang` package folder of `version`'s allocation files,
    unpacked from the release's wheel on first use."""
    cache = cache or sglang_release.cache_dir()
    root = cache / "sglang-tree" / version
    if _intact(root):
        return root
    # Fetched when missing, also where the resolver's entry is intact but the wheel is gone:
    # without it, `auto` judged the release by kvcheck's model instead of its own code.
    wheel = sglang_release.release_wheel(version, cache=cache)
    try:
        _unpack(wheel, root)
    except (OSError, zipfile.BadZipFile) as exc:
        raise TargetLoadError(
            f"cannot unpack SGLang {version}'s allocation code into {root}: {exc}"
        ) from None
    return root


# Beside the marker: the `ALLOCATION_TREES` a tree was unpacked with, so that a tree unpacked
# before the list grew is unpacked again rather than missing a folder.
_TREES_FILE: Final = ".kvcheck-allocation-trees"


def _wanted(name: str) -> bool:
    relative = name.removeprefix("sglang/")
    return (
        name.startswith("sglang/")
        and relative.endswith(".py")
        and (relative.startswith(ALLOCATION_TREES) or relative in sglang_release.VERSION_FILES)
    )


def _unpack(wheel: Path, root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    marker = root / sglang_release.MARKER
    marker.unlink(missing_ok=True)
    lines = []
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if not _wanted(name):
                continue
            content = archive.read(name)
            target = root / name
            target.parent.mkdir(parents=True, exist_ok=True)
            temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            temporary.write_bytes(content)
            temporary.replace(target)
            lines.append(f"{hashlib.sha256(content).hexdigest()}  {name}\n")
        for package in {Path(name).parent for name in archive.namelist() if _wanted(name)}:
            for parent in [package, *package.parents]:
                init = root / parent / "__init__.py"
                if parent != Path(".") and not init.exists():
                    init.write_text("")
    (root / _TREES_FILE).write_text("\n".join(ALLOCATION_TREES))
    temporary = root / f"{sglang_release.MARKER}.{os.getpid()}.tmp"
    temporary.write_text("".join(sorted(lines)))
    temporary.replace(marker)


def _intact(root: Path) -> bool:
    marker = root / sglang_release.MARKER
    # The files saying which release the tree is (`package_version`) are kept too, so that a
    # copy of the tree (the release-tree corpus) is judged under its release's allocation rule
    # rather than every rule of its generation; a tree unpacked before they were kept lacks
    # `version.py` (every release has one) and is unpacked again.
    if not marker.is_file() or not (root / "sglang" / "version.py").is_file():
        return False
    trees = root / _TREES_FILE
    if not trees.is_file() or trees.read_text().split("\n") != list(ALLOCATION_TREES):
        return False
    for line in marker.read_text(encoding="utf-8", errors="replace").splitlines():
        digest, _, name = line.partition("  ")
        file = root / name
        if not file.is_file() or hashlib.sha256(file.read_bytes()).hexdigest() != digest:
            return False
    return True
