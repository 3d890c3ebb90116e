"""Every call a real SGLang resolver makes into an object kvcheck fakes fits the fake's signature.

For every release (from kvcheck's cache, fetched on first use), the resolver and the sibling
methods it reaches are read with `ast`; each call whose receiver is one of SGLang's objects that
kvcheck fakes (`self`, its workers and metrics reporter, the batch and its algorithm, the result,
a request and its KV record) is bound against the fake's method. Calls into methods the file
defines itself are the target's own code and run from the file, so they are left out.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import pytest

from kvcheck.families.sglang import fakes
from kvcheck.families.sglang import release as sglang_release
from tests.quality.test_real_releases import _releases

RECEIVERS: dict[str, type] = {
    "self": fakes.FakeScheduler,
    "self.model_worker": fakes.FakeModelWorker,
    "self.draft_worker": fakes.FakeDraftWorker,
    "self.metrics_reporter": fakes.FakeMetricsReporter,
    "batch": fakes.FakeBatch,
    "batch.spec_algorithm": fakes.FakeSpecAlgorithm,
    "result": fakes.FakeResult,
    "req": fakes.FakeReq,
    "req.kv": fakes.FakeKvInfo,
    "req.grammar": fakes.FakeGrammar,
    "batch.forward_mode": fakes.FakeForwardMode,
    "result.copy_done": fakes.FakeCopyDone,
}
# Methods real resolvers call that kvcheck does not model, each only on a path kvcheck never
# drives: calling one is exit 2, never a verdict. (`self.abort_request`, the 0.5.14-0.5.15
# grammar-refusal path, is modelled now.)
NOT_MODELLED: frozenset[str] = frozenset()


def _functions(tree: ast.Module, location: sglang_release.ResolverLocation) -> dict[str, ast.AST]:
    """The resolver and the methods of its class it reaches through `self`, by name."""
    class_name, method = location.qualname.split(".")
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name)
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    reached: dict[str, ast.AST] = {}
    todo = [method]
    while todo:
        name = todo.pop()
        if name in reached or name not in methods:
            continue
        reached[name] = methods[name]
        for node in ast.walk(methods[name]):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
            ):
                todo.append(node.attr)
    return reached


def literal_arguments(call: ast.Call) -> bool:
    """Whether `call` spells out its arguments (no `*args`, no `**kwargs`), so that binding it
    to a signature tells whether the signature takes it."""
    return not any(isinstance(a, ast.Starred) for a in call.args) and all(
        k.arg is not None for k in call.keywords
    )


def refusal(call: ast.Call, method: Any) -> str | None:
    """Why the method (a fake's, taking `self` first) refuses the arguments of `call`; None
    when it takes them."""
    try:
        inspect.signature(method).bind(
            object(), *call.args, **{k.arg: k.value for k in call.keywords if k.arg}
        )
    except TypeError as exc:
        return str(exc)
    return None


def _call_sites(version: str) -> tuple[list[str], list[str], int]:
    """(calls that do not fit, calls of unmodelled methods, calls checked) for a release."""
    package = sglang_release.release_package(version)
    location = sglang_release.find_resolver(package)
    tree = ast.parse(location.file.read_text(encoding="utf-8"))
    functions = _functions(tree, location)
    misfits: list[str] = []
    missing: list[str] = []
    checked = 0
    for function in functions.values():
        for node in ast.walk(function):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            receiver, name = ast.unparse(node.func.value), node.func.attr
            fake = RECEIVERS.get(receiver)
            if fake is None or (receiver == "self" and name in functions):
                continue
            where = f"{version} {Path(location.file).name}:{node.lineno} {receiver}.{name}"
            method = inspect.getattr_static(fake, name, None)
            if not callable(method) or isinstance(method, property):
                if f"{receiver}.{name}" not in NOT_MODELLED:
                    missing.append(where)
                continue
            if not literal_arguments(node):
                continue
            refused = refusal(node, method)
            if refused is not None:
                misfits.append(f"{where}: {refused}")
            checked += 1
    return misfits, missing, checked


def test_every_real_call_fits_the_fakes() -> None:
    misfits: list[str] = []
    missing: list[str] = []
    checked = 0
    for version in _releases():
        found, absent, count = _call_sites(version)
        misfits += found
        missing += absent
        checked += count
    assert checked > 50  # the walk found the calls it is meant to check
    assert not misfits, "\n".join(misfits)
    assert not missing, "calls into fakes that do not model them:\n" + "\n".join(missing)


def test_the_check_catches_a_misfit(monkeypatch: pytest.MonkeyPatch) -> None:
    """0.5.23 snapshots metrics with (batch, result): a fake taking nothing must be flagged."""
    _releases()

    def snapshot_without_arguments(self: object) -> None:
        return None

    monkeypatch.setattr(
        fakes.FakeMetricsReporter, "snapshot_spec_decode_metrics", snapshot_without_arguments
    )
    misfits, _, _ = _call_sites("0.5.23")
    assert any("snapshot_spec_decode_metrics" in m for m in misfits)
