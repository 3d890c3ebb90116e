"""Fake SGLang objects the target resolver is called with: `Req`, `ScheduleBatch`, the batch
result and the scheduler (`self`).

They speak the attribute spellings SGLang's resolver has used across releases (semantics.md §1):
every spelling of one quantity is an alias of one stored value, so a resolver from any
generation reads and writes the same ledger, and the engine observes it in one place.

Reading or calling an attribute that is not modelled raises `UnmodeledAttributeError`: kvcheck
cannot judge such a target, so it is reported as unsupported (exit 2), never as a violation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import torch

# One stored value, many historical names (semantics.md §1.1, §1.2).
REQ_DRAFT_COUNTER_NAMES: Final = (
    "spec_accepted_tokens",  # <= 0.5.10
    "spec_accepted_drafts",  # 0.5.11
    "spec_num_correct_drafts",  # >= 0.5.12
)
REQ_HISTOGRAM_METHODS: Final = (
    "update_spec_acceptance_histogram",  # 0.5.9 - 0.5.11
    "update_spec_correct_drafts_histogram",  # >= 0.5.12
)
RESULT_DRAFT_TOTAL_NAMES: Final = (
    "num_accepted_tokens",  # <= 0.5.10
    "num_accepted_drafts",  # 0.5.11
    "num_correct_drafts",  # >= 0.5.12
)
RESULT_DRAFT_PER_REQ_NAMES: Final = (
    "accept_length_per_req_cpu",  # 0.5.8 - 0.5.10
    "num_accepted_drafts_per_req_cpu",  # 0.5.11
    "num_correct_drafts_per_req_cpu",  # >= 0.5.12
)


class UnmodeledAttributeError(AttributeError):
    """The target touched an attribute of a fake that kvcheck does not model."""

    def __init__(self, owner: str, name: str, supported: tuple[str, ...]) -> None:
        self.owner = owner
        self.attribute = name
        self.supported = supported
        super().__init__(
            f"target reads `{owner}.{name}`, which kvcheck does not model; "
            f"supported on {owner}: {', '.join(sorted(supported))}"
        )


class _Strict:
    """Base for fakes: unknown attribute reads raise `UnmodeledAttributeError`."""

    _owner: str = "object"

    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup failed.
        if name.startswith("__"):
            raise AttributeError(name)
        supported = tuple(n for n in dir(type(self)) if not n.startswith("_")) + tuple(
            n for n in self.__dict__ if not n.startswith("_")
        )
        raise UnmodeledAttributeError(self._owner, name, supported)


def _alias(field: str) -> property:
    def get(self: Any) -> Any:
        return getattr(self, field)

    def set_(self: Any, value: Any) -> None:
        setattr(self, field, value)

    return property(get, set_)


class FakeKvInfo(_Strict):
    """`req.kv` (0.5.16+): the committed and allocated lengths live on the request object."""

    _owner = "req.kv"

    def __init__(self, req: FakeReq) -> None:
        self._req = req

    @property
    def kv_committed_len(self) -> int:
        return self._req.kv_committed_len

    @kv_committed_len.setter
    def kv_committed_len(self, value: int) -> None:
        self._req.kv_committed_len = value

    @property
    def kv_allocated_len(self) -> int:
        return self._req.kv_allocated_len

    @kv_allocated_len.setter
    def kv_allocated_len(self, value: int) -> None:
        self._req.kv_allocated_len = value


class FakeSamplingParams(_Strict):
    _owner = "req.sampling_params"

    def __init__(self, max_new_tokens: int) -> None:
        self.max_new_tokens = max_new_tokens


class FakeReq(_Strict):
    """A request as the resolver sees it. Staleness flags are live: read at delivery time."""

    _owner = "req"

    def __init__(self, rid: str, prompt_len: int, max_new_tokens: int) -> None:
        self.rid = rid
        self.origin_input_ids = list(range(1, prompt_len + 1))
        self.output_ids: list[int] = []
        self.sampling_params = FakeSamplingParams(max_new_tokens)
        self.kv_committed_len = 0
        self.kv_allocated_len = 0
        self.is_retracted = False
        self.retraction_count = 0
        self.finished_reason: str | None = None
        self.finished_len: int | None = None
        self.to_finish: str | None = None
        self.grammar = None
        self.spec_verify_ct = 0
        self._spec_drafts = 0
        self._histogram: dict[int, int] = {}
        self.kv = FakeKvInfo(self)

    def finished(self) -> bool:
        return self.finished_reason is not None

    def _record_histogram(self, drafts: int) -> None:
        # A dict, not SGLang's growing list: a negative or non-int bucket stays visible.
        key = int(drafts)
        self._histogram[key] = self._histogram.get(key, 0) + 1

    def histogram(self) -> tuple[tuple[int, int], ...]:
        """The acceptance histogram as sorted (accepted drafts, count) pairs."""
        return tuple(sorted(self._histogram.items()))


for _name in REQ_DRAFT_COUNTER_NAMES:
    setattr(FakeReq, _name, _alias("_spec_drafts"))
for _name in REQ_HISTOGRAM_METHODS:
    setattr(FakeReq, _name, FakeReq._record_histogram)


class FakeBatch(_Strict):
    """The launch-time snapshot of a decode batch (SGLang's `batch.copy()`): a fresh list of the
    shared request objects, so row order is fixed at launch and flags are read at delivery."""

    _owner = "batch"

    def __init__(self, reqs: list[FakeReq]) -> None:
        self.reqs = reqs
        self.spec_algorithm = "EAGLE"
        self.has_grammar = False
        self.enable_overlap = True

    def batch_size(self) -> int:
        return len(self.reqs)


class FakeResult(_Strict):
    """The decode result: padded `next_token_ids` (int64) and `accept_lens` (int32) on the CPU,
    the stride recorded at launch, and the counters the resolver writes."""

    _owner = "result"

    def __init__(
        self, next_token_ids: torch.Tensor, accept_lens: torch.Tensor, launch_stride: int
    ) -> None:
        self.next_token_ids = next_token_ids
        self.accept_lens = accept_lens
        self.speculative_num_draft_tokens = launch_stride
        self.num_non_draft_tokens_per_req = 1
        self.block_accept_lens = None
        self.cap_lens = None
        self.grammar_retained_tokens = None
        self._draft_total: int | None = None
        self._draft_per_req: list[int] | None = None


for _name in RESULT_DRAFT_TOTAL_NAMES:
    setattr(FakeResult, _name, _alias("_draft_total"))
for _name in RESULT_DRAFT_PER_REQ_NAMES:
    setattr(FakeResult, _name, _alias("_draft_per_req"))


class FakeDraftWorker(_Strict):
    """`self.draft_worker`: its stride is the scheduler's *current* one, which an adaptive
    switch may have changed since the batch being delivered was launched."""

    _owner = "self.draft_worker"

    def __init__(self, stride: int) -> None:
        self.speculative_num_draft_tokens = stride


class FakeModelWorker(_Strict):
    """`self.model_worker`: records what the resolver feeds the adaptive controller."""

    _owner = "self.model_worker"

    def __init__(self) -> None:
        self.verify_feeds: list[list[int]] = []

    def on_verify_complete_cpu(self, per_req: list[int], batch_size: int | None = None) -> None:
        self.verify_feeds.append([int(x) for x in per_req])


class FakeScheduler(_Strict):
    """The resolver's `self`. Extra methods of a source-loaded class are bound onto it."""

    _owner = "self"

    def __init__(self, stride: int, overlap: bool) -> None:
        self.draft_worker = FakeDraftWorker(stride)
        self.model_worker = FakeModelWorker()
        self.enable_overlap = overlap

    def bind_methods(self, methods: dict[str, Callable[..., Any]]) -> None:
        for name, function in methods.items():
            setattr(self, name, function.__get__(self, type(self)))
