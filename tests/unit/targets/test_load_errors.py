"""Targets kvcheck cannot judge are load errors through `kvcheck check`: exit 2, one line, never
a violation (missing files and names, wrong signatures, unmodelled attributes, imports kvcheck
cannot provide)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from kvcheck.cli.main import main
from tests.helpers import SGLANG_FIXTURES, source_target

FIXTURES = SGLANG_FIXTURES
BY_ID: dict[str, dict[str, Any]] = {
    g["generation"]: g for g in json.loads((FIXTURES / "index.json").read_text())["generations"]
}
BUDGET = ["--max-examples", "100", "--seed", "0", "--no-save", "--no-database"]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def expect_load_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_cli(capsys, "check", *argv, *BUDGET)
    assert code == 2, out
    assert out == ""
    assert err.startswith("kvcheck: error: ") and err.count("\n") == 1, err
    return err


def test_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    err = expect_load_error(capsys, f"{tmp_path / 'nope.py'}::A.b")
    assert "nope.py does not exist" in err


def test_missing_qualname_suggests_the_close_one(capsys: pytest.CaptureFixture[str]) -> None:
    gen = BY_ID["v0_5_23"]
    path = FIXTURES / gen["path"]
    err = expect_load_error(capsys, f"{path}::SchedulerBatchResultProcessor._resolve_spec_v2_token")
    assert "did you mean SchedulerBatchResultProcessor._resolve_spec_v2_tokens" in err


def test_wrong_signature_from_source(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = source_target(tmp_path, "def resolve(self, result):\n    return []\n")
    err = expect_load_error(capsys, target)
    assert (
        "has signature (self, result); a resolver must accept exactly (self, result, batch)" in err
    )


def test_wrong_signature_imported(capsys: pytest.CaptureFixture[str]) -> None:
    err = expect_load_error(capsys, "json:dumps")
    assert "a resolver must accept (self, result, batch)" in err


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("batch.reqs[0].foo", "target reads `req.foo`, which kvcheck does not model; supported"),
        ("self.tree_cache", "target reads `self.tree_cache`, which kvcheck does not model"),
        ("result.num_drafts = 0", "target writes `result.num_drafts`, which kvcheck does not"),
        (
            "self.model_worker.on_verify_complete_cpu([], 1, 2)",
            "`self.model_worker.on_verify_complete_cpu(num_correct_drafts_per_req, batch_size=",
        ),
        ("batch.spec_algorithm.is_medusa()", "target reads `batch.spec_algorithm.is_medusa`"),
    ],
)
def test_unmodelled_attribute_is_a_load_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, line: str, message: str
) -> None:
    body = f"def resolve(self, result, batch):\n    {line}\n    return []\n"
    err = expect_load_error(capsys, source_target(tmp_path, body))
    assert message in err


def test_unprovidable_import_on_an_unreached_path(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A top-level import only a path kvcheck never drives uses (a request retracted a hundred
    times): a load error unless allowed, then harmless."""
    body = """
    def resolve(self, result, batch):
        for i, req in enumerate(batch.reqs):
            if req.retraction_count > 100:
                req.to_finish = get_global_server_args("retractions")
        return _runs(result, result.speculative_num_draft_tokens)
    """
    target = source_target(tmp_path, body)
    err = expect_load_error(capsys, target)
    assert "'get_global_server_args'" in err and "cannot provide" in err
    code, out, _ = run_cli(
        capsys, "check", target, "--allow-unavailable-imports", "--global-counters", "off", *BUDGET
    )
    assert code == 1 and "FAIL" in out  # loads; judged (it keeps no KV ledger at all)


def test_unprovidable_name_reached_at_run_time(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    body = """
    def resolve(self, result, batch):
        get_global_server_args("always")
        return []
    """
    err = expect_load_error(capsys, source_target(tmp_path, body), "--allow-unavailable-imports")
    assert "get_global_server_args" in err and "reached at run time" in err


def test_import_inside_the_resolver(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    body = """
    def resolve(self, result, batch):
        from sglang.srt.speculative.spec_utils import helper
        return []
    """
    err = expect_load_error(capsys, source_target(tmp_path, body))
    assert "imports at run time" in err and "sglang" in err


def test_module_form_on_a_fixture_is_a_clear_load_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    gen = BY_ID["v0_5_23"]
    root = FIXTURES / gen["path"].split("/python/", 1)[0] / "python"
    module = gen["path"].split("/python/", 1)[1].removesuffix(".py").replace("/", ".")
    before = set(sys.modules)
    monkeypatch.syspath_prepend(str(root))
    try:
        err = expect_load_error(capsys, f"{module}:{gen['correct']}")
    finally:
        for name in set(sys.modules) - before:
            if name.split(".")[0] == "sglang":
                del sys.modules[name]
    assert f"cannot import '{module}'" in err
    assert "use path/to/file.py::Qualname" in err
