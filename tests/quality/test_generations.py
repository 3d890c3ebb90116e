"""Real resolver shapes: every SGLang API generation's fixture, read from source and judged.

For each generation in tests/fixtures/sglang/index.json the correct resolver passes and the buggy
one fails with its expected invariant, through the CLI with `--convention auto --global-counters
sglang`, a small budget and a fixed seed. Around that: the API-shape probe (which versions,
what a target is held to), the controller feed, the spellings table, and the error cases that
must be load errors (exit 2, one line), never violations.
"""

from __future__ import annotations

import functools
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from kvcheck.cli.main import main
from kvcheck.core.fakes import (
    SPELLINGS,
    FakeBatch,
    FakeReq,
    FakeResult,
    FakeScheduler,
    UnmodeledAttributeError,
    spellings_table,
)
from kvcheck.core.target import Target
from kvcheck.search.check import check
from kvcheck.targets.loading import load_target
from tests.helpers import README, SGLANG_FIXTURES

FIXTURES = SGLANG_FIXTURES
INDEX = json.loads((FIXTURES / "index.json").read_text())
GENERATIONS: list[dict[str, Any]] = INDEX["generations"]
GEN_IDS = [g["generation"] for g in GENERATIONS]
BY_ID = dict(zip(GEN_IDS, GENERATIONS, strict=True))
# Small and fixed: the whole file runs in well under a minute on two cores. A search stops at
# its first failure, so the buggy resolvers get the CLI's default budget at little cost.
FIXED = ["--seed", "0", "--no-save", "--no-database"]
BUDGET = ["--max-examples", "100", *FIXED]
BUGGY_BUDGET = ["--max-examples", "300", *FIXED]
SGLANG_AUTO = ["--convention", "auto", "--global-counters", "sglang"]


def spec(gen: dict[str, Any], kind: str) -> str:
    return f"{FIXTURES / gen['path']}::{gen[kind]}"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@functools.cache
def _json_verdict(target: str, options: tuple[str, ...]) -> tuple[int, dict[str, Any]]:
    from contextlib import redirect_stdout
    from io import StringIO

    buffer = StringIO()
    with redirect_stdout(buffer):
        code = main(["check", target, *options, "--json"])
    return code, json.loads(buffer.getvalue())


def json_verdict(gen: dict[str, Any], kind: str, *options: str) -> tuple[int, dict[str, Any]]:
    budget = BUGGY_BUDGET if kind == "buggy" else BUDGET
    return _json_verdict(spec(gen, kind), (*(options or SGLANG_AUTO), *budget))


# --- every generation: correct passes, buggy fails with its invariant -------------------------


@pytest.mark.parametrize("gen", GENERATIONS, ids=GEN_IDS)
def test_correct_resolver_passes(gen: dict[str, Any]) -> None:
    code, report = json_verdict(gen, "correct")
    assert (code, report["verdict"]) == (0, "pass"), report.get("violation")
    assert report["convention"] == gen["convention"]
    assert report["convention_reason"].startswith("auto:")


@pytest.mark.parametrize("gen", GENERATIONS, ids=GEN_IDS)
def test_buggy_resolver_fails_with_its_invariant(gen: dict[str, Any]) -> None:
    code, report = json_verdict(gen, "buggy")
    assert (code, report["verdict"]) == (1, "fail")
    expected = {gen["buggy_invariant"], *gen["buggy_also_trips"]}
    assert report["violation"]["invariant"] in expected, report["violation"]["message"]
    assert report["convention"] == gen["convention"]


@pytest.mark.parametrize("gen", GENERATIONS, ids=GEN_IDS)
def test_report_names_the_api_shape(gen: dict[str, Any]) -> None:
    _, report = json_verdict(gen, "correct")
    shape = report["api_shape"]
    assert shape["convention"] == report["convention"]
    assert gen["api"]["committed"] in shape["spellings"]
    assert f"req.{gen['api']['req_drafts']}" in shape["spellings"]
    if gen["api"]["req_histogram"] is None:
        assert "histogram" in shape["not_held_to"]
    else:
        assert "histogram" in shape["held_to"]
    assert ("controller-feed" in shape["held_to"]) == (gen["api"]["controller"] is not None)
    assert report["adaptive"] == (gen["api"]["controller"] is not None)


@pytest.mark.parametrize("gen", GENERATIONS, ids=GEN_IDS)
def test_spellings_place_the_resolver_in_its_versions(gen: dict[str, Any]) -> None:
    """The versions the probe reads off the correct resolver include its generation."""
    loaded = load_target(spec(gen, "correct"))
    shape = loaded.shape
    assert shape.mixed is None

    def v(text: str) -> tuple[int, ...]:
        return tuple(int(p) for p in text.split("."))

    assert v(shape.first) <= v(gen["first_version"])
    assert shape.last is None or v(gen["last_version"]) <= v(shape.last)


def test_text_report_has_the_api_shape_line(capsys: pytest.CaptureFixture[str]) -> None:
    gen = BY_ID["v0_5_19"]
    code, out, _ = run_cli(capsys, "check", spec(gen, "correct"), *SGLANG_AUTO, *BUDGET)
    assert code == 0
    assert "convention  honest  (auto: its spellings (req.kv.kv_committed_len)" in out
    assert "adaptive on (auto: the target feeds the adaptive controller)" in out
    assert (
        "api shape   SGLang 0.5.19+ spellings; stride from result.speculative_num_draft_tokens"
        in out
    )


def test_ideal_mode_faults_sglangs_stale_row_counting() -> None:
    """SGLang's own (correct) resolver counts stale rows: a global-counters finding in `ideal`."""
    code, report = json_verdict(BY_ID["v0_5_23"], "correct", "--global-counters", "ideal")
    assert code == 1
    assert report["violation"]["invariant"] == "global-counters"
    assert "stale rows" in report["violation"]["message"]


# --- what a target is held to ---------------------------------------------------------------

_HEADER = """
from __future__ import annotations

from sglang.srt.managers.schedule_batch import FINISH_ABORT


def _runs(result, stride):
    ids = result.next_token_ids.tolist()
    return [ids[i * stride : i * stride + a] for i, a in enumerate(result.accept_lens.tolist())]

"""


def source_target(tmp_path: Path, body: str, name: str = "resolve") -> str:
    path = tmp_path / "batch_result_processor.py"
    path.write_text(_HEADER + textwrap.dedent(body))
    return f"{path}::{name}"


_HONEST_LIVE_ONLY = """
def resolve(self, result, batch):
    accepts = result.accept_lens.tolist()
    drafts = [a - 1 for a in accepts]
    for i, req in enumerate(batch.reqs):
        if req.is_retracted or req.finished():
            continue
        req.kv.kv_committed_len += accepts[i]
        req.spec_verify_ct += 1
        req.spec_num_correct_drafts += drafts[i]
        {histogram}
    {counters}
    return _runs(result, result.speculative_num_draft_tokens)
"""


def honest(tmp_path: Path, histogram: str = "", counters: str = "pass") -> Target:
    body = _HONEST_LIVE_ONLY.format(
        histogram=histogram or "pass", counters=counters.replace("\n", "\n    ")
    )
    return load_target(source_target(tmp_path, body))


def test_a_resolver_that_writes_no_result_counter_is_not_faulted_on_it(tmp_path: Path) -> None:
    hist = "req.update_spec_correct_drafts_histogram(drafts[i])"
    target = honest(tmp_path, histogram=hist)
    shape = target.shape
    assert {"result-drafts-total", "result-drafts-per-row", "controller-feed"} <= shape.not_judged
    verdict = check(target, max_examples=60, seed=1)  # ideal mode: nothing written, nothing judged
    assert verdict.passed, verdict.violation
    assert verdict.convention == "honest" and not verdict.adaptive


def test_a_modern_resolver_without_a_histogram_is_faulted(tmp_path: Path) -> None:
    """Its spellings are 0.5.19+, where every resolver keeps the histogram."""
    target = honest(tmp_path)
    assert "histogram" not in target.shape.not_judged
    verdict = check(target, max_examples=60, seed=1)
    assert verdict.violation is not None and verdict.violation.invariant == "stats-histogram"


def test_feeding_stale_rows_to_the_controller_is_a_global_counters_finding(
    tmp_path: Path,
) -> None:
    """The result total counts live rows only (ideal), but the controller gets every row."""
    hist = "req.update_spec_correct_drafts_histogram(drafts[i])"
    counters = textwrap.dedent("""\
        live = [d for d, r in zip(drafts, batch.reqs) if not (r.is_retracted or r.finished())]
        result.num_correct_drafts = sum(live)
        self.model_worker.on_verify_complete_cpu(drafts, batch_size=batch.batch_size())""")
    target = honest(tmp_path, histogram=hist, counters=counters)
    ideal = check(target, global_counters="ideal", max_examples=200, seed=2)
    assert ideal.violation is not None and ideal.violation.invariant == "global-counters"
    assert "adaptive controller should be fed" in ideal.violation.message
    assert ideal.adaptive  # auto: it feeds the controller, so strides switch
    # In sglang mode the controller gets every row, which is what it was given; only the
    # live-row total is now wrong.
    sglang = check(target, global_counters="sglang", max_examples=200, seed=2)
    assert sglang.violation is not None
    assert "accepted-draft counter" in sglang.violation.message


def test_a_double_controller_feed_is_a_finding(tmp_path: Path) -> None:
    hist = "req.update_spec_correct_drafts_histogram(drafts[i])"
    counters = textwrap.dedent("""\
        result.num_correct_drafts = sum(drafts)
        self.model_worker.on_verify_complete_cpu(drafts)
        self.model_worker.on_verify_complete_cpu(drafts)""")
    target = honest(tmp_path, histogram=hist, counters=counters)
    verdict = check(target, global_counters="sglang", max_examples=60, seed=1)
    assert verdict.violation is not None and verdict.violation.invariant == "global-counters"
    assert "in 2 calls" in verdict.violation.message


# --- the supported spellings ----------------------------------------------------------------


def _fakes() -> dict[str, Any]:
    import torch

    req = FakeReq("r0", 4, 8)
    result = FakeResult(torch.zeros(4, dtype=torch.int64), torch.ones(1, dtype=torch.int32), 4)
    return {"req": req, "batch": FakeBatch([req]), "result": result, "self": FakeScheduler(4, True)}


@pytest.mark.parametrize("spelling", [s for s in SPELLINGS if "<" not in s.path], ids=str)
def test_every_listed_spelling_exists_on_the_fakes(spelling: Any) -> None:
    owner, *names = spelling.path.split("(", 1)[0].split(".")
    value = _fakes()[owner]
    for name in names:
        value = getattr(value, name)
    assert not spelling.path.endswith(")") or callable(value)


def test_spellings_command_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "spellings")
    assert code == 0 and out.strip() == spellings_table()


def test_readme_table_is_the_generated_one() -> None:
    assert spellings_table() in README.read_text(), (
        "README.md's spellings table is stale: paste the output of `kvcheck spellings`"
    )


def test_unmodelled_names_are_attribute_errors_that_name_the_supported_ones() -> None:
    req = _fakes()["req"]
    with pytest.raises(UnmodeledAttributeError, match=r"target reads `req\.foo`.*spec_verify_ct"):
        _ = req.foo
    assert getattr(req, "foo", None) is None  # hasattr-style version sniffing keeps working
    with pytest.raises(UnmodeledAttributeError, match=r"target writes `req\.spec_verify_count`"):
        req.spec_verify_count = 1


# --- unsupported targets: exit 2, one line, never a violation -------------------------------


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
            "target calls `self.model_worker.on_verify_complete_cpu` with 3 positional",
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
    """A top-level import only the grammar-error path uses: a load error unless allowed, then
    harmless, because kvcheck never drives that path."""
    body = """
    def resolve(self, result, batch):
        for i, req in enumerate(batch.reqs):
            if req.grammar is not None:
                req.to_finish = FINISH_ABORT("grammar")
        return _runs(result, result.speculative_num_draft_tokens)
    """
    target = source_target(tmp_path, body)
    err = expect_load_error(capsys, target)
    assert "'FINISH_ABORT'" in err and "cannot provide" in err
    code, out, _ = run_cli(
        capsys, "check", target, "--allow-unavailable-imports", "--global-counters", "off", *BUDGET
    )
    assert code == 1 and "FAIL" in out  # loads; judged (it keeps no KV ledger at all)


def test_unprovidable_name_reached_at_run_time(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    body = """
    def resolve(self, result, batch):
        FINISH_ABORT("always")
        return []
    """
    err = expect_load_error(capsys, source_target(tmp_path, body), "--allow-unavailable-imports")
    assert "FINISH_ABORT" in err and "reached at run time" in err


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
