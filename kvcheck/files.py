"""Writing kvcheck's output files: never over an input, never over an existing file unless told,
and always atomically.

Every file kvcheck writes for its user (a counterexample, an HTML timeline, a regression test)
goes through `write_text`: the text goes to a temporary file in the destination's own directory
and is moved into place with one `os.replace` (or `os.link`, which refuses an existing name), so
a reader never sees half a file and a crash leaves the old file as it was. `check_destination`
is the same refusal without the write, for the front doors to run before any work: a refused
destination is a usage error (exit 2) then, while a write that fails after a finding is only a
warning next to the finding (the commands in `kvcheck.cli`).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from kvcheck.errors import FileWriteError

StrPath = str | os.PathLike[str]


def check_destination(
    path: StrPath, *, inputs: Iterable[StrPath] = (), force: bool = False, what: str = "file"
) -> Path:
    """`path` as a `Path` if kvcheck may write `what` there; raises `FileWriteError` when it is
    one of `inputs` (the files the command reads: refused even with `force`), a directory, or
    an existing file and `force` is off."""
    out = Path(path)
    for source in inputs:
        if _same_file(out, Path(source)):
            raise FileWriteError(
                f"refusing to write the {what} over {str(path)!r}: it is an input of this "
                "command; choose another name"
            )
    if out.is_dir():
        raise FileWriteError(f"cannot write the {what} to {str(path)!r}: it is a directory")
    if not force and (out.exists() or out.is_symlink()):
        raise FileWriteError(
            f"refusing to overwrite {str(path)!r} with the {what}: it exists (--force to "
            "replace it)"
        )
    return out


def write_text(
    path: StrPath,
    text: str,
    *,
    inputs: Iterable[StrPath] = (),
    force: bool = False,
    what: str = "file",
) -> Path:
    """Write `text` to `path` atomically (parent directories created); returns the path.

    Refuses what `check_destination` refuses. Without `force` an existing file is never
    replaced, even one that appears while writing. Raises `FileWriteError` with one line naming
    the path when the file cannot be written (an unwritable or read-only location, a parent that
    is a file).
    """
    inputs = tuple(inputs)
    out = check_destination(path, inputs=inputs, force=force, what=what)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocking = next((p for p in reversed(out.parents) if p.exists() and not p.is_dir()), None)
        raise FileWriteError(
            f"cannot write the {what} to {str(path)!r}: "
            f"{str(blocking or out.parent)!r} is not a directory"
        ) from None
    except OSError as exc:
        raise FileWriteError(
            f"cannot write the {what} to {str(path)!r}: {exc.strerror or exc}"
        ) from None
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tmp-kvcheck-", dir=out.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; these files are meant to be read by others
        if force:
            os.replace(tmp, out)
        elif not _place_new(tmp, out):
            # Appeared between the check and the move (another process): still not overwritten.
            raise FileWriteError(
                f"refusing to overwrite {str(path)!r} with the {what}: it appeared while "
                "writing (--force to replace it)"
            )
        tmp = None
    except OSError as exc:
        raise FileWriteError(
            f"cannot write the {what} to {str(path)!r}: {exc.strerror or exc}"
        ) from None
    finally:
        if tmp is not None:
            _remove_quietly(tmp)
    return out


def _place_new(tmp: str, out: Path) -> bool:
    """Move `tmp` to `out` unless `out` exists (False then, `tmp` left): a hard link refuses an
    existing name atomically; where the file system has no hard links, check, then replace."""
    try:
        os.link(tmp, out)
    except FileExistsError:
        return False
    except OSError:
        if out.exists() or out.is_symlink():
            return False
        os.replace(tmp, out)
        return True
    os.unlink(tmp)
    return True


def _same_file(a: Path, b: Path) -> bool:
    """Whether `a` and `b` name one file (the same resolved path, or hard links to one inode)."""
    try:
        if a.resolve() == b.resolve():
            return True
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except (OSError, RuntimeError):  # a symlink loop or an unreadable parent: not provably one
        return False


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
