"""`MQTTClient.publish` ends when its task is cancelled and when its connection is gone.

Seen as a hang of tests/test_mqtt_regions.py under load: a wait in the test failed, and
``asyncio.run`` cancelled the remaining tasks, the publisher and its client's connection task
together. The cancel reached the publisher as a PUBACK did: aiomqtt waits for the PUBACK with
``asyncio.wait_for``, which on Python 3.11 returns the result and drops the cancellation. The
publisher went on to its next message, with the connection task cancelled but the client still
marked connected, so each attempt failed at once, backed off and tried again: for ever, and
``asyncio.run`` never returned. Against a real mosquitto (tests/mqtt_broker.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiomqtt
import pytest

from riverbed.mqtt import ClientConfig, MQTTClient, MQTTPublishError

from .mqtt_broker import Broker, broker

__all__ = ["broker"]  # the fixture, imported for pytest


def test_a_cancel_that_comes_with_the_puback_cancels_the_publish(broker: Broker,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    waiting: asyncio.Future[asyncio.Future[None]] | None = None

    async def publish(self: aiomqtt.Client, *args: Any, **kwargs: Any) -> None:
        # What aiomqtt does after sending a QoS 1 message: wait_for the PUBACK's event.
        assert waiting is not None
        puback: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiting.set_result(puback)
        await asyncio.wait_for(puback, 10)

    async def main() -> None:
        nonlocal waiting
        async with MQTTClient(ClientConfig("127.0.0.1", broker.port)) as client:
            monkeypatch.setattr(aiomqtt.Client, "publish", publish)
            waiting = asyncio.get_running_loop().create_future()
            task = asyncio.create_task(client.publish("t/a", b"x", 1))
            puback = await waiting
            puback.set_result(None)  # the PUBACK and the cancel in the same turn of the loop
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            monkeypatch.undo()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_publish_after_the_connection_task_was_cancelled_fails_instead_of_retrying(
        broker: Broker) -> None:
    async def main() -> None:
        client = MQTTClient(ClientConfig("127.0.0.1", broker.port), name="pub")
        async with client:
            await client.publish("t/a", b"before", 1)
            (connection,) = [t for t in asyncio.all_tasks() if t.get_name() == "pub/connection"]
            connection.cancel()  # what asyncio.run does to every task left at its end
            await asyncio.wait({connection})
            with pytest.raises(MQTTPublishError, match=r"'pub'.*connection .*ended"):
                await asyncio.wait_for(client.publish("t/a", b"after", 1), 10)

    asyncio.run(main())
