"""The public API imports as documented, and the testing harness runs operators for real."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from riverbed.graph import Operator, Punct
from riverbed.testing import at, run_operator
from riverbed.windows import EventType

PACKAGES = ["riverbed", "riverbed.windows", "riverbed.graph", "riverbed.runtime", "riverbed.testing",
            "riverbed.operators", "riverbed.checkpoint"]


@pytest.mark.parametrize("name", PACKAGES)
def test_every_exported_name_exists(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__all__, f"{name} declares its public API"
    for export in module.__all__:
        assert hasattr(module, export), f"{name}.{export}"


class Sum(Operator):
    def on_window_event(self, event: Any, port: int) -> None:
        if event.type is EventType.EVICTION:
            self.submit({"sum": sum(t["v"] for t in event.tuples), "at": self.context.now()})


def test_run_operator_drives_time_windows_on_the_virtual_clock() -> None:
    out = run_operator(Sum(), [{"v": 1}, {"v": 2}, at(3.0), {"v": 5}, at(4.5)],
                       window="tumbling, time(2)")
    assert out.tuples == [{"sum": 3, "at": 2_000_000_000}, {"sum": 5, "at": 4_000_000_000}]
    assert out.items[-1] is Punct.FINAL
