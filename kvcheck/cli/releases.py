"""`kvcheck releases`: every release of an engine family in a range checked as it was published,
one row each.

The releases are the chosen family's (`--family`, default the default family, SGLang;
`kvcheck.core.family.Releases`). Each release's code is fetched from the package index into
kvcheck's cache and judged in each of the family's modes: SGLang's with the batch-global counters
as every SGLang release keeps them (`sglang`) and as they should be (`ideal`, stale rows
excluded); vLLM's once at its default options (`vllm`). A family may add columns of its own
(`Releases.facts`: vLLM's generation, the functions it runs and the upstream bug a FAIL is).
This is how docs/sglang.md and docs/vllm-generations.md show what kvcheck finds in each
engine's history. Each row also says how much of the release's code the searches ran together,
where the family's targets are measured.

Where the family judges a release's own allocation code (SGLang, issue 21: `Verdict.
allocation_path`), each row also has its allocation: the path its first mode's search ran (the
release's own code, or kvcheck's model and why), that search's verdict and first invariant
broken on the release's path, the release's allocation functions that ran and their coverage
(`TargetCoverage.beside`), in a second table. The mode columns are the same searches, unchanged.
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
from kvcheck.core.family import DEFAULT_FAMILY, Releases, distribution_of, family_names
from kvcheck.errors import KvcheckUsageError, TargetLoadError
from kvcheck.targets.loading import load_target
from kvcheck.wording import plural

# One release checked at this budget per counter mode takes about a second.
DEFAULT_RELEASE_EXAMPLES = 200


def releases(name: str = DEFAULT_FAMILY) -> Releases:
    """The releases of the family registered as `name` (by default SGLang's)."""
    found = distribution_of(name).front.releases
    if found is None:
        raise KvcheckUsageError(f"engine family {name!r} has no releases to check")
    return found


def add_parser(commands: Any) -> None:
    """Register `releases` on the front door's subparsers."""
    parser = commands.add_parser(
        "releases",
        help="check every release of an engine family (default: SGLang) in a range, fetched "
        "from the package index",
        description=(
            "Fetches each release of the chosen engine family (--family; cached under "
            "$KVCHECK_CACHE, default ~/.cache/kvcheck) and checks it in each of the family's "
            "modes (SGLang: with its global counters and with ideal ones; vLLM: at its default "
            "options). Prints one row per release. Exit 0 once every release has a verdict; 2 "
            "when the index cannot be reached, the family has no releases, a range bound is not "
            "a release, the range is empty, or a release could not be loaded or judged (its row "
            "names the error; the others are still checked)."
        ),
    )
    parser.add_argument(
        "--family",
        default=DEFAULT_FAMILY,
        choices=list(family_names()),
        help=f"the engine family whose releases to check (default: {DEFAULT_FAMILY})",
    )
    parser.add_argument(
        "--from",
        dest="first",
        default=None,
        metavar="V",
        help="oldest release to check (default: the oldest the family checks; SGLang "
        f"{releases().oldest})",
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
    """One release's verdicts, one per mode of the family's (SGLang's `sglang` and `ideal`,
    vLLM's `vllm`), and the family's own columns (`Releases.facts`)."""

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
    # The family's own columns, (name, value) in order (`Releases.facts`); SGLang has none.
    facts: tuple[tuple[str, str], ...] = ()
    # Its allocation, where the family judges a release's own allocation code (SGLang); None
    # for a family that does not.
    allocation: AllocationRow | None = None

    def to_dict(self) -> dict[str, Any]:
        """The row as `--json` reports it (a `verdict_MODE` field per mode, then the family's
        own fields after `first_broken`)."""
        data = attrs.asdict(
            self,
            filter=lambda attribute, _: attribute.name not in ("verdicts", "facts", "allocation"),
        )
        if self.allocation is not None:
            data["allocation"] = self.allocation.to_dict()
        fields = list(data.items())
        place = [name for name, _ in fields].index("first_broken")
        verdicts = [(f"verdict_{mode}", verdict) for mode, verdict in self.verdicts]
        return dict(
            fields[:place]
            + verdicts
            + fields[place : place + 1]
            + list(self.facts)
            + fields[place + 1 :]
        )

    @property
    def coverage_column(self) -> str:
        """`lines run/total` for the text table, `-` when not measured."""
        if self.coverage is None:
            return "-"
        return f"{self.coverage['lines_run']}/{self.coverage['lines_total']}"

    @classmethod
    def failed(cls, index: Releases, version: str, error: str, seconds: float) -> ReleaseRow:
        """The row of a release of `index` that has no verdict, with the reason."""
        return cls(
            version=version,
            location="",
            convention="-",
            api_shape="-",
            verdicts=tuple((mode, _NO_VERDICT) for mode, _ in index.modes),
            first_broken=None,
            seconds=seconds,
            error=error,
            facts=index.facts(version, None),
        )


@attrs.frozen
class AllocationRow:
    """A release's allocation in `kvcheck releases`: the path its first mode's search ran,
    and on the release's own path that search's verdict and first invariant broken, the
    release's allocation functions that ran, and their coverage over all modes."""

    path: str  # `release` or `model`
    reason: str  # why that path (`model`: why not the release's)
    verdict: str | None  # `pass`/`fail` on the release's path; None on the model's
    first_broken: str | None
    functions_run: tuple[str, ...] = ()
    coverage: dict[str, Any] | None = None  # `TargetCoverage.to_dict()`; None: not measured

    def to_dict(self) -> dict[str, Any]:
        """The row's `allocation` object in `--json`."""
        return {
            "path": self.path,
            "reason": self.reason,
            "verdict": self.verdict,
            "first_broken": self.first_broken,
            "functions_run": list(self.functions_run),
            "coverage": self.coverage,
        }

    def columns(self) -> str:
        """The second table's columns after the release."""
        if self.path != "release":
            return f"model: {self.reason}"
        figures = (
            "-"
            if self.coverage is None
            else f"{self.coverage['lines_run']}/{self.coverage['lines_total']} lines, "
            f"{self.coverage['branches_run']}/{self.coverage['branches_total']} branches"
        )
        return (
            f"{'release':<8} {self.verdict or '-':<7} {self.first_broken or '-':<26} "
            f"{len(self.functions_run):>9}  {figures}"
        )


def _allocation(first: Any, coverage: Any) -> AllocationRow | None:
    """The allocation of a release from its first mode's verdict and the coverage of all
    modes; None for a family that does not judge a release's own allocation code."""
    path = first.allocation_path
    if path is None:
        return None
    reason = first.allocation_reason
    if path != "release":
        return AllocationRow(path=path, reason=reason, verdict=None, first_broken=None)
    beside = [] if coverage is None else [c for c in coverage.beside if c.label == "allocation"]
    return AllocationRow(
        path=path,
        reason=reason,
        verdict=first.verdict,
        first_broken=first.violation.invariant if first.violation is not None else None,
        functions_run=beside[0].every_function_run if beside else (),
        coverage=beside[0].to_dict() if beside else None,
    )


# The verdict column of a release that could not be loaded or judged.
_NO_VERDICT = "error"


def run(args: argparse.Namespace) -> int:
    """Check every release in the range, printing each row as it finishes."""
    from kvcheck.search.check import check  # Hypothesis: only when a check runs

    index = releases(args.family)
    versions = _versions_in_range(index, args.first or index.oldest, args.last)
    rows: list[ReleaseRow] = []
    if not args.json:
        print(_header(index))
    for version in versions:
        started = time.perf_counter()
        try:
            row = _check_release(index, version, args, check)
        except KvcheckUsageError as exc:
            # One release that cannot be fetched, loaded or judged must not cost the verdicts of
            # the others: it gets a row with its error, and the exit code says so at the end.
            seconds = round(time.perf_counter() - started, 2)
            row = ReleaseRow.failed(index, version, str(exc), seconds)
            print(f"kvcheck: error: {index.engine} {version}: {exc}", file=sys.stderr)
        rows.append(row)
        if not args.json:
            print(_format_row(row), flush=True)
    if args.json:
        print(json.dumps({"releases": [row.to_dict() for row in rows]}, indent=2))
    elif any(row.allocation is not None for row in rows):
        print()
        print(_allocation_table(index, rows))
    failed = [row.version for row in rows if row.error is not None]
    if failed:
        print(
            f"kvcheck: error: {plural(len(failed), 'release')} without a verdict: "
            f"{', '.join(failed)}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    return EXIT_OK


def _check_release(
    index: Releases, version: str, args: argparse.Namespace, check: Any
) -> ReleaseRow:
    """Fetch, load and judge one release in each of the family's modes."""
    started = time.perf_counter()
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
        facts=index.facts(version, broken.invariant if broken is not None else None),
        allocation=_allocation(next(iter(verdicts.values())), coverage),
    )


def _versions_in_range(index: Releases, first: str, last: str | None) -> list[str]:
    known = index.available_versions()
    if not known:
        distribution = index.spec_prefix.removesuffix("==")
        raise KvcheckUsageError(
            f"cannot list {index.engine} releases: the package index did not answer `pip index "
            f"versions {distribution}`"
        )
    for bound in (first, last):
        if bound is not None and bound not in known:
            raise TargetLoadError(
                f"{index.engine} {bound} is not a release kvcheck can check; releases: "
                f"{', '.join(known)}"
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


# The width of a family's own column in the text table (`Releases.facts`); a longer value
# runs over, as the last columns do.
_FACT_WIDTH = 16


def _header(index: Releases) -> str:
    modes = " ".join(f"{mode:<6}" for mode, _ in index.modes)
    facts = "".join(f"{name:<{_FACT_WIDTH}} " for name, _ in index.facts(index.oldest, None))
    return (
        f"{'release':<13} {'convention':<10} {'api shape':<13} {modes} "
        f"{'first broken':<26} {'coverage':>8} {'time':>6}  {facts}"
        f"{'resolver' if not facts else 'code'}"
    )


def _allocation_table(index: Releases, rows: list[ReleaseRow]) -> str:
    """The second table: each release's allocation (`AllocationRow`), from its first mode's
    search (the mode columns above are the same searches)."""
    mode = index.modes[0][0]
    lines = [
        f"allocation (from the {mode} searches above)",
        f"{'release':<13} {'path':<8} {'verdict':<7} {'first broken':<26} {'functions':>9}  "
        "coverage",
    ]
    for row in rows:
        if row.allocation is not None:
            lines.append(f"{row.version:<13} {row.allocation.columns()}")
        elif row.error is not None:
            lines.append(f"{row.version:<13} -")
    return "\n".join(lines)


def _format_row(row: ReleaseRow) -> str:
    verdicts = " ".join(f"{verdict:<6}" for _, verdict in row.verdicts)
    facts = "".join(f"{value:<{_FACT_WIDTH}} " for _, value in row.facts)
    return (
        f"{row.version:<13} {row.convention:<10} {row.api_shape:<13} {verdicts} "
        f"{row.first_broken or '-':<26} {row.coverage_column:>8} "
        f"{row.seconds:>5.1f}s  {facts}{row.location if row.error is None else row.error}"
    )
