"""What every `kvcheck` command shares: exit codes, the parser class, argument types and the
judging options (`check`, `fuzz` and `exhaust` take the same ones: the family's flags).

Exit codes are part of the contract (docs/contracts.md): 0 no violation found, 1 violation found, 2
usage or load error. User errors are one clear line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, NoReturn

from kvcheck.arguments import non_negative_int as non_negative_int
from kvcheck.arguments import positive_int as positive_int
from kvcheck.core.deadline import DEFAULT_DEADLINE
from kvcheck.core.family import Family, distribution_of, family, family_names
from kvcheck.core.target import Target
from kvcheck.counterexamples.fileformat import DEFAULT_DIR
from kvcheck.counterexamples.replay import AUTO, FILE, replay_choices
from kvcheck.errors import KvcheckUsageError

if TYPE_CHECKING:  # `kvcheck replay` shares this module and never imports kvcheck.search
    from kvcheck.search.target_coverage import TargetCoverage

EXIT_OK: Final = 0
EXIT_VIOLATION: Final = 1
EXIT_USAGE: Final = 2
# Ctrl-C: what was established so far is printed first (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED: Final = 130


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line and exit 2."""

    def error(self, message: str) -> NoReturn:
        """argparse's error hook: a `KvcheckUsageError` pointing at `--help`, which the front
        door reports like any usage error (one line, exit 2, and JSON under `--json`)."""
        # One line, not argparse's usage block: the contract is "one clear line".
        raise KvcheckUsageError(f"{message} (see `{self.prog} --help`)")


def wants_json(argv: Sequence[str]) -> bool:
    """Whether the command line asks for `--json`, read from the raw words (for errors raised
    before or while parsing them); words after `--` are not options."""
    words = list(argv)
    if "--" in words:
        words = words[: words.index("--")]
    return "--json" in words


def error_json(message: str, code: int) -> str:
    """The one JSON object `--json` prints when a command ends in an error instead of a report."""
    return json.dumps({"error": message, "exit_code": code}, indent=2)


def warn(message: str) -> None:
    """A warning on stderr: something went wrong that does not change the verdict (a file that
    could not be written next to a finding that is printed anyway)."""
    print(f"kvcheck: warning: {message}", file=sys.stderr)


def note(message: str) -> None:
    """A note on stderr: how the command judged, where it differs from what the user may assume
    (a replay by another convention than its file's)."""
    print(f"kvcheck: note: {message}", file=sys.stderr)


def add_save_options(parser: argparse._ActionsContainer) -> None:
    """`--save-dir DIR` and `--no-save`: where a failure's counterexample file goes."""
    parser.add_argument(
        "--save-dir",
        default=str(DEFAULT_DIR),
        metavar="DIR",
        help=f"where a failure's counterexample file is written (default: {DEFAULT_DIR})",
    )
    parser.add_argument(
        "--no-save",
        action="store_true",
        help="do not write a counterexample file on failure (default: off, one is written)",
    )


def add_force_option(parser: argparse._ActionsContainer) -> None:
    """`--force`: replace existing output files (never the command's input files)."""
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace an output file that exists; a file the command reads is never replaced "
        "(default: off, an existing file is an error)",
    )


def input_files(target: Target | None, *paths: str | os.PathLike[str]) -> tuple[str, ...]:
    """The files a command reads and so may never write over: `paths` (e.g. the counterexample
    file) and the source files of `target`'s code."""
    code = () if target is None else tuple(span.file for span in target.code)
    return tuple(dict.fromkeys([*map(str, paths), *code]))


# --- argument types -------------------------------------------------------------------------


def seed(text: str) -> int:
    """Any integer seed."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer seed, got {text!r}") from None


def _number(text: str, expected: str) -> float:
    """`text` as a finite float; `nan` and `inf` are refused here, so no option of kvcheck's
    takes a number that no comparison or timer can use (`--duration` alone spells `inf`, by
    `seconds_or_forever`)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected {expected} as a finite number, got {text!r}")
    return value


def seconds(text: str) -> float:
    """A positive, finite number of seconds."""
    value = _number(text, "seconds")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def seconds_or_forever(text: str) -> float:
    """A positive number of seconds, or `inf` for no limit (`math.inf`)."""
    if text.strip().lower() in ("inf", "infinity"):
        return math.inf
    return seconds(text)


def deadline_seconds(text: str) -> float | None:
    """A per-call deadline in seconds; 0 means none (None)."""
    value = _number(text, "seconds")
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text!r}")
    return value or None


def percent(text: str) -> float:
    """A percentage, 0 to 100."""
    value = _number(text, "a percentage")
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"expected a percentage from 0 to 100, got {text!r}")
    return value


# --- shared options -------------------------------------------------------------------------


class _FamilyFlags(argparse._ArgumentGroup):
    """One family's flags on a command's parser, in a group of their own (`add_family_flags`).

    A flag an earlier family added is shared rather than added twice: it parses as that family
    declared it, and both read its value (two families may each have an `--events`)."""

    def __init__(self, parser: argparse.ArgumentParser, title: str) -> None:
        super().__init__(parser, title=title)
        self.flags: list[argparse.Action] = []

    def add_argument(self, *names: Any, **kwargs: Any) -> argparse.Action:
        """Add the flag, or share the one an earlier family added under these names."""
        shared = self._option_string_actions.get(names[0]) if names else None
        if shared is None:
            action = super().add_argument(*names, **kwargs)
        elif all(name in shared.option_strings for name in names):
            action = shared
        else:  # a family's mistake, found when the parser is built (every command, every test)
            raise ValueError(f"flags {names} partly overlap {shared.option_strings}")
        self.flags.append(action)
        return action


# Where a command's parser keeps which family added which flags: by family, (dest, flag, default).
_FAMILY_FLAGS: Final = "family_flags"
FamilyFlags = dict[str, list[tuple[str, str, Any]]]


def add_family_flags(
    parser: argparse.ArgumentParser, title: str, add: Callable[[Family, Any], None]
) -> None:
    """Call `add(family, group)` for every registered family, each with a group of its own
    titled `title` and the family's name, and record which flags each added, so that a flag
    given for a target of another family is refused (`refuse_other_families_flags`). The
    families are the ones registered when the parser is built (the front door registers
    `KVCHECK_FAMILIES` first)."""
    owned: FamilyFlags = parser.get_default(_FAMILY_FLAGS) or {}
    for name in family_names():
        group = _FamilyFlags(parser, f"{title} ({name} targets)")
        add(family(name), group)
        if not group.flags:
            continue
        parser._action_groups.append(group)
        owned.setdefault(name, []).extend(
            (action.dest, action.option_strings[0], action.default) for action in group.flags
        )
    parser.set_defaults(**{_FAMILY_FLAGS: owned})


def refuse_other_families_flags(args: argparse.Namespace, family_name: str, subject: str) -> None:
    """`KvcheckUsageError` for a flag set away from its default that only families other than
    `family_name` read (`--convention` for a target whose family judges without one); `subject`
    says what is of that family ("builtin:reference is a sglang target")."""
    owned: FamilyFlags = getattr(args, _FAMILY_FLAGS, None) or {}
    own = {dest for dest, _, _ in owned.get(family_name, ())}
    for name, flags in owned.items():
        for dest, flag, default in flags:
            if name != family_name and dest not in own and getattr(args, dest) != default:
                raise KvcheckUsageError(f"{flag} is an option for {name} targets; {subject}")


def refuse_flags_for_others(args: argparse.Namespace, target: Target) -> None:
    """`refuse_other_families_flags` for the family of a loaded `target`."""
    refuse_other_families_flags(args, target.family, f"{target.spec} is a {target.family} target")


def add_judging_options(parser: argparse.ArgumentParser, **wording: Any) -> None:
    """Every registered family's judging flags (`FrontDoor.add_options`, in the command's
    `wording`; SGLang's `--convention`, `--global-counters`, `--adaptive`) and
    `--allow-unavailable-imports`. A command turns them into the options it asks of the
    target's family with `requested_options`."""

    def add(owner: Family, group: Any) -> None:
        if owner.distribution is not None:
            owner.distribution.front.add_options(group, **wording)

    add_family_flags(parser, "judging", add)
    parser.add_argument(
        "--allow-unavailable-imports",
        action="store_true",
        help=(
            "for path.py::Qualname targets: load even if the code names imports kvcheck cannot "
            "provide (e.g. an abort reason on an error path); using one at run time is still an "
            "error (default: off)"
        ),
    )


def requested_options(args: argparse.Namespace, target: Target) -> dict[str, Any]:
    """The judging options the flags of `add_judging_options` ask of `target`'s family (by the
    names `kvcheck.check()` takes them); a flag of another family only is a usage error."""
    refuse_flags_for_others(args, target)
    return distribution_of(target.family).front.requested(args)


def add_replay_options(parser: argparse.ArgumentParser) -> None:
    """A `--NAME` flag per judging option a replay may choose (`Judge.replay_choices`; SGLang's
    `--convention`, docs/replay.md), for `replay` and `regress`."""

    def add(owner: Family, group: Any) -> None:
        for name, values in replay_choices(owner.name).items():
            group.add_argument(
                f"--{name.replace('_', '-')}",
                dest=name,
                choices=values,
                default=AUTO,
                help=f"the {name.replace('_', ' ')} to judge by: {AUTO} (default: the file's "
                "for its saved target; for another --target, as its family decides, said on "
                f"stderr when they differ), {FILE} (always the file's), or "
                + " or ".join(v for v in values if v not in (AUTO, FILE)),
            )

    add_family_flags(parser, "judging a replay", add)


def add_deadline_option(parser: argparse._ActionsContainer) -> None:
    """`--deadline SECONDS`: how long each call of the target may take (0: no limit)."""
    parser.add_argument(
        "--deadline",
        type=deadline_seconds,
        default=DEFAULT_DEADLINE,
        metavar="SECONDS",
        help=(
            "interrupt a call of the target still running after SECONDS and report it as "
            f"target-deadline (default: {DEFAULT_DEADLINE:g}; 0: no deadline)"
        ),
    )


def add_json_option(parser: argparse._ActionsContainer) -> None:
    """`--json`: print one JSON object on stdout instead of the text report."""
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object on stdout, also for an error (default: off, a text report)",
    )


# --- the target's coverage ------------------------------------------------------------------


def add_coverage_options(parser: argparse._ActionsContainer, *, gate: bool) -> None:
    """`--no-coverage`, and with `gate` `--min-coverage PCT`."""
    parser.add_argument(
        "--no-coverage",
        action="store_true",
        help="do not measure which lines and branches of a target read from source ran "
        "(default: off, measured)",
    )
    if gate:
        parser.add_argument(
            "--min-coverage",
            type=percent,
            default=None,
            metavar="PCT",
            help=(
                "exit 1 when the target's line coverage is below PCT percent, even if no "
                "violation was found (targets read from source only; default: no minimum)"
            ),
        )


def require_coverage(args: argparse.Namespace, target: Target) -> None:
    """`--min-coverage` needs a coverage to compare: a `KvcheckUsageError` (exit 2) when it
    comes with `--no-coverage` or a target not read from source, before anything runs."""
    if getattr(args, "min_coverage", None) is None:
        return
    if args.no_coverage:
        raise KvcheckUsageError("--min-coverage needs the coverage that --no-coverage turns off")
    if not target.code:
        raise KvcheckUsageError(
            f"--min-coverage needs a target read from source (path/to/file.py::Qualname, an "
            f"SGLang checkout or sglang==VERSION); {target.spec} is not, so kvcheck cannot "
            "measure its coverage"
        )


def coverage_below(coverage: TargetCoverage | None, args: argparse.Namespace) -> bool:
    """Whether `--min-coverage` was given and the measured line coverage of the resolver, or
    of the code beside it (a release's allocation code), is under it."""
    minimum = getattr(args, "min_coverage", None)
    return minimum is not None and coverage is not None and bool(coverage.parts_below(minimum))


def coverage_text(coverage: TargetCoverage | None, args: argparse.Namespace) -> list[str]:
    """The text report's coverage lines (none when not measured), and the `COVERAGE` line when
    it is below `--min-coverage`."""
    if coverage is None:
        return []
    lines = coverage.report_lines()
    if coverage_below(coverage, args):
        for part in coverage.parts_below(args.min_coverage):
            what = f"{part.label}: " if part.label else ""
            lines.append(
                f"COVERAGE    {what}{part.lines_run}/{part.lines_total} lines "
                f"({part.line_percent:.1f}%) below --min-coverage {args.min_coverage:g}: exit 1"
            )
    return lines


def coverage_json(coverage: TargetCoverage | None, args: argparse.Namespace) -> dict[str, Any]:
    """The `--json` fields: `coverage` (null when not measured), `min_coverage` (null when not
    given) and `coverage_below_minimum`."""
    return {
        "coverage": coverage.to_dict() if coverage is not None else None,
        "min_coverage": getattr(args, "min_coverage", None),
        "coverage_below_minimum": coverage_below(coverage, args),
    }
