"""Every number option of kvcheck's is a finite number: `nan` and `inf` are refused by the parser
(one line, exit 2) before any work, instead of reaching the workers' timers (issue 23, item 14).
`fuzz --duration inf` alone is meant: it runs until Ctrl-C."""

from __future__ import annotations

import math

import pytest

from kvcheck.cli.main import main
from kvcheck.cli.options import seconds_or_forever
from tests.helpers import COMMITTED_COUNTEREXAMPLES

pytest_plugins = ["pytester"]

SAVED = str(sorted(COMMITTED_COUNTEREXAMPLES.glob("*.kvcheck.json"))[0])

OPTIONS = [
    (["fuzz", "builtin:reference", "--no-database", "--workers", "1"], "--duration"),
    (["check", "builtin:reference"], "--time-limit"),
    (["exhaust", "builtin:reference"], "--time-limit"),
    (["check", "builtin:reference"], "--min-coverage"),
    (["exhaust", "builtin:reference"], "--min-coverage"),
    (["replay", SAVED], "--deadline"),
]


@pytest.mark.parametrize(("argv", "option"), OPTIONS)
@pytest.mark.parametrize("value", ["nan", "NaN", "-nan"])
def test_nan_is_refused_by_every_number_option(
    capsys: pytest.CaptureFixture[str], argv: list[str], option: str, value: str
) -> None:
    assert main([*argv, f"{option}={value}"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    assert option in err and "finite" in err


@pytest.mark.parametrize(("argv", "option"), OPTIONS[1:])
@pytest.mark.parametrize("value", ["inf", "-inf", "1e999"])
def test_inf_is_refused_where_a_finite_number_is_meant(
    capsys: pytest.CaptureFixture[str], argv: list[str], option: str, value: str
) -> None:
    assert main([*argv, f"{option}={value}"]) == 2
    assert option in capsys.readouterr().err


def test_fuzz_duration_inf_means_no_limit() -> None:
    assert seconds_or_forever("inf") == math.inf
    assert seconds_or_forever("2.5") == 2.5


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_the_plugin_refuses_a_non_finite_deadline(pytester: pytest.Pytester, value: str) -> None:
    result = pytester.runpytest(
        "--kvcheck-target",
        "builtin:reference",
        "--kvcheck-deadline",
        value,
        "-p",
        "no:cacheprovider",
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--kvcheck-deadline must be a finite number" in result.stderr.str()
