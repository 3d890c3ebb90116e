"""Resolving a target spec into something an engine can call: a generic dispatcher over the
families (`kvcheck.core.family.TargetLoader`).

Each family claims its spec forms (SGLang's: `builtin:NAME`, `sglang==VERSION`, an SGLang
checkout directory, `mutant:NAME`, `package.module:Qualname.attr` and
`path/to/file.py::Qualname.attr`; their grammar is a contract: docs/contracts.md) and loads and
probes its targets; the default family loads every spec no other family claims
(`kvcheck.core.family.family_for_spec`). The loaded `Target` names its family.

Every failure is a `TargetLoadError` with one line: the front doors turn it into exit code 2.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import os
import sys
from typing import Any

import attrs

from kvcheck.core.deadline import DEFAULT_DEADLINE
from kvcheck.core.family import family_for_spec
from kvcheck.core.target import Target
from kvcheck.errors import TargetLoadError


def load_target(
    spec: str, *, allow_unavailable: bool = False, deadline: float | None = DEFAULT_DEADLINE
) -> Target:
    """Resolve `spec` through the family that claims it, which probes it once.

    `allow_unavailable` (source targets only): names the file uses but
    kvcheck cannot provide become placeholders that fail only when used at run time.
    `deadline`: seconds each call of the target may take, the probe's included (None or 0: no
    limit; `kvcheck.core.deadline`)."""
    spec = spec.strip()
    owner = family_for_spec(spec)
    target = owner.targets.load(
        spec, allow_unavailable=allow_unavailable, deadline=deadline or None
    )
    return target if target.family == owner.name else attrs.evolve(target, family=owner.name)


def spec_path(spec: str) -> str | None:
    """The file or directory a spec reads its target from, as written; None for the forms that
    name no path (SGLang's `builtin:`, `sglang==`, `mutant:`, `package.module:Qualname`)."""
    spec = spec.strip()
    return family_for_spec(spec).targets.spec_path(spec)


def absolute_spec(spec: str) -> str:
    """`spec` with the path it names made absolute, so that it loads from any directory: what
    counterexample files and generated regression tests record. A spec that names no path is
    returned unchanged."""
    path = spec_path(spec)
    if path is None:
        return spec
    return os.path.abspath(os.path.expanduser(path)) + spec.strip()[len(path) :]


def import_object(spec: str) -> Any:
    """The object a `package.module:Qualname.attr` spec names, imported normally (what the module
    prints when imported goes to stderr); `TargetLoadError` naming what is missing, with the
    closest names."""
    module_name, _, qualname = spec.partition(":")
    if not module_name or not qualname:
        raise TargetLoadError(f"malformed target {spec!r}; expected package.module:Qualname")
    try:
        # What the module prints when imported is the target's output, not kvcheck's report.
        with contextlib.redirect_stdout(sys.stderr):
            module = importlib.import_module(module_name)
    except ImportError as exc:
        raise TargetLoadError(
            f"cannot import {module_name!r} for target {spec!r}: {exc}; to check a file whose "
            "imports are not installed, use path/to/file.py::Qualname"
        ) from None
    except Exception as exc:
        raise TargetLoadError(
            f"importing {module_name!r} raised {type(exc).__name__}: {exc}"
        ) from None
    obj: Any = module
    for depth, part in enumerate(qualname.split(".")):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            names = [n for n in dir(obj) if not n.startswith("__")]
            close = difflib.get_close_matches(part, names, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            where = ".".join([module_name, *qualname.split(".")[:depth]])
            raise TargetLoadError(f"{where} has no attribute {part!r}{hint}") from None
    return obj
