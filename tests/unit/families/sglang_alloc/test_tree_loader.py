"""A package tree as the target (kvcheck.targets.source.TreeSource): what the release's own
allocation code needs of the source loader (issue 21, survey §5.2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvcheck.errors import TargetLoadError
from kvcheck.targets.source import TreeSource


def _tree(tmp_path: Path) -> Path:
    files = {
        "pkg/__init__.py": "",
        "pkg/sizing.py": (
            "from pkg.settings import get_spec\n"
            "from .kernels import assign\n"
            "SCALE = 2\n"
            "def reserve(*, per_step: int, extra=0):\n"
            "    from pkg.algo import Algo\n"
            "    return SCALE * per_step * Algo(get_spec()).width() + extra\n"
            "def write(table):\n"
            "    assign(table)\n"
            "    return table\n"
        ),
        "pkg/settings.py": "def get_spec():\n    raise RuntimeError('not this one')\n",
        "pkg/kernels.py": "import triton\n@triton.jit\ndef assign(table):\n    pass\n",
        "pkg/algo.py": (
            "class Algo:\n"
            "    def __init__(self, spec):\n"
            "        self.spec = spec\n"
            "    def width(self):\n"
            "        return self.spec + 1\n"
        ),
        "pkg/req.py": (
            "class Req:\n"
            "    def __init__(self):\n"
            "        raise RuntimeError('never built')\n"
            "    @property\n"
            "    def through_stop(self):\n"
            "        return self.outputs[: self.stop]\n"
            "    def owned(self):\n"
            "        return self.prompt + len(self.through_stop)\n"
        ),
    }
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_any_signature_same_tree_imports_local_imports_and_overrides(tmp_path: Path) -> None:
    writes: list[object] = []
    tree = TreeSource(
        _tree(tmp_path), "pkg", overrides={"get_spec": lambda: 3, "assign": writes.append}
    )
    reserve = tree.function("pkg.sizing", "reserve")
    assert reserve(per_step=5, extra=1) == 2 * 5 * 4 + 1
    assert tree.function("pkg.sizing", "write")("t") == "t" and writes == ["t"]
    names = {span.qualname for span in tree.code()}
    assert {"reserve", "write"} <= names


def test_members_compile_with_their_properties_for_a_fake_to_inherit(tmp_path: Path) -> None:
    tree = TreeSource(_tree(tmp_path), "pkg")
    members = tree.members("pkg.req", "Req", ["owned"])

    class Fake(members):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            self.prompt, self.outputs, self.stop = 4, [1, 2, 3], 2

    assert Fake().owned() == 6
    assert {"Req.owned", "Req.through_stop"} <= {span.qualname for span in tree.code()}


def test_a_name_missing_from_the_release_is_one_line(tmp_path: Path) -> None:
    tree = TreeSource(_tree(tmp_path), "pkg")
    assert not tree.has("pkg.sizing", "alloc_for_spec_decode")
    assert not tree.has("pkg.nowhere", "x")
    with pytest.raises(TargetLoadError, match="defines no alloc_for_spec_decode"):
        tree.function("pkg.sizing", "alloc_for_spec_decode")


def test_an_unprovidable_local_import_fails_when_reached(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / "pkg" / "late.py").write_text(
        "def later():\n    from pkg.algo import Missing\n    return Missing\n"
    )
    later = TreeSource(root, "pkg").function("pkg.late", "later")
    with pytest.raises(TargetLoadError, match="Missing"):
        later()


def test_code_is_what_runs_per_call_not_what_runs_as_the_tree_compiles(tmp_path: Path) -> None:
    """Coverage is measured over `code()`: a function only module-level code calls (a
    registry's `X = register(...)`) ran before any scenario and is left out; one reached
    through a module-level dispatch table a body reads (a value, a lambda's body) is in."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "alloc.py").write_text(
        "def register(name):\n"
        "    return [name]\n"
        "REGISTRY = register('eagle')\n"
        "def paged(n):\n"
        "    return n * 2\n"
        "def npu(n):\n"
        "    return n\n"
        "TABLE = dict(cuda=lambda n: paged(n), npu=npu)\n"
        "def alloc(n, device='cuda'):\n"
        "    return TABLE[device](n) + len(REGISTRY)\n"
    )
    tree = TreeSource(tmp_path, "pkg")
    assert tree.function("pkg.alloc", "alloc")(3) == 7
    assert {span.qualname for span in tree.code()} == {"alloc", "paged", "npu"}
