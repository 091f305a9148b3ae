"""Fixtures shared by the test modules."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator

import pytest

from riverbed.runtime._parallel import parent_fds


@pytest.fixture
def no_worker_leftovers() -> Iterator[None]:
    """After a test of parallel regions or process groups: no worker process still alive and
    no job-side channel socket still open. A module asks for it with
    ``pytestmark = pytest.mark.usefixtures("no_worker_leftovers")``."""
    yield
    assert multiprocessing.active_children() == []
    assert parent_fds() == frozenset()
