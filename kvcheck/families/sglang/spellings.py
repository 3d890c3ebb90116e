"""The spellings catalogue: every attribute, method and collaborator an SGLang resolver has used,
with the releases that use it (docs/semantics.md §1.1, §1.2).

`SPELLINGS` is the single list of what kvcheck models: the fakes (`kvcheck.families.sglang.fakes`)
provide
exactly these, the probe (`kvcheck.families.sglang.probe`) reads a target's API generation off the
ones it touches, error messages name them, and `spellings_table()` renders them for docs/sglang.md
(`kvcheck spellings`).
"""

from __future__ import annotations

from typing import Final

import attrs


@attrs.frozen
class Spelling:
    """One attribute, method or collaborator a resolver may use, as kvcheck models it."""

    path: str  # "req.kv.kv_committed_len"; a call is written "name()"
    meaning: str
    first: str | None  # first SGLang version whose resolver uses it (None: every version)
    last: str | None  # last such version (None: still current)
    kvcheck: str  # what the fake provides or records
    # What `traced()` records for it, when that is not the path without its parentheses.
    record: str | None = None

    @property
    def key(self) -> str:
        """The path without the call parentheses, as `traced()` records it."""
        return self.record or self.path.split("(", 1)[0]

    @property
    def owner(self) -> str:
        """The object it lives on, as a fake's `_owner` names it (`req.kv`, `self.model_worker`)."""
        return self.key.rsplit(".", 1)[0]

    @property
    def name(self) -> str:
        """The attribute or method name on its owner."""
        return self.key.rsplit(".", 1)[1]

    @property
    def versions(self) -> str:
        """The SGLang releases whose resolvers use it, as `version_range` writes them."""
        return version_range(self.first, self.last)


def version_range(first: str | None, last: str | None) -> str:
    """A release range as text: `all`, `0.5.16+` (still current), `up to 0.5.10` (since the oldest
    release read), one version, or `0.5.12-0.5.14`.
    """
    if first is None and last is None:
        return "all"
    if last is None:
        return f"{first}+"
    if first is None:
        return f"up to {last}"
    return first if first == last else f"{first}-{last}"


# Quantities kvcheck judges, and every name SGLang has given them (docs/semantics.md §1.1, §1.2).
REQ_COMMITTED_NAMES: Final = ("kv_committed_len",)  # on req (<= 0.5.18) and req.kv (>= 0.5.19)
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
    "accept_length_per_req_cpu",  # 0.5.7 - 0.5.10
    "num_accepted_drafts_per_req_cpu",  # 0.5.11
    "num_correct_drafts_per_req_cpu",  # >= 0.5.12
)
RESULT_BLOCK_CAP_TOTAL_NAMES: Final = ("num_block_accept_tokens", "num_cap_tokens")  # >= 0.5.16
CONTROLLER_CALL: Final = "self.model_worker.on_verify_complete_cpu"
CONTROLLER_CALL_WITH_BATCH_SIZE: Final = CONTROLLER_CALL + "(batch_size=)"
# The first release whose controller routes its feed by `batch_size=` (per-batch-size slots);
# its callee defaults an omitted one to 0.
CONTROLLER_ROUTING_SINCE: Final = "0.5.13"

_DRAFTS = "accepted drafts per request (one stored value)"
_HISTOGRAM = "acceptance histogram, bucket = accepted drafts"
_TOTAL = "batch total of accepted drafts (one stored value)"
_PER_ROW = "accepted drafts per row, stale rows included (one stored value)"

SPELLINGS: Final[tuple[Spelling, ...]] = (
    # --- the request -------------------------------------------------------------------------
    Spelling("req.rid", "request id", None, None, "r0, r1, ..."),
    Spelling("req.origin_input_ids", "prompt tokens (P)", None, None, "list of P ints"),
    Spelling("req.output_ids", "output tokens (L)", None, None, "list; the engine appends runs"),
    Spelling("req.sampling_params.max_new_tokens", "length cap", None, None, "from the scenario"),
    Spelling("req.kv_committed_len", "committed KV length C", None, "0.5.18", "judged"),
    Spelling("req.kv.kv_committed_len", "committed KV length C", "0.5.19", None, "same value"),
    Spelling("req.kv_allocated_len", "allocated KV length", None, "0.5.15", "set at prefill"),
    Spelling("req.kv.kv_allocated_len", "allocated KV length", "0.5.16", None, "same value"),
    Spelling("req.is_retracted", "retracted, read at delivery", None, None, "live flag"),
    Spelling("req.retraction_count", "retractions so far", None, None, "live counter"),
    Spelling("req.finished()", "finished, read at delivery", None, None, "live flag"),
    Spelling("req.finished_reason", "finish reason", None, None, "None until finished"),
    Spelling(
        "req.finished_len",
        "output length at the stop",
        None,
        None,
        "None until a length or stop-token finish (aborts leave it None)",
    ),
    Spelling("req.to_finish", "pending abort", None, None, "set by an Abort event"),
    Spelling("req.grammar", "grammar FSM", "0.5.14", None, "None, or the Admit's grammar"),
    Spelling(
        "req.grammar.accept_token(t)",
        "advance the grammar by one token",
        "0.5.14",
        None,
        "ValueError at a refused position or after termination",
    ),
    Spelling(
        "req.grammar.is_terminated()",
        "grammar satisfied",
        "0.5.14",
        None,
        "from the Admit's grammar",
    ),
    Spelling("req.grammar.finished", "finish flag the scheduler syncs", "0.5.14", None, "synced"),
    Spelling(
        "req.inflight_middle_chunks",
        "chunked-prefill chunks in flight",
        "0.5.17",
        None,
        "0 (no chunked prefill)",
    ),
    Spelling("req.spec_verify_ct", "verify count", None, None, "judged"),
    Spelling("req.spec_accepted_tokens", _DRAFTS, None, "0.5.10", "judged"),
    Spelling("req.spec_accepted_drafts", _DRAFTS, "0.5.11", "0.5.11", "judged"),
    Spelling("req.spec_num_correct_drafts", _DRAFTS, "0.5.12", None, "judged"),
    Spelling(
        "req.update_spec_acceptance_histogram(d)",
        _HISTOGRAM,
        "0.5.9",
        "0.5.11",
        "judged once the target updates a histogram or its spellings are 0.5.9+",
    ),
    Spelling(
        "req.update_spec_correct_drafts_histogram(d)",
        _HISTOGRAM,
        "0.5.12",
        None,
        "same histogram",
    ),
    Spelling("req.spec_num_block_accept_tokens", "block-accept tokens", "0.5.16", None, "0"),
    Spelling("req.spec_num_cap_tokens", "cap tokens", "0.5.16", None, "0"),
    Spelling(
        "req.update_spec_cap_lens_histogram(n)", "cap-length histogram", "0.5.16", None, "recorded"
    ),
    # --- the batch snapshot ------------------------------------------------------------------
    Spelling("batch.reqs", "rows, in launch order", None, None, "fresh list per launch"),
    Spelling("batch.batch_size()", "row count, stale rows included", None, None, "len(reqs)"),
    Spelling("batch.enable_overlap", "overlap scheduling", None, None, "from the scenario"),
    Spelling("batch.has_grammar", "any grammar request", None, None, "any row has a grammar"),
    Spelling(
        "batch.forward_mode",
        "extend or decode batch",
        "0.5.17",
        None,
        "is_decode() / is_extend() for the launch's kind",
    ),
    Spelling(
        "batch.spec_algorithm",
        "speculative algorithm",
        None,
        None,
        "EAGLE: is_eagle() True; is_none(), is_eagle3(), is_dflash(), is_uno(), is_ngram() False",
    ),
    # --- the result --------------------------------------------------------------------------
    Spelling("result.next_token_ids", "padded verify output", None, None, "CPU int64 [rows*S]"),
    Spelling("result.accept_lens", "accept length a per row", None, None, "CPU int32 [rows]"),
    Spelling(
        "result.speculative_num_draft_tokens",
        "row width S recorded at launch",
        "0.5.12",
        None,
        "the launch stride",
    ),
    Spelling(
        "result.speculative_output_stride",
        "row width when it differs from S (UNO)",
        "0.5.20",
        None,
        "None (EAGLE): read S from speculative_num_draft_tokens",
    ),
    Spelling(
        "result.num_non_draft_tokens_per_req", "k (non-draft tokens per row)", "0.5.20", None, "1"
    ),
    Spelling("result.block_accept_lens", "block-accept lengths", "0.5.16", None, "None"),
    Spelling("result.cap_lens", "cap lengths", "0.5.16", None, "None"),
    Spelling("result.grammar_advanced", "grammar already advanced", "0.5.17", None, "False"),
    Spelling(
        "result.grammar_retained_tokens",
        "per row: None, or the token ids it kept after grammar",
        "0.5.17",
        None,
        "None until set",
    ),
    Spelling(
        "result.copy_done", "device-to-host copy event", "0.5.17", None, "synchronize() returns"
    ),
    Spelling(
        "result.num_accepted_tokens", _TOTAL, None, "0.5.10", "judged if the target writes it"
    ),
    Spelling("result.num_accepted_drafts", _TOTAL, "0.5.11", "0.5.11", "judged if written"),
    Spelling("result.num_correct_drafts", _TOTAL, "0.5.12", None, "judged if written"),
    Spelling("result.accept_length_per_req_cpu", _PER_ROW, "0.5.7", "0.5.10", "judged if written"),
    Spelling(
        "result.num_accepted_drafts_per_req_cpu", _PER_ROW, "0.5.11", "0.5.11", "judged if written"
    ),
    Spelling(
        "result.num_correct_drafts_per_req_cpu", _PER_ROW, "0.5.12", None, "judged if written"
    ),
    Spelling(
        "result.num_block_accept_tokens", "batch block-accept total", "0.5.16", None, "must be 0"
    ),
    Spelling("result.num_cap_tokens", "batch cap total", "0.5.16", None, "must be 0"),
    # --- the scheduler (self) and its collaborators ------------------------------------------
    Spelling("self.enable_overlap", "overlap scheduling", None, None, "from the scenario"),
    Spelling(
        "self.draft_worker.speculative_num_draft_tokens",
        "the worker's current S",
        None,
        "0.5.11",
        "changed by SwitchStride",
    ),
    Spelling(
        "self.model_worker.on_verify_complete_cpu(per_req)",
        "adaptive controller feed",
        "0.5.12",
        None,
        "recorded; judged if called (ideal: live rows only)",
    ),
    Spelling(
        "self.model_worker.on_verify_complete_cpu(per_req, batch_size=n)",
        "adaptive controller feed",
        "0.5.13",
        None,
        "batch_size must be the launched batch's row count (a routing key)",
        record=CONTROLLER_CALL_WITH_BATCH_SIZE,
    ),
    Spelling(
        "self.metrics_reporter.snapshot_spec_decode_metrics(batch, result)",
        "metrics snapshot (read-only)",
        "0.5.23",
        None,
        "recorded; returns None",
    ),
    Spelling(
        "self.advance_grammar_fsm(result, batch)",
        "advance grammars once per result",
        "0.5.17",
        None,
        "the file's own method runs; else kvcheck's (memoised, live grammar rows)",
    ),
    Spelling(
        "self.abort_request(AbortReq(rid=...))",
        "abort a request (grammar refusal)",
        "0.5.14",
        "0.5.15",
        "running: to_finish; waiting: leaves the queue",
    ),
    Spelling(
        "self.<method>()",
        "other methods of the resolver's class",
        None,
        None,
        "read from the same source file and bound to the fake",
    ),
)

SPELLINGS_BY_KEY: Final[dict[str, Spelling]] = {s.key: s for s in SPELLINGS}


def modelled_names(owner: str) -> tuple[str, ...]:
    """The names kvcheck models directly on `owner` (e.g. `req`), sorted: what an
    `UnmodeledAttributeError` lists as supported there.
    """
    prefix = owner + "."
    names = {
        s.key[len(prefix) :].split(".", 1)[0].split("(", 1)[0]
        for s in SPELLINGS
        if s.key.startswith(prefix)
    }
    names.discard("<method>")
    return tuple(sorted(names))


def spellings_table() -> str:
    """The supported spellings as a Markdown table (docs/sglang.md, "Supported spellings")."""
    lines = [
        "| spelling | meaning | SGLang resolvers using it | kvcheck |",
        "|---|---|---|---|",
    ]
    for s in SPELLINGS:
        lines.append(f"| `{s.path}` | {s.meaning} | {s.versions} | {s.kvcheck} |")
    return "\n".join(lines)
