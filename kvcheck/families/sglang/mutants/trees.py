"""SGLang's release-tree corpus (`kvcheck mutants --corpus release-trees`): single-line bugs
injected into a copy of a whole release's allocation tree (0.5.23 and 0.5.16), each judged with
the tree as the target on the release's own allocation path (issue 21), beside the unmodified
trees and rewrites with identical page fates, which must pass.

No SGLang text lives here: each entry is an anchored substitution (`Patch`) applied at run time
to a copy of the user's cached tree (`kvcheck.families.sglang.real.tree.allocation_tree`, from
the wheel in `KVCHECK_CACHE`). An anchor is the shortest text that is once in its function; an
anchor a release does not hold is kvcheck's fault (`KvcheckInternalError`, exit 2), never a
verdict, since the bug was never injected.

The copies live in one folder per process, removed at exit: the cached tree's files are hard
links there (copied where the cache is on another file system), and the patched file is written
anew, so the cache is never written.

Each entry is addressed as `mutant:NAME` (`kvcheck check mutant:0.5.23-tail-never-freed`), which
rebuilds its tree wherever it is loaded: in a `--jobs` worker, and when a counterexample file
saved from it is replayed.
"""

from __future__ import annotations

import ast
import atexit
import functools
import hashlib
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import attrs

from kvcheck.core.target import Target
from kvcheck.errors import KvcheckInternalError
from kvcheck.families.sglang.judging import SglangJudging
from kvcheck.families.sglang.mutants.registry import SPEC_PREFIX, Kind
from kvcheck.families.sglang.scenario import FAMILY_NAME, Convention, GlobalCounterMode

# The corpus's name (`kvcheck mutants --corpus release-trees`).
CORPUS_NAME: Final = "release-trees"
# Why the kill matrix looks for no exhaustive minimum of these entries (measured on 0.5.23's
# tree; the exhaustive search itself runs on the release's allocation path): its bounds are at
# page size 1, where the page bugs do not show (`page-rounding-down`, `tail-freed-one-slot-early`
# and `tail-from-floor` shrink to 2-3 events at page size 2), and widened to what a tree draws
# (three algorithms, three grammars, both overlaps, its rule) they pass 160,000 states and 5.5 GB
# at level 5 in 90 s. Narrowed to the counterexample's algorithm, overlap and rule, the rows at
# page size 1 take 1-5 s each (`allocation-base-committed` 4 events, `recorded-allocated-is-
# committed` and `tail-never-freed` 3, each its shrunk length).
NO_EXHAUSTIVE: Final = (
    "the exhaustive search enumerates page size 1 only, and most of these bugs need a larger page"
)
# The files patched, relative to the tree's `sglang` package.
SIZING: Final = "srt/mem_cache/allocation_sizing.py"
ALLOCATION: Final = "srt/mem_cache/allocation.py"
COMMON: Final = "srt/mem_cache/common.py"
BATCH: Final = "srt/managers/schedule_batch.py"
CAPACITY: Final = "srt/mem_cache/allocator/base.py"
EAGLE: Final = "srt/speculative/eagle_utils.py"


@attrs.frozen
class Patch:
    """One anchored text substitution in one function of one file of the tree.

    `anchor` must be exactly once in the source of `function` (a qualname: `Req.reset_for_retract`)
    of `file`. It becomes `replacement`, or, when `replacement` is None, the whole statement that
    holds it becomes `pass` (a deleted line, whatever its length in the release)."""

    file: str
    function: str
    anchor: str
    replacement: str | None

    def describe(self) -> str:
        """The patch in one line, as the matrix lists it."""
        change = "drop the statement" if self.replacement is None else f"-> {self.replacement!r}"
        return f"{self.file} {self.function}: {self.anchor!r} {change}"

    def apply(self, text: str, where: str) -> str:
        """`text` (the file's source) patched; `KvcheckInternalError` when the anchor is not
        once in the function (`where` names the release and entry for the message)."""
        try:
            tree = ast.parse(text)
        except SyntaxError as exc:
            raise KvcheckInternalError(f"{where}: {self.file} does not parse ({exc})") from None
        node = _function(tree, self.function)
        if node is None:
            raise KvcheckInternalError(
                f"{where}: no function {self.function} in {self.file}; kvcheck's patch does "
                "not fit this release"
            )
        lines = text.splitlines(keepends=True)
        offsets = [0]
        for line in lines:
            offsets.append(offsets[-1] + len(line))
        start = offsets[node.lineno - 1]
        end = offsets[node.end_lineno or node.lineno]
        found = text.count(self.anchor, start, end)
        if found != 1:
            raise KvcheckInternalError(
                f"{where}: the anchor {self.anchor!r} is {found} times in {self.function} of "
                f"{self.file} (it must be once); kvcheck's patch does not fit this release"
            )
        at = text.index(self.anchor, start, end)
        if self.replacement is not None:
            return text[:at] + self.replacement + text[at + len(self.anchor) :]
        statement = _innermost_statement(node, _line_of(offsets, at))
        first, last = statement.lineno, statement.end_lineno or statement.lineno
        indent = lines[first - 1][: len(lines[first - 1]) - len(lines[first - 1].lstrip())]
        # The statement's lines become one `pass` and blank lines, so every later line keeps
        # its number (the coverage report and tracebacks name the release's lines).
        kept = [f"{indent}pass\n"] + ["\n"] * (last - first)
        return "".join(lines[: first - 1] + kept + lines[last:])


def _function(tree: ast.Module, qualname: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The definition `qualname` (`Class.method` or a module function) in `tree`."""
    scope: list[ast.stmt] = tree.body
    *owners, name = qualname.split(".")
    for owner in owners:
        found = next((n for n in scope if isinstance(n, ast.ClassDef) and n.name == owner), None)
        if found is None:
            return None
        scope = found.body
    return next(
        (
            n
            for n in scope
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name
        ),
        None,
    )


def _line_of(offsets: Sequence[int], position: int) -> int:
    """The 1-based line holding character `position`, given each line's start offset."""
    line = 1
    while line < len(offsets) - 1 and offsets[line] <= position:
        line += 1
    return line


def _innermost_statement(node: ast.AST, line: int) -> ast.stmt:
    """The innermost statement under `node` whose lines hold `line` (the shortest; of equal
    ones the deepest, which `ast.walk` reaches last)."""
    best: ast.stmt | None = None
    for child in ast.walk(node):
        if not isinstance(child, ast.stmt) or child is node:
            continue
        first, last = child.lineno, child.end_lineno or child.lineno
        if first <= line <= last and (best is None or last - first <= _span(best)):
            best = child
    if best is None:
        raise KvcheckInternalError(f"no statement holds line {line}")
    return best


def _span(statement: ast.stmt) -> int:
    return (statement.end_lineno or statement.lineno) - statement.lineno


# What `kvcheck check <tree>` judges both releases' trees by when asked for nothing but SGLang's
# global counters (tests/quality/test_release_tree_mutants.py checks it): the honest convention
# (their spellings are 0.5.16-0.5.18's and 0.5.23+'s, whose launch pre-claims no slot) and
# adaptive switching (their resolvers feed the adaptive controller). The counters are SGLang's
# because every release's resolver feeds stale rows to that controller, which `ideal` fails on
# the unmodified tree, hiding the bug behind it.
CONVENTION: Final[Convention] = "honest"
GLOBAL_COUNTERS: Final[GlobalCounterMode] = "sglang"


@attrs.frozen
class TreeEntry:
    """One entry of the release-tree corpus (`kvcheck.core.family.MutantEntry`): a bug of an
    upstream class (`origin`) injected into `version`'s tree by `patch`, or a rewrite (`patch`
    None: the unmodified tree)."""

    name: str
    kind: Kind
    version: str
    origin: str
    summary: str
    patch: Patch | None
    expect: str | None = None
    # Off for a bug whose code runs only without adaptive switching (UNO's launch).
    adaptive: bool = True
    shrink_note: str = ""

    @property
    def family(self) -> str:
        """The family whose corpus holds it."""
        return FAMILY_NAME

    @property
    def short_spec(self) -> str:
        """`mutant:NAME`."""
        return SPEC_PREFIX + self.name

    @property
    def spec(self) -> str:
        """`mutant:NAME` too: the loader rebuilds its tree (the saved counterexample's spec)."""
        return self.short_spec

    @property
    def convention(self) -> Convention:
        """The convention it is judged under (`CONVENTION`), as a resolver entry's annotation
        (what `kvcheck exhaust mutant:NAME` reads without `--convention`)."""
        return CONVENTION

    @property
    def global_counters(self) -> GlobalCounterMode:
        """The counter mode it is judged under (`GLOBAL_COUNTERS`), as `convention`."""
        return GLOBAL_COUNTERS

    @property
    def options(self) -> SglangJudging:
        """The options it is judged under: as `kvcheck check <tree> --global-counters sglang`
        judges the tree (`CONVENTION`), on the release's own allocation path."""
        return SglangJudging(
            self.convention, self.global_counters, self.adaptive, allocation_path="release"
        )

    def target(self) -> Target:
        """The patched tree as a target, loaded as `kvcheck check <tree>` loads a checkout."""
        from kvcheck.families.sglang.loading import package_target

        package = patched_tree(self.version, self.name) / "sglang"
        what = f"SGLang {self.version}'s tree, {self.kind} {self.name!r}: {self.summary}"
        return package_target(self.short_spec, package, what)


def mutant(
    version: str,
    name: str,
    origin: str,
    expect: str,
    patch: Patch,
    summary: str,
    *,
    adaptive: bool = True,
) -> TreeEntry:
    """A bug of the class `origin` injected into `version`'s tree, named `VERSION-NAME`."""
    return TreeEntry(
        f"{version}-{name}", "mutant", version, origin, summary, patch, expect, adaptive
    )


def rewrite(version: str, name: str, patch: Patch | None, summary: str) -> TreeEntry:
    """A rewrite of `version`'s tree with identical page fates, which must pass."""
    origin = "the release as published" if patch is None else "correct rewrite"
    return TreeEntry(f"{version}-{name}", "rewrite", version, origin, summary, patch)


def _corpus() -> tuple[TreeEntry, ...]:
    """The entries, 0.5.23's then 0.5.16's; origins are the bug classes of issue 21."""
    v23, v16 = "0.5.23", "0.5.16"
    sizing = functools.partial(Patch, SIZING, "page_aligned_decode_alloc_lens")
    tail = functools.partial(Patch, COMMON, "_release_overallocated_kv_indices")
    estimate = functools.partial(
        Patch, BATCH, "ScheduleBatch._new_tokens_required_next_decode_spec_v2"
    )
    launch16 = functools.partial(Patch, EAGLE, "eagle_prepare_for_decode")
    order = functools.partial(Patch, BATCH, "ScheduleBatch._get_decode_retraction_order")
    loop = functools.partial(Patch, BATCH, "ScheduleBatch.retract_decode")
    return (
        # 0.5.23: sizing in mem_cache/allocation_sizing.py, the record on `ReqKvInfo`.
        rewrite(v23, "unmodified", None, "nothing injected"),
        mutant(
            v23,
            "page-rounding-down",
            "page rounding",
            "alloc-estimate-matches",
            sizing("+ page_size - 1)", ")"),
            "the decode allocation rounds C + reserve down to a page, not up",
        ),
        mutant(
            v23,
            "allocation-base-committed",
            "allocation base",
            "kv-no-double-owner",
            sizing("kv.kv_allocated_len", "kv.kv_committed_len"),
            "the decode allocation starts from the committed length, not the allocated one",
        ),
        mutant(
            v23,
            "recorded-allocated-is-committed",
            "recorded allocated length",
            "alloc-covers-reserve",
            Patch(
                ALLOCATION,
                "alloc_for_spec_decode",
                "max(req.kv.kv_allocated_len, nxt_kv_len)",
                "req.kv.kv_committed_len",
            ),
            "the decode launch records the committed length as allocated",
        ),
        mutant(
            v23,
            "tail-never-freed",
            "tail release never",
            "kv-released-once",
            Patch(COMMON, "release_kv_cache", "_release_overallocated_kv_indices(", None),
            "release never frees the over-allocated tail",
        ),
        mutant(
            v23,
            "tail-freed-one-slot-early",
            "tail release early",
            "alloc-expected",
            tail("(start_p, end_p)", "(start_p - 1, end_p)"),
            "release frees the tail from one slot before the owned length",
        ),
        mutant(
            v23,
            "tail-from-floor",
            "tail release floor",
            "kv-released-once",
            tail("ceil_align(start_p, page_size)", "start_p // page_size * page_size"),
            "release frees the tail from the owned length's page floor, not its ceiling",
        ),
        mutant(
            v23,
            "tail-from-committed-length",
            "tail release from committed",
            "alloc-expected",
            tail("ceil_align(start_p", None),
            "release frees the tail from the owned length unrounded, mid-page",
        ),
        mutant(
            v23,
            "allocated-kept-after-release",
            "allocated length after release",
            "alloc-expected",
            Patch(BATCH, "ReqKvInfo.mark_kv_released", "kv_allocated_len = 0", None),
            "release keeps the allocated length",
        ),
        mutant(
            v23,
            "estimate-unaligned",
            "the estimate",
            "alloc-estimate-matches",
            estimate("ceil_align(nxt, page_size) - ceil_align(cur, page_size)", "nxt - cur"),
            "the decode memory estimate counts tokens, not whole pages",
        ),
        mutant(
            v23,
            "retraction-keeps-committed",
            "retraction reset",
            "committed-retracted-zero",
            Patch(BATCH, "Req.reset_for_retract", "kv_committed_len = 0", None),
            "the retraction reset keeps the committed length",
        ),
        mutant(
            v23,
            "retraction-unsorted",
            "retraction order",
            "alloc-retraction-order",
            order("key=lambda i: length_key(reqs[i])", None),
            "memory-pressure retraction takes the batch's order, not the sorted one",
        ),
        mutant(
            v23,
            "retraction-sort-reversed",
            "retraction order",
            "alloc-retraction-order",
            order(
                "length_key(reqs[i]),\n            reverse=True",
                "length_key(reqs[i]),\n            reverse=False",
            ),
            "memory-pressure retraction sorts the batch the wrong way round",
        ),
        mutant(
            v23,
            "retraction-shortest-prompt-first",
            "retraction order",
            "alloc-retraction-order",
            order("-len(req.origin_input_ids)", "len(req.origin_input_ids)"),
            "memory-pressure retraction, among equal outputs, takes the shortest prompt first",
        ),
        mutant(
            v23,
            "retraction-from-the-front",
            "retraction order",
            "alloc-retraction-order",
            loop(
                "            idx = sorted_indices.pop()", "            idx = sorted_indices.pop(0)"
            ),
            "the retraction loop gives up the request its order most prefers to keep",
        ),
        mutant(
            v23,
            "decode-capacity-strict",
            "the estimate",
            "kv-pool-conserved",
            Patch(
                CAPACITY,
                "BaseTokenToKVPoolAllocator.check_decode_capacity",
                "self.available_size() >= num_tokens",
                "self.available_size() > num_tokens",
            ),
            "the decode capacity check wants one free slot more than the launch takes",
        ),
        rewrite(
            v23,
            "retraction-sort-by-negated-key",
            order(
                "key=lambda i: length_key(reqs[i]),\n            reverse=True",
                "key=lambda i: tuple(-part for part in length_key(reqs[i])),\n"
                "            reverse=False",
            ),
            "the retraction order sorted ascending by the negated key (a stable sort either way)",
        ),
        mutant(
            v23,
            "admission-allocated-not-recorded",
            "recorded allocated length",
            "alloc-never-shrinks",
            Patch(ALLOCATION, "alloc_for_extend", "kv_allocated_len = seq_len", None),
            "admission (alloc_for_extend) never records the allocated length",
        ),
        mutant(
            v23,
            "admission-offsets-from-prefix-lengths",
            "allocation base",
            "kv-no-double-owner",
            Patch(ALLOCATION, "alloc_for_extend", "batch.extend_lens,", "batch.prefix_lens,"),
            "admission writes each row from the prefix lengths' offsets, not the extend lengths'",
        ),
        mutant(
            v23,
            "double-buffer-dropped",
            "double buffer",
            "alloc-covers-reserve",
            Patch(SIZING, "get_alloc_reserve_per_decode", "2 * ", ""),
            "the decode reserve drops its double buffer (launch and estimate both read it)",
        ),
        mutant(
            v23,
            "uno-root-slot-forgotten",
            "UNO root slot",
            "alloc-covers-reserve",
            Patch(SIZING, "get_alloc_len_per_decode", "spec_tokens + 1", "spec_tokens"),
            "UNO's launch reserves 2 * drafts, forgetting the clean-root slot",
            # UNO runs adaptively nowhere (adaptive speculation is EAGLE's and EAGLE3's): with
            # switching on, its scenarios run kvcheck's model and its own launch never runs.
            adaptive=False,
        ),
        rewrite(
            v23,
            "no-clamp-is-dead-code",
            sizing("cur,", "0,"),
            # The reserve comes from the fixed adaptive maximum and C only grows within a
            # residency, so ceil(C + R) never falls below the last launch's allocated length.
            "the decode allocation without its clamp (dead code under 0.5.23's fixed reserve)",
        ),
        rewrite(
            v23,
            "record-without-clamp",
            Patch(
                ALLOCATION,
                "alloc_for_spec_decode",
                "max(req.kv.kv_allocated_len, nxt_kv_len)",
                "nxt_kv_len",
            ),
            "the launch records nxt without max (nxt is already clamped to at least cur)",
        ),
        rewrite(
            v23,
            "admission-lengths-swapped",
            Patch(
                ALLOCATION,
                "alloc_for_extend",
                "req.kv.kv_allocated_len = seq_len\n        req.kv.kv_committed_len",
                "req.kv.kv_committed_len = seq_len\n        req.kv.kv_allocated_len",
            ),
            "admission records its two lengths in the other order (nothing reads them between)",
        ),
        rewrite(
            v23,
            "ceil-by-negation",
            sizing(
                "(r.kv.kv_committed_len + reserve + page_size - 1)",
                "(-(-(r.kv.kv_committed_len + reserve) // page_size) * page_size)",
            ),
            "the decode allocation's page ceiling written by negation",
        ),
        # 0.5.16: sizing inline in `eagle_prepare_for_decode`, C on `Req`, the record dropped
        # at release.
        rewrite(v16, "unmodified", None, "nothing injected"),
        mutant(
            v16,
            "page-rounding-down",
            "page rounding",
            "alloc-estimate-matches",
            launch16("+ page_size - 1)", ")"),
            "the decode allocation rounds C + reserve down to a page, not up",
        ),
        mutant(
            v16,
            "allocation-base-committed",
            "allocation base",
            "kv-no-double-owner",
            launch16("cur = r.kv.kv_allocated_len", "cur = r.kv_committed_len"),
            "the decode allocation starts from the committed length, not the allocated one",
        ),
        mutant(
            v16,
            "recorded-allocated-is-committed",
            "recorded allocated length",
            "alloc-covers-reserve",
            Patch(
                ALLOCATION,
                "alloc_for_spec_decode",
                "max(req.kv.kv_allocated_len, int(nxt_kv_lens_cpu[i]))",
                "req.kv_committed_len",
            ),
            "the decode launch records the committed length as allocated",
        ),
        mutant(
            v16,
            "tail-never-freed",
            "tail release never",
            "kv-released-once",
            Patch(COMMON, "release_kv_cache", "_release_overallocated_kv_indices(", None),
            "release never frees the over-allocated tail",
        ),
        mutant(
            v16,
            "tail-freed-one-slot-early",
            "tail release early",
            "kv-released-once",
            tail("start_p:end_p", "start_p - 1 : end_p"),
            "release frees the tail from one slot before the owned length",
        ),
        mutant(
            v16,
            "tail-from-floor",
            "tail release floor",
            "kv-released-once",
            tail("ceil_align(start_p, page_size)", "start_p // page_size * page_size"),
            "release frees the tail from the owned length's page floor, not its ceiling",
        ),
        mutant(
            v16,
            "tail-from-committed-length",
            "tail release from committed",
            "kv-released-once",
            tail("ceil_align(start_p", None),
            "release frees the tail from the owned length unrounded, mid-page",
        ),
        mutant(
            v16,
            "allocated-kept-after-release",
            "allocated length after release",
            "committed-retracted-zero",
            Patch(COMMON, "release_kv_cache", "req.kv = None", None),
            "release keeps the request's allocation record (and its allocated length)",
        ),
        mutant(
            v16,
            "retraction-keeps-committed",
            "retraction reset",
            "committed-retracted-zero",
            Patch(BATCH, "Req.reset_for_retract", "kv_committed_len = 0", None),
            "the retraction reset keeps the committed length",
        ),
        mutant(
            v16,
            "retraction-sorted-under-speculation",
            "retraction order",
            "alloc-retraction-order",
            order("if not allow_policy_sort:", "if False:"),
            "memory-pressure retraction sorts a speculative batch (0.5.16 takes its back)",
        ),
        mutant(
            v16,
            "retraction-from-the-front",
            "retraction order",
            "alloc-retraction-order",
            loop(
                "            idx = sorted_indices.pop()", "            idx = sorted_indices.pop(0)"
            ),
            "the retraction loop gives up the front of a speculative batch, not its back",
        ),
        mutant(
            v16,
            "estimate-unaligned",
            "the estimate",
            "alloc-estimate-matches",
            estimate("ceil_align(nxt, page_size) - ceil_align(cur, page_size)", "nxt - cur"),
            "the decode memory estimate counts tokens, not whole pages",
        ),
        mutant(
            v16,
            "double-buffer-dropped",
            "double buffer",
            "alloc-covers-reserve",
            Patch(SIZING, "get_alloc_reserve_per_decode", "2 * ", ""),
            "the decode reserve drops its double buffer (launch and estimate both read it)",
        ),
        rewrite(
            v16,
            "record-without-clamp",
            Patch(
                ALLOCATION,
                "alloc_for_spec_decode",
                "max(req.kv.kv_allocated_len, int(nxt_kv_lens_cpu[i]))",
                "int(nxt_kv_lens_cpu[i])",
            ),
            "the launch records nxt without max (nxt is already clamped to at least cur)",
        ),
        rewrite(
            v16,
            "ceil-by-negation",
            launch16(
                "(r.kv_committed_len + double_alloc + page_size - 1)",
                "(-(-(r.kv_committed_len + double_alloc) // page_size) * page_size)",
            ),
            "the decode allocation's page ceiling written by negation",
        ),
    )


ENTRIES: Final = _corpus()
BY_NAME: Final = {entry.name: entry for entry in ENTRIES}
if len(BY_NAME) != len(ENTRIES):
    raise ValueError("duplicate release-tree corpus entry")


def entries() -> tuple[TreeEntry, ...]:
    """The corpus in definition order."""
    return ENTRIES


def get(name: str) -> TreeEntry | None:
    """The entry called `name` (no `mutant:` prefix); None when the corpus has none."""
    return BY_NAME.get(name)


@functools.cache
def _workspace() -> Path:
    """This process's folder of patched trees, removed when it exits."""
    folder = Path(tempfile.mkdtemp(prefix="kvcheck-release-trees-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def _link_or_copy(source: str, destination: str) -> None:
    """A hard link to the cached file (as cheap as a listing), or a copy where the cache is on
    another file system."""
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)


def patched_tree(version: str, name: str) -> Path:
    """The folder holding the `sglang` package of entry `name`'s tree, built on first use in
    this process: `version`'s cached allocation tree with the entry's patch applied.
    `TargetLoadError` when the release cannot be fetched; `KvcheckInternalError` when the patch
    does not fit it."""
    from kvcheck.families.sglang.real.tree import allocation_tree

    entry = BY_NAME.get(name)
    if entry is None or entry.version != version:
        raise KvcheckInternalError(f"no release-tree corpus entry {name!r} for SGLang {version}")
    cached = allocation_tree(version) / "sglang"
    # One folder per cache (a process may be pointed at another `KVCHECK_CACHE`).
    root = _workspace() / hashlib.sha256(str(cached).encode()).hexdigest()[:12] / name
    if (root / _DONE).is_file():
        return root
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(cached, root / "sglang", copy_function=_link_or_copy)
    if entry.patch is not None:
        file = root / "sglang" / entry.patch.file
        if not file.is_file():
            raise KvcheckInternalError(
                f"release-tree mutant {name}: SGLang {version}'s tree has no {entry.patch.file}"
            )
        text = entry.patch.apply(
            file.read_text(encoding="utf-8"), f"release-tree mutant {name} (SGLang {version})"
        )
        file.unlink()  # a new file: the link to the cache's copy is left as it was
        file.write_text(text, encoding="utf-8")
    (root / _DONE).write_text("")
    return root


# Written last into a patched tree's folder: the tree is whole.
_DONE: Final = ".kvcheck-patched"


def row_columns(entry: TreeEntry) -> dict[str, Any]:
    """An entry's kill-matrix columns after its name and kind: its release, its patch, and the
    options it is judged under."""
    return {
        "release": entry.version,
        "patch": None if entry.patch is None else attrs.asdict(entry.patch),
        "convention": CONVENTION,
        "global_counters": GLOBAL_COUNTERS,
        "adaptive": entry.adaptive,
    }


def list_columns(entry: TreeEntry) -> dict[str, Any]:
    """An entry's `kvcheck mutants --list --json` columns after its name and kind."""
    return {
        **row_columns(entry),
        "expect": entry.expect,
        "origin": entry.origin,
        "spec": entry.spec,
        "summary": entry.summary,
    }


def list_line(entry: TreeEntry) -> str:
    """An entry as a line of `kvcheck mutants --list`."""
    expect = entry.expect or "must pass"
    return (
        f"{entry.kind:<8} {entry.name:<42} tree {entry.version:<7} {expect:<24} "
        f"{entry.origin}: {entry.summary}"
    )
