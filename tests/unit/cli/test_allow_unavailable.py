"""A target that needs --allow-unavailable-imports keeps needing it after it is saved: replay
(and everything built on it) loads the saved target the way `check` loaded it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcheck.cli.main import main

# Like a real checkout: a module-level import of a name the resolver only uses on a path kvcheck
# never takes (a request retracted a hundred times), and a stale-row bug kvcheck does find.
SOURCE = """
from sglang.srt.server_args import get_global_server_args


class Processor:
    def resolve(self, result, batch):
        tokens = result.next_token_ids.tolist()
        accepts = result.accept_lens.tolist()
        stride = self.draft_worker.speculative_num_draft_tokens
        for req, accepted in zip(batch.reqs, accepts):
            if req.retraction_count > 100:
                req.to_finish = get_global_server_args()
            req.kv_committed_len += accepted - 1
            req.spec_verify_ct += 1
            req.spec_accepted_drafts += accepted - 1
            req.update_spec_acceptance_histogram(accepted - 1)
        return [tokens[i * stride : i * stride + a] for i, a in enumerate(accepts)]
"""

OPTIONS = ["--seed", "1", "--max-examples", "200", "--no-database", "--global-counters", "off"]


@pytest.fixture
def target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "processor.py").write_text(SOURCE)
    return "processor.py::Processor.resolve"


def test_strict_loading_names_the_missing_import(
    target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", target, *OPTIONS]) == 2
    assert "get_global_server_args" in capsys.readouterr().err


def test_replay_loads_the_target_as_check_did(
    target: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", target, "--allow-unavailable-imports", *OPTIONS]) == 1
    (saved,) = (tmp_path / ".kvcheck" / "counterexamples").iterdir()
    document = json.loads(saved.read_text())
    assert document["allow_unavailable_imports"] is True
    capsys.readouterr()

    assert main(["replay", str(saved)]) == 1
    assert "REPRODUCED" in capsys.readouterr().out

    # The same file without the option cannot load its target: a clear exit 2, not a finding.
    del document["allow_unavailable_imports"]
    saved.write_text(json.dumps(document))
    assert main(["replay", str(saved)]) == 2
    assert "get_global_server_args" in capsys.readouterr().err
