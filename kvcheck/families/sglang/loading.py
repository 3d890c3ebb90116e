"""How SGLang's targets are found (`kvcheck.core.family.TargetLoader`): the spec forms, each
loaded and probed (`kvcheck.families.sglang.probe`).

The forms (their grammar is a contract: docs/contracts.md):
- `builtin:NAME`: one of kvcheck's own resolvers (`kvcheck.families.sglang.builtins`);
- `sglang==VERSION`: that SGLang release's resolver, fetched from the package index into
  kvcheck's cache (`kvcheck.families.sglang.release`);
- `path/to/sglang` (a checkout root or the `sglang` package directory): its resolver, found the
  same way;
- `mutant:NAME`: an entry of kvcheck's mutant corpus (`kvcheck.families.sglang.mutants`);
- `package.module:Qualname.attr`: imported normally;
- `path/to/file.py::Qualname.attr`: read from source without importing its module, so a resolver
  inside an SGLang checkout can be checked on a machine without SGLang's dependencies.

SGLang is the default family: it loads (or refuses, with one line) every spec no other family
claims. Every failure is a `TargetLoadError` with one line: the front doors turn it into exit
code 2.
"""

from __future__ import annotations

import functools
import inspect
import os
from pathlib import Path
from typing import Any, Final

import attrs

from kvcheck.core.family import family
from kvcheck.core.target import Target
from kvcheck.errors import TargetLoadError
from kvcheck.families.sglang import release as sglang_release
from kvcheck.families.sglang.allocation_rules import rule_of_release
from kvcheck.families.sglang.builtins import BUILTINS
from kvcheck.families.sglang.names import STAND_INS
from kvcheck.families.sglang.probe import probe_target
from kvcheck.families.sglang.real.path import ReleaseAllocationCode
from kvcheck.families.sglang.real.tree import allocation_tree
from kvcheck.families.sglang.scenario import FAMILY_NAME
from kvcheck.targets.loading import import_object
from kvcheck.targets.source import load_from_source

BUILTIN_PREFIX: Final = "builtin:"
MUTANT_PREFIX: Final = "mutant:"
DEFAULT_TARGETS: Final = ("builtin:seed-prefix", "builtin:seed-fixed")
# The correct built-in: the pre-claim resolver every search and exhaustive search must pass.
CORRECT_BUILTIN: Final = "builtin:reference"
RESOLVER_PARAMETERS: Final = ("self", "result", "batch")


def claims(spec: str) -> bool:
    """Whether `spec` has one of SGLang's forms (it loads every other spec too, as the default
    family, to refuse it with the forms it knows)."""
    spec = spec.strip()
    return (
        spec.startswith((BUILTIN_PREFIX, MUTANT_PREFIX, sglang_release.SPEC_PREFIX))
        or "::" in spec
        or spec.count(":") == 1
        or _expanded(spec).is_dir()
    )


def load(spec: str, *, allow_unavailable: bool, deadline: float | None) -> Target:
    """Resolve `spec` and probe its API shape once (`kvcheck.families.sglang.probe`)."""
    spec = spec.strip()
    if spec.startswith(BUILTIN_PREFIX):
        return _load_builtin(spec, deadline)
    if spec.startswith(sglang_release.SPEC_PREFIX):
        return _load_release(spec, allow_unavailable, deadline)
    if spec.startswith(MUTANT_PREFIX):
        return _load_mutant(spec, deadline)
    if "::" in spec:
        return _load_source(spec, allow_unavailable, deadline)
    if spec.count(":") == 1:
        return _load_import(spec, deadline)
    if _expanded(spec).is_dir():
        return _load_package(spec, allow_unavailable, deadline)
    _refuse_missing_directory(spec)
    raise TargetLoadError(
        f"malformed target {spec!r}; expected builtin:NAME, sglang==VERSION, "
        "package.module:Qualname, path/to/file.py::Qualname or an SGLang checkout directory"
    )


def spec_path(spec: str) -> str | None:
    """The file (`path/to/file.py::Qualname`) or directory (an SGLang checkout) a spec reads its
    target from, as written; None for the forms that name no path (`builtin:`, `sglang==`,
    `mutant:`, `package.module:Qualname`). Mirrors the order `load` tries the forms in."""
    spec = spec.strip()
    if spec.startswith((BUILTIN_PREFIX, sglang_release.SPEC_PREFIX, MUTANT_PREFIX)):
        return None
    if "::" in spec:
        return spec.partition("::")[0] or None
    if spec.count(":") == 1 or not _expanded(spec).is_dir():
        return None
    return spec


def _expanded(path: str) -> Path:
    """`path` with a leading `~` expanded, as for every path kvcheck is given (a quoted `~`
    reaches kvcheck unexpanded)."""
    return Path(path).expanduser()


def _refuse_missing_directory(spec: str) -> None:
    """A spec written as a path (it has a separator, or starts with `~` or `.`) that names no
    directory: say what is at that path instead of calling the spec malformed."""
    if not (os.sep in spec or "/" in spec or spec.startswith(("~", "."))):
        return
    path = _expanded(spec)
    try:
        path.stat()
    except FileNotFoundError:
        raise TargetLoadError(
            f"no such directory {spec!r} (an SGLang checkout target must be an existing directory)"
        ) from None
    except OSError as exc:  # a symlink loop, a name too long, a folder kvcheck may not enter
        raise TargetLoadError(
            f"cannot read the directory {spec!r}: {exc.strerror or exc}"
        ) from None
    raise TargetLoadError(
        f"{spec!r} is a file, not a directory: give an SGLang checkout directory, or a resolver "
        "in a file as path/to/file.py::Qualname"
    )


def _load_release(spec: str, allow_unavailable: bool, deadline: float | None) -> Target:
    version = sglang_release.parse_spec(spec)
    package = sglang_release.release_package(version)
    what = f"SGLang {version} (package index)"
    target = _load_sglang(spec, package, what, allow_unavailable, deadline)
    root = functools.partial(allocation_tree, version)  # unpacked on first use
    code = ReleaseAllocationCode(root, what, rule_of_release(version))
    return attrs.evolve(target, allocation=code)


def _load_package(spec: str, allow_unavailable: bool, deadline: float | None) -> Target:
    package = sglang_release.package_dir(_expanded(spec))
    return package_target(
        spec, package, f"the SGLang package at {spec}", allow_unavailable, deadline
    )


def package_target(
    spec: str,
    package: Path,
    what: str,
    allow_unavailable: bool = False,
    deadline: float | None = None,
) -> Target:
    """The `sglang` package directory `package` as a target called `spec`: its resolver, with
    its own allocation code beside it (a checkout, and the release-tree corpus's patched
    trees)."""
    target = _load_sglang(spec, package, what, allow_unavailable, deadline)
    root = functools.partial(Path, package.parent)
    version = sglang_release.package_version(package)
    rule = None if version is None else rule_of_release(version)
    return attrs.evolve(target, allocation=ReleaseAllocationCode(root, what, rule))


def _load_sglang(
    spec: str, package: Path, what: str, allow_unavailable: bool, deadline: float | None
) -> Target:
    """The resolver of an SGLang package, read from source with its sibling methods."""
    where = sglang_release.find_resolver(package)
    loaded = load_from_source(str(where.file), where.qualname, allow_unavailable=allow_unavailable)
    description = f"{what}: {where.qualname} ({where.file.name}, line {where.line})"
    return probe_target(
        spec, loaded.resolver, description, loaded.self_methods, loaded.code, deadline=deadline
    )


def _load_builtin(spec: str, deadline: float | None) -> Target:
    name = spec.removeprefix(BUILTIN_PREFIX)
    resolver = BUILTINS.get(name)
    if resolver is None:
        raise TargetLoadError(
            f"unknown builtin {name!r}; builtins: {', '.join('builtin:' + n for n in BUILTINS)}"
        )
    description = f"kvcheck built-in resolver {name!r}"
    return probe_target(spec, resolver, description, deadline=deadline)


def _load_mutant(spec: str, deadline: float | None) -> Target:
    """An entry of a mutant corpus, by its short name (a resolver's target spec is the
    importable `kvcheck.mutants:<name>`, which is what counterexample files record; a release-tree
    entry's is `mutant:NAME`, whose tree is patched again wherever it is loaded)."""
    # Through the registry: the corpus (its release trees) loads targets with this module, so
    # a direct import would be a cycle; the corpus is built on first use.
    corpus = family(FAMILY_NAME).mutants
    entry = corpus.get(spec.removeprefix(MUTANT_PREFIX)) if corpus is not None else None
    if entry is None:
        raise TargetLoadError(f"no corpus entry {spec!r} (kvcheck mutants lists them)")
    return attrs.evolve(entry.target(), deadline=deadline)


def _load_source(spec: str, allow_unavailable: bool, deadline: float | None) -> Target:
    path, _, qualname = spec.partition("::")
    if not path or not qualname:
        raise TargetLoadError(f"malformed target {spec!r}; expected path/to/file.py::Qualname")
    loaded = load_from_source(path, qualname, allow_unavailable=allow_unavailable)
    return probe_target(
        spec,
        loaded.resolver,
        loaded.description,
        loaded.self_methods,
        loaded.code,
        deadline=deadline,
    )


def _load_import(spec: str, deadline: float | None) -> Target:
    module_name, _, qualname = spec.partition(":")
    obj = import_object(spec)
    resolver = inspect.unwrap(obj) if callable(obj) else obj
    check_resolver_signature(resolver, spec)
    description = f"{qualname} imported from {module_name}"
    return probe_target(spec, resolver, description, deadline=deadline)


def check_resolver_signature(resolver: Any, spec: str) -> None:
    """A resolver must be callable as resolver(self, result, batch)."""
    if not callable(resolver):
        raise TargetLoadError(f"target {spec!r} is a {type(resolver).__name__}, not a function")
    try:
        inspect.signature(resolver).bind(object(), object(), object())
    except TypeError:
        raise TargetLoadError(
            f"target {spec!r} has signature {inspect.signature(resolver)}; a resolver must "
            "accept (self, result, batch)"
        ) from None
    except ValueError:
        return  # builtins without a signature: let the call decide


class SglangTargets:
    """SGLang's target specs, their loading and the SGLang names a resolver's file may import."""

    default_specs: Final = DEFAULT_TARGETS
    correct_builtin: Final = CORRECT_BUILTIN
    stand_ins: Final = STAND_INS
    resolver_parameters: Final = RESOLVER_PARAMETERS
    claims = staticmethod(claims)
    load = staticmethod(load)
    spec_path = staticmethod(spec_path)
