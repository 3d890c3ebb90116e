"""Where a target's own code lives (`Target.code`), as the source loader records it."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from kvcheck.targets.loading import load_target

SOURCE = textwrap.dedent(
    '''
    import logging

    logger = logging.getLogger(__name__)


    def _stride(result):
        """The padded row width."""
        return result.speculative_num_draft_tokens


    def _never_reached():
        return 0


    class Processor:
        def unrelated(self):
            return 1

        def _runs(self, result):
            ids, accepts = result.next_token_ids.tolist(), result.accept_lens.tolist()
            stride = _stride(result)
            return [ids[i * stride : i * stride + a] for i, a in enumerate(accepts)]

        @staticmethod
        def _noop():
            pass

        def resolve(self, result, batch):
            """Docstring."""
            runs = self._runs(result)
            self._noop()
            for req, run in zip(batch.reqs, runs):
                if req.is_retracted or req.finished():
                    continue
                req.kv_committed_len += len(run)
            return runs
    '''
)


def _lines(text: str, marker: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if marker in line)


def test_source_target_records_resolver_siblings_and_helpers(tmp_path: Path) -> None:
    path = tmp_path / "processor.py"
    path.write_text(SOURCE)
    target = load_target(f"{path}::Processor.resolve")
    names = [span.qualname for span in target.code]
    # The resolver first, then what it reaches by line; nothing it does not reach.
    assert names == ["Processor.resolve", "_stride", "Processor._runs", "Processor._noop"]
    resolve, stride, runs, noop = target.code
    assert {span.file for span in target.code} == {os.path.abspath(path)}
    assert resolve.def_line == _lines(SOURCE, "def resolve")
    assert resolve.first == _lines(SOURCE, '"""Docstring."""')
    assert resolve.last == _lines(SOURCE, "return runs")
    assert (stride.first, stride.last) == (stride.def_line + 1, stride.def_line + 2)
    assert noop.def_line == _lines(SOURCE, "def _noop") and noop.first == noop.last
    assert runs.last == _lines(SOURCE, "return [ids")
    assert resolve.first in resolve and resolve.def_line not in resolve


def test_relative_path_is_recorded_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "processor.py").write_text(SOURCE)
    monkeypatch.chdir(tmp_path)
    target = load_target("processor.py::Processor.resolve")
    assert target.code[0].file == str(tmp_path / "processor.py")


def test_module_function_target_is_its_own_span(tmp_path: Path) -> None:
    path = tmp_path / "f.py"
    path.write_text("def resolve(self, result, batch):\n    return []\n")
    target = load_target(f"{path}::resolve")
    assert [(s.qualname, s.def_line, s.first, s.last) for s in target.code] == [
        ("resolve", 1, 2, 2)
    ]


def test_builtin_and_imported_targets_have_no_code_spans() -> None:
    assert load_target("builtin:reference").code == ()
    assert load_target("kvcheck.mutants:worker_stride").code == ()


def test_a_decorator_the_code_also_calls_keeps_its_whole_body(tmp_path: Path) -> None:
    # `identity` decorates the resolver (at load) and is called in its body (per call): its body
    # can run per call, so it is measured whole; `marker` only decorates, and has no wrapper.
    path = tmp_path / "processor.py"
    path.write_text(
        textwrap.dedent(
            """\
            def identity(value):
                return value


            def marker(function):
                function.marked = True
                return function


            @marker
            @identity
            def resolve(self, result, batch):
                return identity([])
            """
        )
    )
    target = load_target(f"{path}::resolve")
    assert [(s.qualname, s.first, s.last) for s in target.code] == [
        ("resolve", 13, 13),
        ("identity", 2, 2),
    ]
