"""Issue 12 item 9: kvcheck's stdout is its report. What a target prints goes to stderr, `--json`
prints exactly one JSON object (errors included), `--version` works, and every option's help
states its default."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from kvcheck.cli.main import build_parser
from kvcheck.version import VERSION
from tests.helpers import run_cli

FAST = ["--max-examples", "50", "--seed", "0", "--no-database"]
EXHAUST_SMALL = ["--requests", "1", "--events", "4", "--strides", "2"]

# A resolver that talks: at import, on every call, and then delegates to a buggy built-in (so
# the JSON report has a whole failure in it).
NOISY_MODULE = """\
print("noisy: imported")
from kvcheck.families.sglang.builtins import seed_prefix


def resolve(self, result, batch):
    print("noisy: resolving", len(batch.reqs), "rows")
    return seed_prefix(self, result, batch)
"""
# The same, read from source: it prints and raises (a `target-raised` finding).
NOISY_SOURCE = """\
class Noisy:
    def resolve(self, result, batch):
        print('{"verdict": "pass"}')
        raise ValueError("boom")
"""


@pytest.fixture
def noisy_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "kvcheck_noisy_resolver.py").write_text(NOISY_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "kvcheck_noisy_resolver:resolve"


@pytest.fixture
def noisy_source(tmp_path: Path) -> str:
    (tmp_path / "noisy.py").write_text(NOISY_SOURCE)
    return f"{tmp_path / 'noisy.py'}::Noisy.resolve"


# --- the target's output ------------------------------------------------------------------------


def test_an_imported_targets_prints_go_to_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], noisy_module: str
) -> None:
    argv = ["check", noisy_module, *FAST, "--save-dir", str(tmp_path / "cx"), "--json"]
    code, out, err = run_cli(capsys, *argv)
    assert code == 1
    report = json.loads(out)  # the whole of stdout is one object
    assert report["verdict"] == "fail"
    assert "noisy:" not in out
    assert "noisy: imported" in err and "noisy: resolving" in err


@pytest.mark.parametrize("command", ["check", "exhaust"])
def test_a_source_targets_prints_go_to_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], noisy_source: str, command: str
) -> None:
    budget = FAST if command == "check" else EXHAUST_SMALL
    argv = [command, noisy_source, *budget, "--save-dir", str(tmp_path / "cx"), "--json"]
    code, out, err = run_cli(capsys, *argv)
    assert code == 1
    report = json.loads(out)
    assert report["verdict"] == "fail" and report["violation"]["invariant"] == "target-raised"
    assert '{"verdict": "pass"}' in err


def test_replay_of_a_noisy_target_prints_one_json_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], noisy_source: str
) -> None:
    save_dir = tmp_path / "cx"
    run_cli(capsys, "check", noisy_source, *FAST, "--save-dir", str(save_dir))
    [path] = save_dir.iterdir()
    code, out, err = run_cli(capsys, "replay", str(path), "--json")
    assert code == 1
    assert json.loads(out)["replay"] == "same"
    assert '{"verdict": "pass"}' in err


# --- --json and errors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["check", "builtin:reference", "--max-examples", "0", "--json"], "positive integer"),
        (["check", "--json"], "the following arguments are required: target"),
        (["check", "builtin:nope", "--json"], "unknown builtin 'nope'"),
        (["check", "no_such_module_kv:fn", "--json"], "cannot import 'no_such_module_kv'"),
        (["exhaust", "builtin:reference", "--events", "0", "--json"], "needs a --steps bound"),
        (["replay", "no-such-file.kvcheck.json", "--json"], "no such counterexample file"),
        (["mutants", "--only", "mutant:nope", "--json"], "nope"),
        (["releases", "--jobs", "3", "--json"], "unrecognized arguments: --jobs"),
        (["--json"], ""),
    ],
)
def test_json_errors_are_one_json_object(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    report = json.loads(out)
    assert report["exit_code"] == 2 and message in report["error"]
    assert err.startswith("kvcheck: error: ") and len(err.splitlines()) == 1


def test_without_json_an_error_prints_nothing_on_stdout(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run_cli(capsys, "check", "builtin:nope")
    assert (code, out) == (2, "")
    assert "unknown builtin" in err
    # `--json` after `--` is an argument, not the option: no JSON.
    code, out, _ = run_cli(capsys, "check", "--", "--json")
    assert (code, out) == (2, "")


# --- --version and help -------------------------------------------------------------------------


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "--version")
    assert (code, out.strip()) == (0, f"kvcheck {VERSION}")


def _options(parser: argparse.ArgumentParser, name: str) -> list[tuple[str, argparse.Action]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command, sub in action.choices.items():
                found += _options(sub, f"{name} {command}")
        elif action.option_strings and not isinstance(
            action, argparse._HelpAction | argparse._VersionAction
        ):
            found.append((name, action))
    return found


def test_every_options_help_states_its_default() -> None:
    options = _options(build_parser(), "kvcheck")
    assert len(options) > 40
    missing = [
        f"{where} {'/'.join(action.option_strings)}"
        for where, action in options
        if "default" not in (action.help or "")
    ]
    assert missing == []


def test_a_stated_default_is_the_default() -> None:
    # Where the help names a number, it is the one argparse uses.
    for where, action in _options(build_parser(), "kvcheck"):
        default = action.default
        if isinstance(default, int) and not isinstance(default, bool):
            assert f"default: {default}" in (action.help or ""), (where, action.option_strings)
