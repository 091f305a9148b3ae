"""Virtual time: the clock moves only when every task waits, and lands exactly on each timer."""

from __future__ import annotations

import asyncio

import pytest

from riverbed.runtime import VirtualClock, run_virtual

S = 1_000_000_000
# Instants where asyncio's own rule (fire what is due before now + 1 ns of clock resolution)
# would take a timer 1 ns ahead as due now: the float seconds of t + 1 ns fall below t's plus 1e-9.
TIES = [8_000_000_010, 8_300_000_000 + 56, 1_750_000_000 * S + 7]


async def _hops(clock: VirtualClock, log: list[tuple[str, int]], n: int) -> None:
    for _ in range(n):  # a tuple's queue hops: each one a loop turn
        await asyncio.sleep(0)
    log.append(("work", clock.now()))


@pytest.mark.parametrize(("start", "t"), [(0, TIES[0]), (0, TIES[1]), *((t, t) for t in TIES)])
def test_a_timer_one_nanosecond_ahead_waits_for_the_work_ready_now(start: int, t: int) -> None:
    clock = VirtualClock(start)
    log: list[tuple[str, int]] = []

    async def main() -> None:
        await clock.sleep_until(t)
        assert clock.now() == t
        clock.call_at(t + 1, lambda: log.append(("timer", clock.now())))
        await _hops(clock, log, 5)
        await clock.sleep_until(t + 2)

    run_virtual(main(), clock)
    assert log == [("work", t), ("timer", t + 1)]


@pytest.mark.parametrize("t", [0, *TIES])
def test_timers_land_exactly_on_their_deadline_and_one_due_now_runs_now(t: int) -> None:
    clock = VirtualClock(t)
    seen: list[int] = []

    async def main() -> None:
        clock.call_at(t, lambda: seen.append(clock.now()))  # due now: must not hang
        await clock.sleep_until(t)
        for step in (1, 2, 3, 999, S // 3, 7 * S):
            target = clock.now() + step
            await clock.sleep_until(target)
            seen.append(clock.now() - target)
        before = clock.now()
        await asyncio.sleep(0.001)  # user code's asyncio timers follow the same clock
        seen.append(clock.now() - before)

    run_virtual(main(), clock)
    assert seen == [t, 0, 0, 0, 0, 0, 0, 1_000_000]

