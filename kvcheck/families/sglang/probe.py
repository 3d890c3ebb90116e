"""Which SGLang API generation a target speaks, found by watching it on a short probe run.

The probe replays a fixed scenario (two requests; live rows, a finished request's stale row and a
retracted request's stale row, all with accept length 3) with the fakes wrapped in recording
proxies (`kvcheck.families.sglang.tracing.traced`). What the target touched gives:

- the SGLang versions whose resolvers use those spellings
(`kvcheck.families.sglang.spellings.SPELLINGS`), e.g.
  `req.kv.kv_committed_len` means 0.5.19+; a target that never consults a grammar predates
  0.5.14 where its spellings allow that;
- what it is held to: the histogram only if it updates one or its spellings are from 0.5.9 on
  (code from before the histogram existed is not faulted for lacking it); a result counter only
  if it writes that counter; the adaptive controller's feed only if it calls the controller;
- the committed-length convention for `--convention auto`: the versions decide when they fall
  wholly inside or outside the pre-claim generations (0.5.11-0.5.14); otherwise what the target
  does to a finished request's stale row (gives one slot back: pre-claim; nothing: honest),
  then to a live row (adds a - 1: pre-claim; adds a: honest).

The probe never consults the reference model: it observes the target only. It runs once, when a
target is loaded (`probe_target`); the `Target` carries the shape, so every entry point (search,
replay, exhaustive mode) judges a target by the same shape and the engine never probes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import attrs

from kvcheck.core.deadline import DEFAULT_DEADLINE
from kvcheck.core.isolation import maybe_apart, running
from kvcheck.core.scenario import Scenario
from kvcheck.core.target import CodeSpan, Target
from kvcheck.families.sglang.allocation_rules import RULES
from kvcheck.families.sglang.engine import Engine
from kvcheck.families.sglang.scenario import (
    FAMILY_NAME,
    Admit,
    Algorithm,
    AllocationRule,
    Config,
    Convention,
    Event,
    Retract,
    Step,
)
from kvcheck.families.sglang.spellings import (
    CONTROLLER_CALL,
    CONTROLLER_ROUTING_SINCE,
    REQ_HISTOGRAM_METHODS,
    RESULT_BLOCK_CAP_TOTAL_NAMES,
    RESULT_DRAFT_PER_REQ_NAMES,
    RESULT_DRAFT_TOTAL_NAMES,
    SPELLINGS_BY_KEY,
    version_range,
)
from kvcheck.families.sglang.target import ApiShape
from kvcheck.families.sglang.tracing import AccessLog, traced

__all__ = ["detect_api_shape", "probe_target"]

Version = tuple[int, ...]

OLDEST: Final = "0.5.6"
HISTOGRAM_SINCE: Final = "0.5.9"
GRAMMAR_SINCE: Final = "0.5.14"
NO_GRAMMAR_UNTIL: Final = "0.5.13"
PRECLAIM_VERSIONS: Final = ("0.5.11", "0.5.14")
_GRAMMAR_KEYS: Final = frozenset(
    {
        "req.grammar",
        "batch.has_grammar",
        "result.grammar_advanced",
        "result.grammar_retained_tokens",
        "self.advance_grammar_fsm",
    }
)
_STRIDE_KEYS: Final = (
    "result.speculative_output_stride",
    "result.speculative_num_draft_tokens",
    "self.draft_worker.speculative_num_draft_tokens",
)

# Algorithms by the release that first runs them through the spec-v2 resolver: every non-none
# algorithm from 0.5.14 (DFLASH without pre-claim); UNO's k and output stride from 0.5.20.
ALGORITHMS_SINCE: Final = "0.5.14"
_UNO_KEYS: Final = frozenset(
    {"result.num_non_draft_tokens_per_req", "result.speculative_output_stride"}
)
_BLOCK_CAP_KEYS: Final = frozenset({"result.block_accept_lens", "result.cap_lens"})

PROBE_STRIDE: Final = 4
PROBE_ACCEPT: Final = 3
# r1 finishes on the first decode result (max_new_tokens 3 < 1 + 3) and has its stale row in the
# next; r0 is retracted while a launch of it is in flight, so that row arrives stale too.
PROBE_EVENTS: Final[tuple[Event, ...]] = (
    Admit("r0", prompt_len=10, max_new_tokens=64),
    Admit("r1", prompt_len=10, max_new_tokens=3),
    Step(),
    Step((PROBE_ACCEPT, PROBE_ACCEPT)),
    Step((PROBE_ACCEPT, PROBE_ACCEPT)),
    Step((PROBE_ACCEPT,)),
    Step((PROBE_ACCEPT,)),
    Retract("r0"),
    Step(),
)
# With an allocation rule, so that a target reading `kv_allocated_len` finds it sized as every
# release sizes it (without a rule the fakes refuse it); the rule changes no committed length.
PROBE_CONFIG: Final = Config(
    convention="honest", stride=PROBE_STRIDE, global_counters="off", allocation=RULES[-1].name
)
_ALLOCATED_KEYS: Final = frozenset({"req.kv_allocated_len", "req.kv.kv_allocated_len"})


def _v(text: str) -> Version:
    return tuple(int(part) for part in text.split("."))


def _text(version: Version) -> str:
    return ".".join(str(part) for part in version)


# --------------------------------------------------------------------------------------------
# Versions from spellings.


@attrs.frozen
class _Window:
    low: Version
    high: Version | None
    low_by: str | None  # the spelling that set the bound
    high_by: str | None

    @property
    def empty(self) -> bool:
        return self.high is not None and self.high < self.low


def _window(keys: Iterable[str], consults_grammar: bool) -> _Window:
    """The versions whose resolvers use every spelling in `keys`. Never consulting a grammar is
    weaker evidence (a simplified resolver may just leave it out): it narrows the window to
    0.5.13 and earlier only where the spellings allow that."""
    low, high = _v(OLDEST), None
    low_by: str | None = None
    high_by: str | None = None
    for key in sorted(keys):
        spelling = SPELLINGS_BY_KEY.get(key)
        if spelling is None:
            continue
        if spelling.first is not None and _v(spelling.first) > low:
            low, low_by = _v(spelling.first), key
        if spelling.last is not None and (high is None or _v(spelling.last) < high):
            high, high_by = _v(spelling.last), key
    until = _v(NO_GRAMMAR_UNTIL)
    if not consults_grammar and low <= until and (high is None or until < high):
        high, high_by = until, "no grammar handling"
    return _Window(low, high, low_by, high_by)


def _convention_from_window(window: _Window) -> tuple[Convention, str] | None:
    if window.empty:
        return None
    start, end = (_v(v) for v in PRECLAIM_VERSIONS)
    shown = version_range(_text(window.low), _text(window.high) if window.high else None)
    by = ", ".join(sorted({b for b in (window.low_by, window.high_by) if b}))
    why = f" ({by})" if by else ""
    if window.low > end or (window.high is not None and window.high < start):
        return "honest", (
            f"auto: its spellings{why} are SGLang {shown}, whose decode launch does not "
            "pre-claim a slot"
        )
    if window.low >= start and window.high is not None and window.high <= end:
        return "preclaim", (
            f"auto: its spellings{why} are SGLang {shown}, whose decode launch pre-claims one slot"
        )
    return None


# --------------------------------------------------------------------------------------------
# The probe.


@attrs.frozen
class _ProbeRun:
    log: AccessLog
    live_deltas: tuple[int, ...]
    finished_stale_deltas: tuple[int, ...]
    error: str | None


def _probe(
    resolver: Callable[..., Any],
    self_methods: Mapping[str, Callable[..., Any]],
    deadline: float | None,
) -> _ProbeRun:
    log = AccessLog()

    def recording_resolver(scheduler: Any, result: Any, batch: Any) -> Any:
        return resolver(*traced(log, scheduler, result, batch))

    engine = Engine(
        PROBE_CONFIG, recording_resolver, self_methods, not_judged=frozenset(), deadline=deadline
    )
    live: list[int] = []
    finished: list[int] = []
    error: str | None = None
    for event in Scenario(PROBE_CONFIG, PROBE_EVENTS).events:
        before = {rid: req.kv_committed_len for rid, req in engine.reqs.items()}
        observation = engine.apply(event)
        if observation.deadline_exceeded is not None:  # the search reports it as a violation
            error = error or f"TargetDeadlineExceeded (still running after {deadline:g} s)"
            break
        error = error or observation.target_error
        delivery = observation.delivery
        if delivery is not None and any(
            type(after) is not int for _, _, after in delivery.allocated_changed
        ):
            # The scheduler's allocation cannot go on from a non-number in `kv_allocated_len`
            # (a judged run stops here with `alloc-untouched-by-resolver`): what was seen stands.
            break
        if delivery is None or observation.target_error is not None:
            continue
        for rid, stale in zip(delivery.rids, delivery.stale, strict=True):
            req = engine.reqs[rid]
            after, was = req.kv_committed_len, before.get(rid)
            if type(after) is not int or type(was) is not int:
                continue
            if not stale:
                live.append(after - was)
            elif not req.is_retracted:
                finished.append(after - was)
    log.forget_proxies()
    return _ProbeRun(log, tuple(live), tuple(finished), error)


def _algorithms(window: _Window, reads: set[str]) -> tuple[Algorithm, ...]:
    """The algorithms a target's scenarios may use: EAGLE always; from 0.5.14, where every
    non-none algorithm decodes through this resolver, EAGLE3, n-gram and DFLASH (which never
    pre-claims); UNO only for a target that reads k or the output stride (0.5.20+ spellings),
    since its rows are not EAGLE's."""
    if window.empty or window.low < _v(ALGORITHMS_SINCE):
        return ("eagle",)
    found: list[Algorithm] = ["eagle", "eagle3", "ngram", "dflash"]
    if reads & _UNO_KEYS:
        found.append("uno")
    return tuple(found)


def _allocation_rules(
    window: _Window, touched: Iterable[str]
) -> tuple[tuple[AllocationRule, ...], str]:
    """The allocation rules a target's scenarios may use, and why: those of the releases its
    spellings fit (every rule when they fit none), and "off" (no allocation modelled) only when
    it never touches `kv_allocated_len`. A rule of another generation would show it states its
    own release never has (e.g. `Al` of 0.5.16+ before page rounding)."""
    if window.empty:
        rules = [rule.name for rule in RULES if rule.first_release is not None]
        where = "every allocation rule (its spellings fit no single SGLang generation)"
    else:
        rules = [
            rule.name
            for rule in RULES
            if rule.first_release is not None  # "off" is no release's rule
            and (window.high is None or _v(rule.first_release) <= window.high)
            and (rule.last_release is None or _v(rule.last_release) >= window.low)
        ]
        shown = version_range(_text(window.low), _text(window.high) if window.high else None)
        where = (
            f"allocation rule{'s' if len(rules) > 1 else ''} {', '.join(rules)} (SGLang {shown})"
        )
    reads = sorted(set(touched) & _ALLOCATED_KEYS)
    if reads:
        return tuple(rules), f"{where}; never off: it touches {', '.join(reads)}"
    return ("off", *rules), f"{where}, or off: it never touches kv_allocated_len"


def _convention(window: _Window, run: _ProbeRun) -> tuple[Convention, str]:
    from_versions = _convention_from_window(window)
    if from_versions is not None:
        return from_versions
    a = PROBE_ACCEPT
    if run.finished_stale_deltas and set(run.finished_stale_deltas) == {-1}:
        return "preclaim", (
            "auto: it gives back one slot on a finished request's stale row (pre-claim, SGLang "
            "0.5.12-0.5.14)"
        )
    if run.finished_stale_deltas and set(run.finished_stale_deltas) == {0}:
        return "honest", (
            "auto: it leaves a finished request's committed length alone at its stale row "
            "(honest, SGLang 0.5.15+)"
        )
    if run.live_deltas and set(run.live_deltas) == {a - 1}:
        return (
            "preclaim",
            "auto: on a live row the target adds accept_len - 1 to the committed length",
        )
    if run.live_deltas and set(run.live_deltas) == {a}:
        return "honest", "auto: on a live row the target adds accept_len to the committed length"
    return "preclaim", "auto: the probe was inconclusive, so pre-claim (SGLang 0.5.11-0.5.14)"


def detect_api_shape(
    resolver: Callable[..., Any],
    self_methods: Mapping[str, Callable[..., Any]] | None = None,
    *,
    deadline: float | None = DEFAULT_DEADLINE,
) -> ApiShape:
    """Probe `resolver` once (uncached), each call under `deadline` seconds (a call past it ends
    the probe and is its `probe_error`). Raises `UnsupportedTargetError` like a run does."""
    running(None)
    run: _ProbeRun = maybe_apart(_probe, resolver, self_methods or {}, deadline)
    log = run.log
    touched = log.touched
    spellings = tuple(sorted(k for k in touched if k in SPELLINGS_BY_KEY))
    consults_grammar = bool(touched & _GRAMMAR_KEYS)
    window = _window(touched, consults_grammar)
    mixed = None
    if window.empty:
        high = _text(window.high or ())
        mixed = f"{window.low_by} is {_text(window.low)}+, {window.high_by} up to {high}"

    histogram_called = any(f"req.{m}" in log.calls for m in REQ_HISTOGRAM_METHODS)
    why_not: list[tuple[str, str]] = []
    if not histogram_called and not window.empty and window.low < _v(HISTOGRAM_SINCE):
        why_not.append(("histogram", f"never updated; SGLang has one from {HISTOGRAM_SINCE}"))
    written = {k.split(".", 1)[1] for k in log.writes if k.startswith("result.")}
    if not written & set(RESULT_DRAFT_TOTAL_NAMES):
        why_not.append(("result-drafts-total", "never written"))
    if not written & set(RESULT_DRAFT_PER_REQ_NAMES):
        why_not.append(("result-drafts-per-row", "never written"))
    feeds_controller = CONTROLLER_CALL in log.calls
    if not feeds_controller:
        why_not.append(("controller-feed", "never called"))
    elif window.empty or window.low < _v(CONTROLLER_ROUTING_SINCE):
        # A call without batch_size= is right for 0.5.12, whose controller keeps no
        # per-batch-size slots; from 0.5.13 the callee defaults it to 0, the smallest slot.
        why_not.append(
            ("controller-routing", f"its spellings allow SGLang before {CONTROLLER_ROUTING_SINCE}")
        )
    if not written & set(RESULT_BLOCK_CAP_TOTAL_NAMES):
        why_not.append(("result-block-cap", "never written"))

    stride: str | None = next((k for k in _STRIDE_KEYS if k in log.reads), None)
    if (
        stride == "result.speculative_output_stride"
        and "result.speculative_num_draft_tokens" in log.reads
    ):
        stride += ", else result.speculative_num_draft_tokens"
    elif stride == "self.draft_worker.speculative_num_draft_tokens":
        stride += " (the worker's current value)"

    convention, reason = _convention(window, run)
    allocation_rules, allocation_reason = _allocation_rules(window, touched)
    return ApiShape(
        algorithms=_algorithms(window, log.reads),
        block_cap=bool(log.reads & _BLOCK_CAP_KEYS),
        grammar=consults_grammar and not window.empty and window.low >= _v(GRAMMAR_SINCE),
        spellings=spellings,
        first=_text(window.low),
        last=_text(window.high) if window.high is not None else None,
        mixed=mixed,
        stride_source=stride,
        not_judged=frozenset(a for a, _ in why_not),
        not_judged_why=tuple(why_not),
        feeds_controller=feeds_controller,
        convention=convention,
        convention_reason=reason,
        probe_error=run.error,
        allocation_rules=allocation_rules,
        allocation_reason=allocation_reason,
    )


def probe_target(
    spec: str,
    resolver: Callable[..., Any],
    description: str,
    self_methods: Mapping[str, Callable[..., Any]] | None = None,
    code: tuple[CodeSpan, ...] = (),
    *,
    deadline: float | None = DEFAULT_DEADLINE,
) -> Target:
    """A `Target` for `resolver`, carrying its probed API shape, where its code lives (`code`,
    from the source loader) and the deadline of each of its calls (the probe's too). Raises
    `UnsupportedTargetError` when the probe shows the target touches what kvcheck does not
    model."""
    methods = dict(self_methods or {})
    shape = detect_api_shape(resolver, methods, deadline=deadline)
    # A resolver may bring its own allocation path (the corpus's allocation mutants do).
    allocation = getattr(resolver, "kvcheck_allocation", None)
    return Target(
        spec,
        resolver,
        description,
        methods,
        shape,
        code,
        allocation=allocation,
        deadline=deadline,
        family=FAMILY_NAME,
    )
