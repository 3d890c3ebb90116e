"""`kvcheck.files.write_text`: atomic, never over an input, never over an existing file unless
forced, and one line for every failure."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvcheck import files
from kvcheck.errors import FileWriteError
from kvcheck.files import check_destination, write_text


def test_writes_the_text_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    out = write_text(tmp_path / "a" / "b.txt", "hello\n")
    assert out.read_text() == "hello\n"
    assert [p.name for p in out.parent.iterdir()] == ["b.txt"]
    assert out.stat().st_mode & 0o777 == 0o644


def test_an_existing_file_is_kept_without_force_and_replaced_with_it(tmp_path: Path) -> None:
    path = tmp_path / "kept.txt"
    path.write_text("mine\n")
    with pytest.raises(FileWriteError, match=r"refusing to overwrite .*--force"):
        write_text(path, "theirs\n")
    assert path.read_text() == "mine\n"
    write_text(path, "theirs\n", force=True)
    assert path.read_text() == "theirs\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.txt"]


@pytest.mark.parametrize("spelling", ["same", "relative", "dotted", "hard link"])
def test_an_input_is_never_written_over_not_even_with_force(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spelling: str
) -> None:
    source = tmp_path / "x.kvcheck.json"
    source.write_text("{}\n")
    monkeypatch.chdir(tmp_path)
    destination = {
        "same": str(source),
        "relative": "x.kvcheck.json",
        "dotted": f"{tmp_path}/./sub/../x.kvcheck.json",
        "hard link": str(tmp_path / "link.json"),
    }[spelling]
    (tmp_path / "sub").mkdir()
    if spelling == "hard link":
        os.link(source, destination)
    for force in (False, True):
        with pytest.raises(FileWriteError, match="it is an input of this command"):
            write_text(destination, "overwritten\n", inputs=[str(source)], force=force)
    assert source.read_text() == "{}\n"


def test_a_directory_is_not_a_destination(tmp_path: Path) -> None:
    with pytest.raises(FileWriteError, match="is a directory"):
        check_destination(tmp_path, force=True)


def test_a_parent_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("")
    with pytest.raises(FileWriteError, match=r"'.*plain' is not a directory") as caught:
        write_text(tmp_path / "plain" / "x" / "page.html", "<html>", what="HTML timeline")
    assert "\n" not in str(caught.value)
    assert "HTML timeline" in str(caught.value)


def test_a_failed_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "report.html"
    path.write_text("old\n")

    def no_space(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "replace", no_space)
    with pytest.raises(FileWriteError, match="No space left on device"):
        write_text(path, "new\n", force=True)
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]


def test_a_file_that_appears_while_writing_is_not_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "race.py"
    real_mkstemp = files.tempfile.mkstemp

    def mkstemp_then_someone_writes(**kwargs: str) -> tuple[int, str]:
        made = real_mkstemp(**kwargs)
        path.write_text("written by another process\n")
        return made

    monkeypatch.setattr(files.tempfile, "mkstemp", mkstemp_then_someone_writes)
    with pytest.raises(FileWriteError, match="appeared while writing"):
        write_text(path, "ours\n")
    assert path.read_text() == "written by another process\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["race.py"]


def test_without_hard_links_an_existing_file_is_still_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_links(src: str, dst: str) -> None:
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(files.os, "link", no_links)
    write_text(tmp_path / "new.txt", "one\n")
    assert (tmp_path / "new.txt").read_text() == "one\n"
    assert not files._place_new(str(tmp_path / "new.txt"), tmp_path / "new.txt")
