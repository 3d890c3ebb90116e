"""The release-tree corpus (`kvcheck mutants --corpus release-trees`) without the wheels: its
anchored patches on a source of our own, the listing, and the two ways it cannot run (a patch
that does not fit the release: kvcheck's fault, exit 2; a release that cannot be fetched: a
one-line error). The kill matrix over the real trees is tests/quality/test_release_tree_mutants.py.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from kvcheck.cli.main import main
from kvcheck.errors import KvcheckInternalError
from kvcheck.families.sglang import release as sglang_release
from kvcheck.families.sglang.mutants import trees
from kvcheck.families.sglang.mutants.trees import Patch
from kvcheck.mutants import matrix
from tests.unit.targets.test_sglang_release import FakePip

SOURCE = textwrap.dedent(
    """\
    def sizes(items, step):
        total = 0
        for item in items:
            total += (item + step - 1) // step
        return total


    class Box:
        def empty(self):
            self.count = 0
            self.label = (
                "empty"
            )
            return self
    """
)


def test_a_patch_replaces_its_anchor_within_its_function() -> None:
    patched = Patch("f.py", "sizes", "+ step - 1)", ")").apply(SOURCE, "here")
    assert "total += (item ) // step" in patched
    assert patched.count("\n") == SOURCE.count("\n")


def test_a_patch_without_replacement_drops_the_whole_statement_keeping_line_numbers() -> None:
    patched = Patch("f.py", "Box.empty", '"empty"', None).apply(SOURCE, "here")
    lines = patched.splitlines()
    assert lines[10] == "        pass" and lines[11:13] == ["", ""]
    assert "self.count = 0" in patched and "label" not in patched
    assert len(lines) == len(SOURCE.splitlines())


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        (Patch("f.py", "sizes", "no such text", ""), "is 0 times in sizes"),
        (Patch("f.py", "sizes", "total", ""), "is 3 times in sizes"),
        (Patch("f.py", "Box.fill", "count", ""), "no function Box.fill"),
        # An anchor outside the function it names is not found there.
        (Patch("f.py", "Box.empty", "+ step - 1)", ")"), "is 0 times in Box.empty"),
    ],
)
def test_a_patch_that_does_not_fit_is_kvchecks_fault(patch: Patch, message: str) -> None:
    with pytest.raises(KvcheckInternalError, match=message):
        patch.apply(SOURCE, "release-tree mutant x (SGLang 0.0.1)")


def test_every_entry_is_named_by_release_with_an_upstream_bug_class() -> None:
    names = [entry.name for entry in trees.entries()]
    assert len(set(names)) == len(names)
    classes = {e.origin for e in trees.entries() if e.kind == "mutant"}
    assert {
        "page rounding",
        "allocation base",
        "UNO root slot",
        "double buffer",
        "recorded allocated length",
        "tail release never",
        "tail release early",
        "tail release floor",
        "tail release from committed",
        "allocated length after release",
        "the estimate",
    } <= classes
    for entry in trees.entries():
        assert entry.name.startswith(f"{entry.version}-")
        assert (entry.kind == "mutant") == (entry.expect is not None)
        if entry.patch is not None:  # short anchors: facts about names, not release text
            assert len(entry.patch.anchor) <= 70, entry.name
    unmodified = [e.version for e in trees.entries() if e.patch is None]
    assert unmodified == ["0.5.23", "0.5.16"]


def test_the_corpus_is_listed_and_a_replay_command_judges_as_the_matrix(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["mutants", "--corpus", "release-trees", "--list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["entries"]
    assert [e["name"] for e in listed] == [e.name for e in trees.entries()]
    first = listed[1]
    assert first["release"] == "0.5.23" and first["spec"] == "mutant:0.5.23-page-rounding-down"
    assert first["patch"]["function"] == "page_aligned_decode_alloc_lens"
    assert first["origin"] == "page rounding" and first["convention"] == "honest"
    uno = trees.get("0.5.23-uno-root-slot-forgotten")
    assert uno is not None
    assert matrix.replay_command(uno, max_examples=300, seed=1) == (
        "kvcheck check mutant:0.5.23-uno-root-slot-forgotten --convention honest "
        "--global-counters sglang --no-adaptive --allocation-path release --seed 1 "
        "--max-examples 300 --no-database"
    )
    assert main(["mutants", "--corpus", "no-such", "--list"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "named corpora: release-trees" in err
    assert main(["mutants", "--corpus", "release-trees", "--only", "finished-no-giveback"]) == 2
    assert "not in the release-trees corpus" in capsys.readouterr().err


def _fake_tree(root: Path) -> Path:
    """A cached tree whose sizing file lacks every anchor (our own text)."""
    sizing = root / "sglang" / trees.SIZING
    sizing.parent.mkdir(parents=True)
    sizing.write_text(
        "def page_aligned_decode_alloc_lens(reqs, *, reserve, page_size):\n    pass\n"
    )
    return root


def test_an_anchor_missing_from_the_release_is_exit_2_not_a_verdict(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from kvcheck.families.sglang.real import tree

    cached = _fake_tree(tmp_path / "cache")
    monkeypatch.setattr(tree, "allocation_tree", lambda version: cached)
    for command in (
        ["mutants", "--only", "0.5.23-page-rounding-down", "--no-exhaustive"],
        ["check", "mutant:0.5.23-page-rounding-down"],
    ):
        assert main(command) == 2
        err = capsys.readouterr().err.strip()
        assert "'+ page_size - 1)' is 0 times in page_aligned_decode_alloc_lens" in err
        assert "kvcheck's patch does not fit this release" in err and "Traceback" not in err


def test_a_release_that_cannot_be_fetched_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KVCHECK_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(sglang_release, "_pip", FakePip(wheel=False, stderr="ERROR: no index\n"))
    only = ["--only", "0.5.16-unmodified", "--no-exhaustive"]
    code = main(["mutants", "--corpus", "release-trees", *only])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot fetch SGLang 0.5.16" in err
    assert "KVCHECK_CACHE" in err and "Traceback" not in err
