"""MQTT inside a consistent region (issue 19): an ``ack="checkpoint"`` MQTTSource takes part in
the region's resets. What followed the last committed checkpoint is replayed, not lost; nothing
is acknowledged before the checkpoint holding its effects committed; the transactional sink ends
with each message exactly once.

Against a real mosquitto (tests/mqtt_broker.py), on the wall clock. Checkpoints are asked for by
the test at chosen points (`Region.request_consistent`, the region's period being far away), so
each reset lands where the test says: before any checkpoint, between two, during one. The last
test runs a short period with faults at seeded random readings instead. Nothing sleeps: the
test waits on the sink's rows and resets, on the job, on a sentinel message.

Two witnesses of "not acknowledged early": a spy on `MQTTClient.ack` checks, at each ack, that
the message's reading is in the sink's state of the last committed checkpoint; and at the end a
client taking over the source's persistent session gets back from the broker exactly what the
source did not acknowledge.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import orjson
import pytest
import structlog
from structlog.testing import capture_logs

from riverbed.checkpoint import MemoryStore
from riverbed.graph import Graph, Operator, Schema
from riverbed.mqtt import ClientConfig, MQTTClient, MQTTSource, Received
from riverbed.runtime import Job, JobError

from .mqtt_broker import Broker, broker

__all__ = ["broker"]  # the fixture, imported for pytest

SCHEMA = Schema(seq="int64", value="int64")
TOPIC = "region/readings"
TIMEOUT = 30.0
SENTINEL = -1


class InjectedFault(Exception):
    """A transient fault: raised once at a chosen reading, gone after the reset."""


class FailOnce(Operator):
    """Forwards each reading; raises at each reading of ``fail_on`` the first time it sees it,
    and in the next checkpoint's snapshot once ``fail_snapshot`` is set."""

    def __init__(self, fail_on: Iterable[int] = ()) -> None:
        self.fail_on = set(fail_on)
        self.fail_snapshot = False

    def on_tuple(self, tup: Any, port: int) -> None:
        seq = tup["seq"]
        if seq in self.fail_on:
            self.fail_on.discard(seq)
            raise InjectedFault(f"injected at reading {seq}")
        self.submit({"seq": seq, "value": tup["value"]})

    def snapshot(self) -> Any:
        if self.fail_snapshot:
            self.fail_snapshot = False
            raise InjectedFault("injected while checkpointing")
        return None


class Rows(Operator):
    """A transactional sink whose output is its state: a reset takes back what followed the
    checkpoint it restores. Tests wait on it (rows, resets)."""

    transactional = True

    def __init__(self) -> None:
        self.seqs: list[int] = []
        self.resets = 0
        self.changes = 0  # rows and resets: the progress a wait goes on for
        self.changed = asyncio.Event()

    def on_tuple(self, tup: Any, port: int) -> None:
        self.seqs.append(tup["seq"])
        self.changes += 1
        self.changed.set()

    def snapshot(self) -> Any:
        return list(self.seqs)

    def restore(self, state: Any) -> None:
        self.seqs = list(state)
        self.resets += 1
        self.changes += 1
        self.changed.set()

    def reset_to_initial_state(self) -> None:
        self.restore([])

    async def reached(self, rows: int, resets: int) -> None:
        while len(self.seqs) < rows or self.resets < resets:
            self.changed.clear()
            await self.changed.wait()


class AckSpy:
    """Wraps `MQTTClient.receive` and `MQTTClient.ack`: which reading each ack is for, and
    whether the sink's state in the last committed checkpoint held it at that moment."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.latest: dict[int, int] = {}  # packet id -> reading of the last message it named
        self.acked: list[int] = []
        self.early: list[int | None] = []
        self.refused: list[int | None] = []  # acks not sent (not connected): redelivered, then acked
        self.committed: Callable[[], set[int]] = set
        receive, ack = MQTTClient.receive, MQTTClient.ack

        async def spy_receive(client: MQTTClient, timeout: float, limit: int = 4096) -> list[Received]:
            got = await receive(client, timeout, limit)
            if client.manual_ack:
                for m in got:
                    self.latest[m.mid] = orjson.loads(m.payload)["seq"]
            return got

        def spy_ack(client: MQTTClient, mid: int, qos: int, session: int | None = None) -> bool:
            seq = self.latest.get(mid)
            if seq is None or seq not in self.committed():
                self.early.append(seq)
            elif seq != SENTINEL:
                self.acked.append(seq)
            sent = ack(client, mid, qos, session)
            if not sent:
                self.refused.append(seq)
            return sent

        monkeypatch.setattr(MQTTClient, "receive", spy_receive)
        monkeypatch.setattr(MQTTClient, "ack", spy_ack)


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> AckSpy:
    return AckSpy(monkeypatch)


async def publish(port: int, seqs: Iterable[int]) -> None:
    async with MQTTClient(ClientConfig("127.0.0.1", port)) as client:
        for i in seqs:
            await client.publish(TOPIC, orjson.dumps({"seq": i, "value": i * 7}), 1)


async def unacknowledged(port: int, client_id: str) -> list[int]:
    """What the broker still holds for ``client_id``'s session: a client taking the session
    over gets the unacknowledged messages first, then a sentinel published after it connected."""
    config = ClientConfig("127.0.0.1", port, client_id=client_id, persistent=True)
    async with MQTTClient(config, subscriptions=[("region/#", 1)], manual_ack=True) as client:
        assert client.last_connect is not None and client.last_connect.session_present
        await publish(port, [SENTINEL])
        seqs: list[int] = []
        while True:
            got = await client.receive(TIMEOUT)
            assert got, f"no message for {TIMEOUT} s: the sentinel did not come back ({seqs[-10:]} last)"
            for m in got:
                seq = orjson.loads(m.payload)["seq"]
                if seq == SENTINEL:
                    return seqs
                seqs.append(seq)


def _describe(seqs: list[int], n: int) -> str:
    """What is wrong with ``seqs`` as the readings 0..n-1 in order, once each."""
    dup = sorted(k for k, c in Counter(seqs).items() if c > 1)
    missing = sorted(set(range(n)) - set(seqs))
    at = next((i for i, (a, b) in enumerate(zip(seqs, range(n), strict=False)) if a != b), len(seqs))
    return (f"{len(seqs)} rows, repeated {dup[:20]}, missing {missing[:20]}, first wrong at "
            f"{at}: {seqs[max(0, at - 5):at + 10]}")


class Run:
    """MQTTSource(ack="checkpoint") -> FailOnce -> Rows, all in one region, on the wall clock."""

    def __init__(self, broker: Broker, name: str, spy: AckSpy, fail_on: Iterable[int] = (),
                 period: float = 600.0) -> None:
        self.port = broker.port
        self.client_id = f"{name}-consumer"
        self.source = MQTTSource(broker.host, broker.port, topics=["region/#"], qos=1, schema=SCHEMA,
                                 topic_attribute=None, client_id=self.client_id, ack="checkpoint",
                                 idle_flush=0.01)
        self.check = FailOnce(fail_on)
        self.out = Rows()
        self.store = MemoryStore()  # keeps 3: a save scans what it keeps
        g = Graph(name)
        s = g.source("mqtt", self.source, schema=SCHEMA)
        checked = g.operator("check", self.check, [s], [SCHEMA])
        g.sink("out", self.out, [checked])
        g.consistent_region(s, name="r", period=period)
        self.job = Job(g, checkpoints=self.store, logger=structlog.get_logger().bind(job=name))
        (self.region,) = self.job.regions
        self._committed: tuple[int | None, set[int]] = (None, set())
        spy.committed = self.committed
        self.task: asyncio.Task[Any] | None = None

    def committed(self) -> set[int]:
        """The readings in the sink's state of the last committed checkpoint."""
        cid = self.region.last_committed
        if cid is not None and cid != self._committed[0]:
            self._committed = (cid, set(self.store.load(cid).states["out"]["operator"]))
        return self._committed[1]

    async def start(self) -> None:
        self.task = asyncio.create_task(self.job.run())
        await self.until(self.source.subscribed.wait(), "the source subscribed")

    async def until(self, aw: Awaitable[Any], what: str, progress: Callable[[], int] | None = None) -> Any:
        """``aw``'s result; fails if the job ended first or it took over TIMEOUT, or, with
        ``progress``, once ``progress()`` stood still for TIMEOUT (a long run on a loaded
        machine goes on while it moves; a stall fails as before)."""
        assert self.task is not None
        waiter = asyncio.ensure_future(aw)
        mark = progress() if progress is not None else None
        while True:
            done, _ = await asyncio.wait({waiter, self.task}, timeout=TIMEOUT,
                                         return_when=asyncio.FIRST_COMPLETED)
            if done or progress is None or progress() == mark:
                break
            mark = progress()
        if waiter in done:
            return waiter.result()
        waiter.cancel()
        if self.task in done:
            self.task.result()
            raise AssertionError(f"the job ended before {what}")
        seqs = self.out.seqs
        missing = sorted(set(range(max(seqs, default=0))) - set(seqs))
        raise AssertionError(f"not {what} within {TIMEOUT} s{' of no progress' if progress else ''}: "
                             f"{len(seqs)} rows ({missing[:10]} missing), {self.out.resets} resets")

    async def reached(self, rows: int, resets: int = 0) -> None:
        """Waits for ``rows`` rows after ``resets`` resets; they must be 0..rows-1, in order."""
        await self.until(self.out.reached(rows, resets), f"{rows} rows after {resets} resets",
                         progress=lambda: self.out.changes)
        seqs = list(self.out.seqs)
        assert seqs == list(range(rows)), _describe(seqs, rows)

    async def checkpoint(self) -> bool:
        ok: bool = await self.until(self.region.request_consistent(), "a checkpoint ended")
        return ok

    async def stop(self) -> None:
        self.job.stop()  # with checkpoints: a last checkpoint, committed (and acknowledged)
        await self.until(asyncio.shield(self.task), "the job stopped")  # type: ignore[arg-type]

    async def abort(self) -> None:
        self.job.abort()  # nothing committed, nothing acknowledged
        assert self.task is not None
        with pytest.raises(JobError, match="aborted"):
            await self.task


def _run(main: Callable[[], Awaitable[None]]) -> list[dict[str, Any]]:
    """Run ``main`` and return the log events of the run."""
    with capture_logs() as events:
        asyncio.run(main())
    return events


def _resets(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == "mqtt source reset"]


def _replays_logged(events: list[dict[str, Any]]) -> None:
    """Each reset logs what it replays, then (unless the next reset came first) that the
    replay is done: how many messages came again, how long it took."""
    kinds = [e["event"] for e in events if e["event"] in ("mqtt source reset", "mqtt replay done")]
    assert kinds[0] == "mqtt source reset" and kinds[-1] == "mqtt replay done", kinds
    assert "mqtt replay done, mqtt replay done" not in ", ".join(kinds), kinds
    for e in events:
        if e["event"] == "mqtt replay done":
            assert e["replayed"] >= 0 and e["replay_ms"] > 0


def test_resets_before_any_checkpoint_replay_everything_from_the_initial_state(broker: Broker,
                                                                              spy: AckSpy) -> None:
    async def main() -> None:
        run = Run(broker, "initial", spy, fail_on={60, 130})
        await run.start()
        await publish(broker.port, range(200))
        await run.reached(200, resets=2)
        assert run.region.last_committed is None and spy.acked == [] and spy.early == []
        assert run.source.messages_replayed >= 61 + 131  # what it had received at each reset
        assert await run.checkpoint()
        assert sorted(spy.acked) == list(range(200))  # at the commit, each once
        await run.stop()
        assert await unacknowledged(broker.port, run.client_id) == []
        assert spy.early == []

    events = _run(main)
    first, second = _resets(events)
    assert first["to_checkpoint"] is None and first["replay"] >= 61 and first["acks_pending"] == 0
    assert second["to_checkpoint"] is None and second["replay"] >= 131
    _replays_logged(events)


def test_resets_between_checkpoints_replay_what_followed_the_last_one(broker: Broker,
                                                                      spy: AckSpy) -> None:
    async def main() -> None:
        run = Run(broker, "between", spy, fail_on={150, 230, 280})
        await run.start()
        await publish(broker.port, range(100))
        await run.reached(100)
        assert await run.checkpoint()
        await publish(broker.port, range(100, 200))
        await run.reached(200, resets=1)  # the reset at 150
        assert await run.checkpoint()
        await publish(broker.port, range(200, 300))
        await run.reached(300, resets=3)  # at 230, then at 280
        assert await run.checkpoint()
        assert sorted(spy.acked) == list(range(300)) and spy.early == []
        await publish(broker.port, range(300, 350))
        await run.reached(350, resets=3)
        await run.abort()  # 300..349 are in no committed checkpoint: the broker must keep them
        assert await unacknowledged(broker.port, run.client_id) == list(range(300, 350))
        assert run.committed() == set(range(300))
        assert sorted(spy.acked) == list(range(300)) and spy.early == []

    events = _run(main)
    resets = _resets(events)
    _replays_logged(events)
    assert [e["to_checkpoint"] for e in resets] == [1, 2, 2]
    assert [e["replay"] >= n for e, n in zip(resets, (51, 31, 81), strict=True)] == [True] * 3


def test_a_reset_during_a_checkpoint_acknowledges_none_of_it(broker: Broker, spy: AckSpy) -> None:
    async def main() -> None:
        run = Run(broker, "draining", spy)
        await run.start()
        await publish(broker.port, range(100))
        await run.reached(100)
        assert await run.checkpoint()
        await publish(broker.port, range(100, 200))
        await run.reached(200)
        run.check.fail_snapshot = True  # the source has taken its part of checkpoint 2: 100..199
        assert not await run.checkpoint()  # reset to checkpoint 1 instead
        await run.reached(200, resets=1)
        assert sorted(spy.acked) == list(range(100)) and spy.early == []
        assert await run.checkpoint()
        await run.stop()
        assert await unacknowledged(broker.port, run.client_id) == []
        assert sorted(spy.acked) == list(range(200)) and spy.early == []

    events = _run(main)
    _replays_logged(events)
    (reset,) = _resets(events)
    assert reset["to_checkpoint"] == 1 and reset["replay"] == 100


def test_faults_at_random_readings_under_a_short_period_lose_and_repeat_nothing(broker: Broker,
                                                                              spy: AckSpy) -> None:
    n = 3000
    faults = set(random.Random(19).sample(range(n), 6))

    async def main() -> None:
        run = Run(broker, "periodic", spy, fail_on=faults, period=0.05)
        await run.start()
        feeding = asyncio.create_task(publish(broker.port, range(n)))
        await run.reached(n, resets=len(faults))
        await feeding
        while len(run.committed()) < n:  # (a checkpoint under way may not hold the last ones)
            await run.checkpoint()
        await run.abort()
        assert await unacknowledged(broker.port, run.client_id) == []
        assert sorted(spy.acked) == list(range(n)) and spy.early == [] and spy.refused == []
        region = run.job.metrics.regions["r"]
        assert region.resets == len(faults) and region.checkpoints > 5

    events = _run(main)
    assert len(_resets(events)) == len(faults)
    _replays_logged(events)



def test_acks_sent_before_a_close_reach_the_broker_before_the_next_connection(broker: Broker) -> None:
    """What a reset does to the connection, alone: ack everything, close, reconnect at once
    with the same client_id. The broker must have read every ack first (it reads a connection
    one packet per turn; the new connection takes the session over and closes the old one)."""
    n = 3000
    config = ClientConfig("127.0.0.1", broker.port, client_id="settle-consumer", persistent=True)

    async def main() -> list[int]:
        async with MQTTClient(config, subscriptions=[("region/#", 1)], manual_ack=True) as client:
            await publish(broker.port, range(n))
            got: list[Received] = []
            while len(got) < n:
                got += await client.receive(TIMEOUT)
            assert all(client.ack(m.mid, m.qos) for m in got)
        return await unacknowledged(broker.port, "settle-consumer")

    assert asyncio.run(asyncio.wait_for(main(), TIMEOUT)) == []
