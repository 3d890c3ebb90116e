"""`kvcheck mutants` (the kill matrix) and `kvcheck exhaust` (bounded exhaustive checking).

`kvcheck.cli.main` stays the front door; this module adds the two subcommands that measure the
harness itself, so the front door only registers and dispatches them.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kvcheck.core.scenario import EVENT_KINDS, GLOBAL_COUNTER_MODES
from kvcheck.errors import KvcheckUsageError
from kvcheck.search.exhaust import Bounds, ExhaustResult

EXIT_OK, EXIT_VIOLATION, EXIT_USAGE = 0, 1, 2
COMMANDS = ("mutants", "exhaust")


# --- parsing helpers ------------------------------------------------------------------------


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not values:
        raise argparse.ArgumentTypeError(f"expected at least one integer, got {text!r}")
    return values


def _eos_list(text: str) -> tuple[int | None, ...]:
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


def _kinds(text: str) -> tuple[str, ...]:
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


def _overlap(text: str) -> tuple[bool, ...]:
    choices = {"on": (True,), "off": (False,), "both": (True, False)}
    value = choices.get(text.strip())
    if value is None:
        raise argparse.ArgumentTypeError(f"expected on, off or both, got {text!r}")
    return value


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


# --- registration ---------------------------------------------------------------------------


def add_commands(commands: Any) -> None:
    """Add `mutants` and `exhaust` to the front door's subparsers."""
    from kvcheck.cli.main import _positive_int as _positive
    from kvcheck.cli.main import _seed

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
    mutants.add_argument("--max-examples", type=_positive, default=300, metavar="N")
    mutants.add_argument("--seed", type=_seed, default=0, metavar="N", help="default: 0")
    mutants.add_argument(
        "--only",
        action="append",
        default=None,
        metavar="NAME",
        help="run only this entry (repeatable; mutant:NAME or NAME)",
    )
    mutants.add_argument(
        "--no-exhaustive",
        action="store_true",
        help="skip the exhaustive minimum (no shrink ratio)",
    )
    mutants.add_argument(
        "--jobs", type=_positive, default=1, metavar="N", help="worker processes (default 1)"
    )
    mutants.add_argument(
        "--list", action="store_true", help="list the corpus without running anything"
    )
    mutants.add_argument("--json", action="store_true", help="one JSON object on stdout")

    exhaust = commands.add_parser(
        "exhaust",
        help="check every scenario within bounds, breadth-first; shortest counterexample",
        description=(
            "Enumerates every scenario within the bounds, shortest first, merging scenarios "
            "that reach the same state, and checks every invariant after every event. TARGET "
            "is builtin:NAME, mutant:NAME, package.module:Qualname or path/to/file.py::Qualname. "
            "Exit 0: no violation within the bounds (or a time/state limit stopped the search "
            "first: verdict 'incomplete'); 1: a violation, with a shortest counterexample; 2: "
            "usage or load error."
        ),
    )
    exhaust.add_argument("target")
    bounds = exhaust.add_argument_group("bounds")
    default = Bounds()
    bounds.add_argument(
        "--requests", type=_positive, default=default.requests, metavar="N", help="default 2"
    )
    bounds.add_argument(
        "--events",
        type=_non_negative,
        default=default.events,
        metavar="N",
        help="longest scenario, every event counted (default 8; 0: unbounded, needs --steps)",
    )
    bounds.add_argument(
        "--steps",
        type=_non_negative,
        default=None,
        metavar="N",
        help="at most N step events per scenario (default: only --events bounds them)",
    )
    bounds.add_argument(
        "--max-accept", type=_positive, default=default.max_accept, metavar="N", help="default 3"
    )
    bounds.add_argument(
        "--strides", type=_int_list, default=default.strides, metavar="S,S", help="default 2,3"
    )
    bounds.add_argument(
        "--kinds",
        type=_kinds,
        default=default.kinds,
        metavar="K,K",
        help=f"event kinds to enumerate (default all: {','.join(EVENT_KINDS)})",
    )
    bounds.add_argument("--prompt-lens", type=_int_list, default=default.prompt_lens, metavar="P,P")
    bounds.add_argument("--max-new", type=_int_list, default=default.max_new, metavar="M,M")
    bounds.add_argument(
        "--eos", type=_eos_list, default=default.eos, metavar="E,E", help="default none,2"
    )
    bounds.add_argument(
        "--overlap", type=_overlap, default=default.overlap, help="on, off or both (default)"
    )
    judge = exhaust.add_argument_group("judging")
    judge.add_argument("--convention", choices=("auto", "preclaim", "honest"), default="auto")
    judge.add_argument("--global-counters", choices=GLOBAL_COUNTER_MODES, default=None)
    judge.add_argument(
        "--adaptive",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="stride switching (default: on when switch_stride events have two strides)",
    )
    judge.add_argument("--allow-unavailable-imports", action="store_true")
    limits = exhaust.add_argument_group("limits and output")
    limits.add_argument("--time-limit", type=_seconds, default=None, metavar="SECONDS")
    limits.add_argument("--max-states", type=_positive, default=None, metavar="N")
    limits.add_argument(
        "--no-merge", action="store_true", help="do not merge equal states (slow; cross-check)"
    )
    from kvcheck.counterexamples.fileformat import DEFAULT_DIR

    limits.add_argument("--save-dir", default=str(DEFAULT_DIR), metavar="DIR")
    limits.add_argument("--no-save", action="store_true")
    limits.add_argument("--json", action="store_true", help="one JSON object on stdout")


def run(args: argparse.Namespace) -> int:
    if args.command == "mutants":
        return run_mutants(args)
    return run_exhaust(args)


# --- kvcheck mutants ------------------------------------------------------------------------


def run_mutants(args: argparse.Namespace) -> int:
    from kvcheck import mutants
    from kvcheck.mutants import matrix

    entries = mutants.ENTRIES
    if args.only:
        entries = tuple(mutants.get(name) for name in dict.fromkeys(args.only))
    if args.list:
        return _list_corpus(entries, as_json=args.json)
    if not args.json:
        print(matrix.format_header(len(entries), args.max_examples, args.seed), flush=True)

    def progress(row: matrix.Row) -> None:
        if not args.json:
            print(matrix.format_row(row), flush=True)

    result = matrix.run_matrix(
        entries,
        max_examples=args.max_examples,
        seed=args.seed,
        exhaustive=not args.no_exhaustive,
        jobs=args.jobs,
        progress=progress,
    )
    if args.json:
        print(json.dumps(matrix.matrix_to_json(result), indent=2, default=repr))
    else:
        print(matrix.format_tail(result))  # the rows were printed as they finished
    return EXIT_OK if result.summary.passed else EXIT_VIOLATION


def _list_corpus(entries: Any, *, as_json: bool) -> int:
    rows = [
        {
            "name": e.name,
            "kind": e.kind,
            "generation": e.generation.versions,
            "convention": e.convention,
            "global_counters": e.global_counters,
            "adaptive": e.adaptive,
            "expect": e.expect,
            "origin": e.origin,
            "spec": e.spec,
            "summary": e.summary,
        }
        for e in entries
    ]
    if as_json:
        print(json.dumps({"entries": rows}, indent=2))
        return EXIT_OK
    for row in rows:
        expect = row["expect"] or "must pass"
        print(
            f"{row['kind']:<8} {row['name']:<32} SGLang {row['generation']:<14} "
            f"{row['convention']:<9} {expect:<26} {row['summary']}"
        )
    return EXIT_OK


# --- kvcheck exhaust ------------------------------------------------------------------------


def run_exhaust(args: argparse.Namespace) -> int:
    from kvcheck.search.exhaust import default_adaptive, exhaust

    if args.events == 0 and args.steps is None:
        raise KvcheckUsageError("--events 0 (unbounded) needs a --steps bound")
    bounds = Bounds(
        requests=args.requests,
        events=args.events or None,
        steps=args.steps,
        max_accept=args.max_accept,
        strides=args.strides,
        kinds=args.kinds,
        prompt_lens=args.prompt_lens,
        max_new=args.max_new,
        eos=args.eos,
        overlap=args.overlap,
    )
    target, defaults = _load_exhaust_target(args.target, args.allow_unavailable_imports)
    convention, convention_reason = _exhaust_convention(args.convention, target, defaults)
    global_counters = args.global_counters or defaults.get("global_counters", "ideal")
    if args.adaptive is not None:
        adaptive, adaptive_reason = args.adaptive, "given"
    elif "adaptive" in defaults:
        adaptive, adaptive_reason = defaults["adaptive"], "as the corpus entry is judged"
    else:
        adaptive = default_adaptive(bounds)
        adaptive_reason = (
            "switch_stride events between two or more strides"
            if adaptive
            else "no stride switches within the bounds"
        )
    result = exhaust(
        target,
        bounds,
        convention=convention,
        global_counters=global_counters,
        adaptive=adaptive,
        merge=not args.no_merge,
        max_states=args.max_states,
        time_limit=args.time_limit,
    )
    saved_path, replay = _save(result, args, convention_reason)
    if args.json:
        report = exhaust_to_json(result) | {
            "convention_reason": convention_reason,
            "adaptive_reason": adaptive_reason,
        }
        if result.failure is not None:
            report["counterexample_file"] = saved_path
            report["replay_command"] = replay
        print(json.dumps(report, indent=2, default=repr))
    else:
        print(format_exhaust(result, convention_reason, adaptive_reason, target.description))
        if result.failure is not None:
            from kvcheck.reporting.render import print_timeline
            from kvcheck.reporting.timeline import build_timeline

            print()
            sys.stdout.flush()
            print_timeline(build_timeline(result.failure, target=result.target))
            if saved_path:
                print()
                print(f"counterexample saved to {saved_path}")
                print(f"replay with: {replay}")
    return EXIT_VIOLATION if result.failure is not None else EXIT_OK


def _load_exhaust_target(spec: str, allow_unavailable: bool) -> tuple[Any, dict[str, Any]]:
    """The target, and the judging options a corpus entry is annotated with (mutant:NAME)."""
    from kvcheck.mutants.registry import SPEC_PREFIX

    if spec.strip().startswith(SPEC_PREFIX):
        from kvcheck.mutants import get

        entry = get(spec.strip())
        defaults = {
            "convention": entry.convention,
            "global_counters": entry.global_counters,
            "adaptive": entry.adaptive,
        }
        return entry.target(), defaults
    from kvcheck.targets.loading import load_target

    return load_target(spec, allow_unavailable=allow_unavailable), {}


def _exhaust_convention(choice: str, target: Any, defaults: dict[str, Any]) -> tuple[Any, str]:
    if choice != "auto":
        return choice, f"convention {choice} (given)"
    if "convention" in defaults:
        return defaults["convention"], "as the corpus entry is annotated"
    return target.shape.convention, target.shape.convention_reason


def _save(
    result: ExhaustResult, args: argparse.Namespace, convention_reason: str
) -> tuple[str | None, str | None]:
    if result.failure is None or args.no_save:
        return None, None
    from kvcheck.counterexamples.fileformat import save
    from kvcheck.counterexamples.replay import from_run, replay_command

    counterexample = from_run(
        result.failure,
        result.target,
        convention_reason=convention_reason,
        allow_unavailable_imports=args.allow_unavailable_imports,
    )
    path = str(save(counterexample, args.save_dir))
    return path, replay_command(path)


def format_exhaust(
    result: ExhaustResult,
    convention_reason: str = "",
    adaptive_reason: str = "",
    description: str = "",
) -> str:
    from kvcheck.reporting.text import format_failure

    about = f"  ({description})" if description else ""
    conv = f"  ({convention_reason})" if convention_reason else ""
    why = f" ({adaptive_reason})" if adaptive_reason else ""
    lines = [
        f"target      {result.target}{about}",
        f"convention  {result.convention}{conv}",
        f"options     global counters {result.global_counters}, "
        f"adaptive {'on' if result.adaptive else 'off'}{why}",
        f"bounds      {result.bounds.describe()}",
        f"explored    {result.scenarios} scenarios, {result.states} distinct states, "
        f"lengths up to {result.depth}, in {result.seconds:.2f} s "
        f"({result.states_per_second:.0f} states/s)",
    ]
    failure, violation = result.failure, result.violation
    if failure is None or violation is None:
        if result.complete:
            lines.append("PASS        no violation within bounds")
        else:
            lines.append(
                f"INCOMPLETE  no violation in scenarios of up to {result.depth} events; a time "
                "or state limit stopped the search before the bounds were cleared"
            )
        return "\n".join(lines)
    scenario = failure.scenario
    headline = f"shortest counterexample ({len(scenario.events)} events): "
    lines += format_failure(violation, scenario, headline)
    others = sorted(result.minimal_invariants - {violation.invariant})
    if others:
        lines.append(f"other counterexamples of this length break: {', '.join(others)}")
    return "\n".join(lines)


def exhaust_to_json(result: ExhaustResult) -> dict[str, Any]:
    from kvcheck.reporting.text import failure_to_json

    data: dict[str, Any] = {
        "verdict": result.verdict,
        "target": result.target,
        "convention": result.convention,
        "global_counters": result.global_counters,
        "adaptive": result.adaptive,
        "bounds": result.bounds.to_dict(),
        "scenarios": result.scenarios,
        "states": result.states,
        "depth": result.depth,
        "complete": result.complete,
        "seconds": round(result.seconds, 3),
    }
    violation, scenario = result.violation, result.counterexample
    if violation is not None and scenario is not None:
        data |= failure_to_json(violation, scenario)
        data["minimal_invariants"] = sorted(result.minimal_invariants)
    return data
