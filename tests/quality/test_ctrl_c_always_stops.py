"""Ctrl-C always stops `kvcheck check` (issue 23, item 7): thirty SIGINTs at random moments,
one in each thirtieth of the span from the interpreter's start-up through the probe to the middle
of the Hypothesis search, each end the process with exit code 130 and no traceback. Before
`kvcheck.core.interrupts`, about one in five landed in Hypothesis's garbage-collector callback,
where Python drops exceptions, and the search went on; one during the import of the commands
ended the interpreter by SIGINT (-2). The presses are stratified rather than independent (the
test once sent fifty): no part of the span goes without one, at three fifths of the cost."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

KVCHECK = [sys.executable, "-m", "kvcheck.cli"]
PRESSES = 30
# Seconds after the start: start-up takes 1-2 s here (imports, the probe), longer under load;
# the search runs after it. Presses later than 3 s would all land in the same search loop.
EARLIEST, LATEST = 0.3, 3.0


def test_thirty_ctrl_cs_at_random_moments_all_exit_130(tmp_path: Path) -> None:
    chooser = random.Random(23)
    width = (LATEST - EARLIEST) / PRESSES
    # One random moment in each of PRESSES equal slices of the span, in a random order.
    delays = [EARLIEST + (i + chooser.random()) * width for i in range(PRESSES)]
    chooser.shuffle(delays)
    outcomes: list[tuple[float, int | None, str]] = []
    for delay in delays:
        process = subprocess.Popen(
            [*KVCHECK, "check", "builtin:reference", "--max-examples", "100000", "--no-save"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
        )
        time.sleep(delay)
        process.send_signal(signal.SIGINT)
        try:
            _, err = process.communicate(timeout=15)
        except subprocess.TimeoutExpired:  # the search went on: Ctrl-C was lost
            process.kill()
            _, err = process.communicate()
            outcomes.append((delay, None, err[-300:]))
            continue
        outcomes.append((delay, process.returncode, err[-300:] if "Traceback" in err else ""))
    failed = [o for o in outcomes if o[1] != 130 or o[2]]
    assert not failed, failed
