"""Messages and refusals that confused (issue 16, item 12): a cycle error that named operators
downstream of the cycle, and checkpoints refusing file names whose bytes are not UTF-8 (FF FE).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from riverbed.checkpoint import RocksDBStore
from riverbed.graph import Graph, GraphValidationError, Operator, Source

ROOT = Path(__file__).resolve().parent.parent
GRAPH = ROOT / "tests" / "graphs" / "crash_graph.py"


class Nothing(Source):
    async def run(self) -> None:
        return


class Pass(Operator):
    def on_tuple(self, tup: Any, port: int) -> None:
        self.submit(tup)


def cycle_errors(g: Graph) -> dict[str, str]:
    with pytest.raises(GraphValidationError) as info:
        g.freeze()
    return {e.operator or "": str(e) for e in info.value.errors if e.rule == "cycle"}


def test_a_cycle_error_names_only_the_operators_on_the_cycle() -> None:
    g = Graph("loop")
    src = g.source("src", Nothing())
    a = g.operator("a", Pass(), [src])
    b = g.operator("b", Pass(), [a])
    g.add_input("a", b)
    after = g.operator("after", Pass(), [b])
    g.sink("sink", Pass(), [after])
    errors = cycle_errors(g)
    assert sorted(errors) == ["a", "b"]  # before: the downstream 'after' and 'sink' too
    assert "is on a cycle with no feedback connection (a -> b -> a); mark the stream that closes it " \
           "with .feedback()" in errors["a"]
    assert "(b -> a -> b)" in errors["b"]


def test_two_cycles_and_a_self_loop_are_each_named_with_their_own_path() -> None:
    g = Graph("loops")
    src = g.source("src", Nothing())
    a = g.operator("a", Pass(), [src])
    b = g.operator("b", Pass(), [a])
    c = g.operator("c", Pass(), [a])
    g.add_input("a", b)
    g.add_input("a", c)  # a -> b -> a and a -> c -> a: one component
    d = g.operator("d", Pass(), [c])
    g.add_input("d", d)  # d feeds itself
    g.sink("sink", Pass(), [d])
    errors = cycle_errors(g)
    assert sorted(errors) == ["a", "b", "c", "d"]
    assert "(c -> a -> c)" in errors["c"]
    assert "(d -> d)" in errors["d"]
    fixed = Graph("loops")
    src = fixed.source("src", Nothing())
    a = fixed.operator("a", Pass(), [src])
    b = fixed.operator("b", Pass(), [a])
    fixed.add_input("a", b.feedback())
    fixed.sink("sink", Pass(), [b])
    fixed.freeze()


def test_a_checkpointing_job_writes_to_a_file_name_that_is_not_utf8(tmp_path: Path) -> None:
    # Bytes FF FE in a file name (Python keeps them as lone surrogates): before, the first
    # checkpoint failed the job with "str ... is not valid Unicode (surrogates not allowed)".
    input_csv = tmp_path / os.fsdecode(b"in-\xff\xfe.csv")
    input_csv.write_text("".join(f"{i},{i % 13},{i % 1000}\n" for i in range(3000)))
    out = tmp_path / os.fsdecode(b"out-\xff\xfe.csv")

    def run(out: Path, *checkpoints: str) -> None:
        args = [sys.executable, "-m", "riverbed", "run", str(GRAPH), "-p", f"input={input_csv}", "-p",
                f"out={out}", "-p", "rate=30000", "--no-status", "--log-format", "json", *checkpoints]
        done = subprocess.run(args, cwd=ROOT, capture_output=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr.decode(errors="replace")

    run(tmp_path / "reference.csv")
    ckpt = tmp_path / "ckpt"
    run(out, "--checkpoint-dir", str(ckpt), "--checkpoint-period", "20ms")
    assert out.read_bytes() == (tmp_path / "reference.csv").read_bytes()
    with RocksDBStore(ckpt, read_only=True) as store:
        latest = store.latest_good()
        assert latest is not None
        assert latest.states["read"]["operator"]["file"] == str(input_csv)
        assert latest.states["write"]["operator"]["file"] == str(out)
