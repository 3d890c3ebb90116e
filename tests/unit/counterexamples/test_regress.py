"""The module `kvcheck regress` generates is valid Python whatever the file's strings hold."""

from __future__ import annotations

import ast

import pytest

from kvcheck.core.run import run_scenario
from kvcheck.counterexamples.regress import regression_test
from kvcheck.counterexamples.replay import from_run
from kvcheck.families.sglang.scenario import Admit, Step
from kvcheck.targets.loading import load_target
from tests.helpers import scenario


@pytest.mark.parametrize("rid", ["r\\N0", "r\\x", "r\\u12", "r\\", 'r"""0', "r\x07bell"])
def test_odd_request_ids_keep_the_docstring_valid_and_readable(rid: str) -> None:
    # The stale row of a finished request (docs/semantics.md §3.1), under a hostile request id.
    stale = scenario(Admit(rid, 10, 3), Step(), Step((2,)), Step((3,)), Step(), stride=4)
    result = run_scenario(stale, load_target("builtin:seed-prefix"), record=True)
    assert result.violation is not None and result.violation.rid == rid
    counterexample = from_run(result, "builtin:seed-prefix")
    text = regression_test(counterexample, source='saved\\odd """ name.kvcheck.json')
    module = ast.parse(text)  # a SyntaxError here is the bug
    docstring = ast.get_docstring(module, clean=False) or ""
    shown = rid.replace('"""', "'''").replace("\x07", "\\x07")
    assert f"({shown})" in docstring
    assert "from saved/odd ''' name.kvcheck.json" in docstring
    assert "\x07" not in text
