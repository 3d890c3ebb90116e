"""What SGLang adds to kvcheck's front doors (`kvcheck.core.family.FrontDoor`): its judging
flags on the command line (`--convention`, `--global-counters`, `--adaptive`) and in the pytest
plugin (`--kvcheck-convention` and the rest, with the items they split a target's search into),
the argument types of its exhaustive bounds, `kvcheck spellings`, and its releases for `kvcheck
releases`. The plumbing (parsers, exit codes, reports) is the generic CLI's and plugin's; this
module imports neither."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, Final

from kvcheck.core.target import Target
from kvcheck.families.sglang import release
from kvcheck.families.sglang.judging import NO_RELEASE_CODE, SglangJudging
from kvcheck.families.sglang.scenario import (
    ALLOCATION_PATHS,
    GLOBAL_COUNTER_MODES,
)
from kvcheck.families.sglang.spellings import spellings_table
from kvcheck.families.sglang.target import ApiShape

CONVENTION_CHOICES: Final = ("auto", "preclaim", "honest")
ALLOCATION_PATH_CHOICES: Final = ("auto", *ALLOCATION_PATHS)

# --- the command line ---------------------------------------------------------------------


def add_options(
    parser: argparse._ActionsContainer,
    *,
    global_counters_default: str | None,
    adaptive_help: str,
) -> None:
    """--convention, --global-counters and --adaptive (`check`, `fuzz` and `exhaust` take the
    same ones; `global_counters_default` None: the command decides, from a corpus entry)."""
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
        help="ideal: stale rows excluded; sglang: counted as SGLang does; off (default: "
        + (
            global_counters_default
            if global_counters_default is not None
            else "a mutant:NAME entry's own, else ideal"
        )
        + ")",
    )
    parser.add_argument(
        "--adaptive", action=argparse.BooleanOptionalAction, default=None, help=adaptive_help
    )
    parser.add_argument(
        "--allocation-path",
        choices=ALLOCATION_PATH_CHOICES,
        default="auto",
        help="whose code allocates and releases KV under an allocation rule: release (the "
        "release tree's own functions), model (kvcheck's) or auto (default: release for "
        "sglang==VERSION, a checkout or a package directory, model otherwise)",
    )


def requested(args: argparse.Namespace) -> dict[str, Any]:
    """The judging options `args` ask for, as `kvcheck.check()` takes them; one left to the
    target (None) is left out, which `kvcheck.families.sglang.judging.judging` reads alike."""
    asked = {
        "convention": args.convention,
        "global_counters": args.global_counters,
        "adaptive": args.adaptive,
        "allocation_path": args.allocation_path,
    }
    return {name: value for name, value in asked.items() if value is not None}


# --- the pytest plugin ----------------------------------------------------------------------


def add_plugin_options(group: Any) -> None:
    """`--kvcheck-convention`, `--kvcheck-adaptive` and `--kvcheck-global-counters`."""
    group.addoption(
        "--kvcheck-convention",
        dest="kvcheck_convention",
        choices=("auto", "preclaim", "honest", "both"),
        default="auto",
        help="convention axis: auto (detected from each target, default), one, or both (an "
        "item per overlap value that passes when either convention shows no violation)",
    )
    group.addoption(
        "--kvcheck-adaptive",
        dest="kvcheck_adaptive",
        choices=("auto", "on", "off", "both"),
        default="auto",
        help="switch strides between launch and delivery: auto (default: on exactly when the "
        "target feeds the adaptive controller, as `kvcheck check` decides), on, off, or both "
        "(one item each)",
    )
    group.addoption(
        "--kvcheck-global-counters",
        dest="kvcheck_global_counters",
        choices=GLOBAL_COUNTER_MODES,
        default="ideal",
        help="how the batch-global counter is judged (default: ideal, stale rows excluded)",
    )
    group.addoption(
        "--kvcheck-allocation-path",
        dest="kvcheck_allocation_path",
        choices=ALLOCATION_PATH_CHOICES,
        default="auto",
        help="whose code allocates under an allocation rule: auto (default: a release tree's "
        "own, else kvcheck's model), release or model",
    )


_ADAPTIVE_VALUES: Final[dict[str, tuple[bool | None, ...]]] = {
    "auto": (None,),
    "on": (True,),
    "off": (False,),
    "both": (False, True),
}


def plugin_items(option: Callable[[str], Any]) -> list[tuple[str, dict[str, Any]]]:
    """The property items of a target: with convention `auto` one, the search `kvcheck check`
    runs (the detected convention, then the other), so both front doors give the same verdict;
    with a convention given one per overlap value (so `pytest -n auto` spreads them), and
    `both` splits `auto`'s search (either convention passing passes) the same way;
    `--kvcheck-adaptive both` doubles either set. Each as its name's axes and the options it
    asks for."""
    chosen = option("kvcheck_convention")
    global_counters = option("kvcheck_global_counters")
    # (the convention searched, the item's label): `both` is `auto`'s search split by overlap.
    conventions = [("auto", chosen)] if chosen in ("auto", "both") else [(chosen, chosen)]
    items: list[tuple[str, dict[str, Any]]] = []
    for convention, label in conventions:
        for overlap in (None,) if label == "auto" else (True, False):
            for adaptive in _ADAPTIVE_VALUES[option("kvcheck_adaptive")]:
                axes: list[str] = [label]
                if overlap is not None:
                    axes.append(f"overlap-{'on' if overlap else 'off'}")
                if adaptive is not None:
                    axes.append(f"adaptive-{'on' if adaptive else 'off'}")
                asked = {
                    "convention": convention,
                    "global_counters": global_counters,
                    "adaptive": adaptive,
                    "overlap": overlap,
                    "allocation_path": option("kvcheck_allocation_path"),
                }
                items.append(("-".join(axes), asked))
    return items


def describe(options: SglangJudging, reason: str) -> str:
    """The convention and why, the overlap pinned (if it is) and adaptive switching."""
    if not reason.startswith("convention "):
        reason = f"convention {options.convention}, {reason}"
    overlap = "" if options.overlap is None else f"overlap {'on' if options.overlap else 'off'}, "
    allocation = "" if options.allocation_path == "model" else "; the release's allocation code"
    return f"{reason}; {overlap}adaptive {'on' if options.adaptive else 'off'}{allocation}"


def _options_lines(options: SglangJudging, reason: str, adaptive_reason: str) -> list[str]:
    """The convention (and why) and the other options, adaptive switching's reason shown when
    `adaptive_reason` is given."""
    return [
        f"convention  {options.convention}  ({reason})",
        f"options     global counters {options.global_counters}, "
        f"adaptive {'on' if options.adaptive else 'off'}"
        + (f" ({adaptive_reason})" if adaptive_reason else ""),
    ]


def _allocation_lines(options: SglangJudging) -> list[str]:
    """Whose allocation code judged (the release's own or kvcheck's model) and why, unless
    kvcheck's model judged a target that brings no release code (nothing to choose)."""
    if options.allocation_path == "model" and options.allocation_reason in ("", NO_RELEASE_CODE):
        return []
    why = options.allocation_reason
    return [f"allocation  {options.allocation_path}" + (f"  ({why})" if why else "")]


def verdict_lines(options: SglangJudging, reason: str, shape: ApiShape | None) -> list[str]:
    """`kvcheck check`'s lines on the convention (and why), the other options, and the API
    shape the probe showed (None: not probed). Adaptive switching's reason is shown when the
    target's shape decided it, not when it was given."""
    auto = options.adaptive_reason.startswith("auto")
    lines = _options_lines(options, reason, options.adaptive_reason if auto else "")
    lines += _allocation_lines(options)
    if shape is not None:
        lines.append(f"api shape   {shape.summary()}")
    return lines


def campaign_lines(options: SglangJudging, reason: str) -> list[str]:
    """`kvcheck fuzz`'s lines on the convention (and why) and the other options: as `check`'s,
    with adaptive switching's reason shown when it was given too ("given")."""
    return _options_lines(options, reason, options.adaptive_reason) + _allocation_lines(options)


def report_fields(options: SglangJudging, reason: str) -> dict[str, Any]:
    """SGLang's fields of `check`'s and `fuzz`'s `--json` reports, as they were before the
    generic `family` and `options`: the convention and why, the counter mode, adaptive
    switching and why."""
    return {
        "convention": options.convention,
        "convention_reason": reason,
        "global_counters": options.global_counters,
        "adaptive": options.adaptive,
        "adaptive_reason": options.adaptive_reason,
        "allocation_path": options.allocation_path,
        "allocation_reason": options.allocation_reason,
    }


# --- tables and releases --------------------------------------------------------------------


class SglangReleases:
    """SGLang's releases on the package index (`kvcheck.core.family.Releases`): each checked
    with the batch-global counters as every release keeps them (`sglang`) and as they should be
    (`ideal`, stale rows excluded)."""

    engine: Final = "SGLang"
    spec_prefix: Final = release.SPEC_PREFIX
    oldest: Final = release.OLDEST
    modes: Final = (
        ("sglang", {"global_counters": "sglang"}),
        ("ideal", {"global_counters": "ideal"}),
    )

    @staticmethod
    def available_versions() -> list[str]:
        """The releases `pip index versions sglang` lists, oldest first (read at each call)."""
        return release.available_versions()

    @staticmethod
    def version_key(version: str) -> tuple[int, ...]:
        """`version` as a sortable key."""
        return release.version_key(version)

    @staticmethod
    def shape_name(target: Target) -> str:
        """The SGLang versions the release's spellings fit."""
        versions: str = target.shape.versions
        return versions

    @staticmethod
    def facts(version: str, first_broken: str | None) -> tuple[tuple[str, str], ...]:
        """None: SGLang's rows say everything in the generic columns."""
        return ()


class SglangFrontDoor:
    """SGLang's flags, pytest options, spellings table and releases
    (`kvcheck.core.family.FrontDoor`)."""

    add_options = staticmethod(add_options)
    requested = staticmethod(requested)
    add_plugin_options = staticmethod(add_plugin_options)
    plugin_items = staticmethod(plugin_items)
    describe = staticmethod(describe)
    verdict_lines = staticmethod(verdict_lines)
    campaign_lines = staticmethod(campaign_lines)
    report_fields = staticmethod(report_fields)
    spellings_table = staticmethod(spellings_table)
    releases: Final = SglangReleases()
