"""The kill matrix as text (rows as they finish, the summary) and as JSON (`kvcheck mutants`)."""

from __future__ import annotations

from typing import Any

from kvcheck.core.family import DEFAULT_FAMILY
from kvcheck.mutants.matrix import Matrix, Row, minimum_bounds
from kvcheck.wording import plural


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def format_row(row: Row) -> str:
    """One finished entry as a line, printed as it finishes, and, when its search failed, the
    command that replays it on a second line.

    A mutant shows its status, the invariant it broke, time to kill and shrink figures; a rewrite,
    whether it passed.
    """
    line = _row_line(row)
    return line if row.replay_command is None else f"{line}\n    replay with: {row.replay_command}"


def _row_line(row: Row) -> str:
    if row.kind == "rewrite":
        detail = (
            f"{plural(row.examples, 'scenario')}, no violation"
            if row.passed
            else f"{row.invariant} on a {row.shrunk_length}-event scenario"
        )
        return f"{row.status:<15} {row.name:<32} {detail} ({row.seconds:.2f} s)"
    if not row.killed:
        return f"{row.status:<15} {row.name:<32} no violation in {plural(row.examples, 'scenario')}"
    match = "" if row.invariant_matches else f" (annotated {row.expect})"
    minimum = "-" if row.exhaustive_length is None else str(row.exhaustive_length)
    ratio = "-" if row.shrink_ratio is None else f"{row.shrink_ratio:.2f}"
    return (
        f"{row.status:<15} {row.name:<32} {row.invariant}{match}; after "
        f"{plural(row.examples_to_failure or 0, 'scenario')} / "
        f"{_seconds(row.seconds_to_failure)} s; shrunk {plural(row.shrunk_length or 0, 'event')}, "
        f"exhaustive minimum {minimum}, ratio {ratio}"
    )


def format_summary(matrix: Matrix) -> str:
    """The summary line: kill rate, annotated-invariant hits, shrink optimality, time to kill,
    false positives and wall time.
    """
    s = matrix.summary
    rate = 100.0 * s.killed / s.mutants if s.mutants else 100.0
    parts = [f"summary: {s.killed}/{s.mutants} mutants killed ({rate:.0f}%)"]
    if s.mutants:
        parts.append(f"annotated invariant hit {s.annotated_invariant}/{s.killed}")
    if s.shrink_compared:
        share = 100.0 * s.shrink_optimal / s.shrink_compared
        parts.append(
            f"shrunk length = exhaustive minimum {s.shrink_optimal}/{s.shrink_compared} "
            f"({share:.0f}%)"
        )
    if s.median_seconds_to_kill is not None:
        parts.append(
            f"time to kill median {s.median_seconds_to_kill:.3f} s, "
            f"p90 {s.p90_seconds_to_kill:.3f} s"
        )
    parts.append(
        f"{plural(s.false_positives, 'false positive')} in {plural(s.rewrites, 'rewrite')}"
    )
    parts.append(f"{matrix.seconds:.1f} s")
    return "; ".join(parts)


def format_header(entries: int, max_examples: int, seed: int | None) -> str:
    """The first line of the text report: how many entries, the search budget and the seed."""
    return f"kill matrix: {entries} entries, --max-examples {max_examples}, seed {seed}"


def format_tail(matrix: Matrix) -> str:
    """What follows the rows: mutants whose shrunk length is not minimal, and the summary."""
    lines = []
    off = [r for r in matrix.rows if r.shrink_ratio is not None and r.shrink_ratio != 1.0]
    if off:
        lines.append("")
        lines.append("shrunk length differs from the exhaustive minimum:")
        for row in off:
            why = row.shrink_reason
            lines.append(
                f"  {row.name}: shrunk {row.shrunk_length}, minimum {row.exhaustive_length} "
                f"({', '.join(row.exhaustive_invariants)}); {why}"
            )
    lines.append("")
    lines.append(format_summary(matrix))
    return "\n".join(lines)


def format_matrix(matrix: Matrix) -> str:
    """The whole text report of a finished matrix: header, one line per row, then the tail."""
    return "\n".join(
        [
            format_header(len(matrix.rows), matrix.max_examples, matrix.seed),
            *(format_row(row) for row in matrix.rows),
            format_tail(matrix),
        ]
    )


def _family_of(matrix: Matrix) -> str:
    """The family whose minimum bounds the report names: its rows' (the default for none)."""
    return matrix.rows[0].family if matrix.rows else DEFAULT_FAMILY


def matrix_to_json(matrix: Matrix) -> dict[str, Any]:
    """The `kvcheck mutants --json` report (fields listed in docs/contracts.md)."""
    return {
        "summary": matrix.summary.to_dict(),
        "max_examples": matrix.max_examples,
        "seed": matrix.seed,
        "exhaustive_bounds": minimum_bounds(_family_of(matrix)).to_dict()
        if matrix.exhaustive
        else None,
        "seconds": round(matrix.seconds, 3),
        "rows": [row.to_dict() for row in matrix.rows],
    }
