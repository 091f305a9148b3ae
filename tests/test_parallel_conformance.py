"""The partitioned conformance cases through a parallel region (`riverbed trace --host runtime`
with the window in worker processes): at width 1 every event, step and time as in the runtime;
at widths 2 and 3 the same per pane and partition (channels have no order among them)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from riverbed.conformance import Case, CaseError, Event
from riverbed.runtime import replay_in_runtime
from riverbed.runtime._parallel_trace import replay_in_parallel, unsupported
from tests.test_conformance import CASES_DIR, EXTRA_DIR, selected

pytestmark = pytest.mark.usefixtures("no_worker_leftovers")


def _by_key(events: list[Event]) -> dict[tuple[str, str], list[Event]]:
    keys: dict[tuple[str, str], list[Event]] = defaultdict(list)
    for e in events:
        keys[repr(e.pane), repr(e.partition)].append(e)
    return dict(keys)


def _playable(folder: Any, flavor: str, width: int) -> list[Case]:
    return [c for p in selected(folder, flavor) if unsupported(c := p.values[0], flavor, width) is None]


@pytest.mark.parametrize("folder", [CASES_DIR, EXTRA_DIR], ids=["public", "extra"])
@pytest.mark.parametrize("flavor", ["java", "cpp"])
def test_partitioned_cases_give_the_same_events_at_width_1_2_and_3(folder: Any, flavor: str) -> None:
    checked = 0
    for case in _playable(folder, flavor, 1):
        expected = replay_in_runtime(case, flavor)
        assert replay_in_parallel(case, flavor, 1) == expected, case.name
        for width in (2, 3):
            if unsupported(case, flavor, width) is None:
                assert _by_key(replay_in_parallel(case, flavor, width)) == _by_key(expected), \
                    (case.name, width)
                checked += 1
    assert checked >= (0 if (folder, flavor) == (EXTRA_DIR, "cpp") else 2)  # its partitioned
    # extra cases all use cpp windows that span partitions (refused beyond width 1)


def test_enough_partitioned_cases_play_through_a_region() -> None:
    counts = {(flavor, width): sum(len(_playable(f, flavor, width)) for f in (CASES_DIR, EXTRA_DIR))
              for flavor in ("java", "cpp") for width in (1, 2)}
    assert counts[("java", 1)] >= 20 and counts[("cpp", 1)] >= 15
    assert counts[("java", 2)] >= 10 and counts[("cpp", 2)] >= 6


def test_a_window_whose_events_span_partitions_is_refused_beyond_width_1() -> None:
    case = next(c for p in selected(CASES_DIR, "java") if (c := p.values[0]).name == "pe-tupleCount4-sliding")
    assert unsupported(case, "java", 1) is None
    assert "counts across partitions" in (unsupported(case, "java", 2) or "")
    with pytest.raises(CaseError, match=r"cannot replay through a parallel region of width 2: input "
                                        r"port 0: its partition eviction \(tupleCount\(4\)\) counts"):
        replay_in_parallel(case, "java", 2)
