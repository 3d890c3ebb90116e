"""kvcheck's pytest plugin (registered through the `pytest11` entry point as `kvcheck`).

Two kinds of items:

- `--kvcheck-target T` (repeatable) adds property items: the family's judging options (SGLang's
  `--kvcheck-convention`, `--kvcheck-adaptive`, `--kvcheck-global-counters`:
  `kvcheck.core.family.FrontDoor`) say which. By default one item per target runs exactly the
  search `kvcheck check T` runs with the same options (SGLang: convention detected with fallback,
  adaptive on exactly when the target feeds the controller), so both front doors give the same
  verdict. With a convention given (`preclaim`, `honest`) there is one item per overlap value,
  so `pytest -n auto` spreads them; `both` splits the same way, and each of its items passes
  when either convention shows no violation (`auto`'s fallback: a resolver follows one
  convention, so judging it by the other alone would fail every correct one);
  `--kvcheck-adaptive both` doubles either set.
- Counterexample files (`*.kvcheck.json`) under the collected paths become replay items: the
  saved scenario is replayed once against its saved target and must show no violation.

A failing item reports the per-request timeline, the counterexample file and the command that
replays it. An unreadable counterexample file, one from a newer schema or one whose target no
longer loads is a collection error with one line. Without a `--kvcheck-*` option the plugin adds
nothing but the replay items, and it imports neither Hypothesis nor torch until it needs them.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pytest

from kvcheck.core.deadline import DEFAULT_DEADLINE
from kvcheck.core.family import distribution_of, family, family_names, register_from_environment
from kvcheck.counterexamples.fileformat import SUFFIX, load
from kvcheck.errors import KvcheckUsageError
from kvcheck.wording import plural

if TYPE_CHECKING:
    from hypothesis.database import ExampleDatabase

    from kvcheck.core.target import Target
    from kvcheck.counterexamples.fileformat import Counterexample

# pytest loads this plugin in every session of every project that has kvcheck installed, so the
# engine, the reporting and Hypothesis are imported inside the hooks that use them (the imports
# marked `light plugin`), never at module level.

GROUP: Final = "kvcheck"


def pytest_addoption(parser: pytest.Parser) -> None:
    """Pytest hook: the `--kvcheck-*` options that add property items and tune them."""
    group = parser.getgroup(
        GROUP, "kvcheck: KV-accounting checks of speculative-decoding resolvers"
    )
    group.addoption(
        "--kvcheck-target",
        action="append",
        default=[],
        dest="kvcheck_targets",
        metavar="TARGET",
        help="add property-test items for TARGET (any target spec `kvcheck check` takes): one "
        "running check's search by default, one per overlap value for a given convention; "
        "repeatable",
    )
    group.addoption(
        "--kvcheck-profile",
        dest="kvcheck_profile",
        default=None,
        metavar="NAME",
        help="Hypothesis settings profile for the property items: dev, ci, thorough (kvcheck's) "
        "or any registered one (default: the active profile)",
    )
    # Every registered family's judging options (SGLang's --kvcheck-convention,
    # --kvcheck-adaptive and --kvcheck-global-counters); a target's items read its family's.
    try:
        register_from_environment()
    except KvcheckUsageError as exc:
        raise pytest.UsageError(str(exc)) from None
    shared = _SharedOptions(group)
    for name in family_names():
        distribution = family(name).distribution
        if distribution is not None:
            distribution.front.add_plugin_options(shared)
    group.addoption(
        "--kvcheck-allow-unavailable-imports",
        dest="kvcheck_allow_unavailable_imports",
        action="store_true",
        help="load a path.py::Qualname target even if its code names imports kvcheck cannot "
        "provide (using one at run time is still an error), as `kvcheck check` does",
    )
    group.addoption(
        "--kvcheck-max-examples",
        dest="kvcheck_max_examples",
        type=int,
        default=None,
        metavar="N",
        help="scenarios per property item (default: the profile's max_examples)",
    )
    group.addoption(
        "--kvcheck-seed",
        dest="kvcheck_seed",
        type=int,
        default=None,
        metavar="N",
        help="seed for the property items (default: --hypothesis-seed if given, else random)",
    )
    group.addoption(
        "--kvcheck-save-dir",
        dest="kvcheck_save_dir",
        default=None,
        metavar="DIR",
        help="where failing property items write counterexample files (default: "
        ".kvcheck/counterexamples under the project's rootdir, or else under the directory "
        "pytest was started in)",
    )
    group.addoption(
        "--kvcheck-deadline",
        dest="kvcheck_deadline",
        type=float,
        default=DEFAULT_DEADLINE,
        metavar="SECONDS",
        help="interrupt a call of the target still running after SECONDS: a target-deadline "
        f"failure (default: {DEFAULT_DEADLINE:g}; 0: no deadline)",
    )
    group.addoption(
        "--kvcheck-no-replay",
        dest="kvcheck_no_replay",
        action="store_true",
        help=f"do not collect *{SUFFIX} counterexample files as replay items",
    )


# --- failures -----------------------------------------------------------------------------------


class KvcheckViolation(Exception):
    """An item found or reproduced a violation; the message is the whole report."""


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


def _deadline(config: pytest.Config) -> float | None:
    """`--kvcheck-deadline`: seconds per call of the target, None for none (0)."""
    value = config.getoption("kvcheck_deadline", DEFAULT_DEADLINE)
    if value is None or not math.isfinite(value) or value < 0:
        raise pytest.UsageError(
            f"--kvcheck-deadline must be a finite number >= 0 of seconds, got {value}"
        )
    return float(value) or None


def _relative(path: Path) -> str:
    """`path` relative to the working directory when it is below it (shorter replay commands)."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


class _SharedOptions:
    """The plugin's option group as each family adds its options to it: an option an earlier
    family added (same names) is shared, not added twice (pytest refuses that)."""

    def __init__(self, group: pytest.OptionGroup) -> None:
        self._group = group

    def addoption(self, *names: str, **attributes: Any) -> None:
        """Add the option unless an earlier family added it under these names."""
        added = {name for option in self._group.options for name in option.names()}
        if not set(names) <= added:
            self._group.addoption(*names, **attributes)


# --- replay items -------------------------------------------------------------------------------


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """Pytest hook: a `*.kvcheck.json` file is one replay item, unless `--kvcheck-no-replay`."""
    if not file_path.name.endswith(SUFFIX):
        return None
    if parent.config.getoption("kvcheck_no_replay", False):
        return None
    collector: CounterexampleFile = CounterexampleFile.from_parent(parent, path=file_path)
    return collector


class _KvcheckItem(pytest.Item):
    """Reports a kvcheck finding as its own text (timeline, file, replay command) and a load
    error as one line, instead of a traceback into kvcheck."""

    def repr_failure(  # type: ignore[override]
        self, excinfo: pytest.ExceptionInfo[BaseException]
    ) -> str | Any:
        """A kvcheck report as is, a usage error as one line, anything else as pytest shows it."""
        if isinstance(excinfo.value, KvcheckViolation):
            return str(excinfo.value)
        if isinstance(excinfo.value, KvcheckUsageError):
            return f"kvcheck: {_one_line(excinfo.value)}"
        return super().repr_failure(excinfo)


class CounterexampleFile(pytest.File):
    """A `*.kvcheck.json` file: one replay item."""

    def collect(self) -> Iterator[pytest.Item]:
        """Load the file and its saved target now, then yield its replay item.

        An unreadable file, one naming no target, or a target that no longer loads is a one-line
        collection error.
        """
        from kvcheck.targets.loading import load_target  # light plugin

        counterexample = load(self.path)
        if counterexample.target is None:
            raise KvcheckUsageError(f"{self.path} names no target to replay against")
        try:
            target = load_target(
                counterexample.target,
                allow_unavailable=counterexample.allow_unavailable_imports,
                deadline=_deadline(self.config),
            )
        except KvcheckUsageError as exc:
            raise KvcheckUsageError(
                f"{self.path}: its target {counterexample.target!r} does not load: {exc}"
            ) from None
        yield ReplayItem.from_parent(
            self, name="replay", counterexample=counterexample, target=target
        )

    def repr_failure(  # type: ignore[override]
        self, excinfo: pytest.ExceptionInfo[BaseException]
    ) -> str | Any:
        """A collection error caused by kvcheck's input as one line, not a traceback."""
        if isinstance(excinfo.value, KvcheckUsageError):
            return f"kvcheck: {_one_line(excinfo.value)}"
        return super().repr_failure(excinfo)


class ReplayItem(_KvcheckItem):
    """A counterexample file replayed once against its saved target.

    It fails while the saved scenario still breaks any invariant, and passes once the bug is
    fixed.
    """

    def __init__(self, *, counterexample: Counterexample, target: Target, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.counterexample = counterexample
        self.target = target

    def runtest(self) -> None:
        """Replay the scenario (no Hypothesis); fail with the timeline, file and replay command."""
        from kvcheck.counterexamples.replay import replay  # light plugin

        replayed = replay(self.counterexample, self.target, path=_relative(self.path))
        if replayed.violation is not None:
            raise KvcheckViolation(replayed.failure_report())

    def reportinfo(self) -> tuple[Path, int | None, str]:
        """The item's location in reports: the file, and the target it is replayed against."""
        saved = self.counterexample.violation
        from kvcheck.reporting.render import printable  # light plugin

        what = f" (saved: {saved.where()})" if saved is not None else ""
        return self.path, None, printable(f"kvcheck replay against {self.target.spec}{what}")


# --- property items -----------------------------------------------------------------------------


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Append the property items (before -k/-m deselection, which runs after this)."""
    specs: list[str] = config.getoption("kvcheck_targets", None) or []
    if not specs:
        return
    options = _SearchOptions.from_config(config)
    added: list[pytest.Item] = []
    for spec in specs:
        added.extend(_property_items(session, spec, options))
    items.extend(added)
    # No collector yields the property items, so pytest's counts ("collected N items", the
    # `--collect-only` summary, "N deselected") would leave them out: report them as collected.
    report = pytest.CollectReport(
        nodeid=GROUP,
        outcome="passed",
        longrepr=None,
        result=list[pytest.Item | pytest.Collector](added),
    )
    config.hook.pytest_collectreport(report=report)


class _SearchOptions:
    def __init__(
        self,
        *,
        option: Callable[[str], Any],
        allow_unavailable_imports: bool,
        max_examples: int,
        database: ExampleDatabase | None,
        seed: int | None,
        save_dir: Path,
    ) -> None:
        # The plugin's options by dest, which the target's family reads its items from.
        self.option = option
        self.allow_unavailable_imports = allow_unavailable_imports
        self.max_examples = max_examples
        self.database = database
        self.seed = seed
        self.save_dir = save_dir

    def items_for(self, target: Target) -> list[tuple[str, dict[str, Any]]]:
        """The property items of `target`, as its family splits its search (their axes, and
        the options each asks for)."""
        return distribution_of(target.family).front.plugin_items(self.option)

    @classmethod
    def from_config(cls, config: pytest.Config) -> _SearchOptions:
        # light plugin: Hypothesis only when property items are asked for
        from hypothesis import settings
        from hypothesis.errors import InvalidArgument

        from kvcheck.search.profiles import PROFILE_EXAMPLES, register_profiles

        name: str | None = config.getoption("kvcheck_profile", None)
        if name is None:
            profile = settings()
        else:
            try:
                profile = settings.get_profile(name)
            except InvalidArgument:
                if name not in PROFILE_EXAMPLES:
                    known = ", ".join(PROFILE_EXAMPLES)
                    raise pytest.UsageError(
                        f"--kvcheck-profile: no Hypothesis profile {name!r} is registered "
                        f"(kvcheck's: {known})"
                    ) from None
                register_profiles()
                profile = settings.get_profile(name)
        given = config.getoption("kvcheck_max_examples", None)
        max_examples = profile.max_examples if given is None else given
        if max_examples < 1:
            raise pytest.UsageError(f"--kvcheck-max-examples must be at least 1, got {given}")
        seed = config.getoption("kvcheck_seed", None)
        if seed is None:
            seed = seed_from_option(config.getoption("hypothesis_seed", None))
        save_dir = config.getoption("kvcheck_save_dir", None)
        return cls(
            option=config.getoption,
            allow_unavailable_imports=config.getoption("kvcheck_allow_unavailable_imports", False),
            max_examples=max_examples,
            database=profile.database,
            seed=seed,
            save_dir=Path(save_dir) if save_dir else default_save_dir(config),
        )


def default_save_dir(config: pytest.Config) -> Path:
    """Where failing property items save without `--kvcheck-save-dir`: under the project's root
    when pytest found it by its config file (and the run started inside it) or was given it
    with `--rootdir`, else under the directory pytest was started in.

    pytest's rootdir alone is no project: before plugins load, pytest reads the value of a
    separate `--kvcheck-target path/to/file.py::Qual` as a test path, and roots the run at the
    common ancestor of that file and the working directory, up to the filesystem root.
    """
    invocation = config.invocation_params.dir
    root = config.rootpath
    given = config.getoption("rootdir", None)
    project = bool(given) or (config.inipath is not None and invocation.is_relative_to(root))
    return (root if project else invocation) / ".kvcheck" / "counterexamples"


def seed_from_option(raw: object) -> int | None:
    """The seed `--hypothesis-seed` gives the property items: an integer as itself, any other
    text as a number derived from it the same way in every process (never `hash()`, which
    differs per process), so such a run is reproducible."""
    if raw is None:
        return None
    text = str(raw)
    if text.lstrip("-").isdigit():
        return int(text)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def _property_items(
    session: pytest.Session, spec: str, options: _SearchOptions
) -> list[pytest.Item]:
    from kvcheck.targets.loading import load_target  # light plugin

    try:
        target = load_target(
            spec,
            allow_unavailable=options.allow_unavailable_imports,
            deadline=_deadline(session.config),
        )
    except KvcheckUsageError as exc:
        raise pytest.UsageError(f"--kvcheck-target {spec}: {_one_line(exc)}") from None
    items: list[pytest.Item] = []
    # Each property item of a target: the axes its name carries and the judging options it asks
    # of the target's family (`FrontDoor.plugin_items`).
    for axes, requested in options.items_for(target):
        name = f"kvcheck[{spec.replace('::', ':')}][{axes}]"
        items.append(
            PropertyItem.from_parent(
                session,
                name=name,
                nodeid=name,
                target=target,
                requested=requested,
                options=options,
            )
        )
    return items


class PropertyItem(_KvcheckItem):
    """One search of a target under the judging options `requested` (SGLang: with convention
    `auto` the search `kvcheck check` runs, else one convention x overlap point; adaptive as
    given, None: `kvcheck check`'s default)."""

    def __init__(
        self,
        *,
        target: Target,
        requested: dict[str, Any],
        options: _SearchOptions,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.target = target
        self.requested = requested
        self.options = options

    def runtest(self) -> None:
        """Search; on a violation, save the shrunk counterexample and fail with its report.

        The report is the timeline, the file (or why it could not be saved) and the replay command.
        """
        # light plugin: the search, the reporting and saving only when a property item runs
        from kvcheck.counterexamples.fileformat import save
        from kvcheck.counterexamples.replay import replay_command
        from kvcheck.reporting.render import render_plain
        from kvcheck.reporting.timeline import build_timeline
        from kvcheck.search.check import check, from_verdict

        verdict = check(
            self.target,
            **self.requested,
            max_examples=self.options.max_examples,
            seed=self.options.seed,
            database=self.options.database,
            measure_coverage=False,
        )
        failure = verdict.outcome.failure
        counterexample = from_verdict(
            verdict, allow_unavailable_imports=self.options.allow_unavailable_imports
        )
        if failure is None or failure.violation is None or counterexample is None:
            return
        try:
            path = _relative(save(counterexample, self.options.save_dir))
        except KvcheckUsageError as exc:
            path = f"(not saved: {_one_line(exc)})"
        judged = distribution_of(self.target.family).front.describe(verdict.options, verdict.reason)
        lines = [
            f"kvcheck: {self.target.spec} breaks {failure.violation.invariant} "
            f"({judged}; found after "
            f"{plural(verdict.outcome.examples_to_failure or 0, 'scenario')})",
            "",
            render_plain(build_timeline(failure, target=self.target.spec)),
            "",
            f"counterexample file: {path}",
            f"replay with: {replay_command(path)}",
        ]
        raise KvcheckViolation("\n".join(lines))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        """The item's location in reports: its name, which carries the target and the axes."""
        return self.path, None, self.name
