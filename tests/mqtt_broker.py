"""A real mosquitto broker for tests: `riverbed.mqtt._broker` (a subprocess on 127.0.0.1, a free
port, a generated config; see that module for why each config line is there).

Tests skip when no mosquitto binary is found (``scripts/install_broker.sh`` installs it).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest

from riverbed.mqtt._broker import Broker, BrokerUnavailable, free_port, mosquitto_path
from riverbed.mqtt._broker import start_broker as _start

__all__ = ["Broker", "broker", "free_port", "mosquitto_path", "start_broker"]


def start_broker(users: dict[str, str] | None = None,
                 settings: Mapping[str, str | None] | None = None) -> Broker:
    """A mosquitto on 127.0.0.1 and a free port (the test skips without mosquitto).

    ``settings`` replaces configuration lines (``{"max_packet_size": "1000"}``); None as a
    value drops the line, leaving mosquitto's default (``{"max_inflight_messages": None}``)."""
    if mosquitto_path() is None:
        pytest.skip("mosquitto not installed (run scripts/install_broker.sh)")
    try:
        return _start(users=users, prefer="mosquitto", settings=settings)
    except BrokerUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture
def broker() -> Iterator[Broker]:
    """A fresh mosquitto per test (it starts in ~20 ms), stopped at teardown."""
    b = start_broker()
    try:
        yield b
    finally:
        b.close()
