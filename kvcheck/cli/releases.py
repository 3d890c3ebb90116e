"""`kvcheck releases`: every SGLang release in a range checked as it was published, one row each.

Each release's resolver is fetched from the package index into kvcheck's cache (`sglang==V`) and
judged twice: with the batch-global counters as every SGLang release keeps them (`sglang`) and
as they should be (`ideal`, stale rows excluded). This is how docs/sglang.md shows what kvcheck
finds in SGLang's history. Each row also says how much of the release's resolver code (the resolver,
its siblings and helpers) the two searches ran together.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import attrs

from kvcheck.cli.options import (
    EXIT_OK,
    EXIT_USAGE,
    add_coverage_options,
    add_deadline_option,
    add_json_option,
    positive_int,
    seed,
)
from kvcheck.errors import KvcheckUsageError, TargetLoadError
from kvcheck.families.sglang import release as sglang_release
from kvcheck.targets.loading import load_target
from kvcheck.wording import plural

# One release checked at this budget per counter mode takes about a second.
DEFAULT_RELEASE_EXAMPLES = 200


def add_parser(commands: Any) -> None:
    """Register `releases` on the front door's subparsers."""
    parser = commands.add_parser(
        "releases",
        help="check every SGLang release in a range, fetched from the package index",
        description=(
            "Fetches each SGLang release's resolver (cached under $KVCHECK_CACHE, default "
            "~/.cache/kvcheck) and checks it with SGLang's global counters and with ideal ones. "
            "Prints one row per release. Exit 0 once every release has a verdict; 2 when the "
            "index cannot be reached, a range bound is not a release, the range is empty, or a "
            "release could not be loaded or judged (its row names the error; the others are "
            "still checked)."
        ),
    )
    parser.add_argument(
        "--from",
        dest="first",
        default=sglang_release.OLDEST,
        metavar="V",
        help=f"oldest release to check (default: {sglang_release.OLDEST})",
    )
    parser.add_argument(
        "--to",
        dest="last",
        default=None,
        metavar="V",
        help="newest release to check (default: the newest on the index)",
    )
    parser.add_argument(
        "--max-examples",
        type=positive_int,
        default=DEFAULT_RELEASE_EXAMPLES,
        metavar="N",
        help=f"per release and counter mode (default: {DEFAULT_RELEASE_EXAMPLES})",
    )
    parser.add_argument(
        "--seed", type=seed, default=0, metavar="N", help="Hypothesis seed (default: 0)"
    )
    add_deadline_option(parser)
    add_json_option(parser)
    add_coverage_options(parser, gate=False)
    parser.set_defaults(run=run)


@attrs.frozen
class ReleaseRow:
    """One release's verdicts."""

    version: str
    location: str
    convention: str
    api_shape: str
    verdict_sglang: str
    verdict_ideal: str
    first_broken: str | None
    seconds: float
    # The release's own code run by both searches together (`TargetCoverage.to_dict()`); None
    # with --no-coverage.
    coverage: dict[str, Any] | None = None
    # Why the release has no verdict (it could not be fetched, loaded or judged); None once it
    # has one. Such a row keeps the others' verdicts and makes the command exit 2 at the end.
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The row as `--json` reports it."""
        return attrs.asdict(self)

    @property
    def coverage_column(self) -> str:
        """`lines run/total` for the text table, `-` when not measured."""
        if self.coverage is None:
            return "-"
        return f"{self.coverage['lines_run']}/{self.coverage['lines_total']}"

    @classmethod
    def failed(cls, version: str, error: str, seconds: float) -> ReleaseRow:
        """The row of a release that has no verdict, with the reason."""
        return cls(
            version=version,
            location="",
            convention="-",
            api_shape="-",
            verdict_sglang=_NO_VERDICT,
            verdict_ideal=_NO_VERDICT,
            first_broken=None,
            seconds=seconds,
            error=error,
        )


# The verdict column of a release that could not be loaded or judged.
_NO_VERDICT = "error"


def run(args: argparse.Namespace) -> int:
    """Check every release in the range, printing each row as it finishes."""
    from kvcheck.search.check import check  # Hypothesis: only when a check runs

    versions = _versions_in_range(args.first, args.last)
    rows: list[ReleaseRow] = []
    if not args.json:
        print(_HEADER)
    for version in versions:
        started = time.perf_counter()
        try:
            row = _check_release(version, args, check)
        except KvcheckUsageError as exc:
            # One release that cannot be fetched, loaded or judged must not cost the verdicts of
            # the others: it gets a row with its error, and the exit code says so at the end.
            row = ReleaseRow.failed(version, str(exc), round(time.perf_counter() - started, 2))
            print(f"kvcheck: error: SGLang {version}: {exc}", file=sys.stderr)
        rows.append(row)
        if not args.json:
            print(_format_row(row), flush=True)
    if args.json:
        print(json.dumps({"releases": [row.to_dict() for row in rows]}, indent=2))
    failed = [row.version for row in rows if row.error is not None]
    if failed:
        print(
            f"kvcheck: error: {plural(len(failed), 'release')} without a verdict: "
            f"{', '.join(failed)}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    return EXIT_OK


def _check_release(version: str, args: argparse.Namespace, check: Any) -> ReleaseRow:
    """Fetch, load and judge one release in both counter modes."""
    started = time.perf_counter()
    target = load_target(f"{sglang_release.SPEC_PREFIX}{version}", deadline=args.deadline)
    verdicts = {
        mode: check(
            target,
            global_counters=mode,
            max_examples=args.max_examples,
            seed=args.seed,
            measure_coverage=not args.no_coverage,
        )
        for mode in ("sglang", "ideal")
    }
    broken = next((v.violation for v in verdicts.values() if v.violation is not None), None)
    sglang_run, ideal_run = verdicts["sglang"].coverage, verdicts["ideal"].coverage
    both = sglang_run.union(ideal_run) if sglang_run and ideal_run else None
    return ReleaseRow(
        version=version,
        location=target.description.partition(": ")[2],
        convention=verdicts["ideal"].convention,
        api_shape=target.shape.versions,
        verdict_sglang=verdicts["sglang"].verdict,
        verdict_ideal=verdicts["ideal"].verdict,
        first_broken=broken.invariant if broken is not None else None,
        seconds=round(time.perf_counter() - started, 2),
        coverage=both.to_dict() if both is not None else None,
    )


def _versions_in_range(first: str, last: str | None) -> list[str]:
    known = sglang_release.available_versions()
    if not known:
        raise KvcheckUsageError(
            "cannot list SGLang releases: the package index did not answer `pip index versions "
            "sglang`"
        )
    for bound in (first, last):
        if bound is not None and bound not in known:
            raise TargetLoadError(
                f"SGLang {bound} is not a release kvcheck can check; releases: {', '.join(known)}"
            )
    low = sglang_release.version_key(first)
    high = sglang_release.version_key(last) if last else None
    if high is not None and high < low:
        # An empty range would check nothing and exit 0, which reads as "all fine".
        raise KvcheckUsageError(
            f"empty range: --from {first} is newer than --to {last}; give the older release "
            "to --from"
        )
    return [
        v
        for v in known
        if sglang_release.version_key(v) >= low
        and (high is None or sglang_release.version_key(v) <= high)
    ]


_HEADER = (
    f"{'release':<13} {'convention':<10} {'api shape':<13} {'sglang':<6} {'ideal':<6} "
    f"{'first broken':<26} {'coverage':>8} {'time':>6}  resolver"
)


def _format_row(row: ReleaseRow) -> str:
    return (
        f"{row.version:<13} {row.convention:<10} {row.api_shape:<13} {row.verdict_sglang:<6} "
        f"{row.verdict_ideal:<6} {row.first_broken or '-':<26} {row.coverage_column:>8} "
        f"{row.seconds:>5.1f}s  {row.location if row.error is None else row.error}"
    )
