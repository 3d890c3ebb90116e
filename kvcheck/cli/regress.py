"""`kvcheck regress FILE`: a counterexample file turned into a standalone pytest regression test
that fails while the bug is there and passes once it is fixed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Final

from kvcheck.cli.options import (
    EXIT_OK,
    add_deadline_option,
    add_force_option,
    add_replay_options,
    input_files,
    note,
)
from kvcheck.cli.replay import replay_requests
from kvcheck.counterexamples.fileformat import Counterexample, load
from kvcheck.counterexamples.regress import function_name, regression_test
from kvcheck.counterexamples.replay import judged_scenario, judging_of, replay_choices
from kvcheck.errors import KvcheckUsageError
from kvcheck.files import check_destination, write_text
from kvcheck.reporting.render import printable
from kvcheck.targets.loading import absolute_spec, load_target

_WHAT: Final = "regression test"


def add_parser(commands: Any) -> None:
    """Register `regress` on the front door's subparsers."""
    regress_parser = commands.add_parser(
        "regress",
        help="turn a counterexample file into a standalone pytest regression test",
        description=(
            "Print (or write with --out) a pytest module that replays the counterexample against "
            "its target and asserts that no invariant is violated: it fails while the bug is "
            "there and passes once it is fixed."
        ),
    )
    regress_parser.add_argument("file", help="a *.kvcheck.json counterexample file")
    regress_parser.add_argument(
        "--out",
        metavar="PATH",
        help="write the test to this file, or into this directory (e.g. tests/) (default: "
        "print it); never over the counterexample file",
    )
    regress_parser.add_argument(
        "--target", default=None, help="the target the test replays (default: the saved one)"
    )
    add_replay_options(regress_parser)
    add_force_option(regress_parser)
    add_deadline_option(regress_parser)
    regress_parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """`kvcheck regress FILE`: print the regression test, or write it under `--out`.

    The target is loaded first, so one that no longer loads is an error now rather than in the
    generated test; a directory `--out` gets `test_kvcheck_<name>.py`. Raises `KvcheckUsageError`
    when no target is known or the file cannot be written.
    """
    counterexample = load(args.file)
    target = args.target or counterexample.target
    if target is None:
        raise KvcheckUsageError(f"{args.file} names no target; give one with --target")
    out = None if not args.out else _destination(args.out, counterexample)
    if out is not None:
        # Refused before the target loads (seconds for a release), as far as it can be told
        # without it; the target's own files are checked once it has loaded.
        check_destination(out, inputs=(args.file,), force=args.force, what=_WHAT)
    # a target that no longer exists is an error now, not in the test
    loaded = load_target(
        target, allow_unavailable=counterexample.allow_unavailable_imports, deadline=args.deadline
    )
    # How the test judges (SGLang: by which convention), chosen now as `replay` chooses it, and
    # written into the test per option when it is not the file's (so a reader sees it) or the
    # test's own replay would choose another by default (the target's own for another target).
    requested = replay_requests(args, counterexample.scenario.family)
    scenario, said = judged_scenario(counterexample, loaded, requested)
    if said:  # names the file's target and rule: escaped, as `replay` prints them
        note(printable(said, keep_newlines=False))
    used = judging_of(scenario).to_dict()
    by_default = judging_of(judged_scenario(counterexample, loaded)[0]).to_dict()
    saved = judging_of(counterexample.scenario).to_dict()
    pinned = {
        name: used[name]
        for name in replay_choices(counterexample.scenario.family)
        if not used[name] == by_default[name] == saved[name]
    }
    # An absolute path, so that the test runs from its own folder (or any other).
    text = regression_test(
        counterexample,
        source=args.file,
        target=absolute_spec(target),
        deadline=args.deadline,
        chosen=pinned,
    )
    if out is None:
        sys.stdout.write(text)
        return EXIT_OK
    inputs = input_files(loaded, args.file)
    write_text(out, text, inputs=inputs, force=args.force, what=_WHAT)
    print(f"wrote {out}")
    return EXIT_OK


def _destination(out: str, counterexample: Counterexample) -> Path:
    """Where `--out` writes: the path, or `test_kvcheck_<name>.py` in it when it is a directory
    (or ends in a separator)."""
    path = Path(out)
    if path.is_dir() or out.endswith(("/", "\\")):
        return path / f"test_kvcheck_{function_name(counterexample)}.py"
    return path
