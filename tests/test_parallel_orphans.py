"""A job killed outright (kill -9) takes its worker processes with it.

A worker left running finished the batch it was on and wrote on, while ``riverbed run
--restarts`` had started a new job that rewrote the same files: a FileSink opening its next
file removed what the new job had committed there (1,800 of 20,000 rows lost, exit 0).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = '''
import os, time
from typing import Any
from riverbed.graph import Graph, Operator
from riverbed.operators import Beacon

class Stuck(Operator):
    """Tells the test its pid, then is busy in a long call (the job is killed meanwhile)."""

    def on_tuple(self, tup: Any, port: int) -> None:
        with open(os.environ["RIVERBED_TEST_FIFO"], "w") as fifo:
            fifo.write(f"{os.getpid()}\\n")
        time.sleep(120)

def build(params: dict[str, Any]) -> Graph:
    g = Graph("orphans", params)
    src = g.source("beacon", Beacon(iterations=50, output={"k": lambda i: i}))
    with g.parallel(2, partition_by="k"):
        stuck = g.operator("stuck", Stuck(), [src])
    g.sink("sink", Stuck(), [stuck])
    return g
'''


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG) is Linux's")
def test_the_workers_of_a_job_killed_outright_end_with_it(tmp_path: Path) -> None:
    script = tmp_path / "graph.py"
    script.write_text(SCRIPT)
    fifo = tmp_path / "pids"
    os.mkfifo(fifo)
    job = subprocess.Popen([sys.executable, "-m", "riverbed", "run", str(script), "--no-status"],
                           env={**os.environ, "RIVERBED_TEST_FIFO": str(fifo)},
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        workers: set[int] = set()
        while len(workers) < 2:
            with open(fifo) as pids:  # blocks until a worker opens it to write its pid
                workers.update(int(line) for line in pids)  # until the writers closed it
        assert job.pid not in workers
        handles = [os.pidfd_open(pid) for pid in workers]
        job.send_signal(signal.SIGKILL)
        job.wait()
        # Both workers exit within seconds (they slept 120 s before, then wrote to the dead job).
        ended: set[int] = set()
        while len(ended) < len(handles):
            ready, _, _ = select.select([h for h in handles if h not in ended], [], [], 15)
            assert ready, "a worker outlived the job it belonged to"
            ended.update(ready)
        for h in handles:
            os.close(h)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
