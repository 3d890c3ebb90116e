"""What every `kvcheck` command shares: exit codes, the parser class, argument types and the
judging options (`check` and `exhaust` take the same ones).

Exit codes are part of the contract (CHANGELOG.md): 0 no violation found, 1 violation found, 2
usage or load error. User errors are one clear line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
from typing import Final, NoReturn

from kvcheck.core.scenario import EVENT_KINDS, GLOBAL_COUNTER_MODES

EXIT_OK: Final = 0
EXIT_VIOLATION: Final = 1
EXIT_USAGE: Final = 2

CONVENTION_CHOICES: Final = ("auto", "preclaim", "honest")


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line and exit 2."""

    def error(self, message: str) -> NoReturn:
        """argparse's error hook: one line pointing at `--help`, exit 2 (`EXIT_USAGE`)."""
        # One line, not argparse's usage block: the contract is "one clear line".
        self.exit(EXIT_USAGE, f"kvcheck: error: {message} (see `{self.prog} --help`)\n")


# --- argument types -------------------------------------------------------------------------


def positive_int(text: str) -> int:
    """An integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    """An integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return value


def seed(text: str) -> int:
    """Any integer seed."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer seed, got {text!r}") from None


def seconds(text: str) -> float:
    """A positive number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def int_list(text: str) -> tuple[int, ...]:
    """Comma-separated integers, at least one."""
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not values:
        raise argparse.ArgumentTypeError(f"expected at least one integer, got {text!r}")
    return values


def eos_list(text: str) -> tuple[int | None, ...]:
    """Comma-separated EOS positions: integers, or `none` for a request that never hits EOS."""
    values: list[int | None] = []
    for part in (p.strip() for p in text.split(",")):
        if part.lower() in ("none", "no", "-"):
            values.append(None)
            continue
        try:
            values.append(int(part))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected EOS positions (integers or 'none'), got {text!r}"
            ) from None
    return tuple(values)


def event_kinds(text: str) -> tuple[str, ...]:
    """Comma-separated event kinds (`kvcheck.core.scenario.EVENT_KINDS`) or `all`; `step` is
    always included."""
    if text.strip() == "all":
        return EVENT_KINDS
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in kinds if k not in EVENT_KINDS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown event kind(s) {', '.join(unknown)}; choose from {', '.join(EVENT_KINDS)} "
            "or 'all'"
        )
    return kinds if "step" in kinds else ("step", *kinds)


def overlap_modes(text: str) -> tuple[bool, ...]:
    """`on`, `off` or `both`."""
    choices = {"on": (True,), "off": (False,), "both": (True, False)}
    value = choices.get(text.strip())
    if value is None:
        raise argparse.ArgumentTypeError(f"expected on, off or both, got {text!r}")
    return value


# --- shared options -------------------------------------------------------------------------


def add_judging_options(
    parser: argparse._ActionsContainer,
    *,
    global_counters_default: str | None,
    adaptive_help: str,
) -> None:
    """--convention, --global-counters, --adaptive and --allow-unavailable-imports."""
    parser.add_argument(
        "--convention",
        choices=CONVENTION_CHOICES,
        default="auto",
        help="committed-length convention to judge by (default: auto, detected from the target)",
    )
    parser.add_argument(
        "--global-counters",
        choices=GLOBAL_COUNTER_MODES,
        default=global_counters_default,
        help="ideal: stale rows excluded (default); sglang: counted as SGLang does; off",
    )
    parser.add_argument(
        "--adaptive", action=argparse.BooleanOptionalAction, default=None, help=adaptive_help
    )
    parser.add_argument(
        "--allow-unavailable-imports",
        action="store_true",
        help=(
            "for path.py::Qualname targets: load even if the code names imports kvcheck cannot "
            "provide (e.g. an abort reason on an error path); using one at run time is still an "
            "error"
        ),
    )


def add_json_option(parser: argparse._ActionsContainer) -> None:
    """`--json`: print one JSON object on stdout instead of the text report."""
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
