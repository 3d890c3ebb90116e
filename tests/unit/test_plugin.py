"""The pytest plugin, exercised with pytester in throwaway directories."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
import torch

import kvcheck.reporting.timeline
import kvcheck.search.check
from kvcheck.core.run import run_scenario
from kvcheck.counterexamples.fileformat import SUFFIX, save
from kvcheck.counterexamples.replay import from_run
from kvcheck.families.sglang.scenario import Admit, Step
from kvcheck.targets.loading import load_target
from tests.helpers import COMMITTED_COUNTEREXAMPLES, PLUGIN_FAST, scenario

pytest_plugins = ["pytester"]

# Loaded here, not first inside a pytester run: pytester drops the modules an inline run imported,
# and importing torch's or Hypothesis's compiled extensions a second time crashes the process.
PRELOADED = (torch, kvcheck.search.check, kvcheck.reporting.timeline)

COMMITTED = COMMITTED_COUNTEREXAMPLES
STALE_FINISHED = scenario(Admit("r0", 10, 3), Step(), Step((2,)), Step((3,)), Step(), stride=4)


def test_options_have_their_own_group(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    text = result.stdout.str()
    assert "kvcheck: KV-accounting checks of speculative-decoding resolvers:" in text
    for option in (
        "--kvcheck-target",
        "--kvcheck-profile",
        "--kvcheck-convention",
        "--kvcheck-no-replay",
        "--kvcheck-deadline",
    ):
        assert option in text


def test_loading_the_plugin_imports_neither_torch_nor_hypothesis() -> None:
    code = (
        "import sys, kvcheck.pytest_plugin; "
        "print(sorted(m for m in ('torch', 'hypothesis') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_nothing_is_added_without_options(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_ok():\n    assert True\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=1)
    assert "kvcheck[" not in result.stdout.str()


def test_seed_prefix_fails_with_the_timeline(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--kvcheck-target", "builtin:seed-prefix", *PLUGIN_FAST)
    # By default one item: the search `kvcheck check builtin:seed-prefix` runs.
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "FAILED kvcheck[builtin:seed-prefix][auto]" in out
    assert "timeline  builtin:seed-prefix: preclaim convention, overlap on" in out
    assert ">> VIOLATION committed-" in out and "STALE row" in out
    assert "counterexample file: .kvcheck/counterexamples/builtin-seed-prefix-committed-" in out
    assert "replay with: kvcheck replay .kvcheck/counterexamples/" in out
    saved = list((pytester.path / ".kvcheck" / "counterexamples").iterdir())
    assert len(saved) == 1 and all(p.name.endswith(SUFFIX) for p in saved)


def test_a_given_convention_splits_by_overlap(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(
        "--kvcheck-target", "builtin:seed-prefix", "--kvcheck-convention", "preclaim", *PLUGIN_FAST
    )
    # The stale rows only exist with overlap on: that item fails, the other passes.
    result.assert_outcomes(failed=1, passed=1)
    assert "FAILED kvcheck[builtin:seed-prefix][preclaim-overlap-on]" in result.stdout.str()


def test_convention_both_passes_a_correct_resolver_and_fails_one_wrong_under_either(
    pytester: pytest.Pytester,
) -> None:
    """`both` judged each item by each convention alone, so every correct resolver failed the
    items of the convention it does not follow, without saying why (issue 23, messages)."""
    correct = pytester.runpytest(
        "--kvcheck-target", "builtin:reference", "--kvcheck-convention", "both", *PLUGIN_FAST
    )
    correct.assert_outcomes(passed=2)
    wrong = pytester.runpytest(
        "--kvcheck-target", "builtin:seed-prefix", "--kvcheck-convention", "both", *PLUGIN_FAST
    )
    wrong.assert_outcomes(failed=1, passed=1)
    out = wrong.stdout.str()
    assert "FAILED kvcheck[builtin:seed-prefix][both-overlap-on]" in out
    assert "it also fails under honest" in out


def test_one_item_per_axis_value(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(
        "--kvcheck-target",
        "builtin:reference",
        "--kvcheck-target",
        "builtin:seed-fixed",
        "--kvcheck-convention",
        "both",
        "--kvcheck-adaptive",
        "both",
        "--kvcheck-profile",
        "ci",
        "--collect-only",
        "-q",
        "-p",
        "no:cacheprovider",
    )
    ids = [line for line in result.stdout.lines if line.startswith("kvcheck[")]
    # `both` is one item per overlap value judged by either convention (2 x 2 x 2 items).
    assert len(ids) == 8 and len(set(ids)) == 8
    assert "kvcheck[builtin:seed-fixed][both-overlap-off-adaptive-on]" in ids
    # -k selects among them like any other item.
    picked = pytester.runpytest(
        "--kvcheck-target",
        "builtin:reference",
        "--kvcheck-convention",
        "honest",
        "-k",
        "overlap-off",
        "--co",
        "-q",
        "-p",
        "no:cacheprovider",
    )
    picked_ids = [line for line in picked.stdout.lines if line.startswith("kvcheck[")]
    assert picked_ids == ["kvcheck[builtin:reference][honest-overlap-off]"]


def test_bad_target_and_profile_are_usage_errors(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--kvcheck-target", "builtin:nope", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --kvcheck-target builtin:nope: unknown builtin 'nope'*"])
    result = pytester.runpytest(
        "--kvcheck-target",
        "builtin:reference",
        "--kvcheck-profile",
        "fast",
        "-p",
        "no:cacheprovider",
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --kvcheck-profile: no Hypothesis profile 'fast'*"])


def test_committed_counterexample_is_collected_and_replayed(pytester: pytest.Pytester) -> None:
    for path in COMMITTED.glob(f"*{SUFFIX}"):
        shutil.copy(path, pytester.path / path.name)
    result = pytester.runpytest("-p", "no:cacheprovider", "-v")
    count = len(list(COMMITTED.glob(f"*{SUFFIX}")))
    result.assert_outcomes(passed=count)
    result.stdout.fnmatch_lines([f"*{SUFFIX}::replay PASSED*"])
    none = pytester.runpytest("-p", "no:cacheprovider", "--kvcheck-no-replay")
    assert none.ret == pytest.ExitCode.NO_TESTS_COLLECTED


def test_failing_replay_item_shows_timeline_file_and_command(pytester: pytest.Pytester) -> None:
    result = run_scenario(STALE_FINISHED, load_target("builtin:seed-prefix"), record=True)
    path = save(from_run(result, "builtin:seed-prefix"), pytester.path / "regressions")
    outcome = pytester.runpytest("-p", "no:cacheprovider")
    outcome.assert_outcomes(failed=1)
    out = outcome.stdout.str()
    assert "timeline  builtin:seed-prefix" in out
    assert "REPRODUCED  committed-finished-frozen at event 4 (r0)" in out
    relative = path.relative_to(pytester.path)
    assert f"counterexample file: {relative}" in out
    assert f"replay with: kvcheck replay {relative}" in out


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ('{"schema_version": 1, "events": [', "not valid JSON (corrupt or truncated?)"),
        ('{"schema_version": 5, "config": {}, "events": []}', "reads version(s) 1, 2, 3, 4"),
        (
            '{"schema_version": 4, "family": "mamba", "config": {}, "events": []}',
            "unknown engine family 'mamba'; this kvcheck knows: sglang, vllm",
        ),
        (None, "its target 'builtin:retired' does not load: unknown builtin 'retired'"),
    ],
)
def test_bad_counterexample_files_are_collection_errors(
    pytester: pytest.Pytester, content: str | None, needle: str
) -> None:
    if content is None:
        result = run_scenario(STALE_FINISHED, load_target("builtin:seed-prefix"), record=True)
        good = from_run(result, "builtin:seed-prefix").to_json()
        content = good.replace("builtin:seed-prefix", "builtin:retired")
    (pytester.path / f"bad{SUFFIX}").write_text(content)
    outcome = pytester.runpytest("-p", "no:cacheprovider")
    assert outcome.ret == pytest.ExitCode.INTERRUPTED
    errors = [line for line in outcome.stdout.lines if line.startswith("kvcheck: ")]
    assert len(errors) == 1 and needle in errors[0], outcome.stdout.str()
    assert "Traceback" not in outcome.stdout.str()


def test_collect_only_counts_the_property_items(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_ok():\n    assert True\n")
    # Both conventions in one item per overlap value, both adaptive settings: 4 property items.
    options = ["--kvcheck-target", "builtin:reference", "--kvcheck-convention", "both"]
    options += ["--kvcheck-adaptive", "both"]
    result = pytester.runpytest(*options, "--collect-only", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["collected 5 items", "*= 5 tests collected in *"])
    quiet = pytester.runpytest(*options, "--co", "-q", "-k", "test_ok", "-p", "no:cacheprovider")
    quiet.stdout.fnmatch_lines(["1/5 tests collected (4 deselected) in *"])


# A file target outside the project, with the stale-finished-row bug of builtin:seed-prefix
# (docs/semantics.md §3.1): it commits the row of a request that finished meanwhile.
OUTSIDE_RESOLVER = """
def resolve(self, result, batch):
    accept_lens = result.accept_lens.tolist()
    for req, accepted in zip(batch.reqs, accept_lens, strict=True):
        if req.is_retracted:
            continue
        req.kv_committed_len += accepted - 1
        req.spec_verify_ct += 1
        req.spec_accepted_drafts += accepted - 1
        req.update_spec_acceptance_histogram(accepted - 1)
    result.num_accepted_drafts = sum(a - 1 for a in accept_lens)
    result.num_accepted_drafts_per_req_cpu = [a - 1 for a in accept_lens]
    ids = result.next_token_ids.tolist()
    stride = result.speculative_num_draft_tokens
    return [ids[i * stride : i * stride + a] for i, a in enumerate(accept_lens)]
"""


def test_a_target_outside_the_project_saves_inside_it(pytester: pytest.Pytester) -> None:
    # Given as a separate argument, pytest reads the target as a test path and roots the run at
    # the common ancestor of both directories, outside the one pytest was started in.
    outside = pytester.path.parent / f"{pytester.path.name}-elsewhere"
    outside.mkdir()
    (outside / "outside_resolver.py").write_text(OUTSIDE_RESOLVER)
    spec = f"{outside}/outside_resolver.py::resolve"
    result = pytester.runpytest("--kvcheck-target", spec, *PLUGIN_FAST)
    result.assert_outcomes(failed=1)
    assert f"rootdir: {pytester.path.parent}" in result.stdout.str()  # pytest's own choice
    saved = pytester.path / ".kvcheck" / "counterexamples"
    names = [path.name for path in saved.iterdir()]
    assert len(names) == 1 and names[0].startswith("outside-resolver-resolve-")
    assert not (pytester.path.parent / ".kvcheck").exists()
    assert "counterexample file: .kvcheck/counterexamples/outside-resolver-" in result.stdout.str()
