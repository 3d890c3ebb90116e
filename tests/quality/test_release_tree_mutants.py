"""Single-line allocation bugs injected into a copy of a whole release tree (0.5.23 and 0.5.16)
are caught end to end by `kvcheck check <tree>` on the release's own allocation path (issue 21),
and the unmodified trees and rewrites with identical page fates pass.

The tree is the release's allocation files (`kvcheck.families.sglang.real.tree`), which hold its
resolver too, copied into `tmp_path`. Checks run at default options except
`--global-counters sglang`: every release's resolver feeds stale rows to the adaptive
controller (`ideal` fails the unmodified tree on `global-counters`), which would hide the
allocation bug behind the first violation found; `kvcheck releases` judges releases the same
way. A bug counts as caught when the violation is one of the allocation and pool invariants.

UNO's root slot is the one bug searched with `--no-adaptive`: adaptive speculation runs for EAGLE
and EAGLE3 only, so with adaptive switching (the default for 0.5.23, whose resolver feeds the
controller) UNO's scenarios run kvcheck's model (`runs_adaptively`) and UNO's own launch never
runs; without it, it does.

Cost: each version's tree is copied once per module (`pristine`), and each case links its files
into its own tree and writes only the mutated file anew; coverage is not measured (`--no-coverage`:
nothing here reads it).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from kvcheck.errors import KvcheckUsageError
from tests.helpers import run_cli

# The invariants an allocation or retraction bug must break (not the resolver's alone).
ALLOCATION_INVARIANTS = (
    "alloc-",
    "kv-",
    "pool",
    "committed-retracted-zero",
)
# Bugs are searched with a fixed seed, so a run is reproducible (docs/release-allocation.md gives
# how many scenarios each took over several seeds).
OPTIONS = ["--global-counters", "sglang", "--no-database", "--no-save", "--no-coverage", "--json"]
SIZING = "sglang/srt/mem_cache/allocation_sizing.py"
ALLOCATION = "sglang/srt/mem_cache/allocation.py"
COMMON = "sglang/srt/mem_cache/common.py"
BATCH = "sglang/srt/managers/schedule_batch.py"
EAGLE = "sglang/srt/speculative/eagle_utils.py"

# (name, file, the line as the release has it, the bug) for 0.5.23.
BUGS_0_5_23 = [
    (
        "page-rounding-down",
        SIZING,
        "(r.kv.kv_committed_len + reserve + page_size - 1) // page_size * page_size,",
        "(r.kv.kv_committed_len + reserve) // page_size * page_size,",
    ),
    (
        "allocation-base-committed",
        SIZING,
        "        cur = r.kv.kv_allocated_len\n",
        "        cur = r.kv.kv_committed_len\n",
    ),
    (
        "recorded-allocated-is-committed",
        ALLOCATION,
        "req.kv.kv_allocated_len = max(req.kv.kv_allocated_len, nxt_kv_len)",
        "req.kv.kv_allocated_len = req.kv.kv_committed_len",
    ),
    (
        "tail-never-freed",
        COMMON,
        "    _release_overallocated_kv_indices(\n"
        "        req, owned_kv_len, req.kv.kv_allocated_len, tree_cache\n    )\n",
        "",
    ),
    (
        "tail-freed-one-slot-early",
        COMMON,
        "tree_cache.free_kv_row(req.kv, [(start_p, end_p)])",
        "tree_cache.free_kv_row(req.kv, [(start_p - 1, end_p)])",
    ),
    (
        "tail-from-floor",
        COMMON,
        "        start_p = ceil_align(start_p, page_size)\n",
        "        start_p = start_p // page_size * page_size\n",
    ),
    (
        "tail-from-committed-length",
        COMMON,
        "    if page_size > 1:\n        start_p = ceil_align(start_p, page_size)\n",
        "",
    ),
    (
        "allocated-kept-after-release",
        BATCH,
        "    def mark_kv_released(self) -> None:\n        self.kv_allocated_len = 0\n",
        "    def mark_kv_released(self) -> None:\n        pass\n",
    ),
    (
        "estimate-unaligned",
        BATCH,
        "total += ceil_align(nxt, page_size) - ceil_align(cur, page_size)",
        "total += nxt - cur",
    ),
    (  # the retraction reset keeps the committed length (release_req -> reset_for_retract)
        "retraction-keeps-committed",
        BATCH,
        '        assert not self.kv.holds_kv, "expect it is already released"\n'
        "        self.kv.kv_committed_len = 0\n",
        '        assert not self.kv.holds_kv, "expect it is already released"\n',
    ),
    (  # admission (`alloc_for_extend`) never records the allocated length
        "admission-allocated-not-recorded",
        ALLOCATION,
        "        req.kv.kv_allocated_len = seq_len\n",
        "",
    ),
    (  # admission writes each row from the prefix lengths' offsets, not the extend lengths'
        "admission-offsets-from-prefix-lengths",
        ALLOCATION,
        "    extend_lens_cpu = torch.tensor(\n        batch.extend_lens,",
        "    extend_lens_cpu = torch.tensor(\n        batch.prefix_lens,",
    ),
    (  # the reserve without its double buffer (the launch and the estimate both read it)
        "double-buffer-dropped",
        SIZING,
        "    return 2 * get_alloc_len_per_decode()\n",
        "    return get_alloc_len_per_decode()\n",
    ),
    (  # UNO's clean-root position forgotten: its launch reserves 2 * drafts, not 2 * (drafts + 1)
        "uno-root-slot-forgotten",
        SIZING,
        "        return spec_tokens + 1\n",
        "        return spec_tokens\n",
    ),
]
# Bugs whose code runs only without adaptive switching (module docstring).
WITHOUT_ADAPTIVE = {"uno-root-slot-forgotten"}

# Rewrites with the same page fates: they must pass.
REWRITES_0_5_23 = [
    # The clamp is dead code in 0.5.23: the reserve comes from the fixed adaptive maximum
    # (`get_alloc_len_per_decode`, allocation_sizing.py:28-57) and the committed length only
    # grows within a residency, so `ceil(C + R)` never falls below the last launch's `Al`.
    # Dropping it changes no page's fate; it is a bug under rule 0.5.12, which reserves from
    # the launched stride (kvcheck's corpus mutant `alloc-no-clamp`).
    (
        "no-clamp-is-dead-code",
        SIZING,
        "        nxt = max(\n            cur,\n",
        "        nxt = max(\n            0,\n",
    ),
    (
        "record-without-clamp",  # nxt is already clamped to at least cur
        ALLOCATION,
        "req.kv.kv_allocated_len = max(req.kv.kv_allocated_len, nxt_kv_len)",
        "req.kv.kv_allocated_len = nxt_kv_len",
    ),
    (  # admission records its lengths in the other order: nothing reads them in between
        "admission-lengths-swapped",
        ALLOCATION,
        "        req.kv.kv_allocated_len = seq_len\n        req.kv.kv_committed_len = seq_len\n",
        "        req.kv.kv_committed_len = seq_len\n        req.kv.kv_allocated_len = seq_len\n",
    ),
    (
        "ceil-by-negation",
        SIZING,
        "(r.kv.kv_committed_len + reserve + page_size - 1) // page_size * page_size,",
        "-(-(r.kv.kv_committed_len + reserve) // page_size) * page_size,",
    ),
]


# The same bug classes in the 0.5.16-0.5.18 layout (sizing inline in `eagle_prepare_for_decode`,
# C on `Req`, the record dropped at release).
BUGS_0_5_16 = [
    (
        "page-rounding-down",
        EAGLE,
        "(r.kv_committed_len + double_alloc + page_size - 1)",
        "(r.kv_committed_len + double_alloc)",
    ),
    (
        "allocation-base-committed",
        EAGLE,
        "        cur = r.kv.kv_allocated_len\n",
        "        cur = r.kv_committed_len\n",
    ),
    (
        "recorded-allocated-is-committed",
        ALLOCATION,
        "req.kv.kv_allocated_len = max(req.kv.kv_allocated_len, int(nxt_kv_lens_cpu[i]))",
        "req.kv.kv_allocated_len = req.kv_committed_len",
    ),
    (
        "tail-never-freed",
        COMMON,
        "    _release_overallocated_kv_indices(req, start_p, end_p, tree_cache)\n",
        "",
    ),
    ("tail-freed-one-slot-early", COMMON, "start_p:end_p", "start_p - 1 : end_p"),
    (
        "tail-from-floor",
        COMMON,
        "        start_p = ceil_align(start_p, page_size)\n",
        "        start_p = start_p // page_size * page_size\n",
    ),
    (
        "tail-from-committed-length",
        COMMON,
        "    if page_size > 1:\n        start_p = ceil_align(start_p, page_size)\n",
        "",
    ),
    ("allocated-kept-after-release", COMMON, "    req.kv = None\n", ""),
    (
        "retraction-keeps-committed",
        BATCH,
        '        assert self.kv is None, "expect it is already released"\n'
        "        self.kv_committed_len = 0\n",
        '        assert self.kv is None, "expect it is already released"\n',
    ),
    (
        "estimate-unaligned",
        BATCH,
        "total += ceil_align(nxt, page_size) - ceil_align(cur, page_size)",
        "total += nxt - cur",
    ),
    (
        "double-buffer-dropped",
        SIZING,
        "    return 2 * get_alloc_len_per_decode(server_args)\n",
        "    return get_alloc_len_per_decode(server_args)\n",
    ),
]
REWRITES_0_5_16 = [
    (
        "record-without-clamp",
        ALLOCATION,
        "req.kv.kv_allocated_len = max(req.kv.kv_allocated_len, int(nxt_kv_lens_cpu[i]))",
        "req.kv.kv_allocated_len = int(nxt_kv_lens_cpu[i])",
    ),
    (
        "ceil-by-negation",
        EAGLE,
        "(r.kv_committed_len + double_alloc + page_size - 1)\n            // page_size\n",
        "-(-(r.kv_committed_len + double_alloc)\n            // page_size)\n",
    ),
]
BUGS = [("0.5.23", *bug) for bug in BUGS_0_5_23] + [("0.5.16", *bug) for bug in BUGS_0_5_16]
REWRITES = [("0.5.23", *r) for r in REWRITES_0_5_23] + [("0.5.16", *r) for r in REWRITES_0_5_16]


def tree(version: str) -> Path:
    """The release's allocation tree from the cached wheel (skipped when it cannot be fetched,
    except under CI)."""
    try:
        from kvcheck.families.sglang.real.tree import allocation_tree

        return allocation_tree(version)
    except KvcheckUsageError as exc:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"SGLang {version}'s wheel cannot be fetched here: {exc}")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """`version`'s tree, copied once for the module (the cache's own is never written)."""
    copies: dict[str, Path] = {}

    def copy_of(version: str) -> Path:
        if version not in copies:
            copies[version] = tmp_path_factory.mktemp(f"sglang-{version}") / "tree"
            shutil.copytree(tree(version), copies[version])
        return copies[version]

    return copy_of


def linked_copy(source: Path, tmp_path: Path) -> Path:
    """A tree in `tmp_path` whose files are hard links to `source`'s: as cheap as a listing.
    A file to change must be written anew (`mutate`), never in place."""
    copy = tmp_path / "tree"
    shutil.copytree(source, copy, copy_function=os.link)
    return copy


def mutated_copy(
    pristine: Callable[[str], Path],
    tmp_path: Path,
    version: str,
    file: str,
    line: str,
    replacement: str,
) -> Path:
    """A tree of `version` in `tmp_path` with `line` of `file` replaced (once)."""
    copy = linked_copy(pristine(version), tmp_path)
    target = copy / file
    text = target.read_text()
    assert text.count(line) == 1, f"{line!r} is not once in {file}"
    target.unlink()  # a new file: the pristine copy's link keeps the original
    target.write_text(text.replace(line, replacement))
    return copy / "sglang"


def check(capsys: pytest.CaptureFixture[str], root: Path, *extra: str) -> dict[str, object]:
    code, out, err = run_cli(capsys, "check", str(root), *OPTIONS, *extra)
    assert code in (0, 1), err
    report: dict[str, object] = json.loads(out)
    assert report["allocation_path"] == "release"
    return report


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize(
    ("version", "name", "file", "line", "bug"), BUGS, ids=[f"{b[0]}-{b[1]}" for b in BUGS]
)
def test_single_line_bugs_are_caught(
    capsys: pytest.CaptureFixture[str],
    pristine: Callable[[str], Path],
    tmp_path: Path,
    version: str,
    name: str,
    file: str,
    line: str,
    bug: str,
) -> None:
    root = mutated_copy(pristine, tmp_path, version, file, line, bug)
    extra = ["--no-adaptive"] if name in WITHOUT_ADAPTIVE else []
    report = check(capsys, root, "--seed", "1", *extra)
    assert report["verdict"] == "fail", name
    violation = report["violation"]
    assert isinstance(violation, dict)
    # An estimate bug that lets the engine keep a request the model retracts makes the launch
    # run out of memory; that fault comes before the same step's delivery findings
    # (docs/release-allocation.md).
    assert str(violation["invariant"]).startswith(ALLOCATION_INVARIANTS), violation


@pytest.mark.parametrize(
    ("version", "name", "file", "line", "rewrite"),
    REWRITES,
    ids=[f"{r[0]}-{r[1]}" for r in REWRITES],
)
def test_rewrites_with_the_same_page_fates_pass(
    capsys: pytest.CaptureFixture[str],
    pristine: Callable[[str], Path],
    tmp_path: Path,
    version: str,
    name: str,
    file: str,
    line: str,
    rewrite: str,
) -> None:
    root = mutated_copy(pristine, tmp_path, version, file, line, rewrite)
    report = check(capsys, root, "--seed", "7")
    assert report["verdict"] == "pass", (name, report.get("violation"))


@pytest.mark.parametrize("version", ["0.5.23", "0.5.16"])
def test_the_unmodified_tree_passes(
    capsys: pytest.CaptureFixture[str],
    pristine: Callable[[str], Path],
    tmp_path: Path,
    version: str,
) -> None:
    report = check(capsys, linked_copy(pristine(version), tmp_path) / "sglang", "--seed", "11")
    assert report["verdict"] == "pass", report.get("violation")


def test_a_counterexample_of_the_release_path_replays_on_it(
    capsys: pytest.CaptureFixture[str], pristine: Callable[[str], Path], tmp_path: Path
) -> None:
    name, file, line, bug = BUGS_0_5_23[0]
    root = mutated_copy(pristine, tmp_path, "0.5.23", file, line, bug)
    code, out, err = run_cli(
        capsys, "check", str(root), "--global-counters", "sglang", "--no-database", "--json"
    )
    assert code == 1, err
    saved = Path(json.loads(out)["counterexample_file"])
    assert json.loads(saved.read_text())["config"]["allocation_path"] == "release"
    code, out, err = run_cli(capsys, "replay", str(saved), "--json")
    assert code == 1, err
    replayed = json.loads(out)
    assert replayed["replay"] == "same" and replayed["allocation_path"] == "release"
    # Asked for kvcheck's model, the same scenario passes: the bug is in the release's code.
    code, out, err = run_cli(capsys, "replay", str(saved), "--allocation-path", "model", "--json")
    assert code == 0, (name, out, err)
    replayed = json.loads(out)
    assert (replayed["allocation_path"], replayed["file_allocation_path"]) == ("model", "release")
