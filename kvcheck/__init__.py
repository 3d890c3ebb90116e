"""kvcheck: a property-based correctness harness for the KV-cache accounting of speculative
decoding resolvers under overlap scheduling (SGLang's spec-v2 path first)."""

from kvcheck.check import Verdict, check, detect_convention
from kvcheck.run import RunResult, run_scenario
from kvcheck.scenario import Abort, Admit, Config, Retract, Scenario, Step, SwitchStride
from kvcheck.targets import Target, load_target

__version__ = "0.1.0"

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
