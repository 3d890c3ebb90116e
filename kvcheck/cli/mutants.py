"""`kvcheck mutants`: the kill matrix. Every mutant of the corpus (`kvcheck.mutants`) must be
caught, every correct rewrite must pass; the harness measured against itself."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kvcheck import mutants as corpus
from kvcheck.cli.options import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_VIOLATION,
    add_json_option,
    positive_int,
    seed,
)
from kvcheck.core.family import family_names
from kvcheck.errors import KvcheckUsageError
from kvcheck.mutants import matrix, report


def add_parser(commands: Any) -> None:
    """Register `mutants` on the front door's subparsers."""
    mutants = commands.add_parser(
        "mutants",
        help="run the mutant kill matrix: every corpus mutant must be caught, every rewrite pass",
        description=(
            "Runs kvcheck's search on every resolver of the mutant corpus (kvcheck.mutants) "
            "under its annotated convention and options, and the exhaustive search for each "
            "mutant's shortest counterexample. Exit 0: every mutant killed and every correct "
            "rewrite passed; 1: a mutant survived or a rewrite failed; 2: usage error."
        ),
    )
    mutants.add_argument(
        "--max-examples",
        type=positive_int,
        default=300,
        metavar="N",
        help="scenarios per entry's search (default: 300)",
    )
    mutants.add_argument(
        "--seed", type=seed, default=0, metavar="N", help="Hypothesis seed (default: 0)"
    )
    mutants.add_argument(
        "--family",
        default=None,
        choices=list(family_names()),
        help="run only this engine family's corpus (default: every family's, in turn)",
    )
    mutants.add_argument(
        "--corpus",
        default=None,
        metavar="NAME",
        help="run this named corpus instead: release-trees (SGLang: single-line bugs injected "
        "into copies of whole release trees, 0.5.23 and 0.5.16, from the wheels in "
        "KVCHECK_CACHE; docs/release-allocation.md) (default: each family's resolver corpus)",
    )
    mutants.add_argument(
        "--only",
        action="append",
        default=None,
        metavar="NAME",
        help="run only this entry (repeatable; mutant:NAME or NAME; default: every entry)",
    )
    mutants.add_argument(
        "--no-exhaustive",
        action="store_true",
        help="skip the exhaustive minimum (no shrink ratio) (default: off, it runs)",
    )
    mutants.add_argument(
        "--jobs", type=positive_int, default=1, metavar="N", help="worker processes (default: 1)"
    )
    mutants.add_argument(
        "--list",
        action="store_true",
        help="list the corpus without running anything (default: off)",
    )
    add_json_option(mutants)
    mutants.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """`kvcheck mutants`: list the corpus or run the kill matrix over it (or the `--only` entries).

    Text rows are printed as entries finish. Returns exit 0 when every mutant is killed and every
    rewrite passes, else 1.
    """
    if args.corpus is not None:
        entries = tuple(corpus.named_corpus(args.corpus, args.family).entries)
    elif args.family is None:
        entries = corpus.entries()
    else:
        entries = tuple(corpus.corpus_of(args.family).entries)
    if args.only:
        chosen = tuple(corpus.get(name) for name in dict.fromkeys(args.only))
        if args.corpus is not None:
            outside = [e.name for e in chosen if e not in entries]
            if outside:
                raise KvcheckUsageError(
                    f"--only {', '.join(outside)}: not in the {args.corpus} corpus "
                    f"(kvcheck mutants --corpus {args.corpus} --list lists it)"
                )
        entries = chosen
        others = [e.name for e in entries if args.family not in (None, e.family)]
        if others:
            raise KvcheckUsageError(
                f"--only {', '.join(others)}: not in the {args.family} family's corpus "
                f"(kvcheck mutants --family {args.family} --list lists it)"
            )
    if not entries:
        raise KvcheckUsageError(f"the {args.family} family's mutant corpus is empty")
    if args.list:
        return _list_corpus(entries, as_json=args.json)
    if not args.no_exhaustive:
        for why in dict.fromkeys(filter(None, map(matrix.why_no_exhaustive, entries))):
            print(f"kvcheck: some entries get no exhaustive minimum: {why}", file=sys.stderr)
    if not args.json:
        print(report.format_header(len(entries), args.max_examples, args.seed), flush=True)

    done: list[matrix.Row] = []

    def progress(row: matrix.Row) -> None:
        done.append(row)
        if not args.json:
            print(report.format_row(row), flush=True)
        else:
            print(f"kvcheck: {len(done)}/{len(entries)} entries done", file=sys.stderr, flush=True)

    try:
        result = matrix.run_matrix(
            entries,
            max_examples=args.max_examples,
            seed=args.seed,
            exhaustive=not args.no_exhaustive,
            jobs=args.jobs,
            progress=progress,
        )
    except KeyboardInterrupt:
        # The workers are ended; what finished is above (text) or in the JSON object.
        if args.json:
            rows = [{"name": row.name, "killed": row.killed, "passed": row.passed} for row in done]
            print(json.dumps({"verdict": "interrupted", "finished": rows, "entries": len(entries)}))
        else:
            print(f"interrupted: {len(done)} of {len(entries)} entries finished (rows above)")
        return EXIT_INTERRUPTED
    if args.json:
        print(json.dumps(report.matrix_to_json(result), indent=2, default=repr))
    else:
        print(report.format_tail(result))  # the rows were printed as they finished
    return EXIT_OK if result.summary.passed else EXIT_VIOLATION


def _list_corpus(entries: Any, *, as_json: bool) -> int:
    if as_json:
        rows = [
            {
                "name": e.name,
                "kind": e.kind,
                **corpus.corpus_of(e.family).list_columns(e),
                "family": e.family,
                "options": e.options.to_dict(),
            }
            for e in entries
        ]
        print(json.dumps({"entries": rows}, indent=2))
        return EXIT_OK
    for entry in entries:
        print(corpus.corpus_of(entry.family).list_line(entry))
    return EXIT_OK
