"""kvcheck: a property-based correctness harness for the KV-cache accounting of speculative
decoding resolvers under overlap scheduling (SGLang's spec-v2 path first)."""

from typing import TYPE_CHECKING, Any, Final

from kvcheck.version import VERSION

if TYPE_CHECKING:
    from kvcheck.core.run import RunResult, run_scenario
    from kvcheck.core.scenario import Scenario
    from kvcheck.core.target import Target
    from kvcheck.search.check import Verdict, check, detect_convention
    from kvcheck.targets.loading import load_target

__version__ = VERSION

# Imported on first use: `kvcheck.search.check` pulls in Hypothesis and the engine pulls in
# torch, and neither may load for `kvcheck replay` (no Hypothesis) or when pytest merely loads
# the plugin. Even the scenario (attrs, the family registry) waits: `python -m kvcheck.cli`
# imports this package before the command line can handle Ctrl-C, so what it imports is a
# window in which Ctrl-C ends the interpreter with a traceback instead of exit 130.
_LAZY = {
    "Scenario": "kvcheck.core.scenario",
    "Verdict": "kvcheck.search.check",
    "check": "kvcheck.search.check",
    "detect_convention": "kvcheck.search.check",
    "RunResult": "kvcheck.core.run",
    "run_scenario": "kvcheck.core.run",
    "Target": "kvcheck.core.target",
    "load_target": "kvcheck.targets.loading",
}
# SGLang's scenario vocabulary (`kvcheck.Step` and the rest), found through the family registry
# (the module of its scenario codec), so `import kvcheck` loads no family.
_SGLANG: Final = "sglang"
_SGLANG_NAMES: Final = frozenset({"Abort", "Admit", "Config", "Retract", "Step", "SwitchStride"})


def __getattr__(name: str) -> Any:
    import importlib

    if name in _SGLANG_NAMES:
        from kvcheck.core.family import family

        codec = family(_SGLANG).scenarios
        return getattr(importlib.import_module(type(codec).__module__), name)
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kvcheck' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "Abort",
    "Admit",
    "Config",
    "Retract",
    "RunResult",
    "Scenario",
    "Step",
    "SwitchStride",
    "Target",
    "Verdict",
    "__version__",
    "check",
    "detect_convention",
    "load_target",
    "run_scenario",
]
