"""What the engine hands the target: CPU tensors in SGLang's padded layout, live flags."""

from __future__ import annotations

from typing import Any

import torch

from kvcheck.core.run import run_scenario
from kvcheck.families.sglang.builtins import reference
from kvcheck.families.sglang.scenario import Admit, Step, SwitchStride
from tests.helpers import scenario, target


def test_result_tensors_follow_the_padded_layout() -> None:
    seen: list[dict[str, Any]] = []

    def recording(self: Any, result: Any, batch: Any) -> list[list[int]]:
        seen.append(
            {
                "ids": result.next_token_ids.clone(),
                "accepts": result.accept_lens.clone(),
                "launch_stride": result.speculative_num_draft_tokens,
                "worker_stride": self.draft_worker.speculative_num_draft_tokens,
                "rows": [req.rid for req in batch.reqs],
                "batch_size": batch.batch_size(),
            }
        )
        return reference(self, result, batch)

    events = (
        Admit("r0", 4, 50),
        Admit("r1", 4, 50),
        Step(),
        Step((2, 3)),
        SwitchStride(2),
        Step((9, 1)),
    )
    checked = target(recording)  # probes the target's API shape once
    seen.clear()  # what the probe run saw; the scenario's calls follow
    result = run_scenario(scenario(*events, stride=3, adaptive=True), checked)
    assert result.violation is None
    first = seen[0]
    assert first["ids"].dtype == torch.int64 and first["ids"].device.type == "cpu"
    assert first["accepts"].dtype == torch.int32 and first["accepts"].device.type == "cpu"
    assert first["ids"].shape == (2 * 3,)  # rows * launch-time stride, padding included
    assert first["ids"].tolist() == [20000, 20001, 20002, 20100, 20101, 20102]
    assert len(set(first["ids"].tolist())) == 6  # distinct ids, so misaligned slices show
    assert first["accepts"].tolist() == [2, 3]
    assert (first["launch_stride"], first["worker_stride"]) == (3, 2)
    assert (first["rows"], first["batch_size"]) == (["r0", "r1"], 2)


def test_overlap_off_has_no_stale_rows() -> None:
    events = (Admit("r0", 4, 1), Step(), Step((3,)), Step())
    from kvcheck.families.sglang.builtins import seed_prefix

    # seed-prefix only goes wrong on stale rows; without overlap it never sees one.
    result = run_scenario(scenario(*events, overlap=False), target(seed_prefix))
    assert result.violation is None
    assert run_scenario(scenario(*events, overlap=True), target(seed_prefix)).violation is not None
