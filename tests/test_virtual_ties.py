"""On a `VirtualClock`, timers due at one instant run in the order they were set, whatever other
timers there are: the loop's heap left their order to its shape, so a timer set for another
instant (a crash test's, a checkpoint's) changed which of two sources paced alike went first,
and a restarted job's output differed from the uninterrupted run's at such ties (a review)."""

from __future__ import annotations

import asyncio

from riverbed.runtime import VirtualClock, run_virtual

S = 1_000_000_000


def test_timers_due_at_one_instant_run_in_the_order_they_were_set() -> None:
    order: list[int] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        seconds = loop.seconds  # type: ignore[attr-defined]
        for i in range(50):
            loop.call_at(seconds(10 * S), order.append, i)
            loop.call_at(seconds((i % 7 + 1) * S), lambda: None)  # other instants, in between
            if i % 5 == 0:
                loop.call_at(seconds(3 * S), lambda: None).cancel()
        await asyncio.sleep(11)

    run_virtual(main(), VirtualClock())
    assert order == list(range(50))
