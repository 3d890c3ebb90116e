"""Every call a release's allocation code makes into one of kvcheck's allocation fakes fits it.

The release's own allocation path (issue 21) runs the release's functions over fakes of the
allocator, `req_to_token_pool`, the tree cache, the request, its KV record, the batch and the
draft inputs. For every release (from kvcheck's cache, fetched on first use), each function the
path compiles is read with `ast`; each call whose receiver is one of those objects is bound
against the member the path's object really has. A member the release brings itself (mixed in
from its tree) is its own code: a call it refuses is the release's `TypeError`, so it is left
out. What is left is kvcheck's reading of SGLang's methods, which must take what the release
passes: a call it refuses is a `FakeCallError` at run time (exit 2, never a verdict), and here a
failure.
"""

from __future__ import annotations

import ast
import functools
import inspect
from pathlib import Path

import pytest

from kvcheck.core.target import CodeSpan
from kvcheck.families.sglang.real import objects
from kvcheck.families.sglang.real import path as release_path
from kvcheck.families.sglang.scenario import Config
from tests.quality.test_fake_signatures import literal_arguments, refusal
from tests.quality.test_real_releases import _releases
from tests.quality.test_release_allocation import _tree

# The last name of a call's receiver, and which of the path's objects it is.
RECEIVERS: dict[str, str] = {
    "allocator": "allocator",
    "token_to_kv_pool_allocator": "allocator",
    "req_to_token_pool": "rows",
    "tree_cache": "tree_cache",
    "unified_cache": "tree_cache",
    "req": "req",
    "kv": "kv",
    "batch": "batch",
}
# What `self` is in a member of each of the release's classes the path mixes into a fake.
SELF: dict[str, str] = {
    "BaseTokenToKVPoolAllocator": "allocator",
    "BasePrefixCache": "tree_cache",
    "ChunkCache": "tree_cache",
    "Req": "req",
    "ReqKvInfo": "kv",
    "ScheduleBatch": "batch",
}


def _objects(path: release_path.ReleaseAllocation) -> dict[str, type]:
    """The classes of the objects the path hands the release's code, by role; the batch is the
    retraction loop's (the decode launch's view plus the loop's faked members)."""
    functions = path.functions
    classes: dict[str, type] = {
        "allocator": type(path.allocator),
        "rows": type(path.rows),
        "tree_cache": type(path.tree_cache),
        "req": path._req_class,
        "kv": path._kv_class,
        "batch": path._retraction_class,
    }
    for algorithm, draft_input in functions.draft_inputs.items():
        fake = release_path._DRAFT_INPUT_FAKES[algorithm]
        classes[draft_input.__name__] = type("DraftInput", (fake, draft_input), {})
    if functions.draft_mixin is not None:
        classes["EagleDraftInputV2Mixin"] = type(
            "DraftInput", (release_path._EagleV2Input, functions.draft_mixin), {}
        )
    return classes


@functools.cache
def _parsed(file: str) -> ast.Module:
    return ast.parse(Path(file).read_text(encoding="utf-8"))


def _definition(span: CodeSpan) -> ast.AST:
    return next(
        node
        for node in ast.walk(_parsed(span.file))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.lineno == span.def_line
    )


def _kvchecks_member(fake: type, name: str) -> object | None:
    """The member `name` of `fake` where kvcheck wrote it (a fake's method); None where the
    release brings it (mixed in from its tree) or no class has it."""
    for klass in fake.__mro__:
        if name in vars(klass):
            member = vars(klass)[name]
            mine = klass.__module__.startswith("kvcheck.")
            return member if mine and inspect.isfunction(member) else None
    return None


def _call_sites(version: str) -> tuple[list[str], int]:
    """(calls into a fake that do not fit it, calls checked) for a release's allocation code."""
    code = release_path.release_allocation_factory(_tree(version))
    path = code(Config(allocation="0.5.16", page_size=4, stride=3))
    assert isinstance(path, release_path.ReleaseAllocation)
    classes = _objects(path)
    misfits: list[str] = []
    checked = 0
    for span in path.functions.tree.code():
        owner = span.qualname.rpartition(".")[0]
        for node in ast.walk(_definition(span)):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            receiver = ast.unparse(node.func.value)
            role = (
                SELF.get(owner, owner)
                if receiver == "self"
                else RECEIVERS.get(receiver.rpartition(".")[2])
            )
            fake = classes.get(role or "")
            if fake is None:
                continue
            member = _kvchecks_member(fake, node.func.attr)
            if member is None:
                continue
            if not literal_arguments(node):
                continue
            refused = refusal(node, member)
            if refused is not None:
                where = f"{version} {Path(span.file).name}:{node.lineno} {receiver}"
                misfits.append(f"{where}.{node.func.attr}: {refused}")
            checked += 1
    return misfits, checked


def test_every_call_of_the_allocation_code_fits_the_fakes() -> None:
    misfits: list[str] = []
    checked: dict[str, int] = {}
    for version in _releases():
        found, checked[version] = _call_sites(version)
        misfits += found
    # The walk finds the calls it is meant to check in every release (20 to 44 of them).
    assert min(checked.values()) >= 15, checked
    assert not misfits, "\n".join(misfits)


def test_the_check_catches_a_misfit(monkeypatch: pytest.MonkeyPatch) -> None:
    """0.5.23's tail release frees indices through the allocator: a fake `free` that takes
    nothing must be flagged."""

    def free_without_arguments(self: object) -> None:
        return None

    monkeypatch.setattr(objects.TokenAllocator, "free", free_without_arguments)
    misfits, _ = _call_sites("0.5.23")
    assert any(".free:" in m for m in misfits)
