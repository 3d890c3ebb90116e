"""`kvcheck releases`: every SGLang release in a range checked as it was published, one row each.

The releases are the default family's (`kvcheck.core.family.Releases`, SGLang's). Each release's
resolver is fetched from the package index into kvcheck's cache (`sglang==V`) and judged in each
of the family's modes: SGLang's with the batch-global counters as every SGLang release keeps them
(`sglang`) and as they should be (`ideal`, stale rows excluded). This is how docs/sglang.md shows
what kvcheck finds in SGLang's history. Each row also says how much of the release's resolver
code (the resolver, its siblings and helpers) the searches ran together.
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
from kvcheck.core.family import DEFAULT_FAMILY, Releases, distribution_of
from kvcheck.errors import KvcheckUsageError, TargetLoadError
from kvcheck.targets.loading import load_target
from kvcheck.wording import plural

# One release checked at this budget per counter mode takes about a second.
DEFAULT_RELEASE_EXAMPLES = 200


def releases() -> Releases:
    """The default family's releases (SGLang's)."""
    found = distribution_of(DEFAULT_FAMILY).front.releases
    if found is None:
        raise KvcheckUsageError(f"engine family {DEFAULT_FAMILY!r} has no releases to check")
    return found


def add_parser(commands: Any) -> None:
    """Register `releases` on the front door's subparsers."""
    oldest = releases().oldest
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
        default=oldest,
        metavar="V",
        help=f"oldest release to check (default: {oldest})",
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
    """One release's verdicts, one per mode of the family's (SGLang's `sglang` and `ideal`)."""

    version: str
    location: str
    convention: str
    api_shape: str
    # (mode, `pass`/`fail`/`error`) in the family's order of its modes.
    verdicts: tuple[tuple[str, str], ...]
    first_broken: str | None
    seconds: float
    # The release's own code run by all searches together (`TargetCoverage.to_dict()`); None
    # with --no-coverage.
    coverage: dict[str, Any] | None = None
    # Why the release has no verdict (it could not be fetched, loaded or judged); None once it
    # has one. Such a row keeps the others' verdicts and makes the command exit 2 at the end.
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The row as `--json` reports it (a `verdict_MODE` field per mode)."""
        data = attrs.asdict(self, filter=lambda attribute, _: attribute.name != "verdicts")
        fields = list(data.items())
        place = [name for name, _ in fields].index("first_broken")
        verdicts = [(f"verdict_{mode}", verdict) for mode, verdict in self.verdicts]
        return dict(fields[:place] + verdicts + fields[place:])

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
            verdicts=tuple((mode, _NO_VERDICT) for mode, _ in releases().modes),
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
        print(_header())
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
    """Fetch, load and judge one release in each of the family's modes."""
    started = time.perf_counter()
    index = releases()
    target = load_target(f"{index.spec_prefix}{version}", deadline=args.deadline)
    verdicts = {
        mode: check(
            target,
            **requested,
            max_examples=args.max_examples,
            seed=args.seed,
            measure_coverage=not args.no_coverage,
        )
        for mode, requested in index.modes
    }
    broken = next((v.violation for v in verdicts.values() if v.violation is not None), None)
    coverage = None
    if all(v.coverage is not None for v in verdicts.values()):
        for verdict in verdicts.values():
            coverage = verdict.coverage if coverage is None else coverage.union(verdict.coverage)
    last = list(verdicts.values())[-1]
    return ReleaseRow(
        version=version,
        location=target.description.partition(": ")[2],
        convention=distribution_of(target.family).label(last.options),
        api_shape=index.shape_name(target),
        verdicts=tuple((mode, verdict.verdict) for mode, verdict in verdicts.items()),
        first_broken=broken.invariant if broken is not None else None,
        seconds=round(time.perf_counter() - started, 2),
        coverage=coverage.to_dict() if coverage is not None else None,
    )


def _versions_in_range(first: str, last: str | None) -> list[str]:
    index = releases()
    known = index.available_versions()
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
    low = index.version_key(first)
    high = index.version_key(last) if last else None
    if high is not None and high < low:
        # An empty range would check nothing and exit 0, which reads as "all fine".
        raise KvcheckUsageError(
            f"empty range: --from {first} is newer than --to {last}; give the older release "
            "to --from"
        )
    return [
        v
        for v in known
        if index.version_key(v) >= low and (high is None or index.version_key(v) <= high)
    ]


def _header() -> str:
    modes = " ".join(f"{mode:<6}" for mode, _ in releases().modes)
    return (
        f"{'release':<13} {'convention':<10} {'api shape':<13} {modes} "
        f"{'first broken':<26} {'coverage':>8} {'time':>6}  resolver"
    )


def _format_row(row: ReleaseRow) -> str:
    verdicts = " ".join(f"{verdict:<6}" for _, verdict in row.verdicts)
    return (
        f"{row.version:<13} {row.convention:<10} {row.api_shape:<13} {verdicts} "
        f"{row.first_broken or '-':<26} {row.coverage_column:>8} "
        f"{row.seconds:>5.1f}s  {row.location if row.error is None else row.error}"
    )
