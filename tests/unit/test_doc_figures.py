"""The figures the README and docs quote, re-derived so that they cannot drift.

The cheap ones are computed here: the corpus sizes from the mutant registry, the generations from
their table, the replay-comparison corpus from its benchmark's constants, and the Performance
table as `benchmarks/bench_harness.py` last wrote it. The 8-event proof's state count is checked
where the quality tier runs that proof (tests/quality/test_exhaust.py); the rest, each a minute
or more, by `benchmarks/doc_figures.py`, which re-runs the commands that produce them.
"""

from __future__ import annotations

import ast
import importlib.util
import re

from kvcheck.cli.main import build_parser
from kvcheck.families.sglang.mutants.generations import GENERATIONS
from kvcheck.mutants import corpus_of
from tests.helpers import ROOT, quoted

# The manual's corpus figures are SGLang's (docs/measuring.md; vLLM's corpus is docs/vllm.md's).
SGLANG_ENTRIES = corpus_of("sglang").entries
MUTANTS = tuple(e for e in SGLANG_ENTRIES if e.kind == "mutant")
REWRITES = tuple(e for e in SGLANG_ENTRIES if e.kind == "rewrite")

SEMANTICS = ROOT / "docs" / "semantics.md"
MEASURING = ROOT / "docs" / "measuring.md"
PERFORMANCE = ROOT / "docs" / "performance.md"


def test_the_corpus_sizes_are_the_registrys() -> None:
    sizes = quoted(r"holds (\d+) plausible buggy resolvers and (\d+) correct rewrites")
    assert sizes == (len(MUTANTS), len(REWRITES))
    assert quoted(r"and (\w+) correct rewrites complete the corpus", SEMANTICS) == (len(REWRITES),)


def test_the_kill_matrix_figures_are_over_the_whole_corpus() -> None:
    # The numerators come from a run of `kvcheck mutants` (benchmarks/doc_figures.py); the
    # options and denominators quoted with them are checked here.
    examples, seed, killed_of, annotated_of, minimal_of = quoted(
        r"Today \(`kvcheck mutants`, (\d+) examples, seed (\d+)\), SGLang's entries: \d+/(\d+) "
        r"killed, .*? the "
        r"annotated invariant for \d+/(\d+), .*? minimum \(\d+ to \d+ events\) for \d+/(\d+)\."
    )
    args = build_parser().parse_args(["mutants"])
    assert (examples, seed) == (args.max_examples, args.seed)
    assert killed_of == annotated_of == minimal_of == len(MUTANTS)
    assert quoted(r"At seed 0,? (?:all )?\d+ of (\d+) mutants shrink", SEMANTICS) == (len(MUTANTS),)


def test_the_generations_listed_are_the_corpuss() -> None:
    (listed,) = re.findall(r"generation \((\d[^;]*);", " ".join(MEASURING.read_text().split()))
    assert listed == ", ".join(generation.versions for generation in GENERATIONS)


def test_the_replay_comparison_corpus_is_the_benchmarks() -> None:
    tree = ast.parse((ROOT / "benchmarks" / "compare_replay.py").read_text())
    wanted = {"REFERENCE_COUNT", "ENTRY_COUNT", "ENTRIES"}
    constants = {
        target.id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name) and target.id in wanted
    }
    reference, each, entries = (
        constants["REFERENCE_COUNT"],
        constants["ENTRY_COUNT"],
        len(constants["ENTRIES"]),
    )
    assert quoted(
        r"\(([\d,]+) scenarios: ([\d,]+) for `builtin:reference` and (\d+) for each of (\d+) "
        r"mutants and rewrites"
    ) == (reference + each * entries, reference, each, entries)


def test_the_performance_table_is_the_one_the_benchmark_wrote() -> None:
    def table(text: str) -> str:
        start = text.index("| what | measure | value |")
        return text[start : text.index("\n\n", start)]

    written = (ROOT / "benchmarks" / "results.md").read_text() + "\n\n"
    assert table(PERFORMANCE.read_text()) == table(written), (
        "docs/performance.md's Performance table differs from benchmarks/results.md: paste the "
        "table benchmarks/bench_harness.py wrote"
    )


def test_every_figure_the_benchmark_rederives_is_found_in_the_docs() -> None:
    # A reworded sentence must fail here, not only in the next (slow) benchmark run.
    spec = importlib.util.spec_from_file_location(
        "doc_figures", ROOT / "benchmarks" / "doc_figures.py"
    )
    assert spec is not None and spec.loader is not None
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    runs = {name for name, _, _ in benchmark.RUNS}
    for run, pattern, document, _ in benchmark.FIGURES:
        assert run in runs
        assert quoted(pattern, document)
