"""Small shared pieces for the test suite: where its data lives, scenario builders and
hand-written resolvers."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import pytest

from kvcheck.cli.main import main
from kvcheck.core.scenario import Scenario
from kvcheck.core.target import Target
from kvcheck.families.sglang.probe import probe_target
from kvcheck.families.sglang.scenario import Admit, Config, Event, Step, SwitchStride

# Data the tests read, wherever the test module that reads it lives.
TESTS_DIR = Path(__file__).resolve().parent
ROOT = TESTS_DIR.parent
README = ROOT / "README.md"
SGLANG_FIXTURES = TESTS_DIR / "fixtures" / "sglang"
COMMITTED_COUNTEREXAMPLES = TESTS_DIR / "counterexamples"


# Numbers the docs spell out ("eleven correct rewrites"), by value.
_NUMBER_WORDS: Final = (  # noqa: SIM905 (one line of text reads better than 21 of list)
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty"
).split()


def manual_documents() -> tuple[Path, ...]:
    """The README and the manual in docs/, where the figures kvcheck quotes live."""
    return (README, *sorted((ROOT / "docs").glob("*.md")))


def quoted(pattern: str, document: Path | None = None) -> tuple[int, ...]:
    """The figures `document` (default: the README and docs/ together) quotes in the one place
    `pattern` (a regex; one group per figure) matches: `36,599` and `eleven` read as numbers.
    Zero or several matches fail, so a sentence reworded, moved or repeated cannot silently stop
    being checked (tests/unit/test_doc_figures.py)."""
    documents = manual_documents() if document is None else (document,)
    # A figure's sentence may wrap anywhere.
    text = " ".join(" ".join(d.read_text().split()) for d in documents)
    matches = list(re.finditer(pattern, text))
    where = "the manual" if document is None else document.name
    assert len(matches) == 1, f"{where}: {len(matches)} matches of {pattern!r}"
    return tuple(
        _NUMBER_WORDS.index(group) if group in _NUMBER_WORDS else int(group.replace(",", ""))
        for group in matches[0].groups()
    )


def scenario(*events: Event, **config: Any) -> Scenario:
    return Scenario(Config(**config), events)


def target(resolver: Callable[..., Any], name: str | None = None) -> Target:
    label = name or resolver.__name__
    return probe_target(f"test:{label}", resolver, f"test resolver {label}")


# docs/semantics.md §3.4: two live rows launched at stride 4, a switch to 2 before their
# delivery, so a resolver reading the worker's stride misreads row 1.
STRIDE_SWITCH_BEFORE_DELIVERY = (
    Admit("r0", 10, 20),
    Admit("r1", 10, 20),
    Step(),
    Step((2, 3)),
    SwitchStride(2),
    Step(),
)

# A resolver file in SGLang's style for `source_target`: it imports a name kvcheck cannot provide
# (used only on a grammar-error path) and defines `_runs`, the usual slicing of the padded tokens.
_HEADER = """
from __future__ import annotations

from sglang.srt.server_args import get_global_server_args


def _runs(result, stride):
    ids = result.next_token_ids.tolist()
    return [ids[i * stride : i * stride + a] for i, a in enumerate(result.accept_lens.tolist())]

"""


def source_target(tmp_path: Path, body: str, name: str = "resolve") -> str:
    """Write `body` below `_HEADER` to a file and return its `path::name` target spec."""
    path = tmp_path / "batch_result_processor.py"
    path.write_text(_HEADER + textwrap.dedent(body))
    return f"{path}::{name}"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """`kvcheck ARGV` in this process: (exit code, stdout, stderr). Whatever the command and its
    input, neither output may hold a traceback."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out and "Traceback" not in err, out + err
    return code, out, err


def run_process(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`kvcheck ARGV` in a fresh interpreter (where an uncaught exception would print its
    traceback); no output may hold one."""
    completed = subprocess.run(
        [sys.executable, "-m", "kvcheck.cli", *argv],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
    )
    both = completed.stdout + completed.stderr
    assert "Traceback" not in both, both
    return completed


def call_in_a_fresh_interpreter(module: str, call: str, *, timeout: float) -> None:
    """Run `call` (Python, on the test module `module` imported as `t`) in a new interpreter
    and fail with its output unless it exits 0. For seeded Hypothesis runs whose result must not
    depend on test order: Hypothesis mixes literal constants from every local module loaded so
    far into what it draws, so in a test worker the same seed draws differently after other
    tests ran there."""
    done = subprocess.run(
        [sys.executable, "-c", f"import {module} as t; t.{call}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout + done.stderr


# A short, seeded plugin run for pytester: no cache provider, no assertion-rewrite warnings.
PLUGIN_FAST: list[str] = [
    "-p",
    "no:cacheprovider",
    "-W",
    "ignore::pytest.PytestAssertRewriteWarning",
    "--kvcheck-max-examples",
    "60",
    "--kvcheck-seed",
    "0",
]
