"""How vLLM's targets are found (`kvcheck.core.family.TargetLoader`).

The forms this module loads: `builtin:vllm-NAME` (kvcheck's own schedulers,
`kvcheck.families.vllm.builtins`) and `vllm-mutant:NAME` (the corpus,
`kvcheck.families.vllm.mutants`). A release's own code (`vllm==VERSION`, a checkout, a
`file.py::Qualname`) is loaded by `kvcheck.families.vllm.real` when that subpackage is present:
it offers `claims(spec)`, `load(spec, *, allow_unavailable, deadline)` and `spec_path(spec)`.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Final

from kvcheck.core.target import Target
from kvcheck.errors import TargetLoadError
from kvcheck.families.vllm.builtins import BUILTINS, builtin_target
from kvcheck.families.vllm.mutants import MUTANT_PREFIX, MUTANTS

BUILTIN_PREFIX: Final = "builtin:vllm-"

# kvcheck's own scheduler written from the semantics: every search must pass it.
CORRECT_BUILTIN: Final = "builtin:vllm-reference"
DEFAULT_TARGETS: Final = (CORRECT_BUILTIN,)


def real_targets() -> ModuleType | None:
    """`kvcheck.families.vllm.real` when present (the release-target code), else None."""
    try:
        return importlib.import_module("kvcheck.families.vllm.real")
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.startswith("kvcheck.families.vllm.real"):
            return None
        raise


def claims(spec: str) -> bool:
    """Whether `spec` names a vLLM target."""
    spec = spec.strip()
    if spec.startswith((BUILTIN_PREFIX, MUTANT_PREFIX)):
        return True
    real = real_targets()
    return bool(real is not None and hasattr(real, "claims") and real.claims(spec))


def load(spec: str, *, allow_unavailable: bool, deadline: float | None) -> Target:
    """The target `spec` names; `TargetLoadError` (one line) when there is none."""
    spec = spec.strip()
    if spec.startswith(BUILTIN_PREFIX):
        name = spec.removeprefix("builtin:")
        builtin = BUILTINS.get(name)
        if builtin is None:
            raise TargetLoadError(
                f"no built-in vLLM scheduler {name!r}; known: {', '.join(BUILTINS)}"
            )
        return builtin_target(spec, builtin.factory, builtin.summary)
    if spec.startswith(MUTANT_PREFIX):
        entry = MUTANTS.get(spec.removeprefix(MUTANT_PREFIX))
        if entry is None:
            raise TargetLoadError(f"no vLLM mutant {spec!r}; known: {', '.join(MUTANTS)}")
        return builtin_target(spec, entry.scheduler, entry.summary)
    real = real_targets()
    if real is not None and hasattr(real, "claims") and real.claims(spec):
        loaded: Target = real.load(spec, allow_unavailable=allow_unavailable, deadline=deadline)
        return loaded
    raise TargetLoadError(f"not a vLLM target: {spec!r}")


def spec_path(spec: str) -> str | None:
    """The path a spec reads its target from (only a release's own code names one)."""
    real = real_targets()
    if real is not None and hasattr(real, "spec_path") and real.claims(spec):
        path: str | None = real.spec_path(spec)
        return path
    return None


class VllmTargets:
    """vLLM's `TargetLoader`."""

    default_specs: Final = DEFAULT_TARGETS
    correct_builtin: Final = CORRECT_BUILTIN
    stand_ins: Final[dict[tuple[str, str], object]] = {}
    resolver_parameters: Final = ("settings",)
    claims = staticmethod(claims)
    load = staticmethod(load)
    spec_path = staticmethod(spec_path)
