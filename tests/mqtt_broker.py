"""A real mosquitto broker for tests: a subprocess on 127.0.0.1, a free port, a generated config.

Why these config lines (all reproduced traps, see notes/dependencies.md §2.4):
``listener PORT 127.0.0.1`` (a bare port binds 0.0.0.0), ``allow_anonymous``
(mosquitto 2 defaults to false per listener), ``max_queued_messages 0`` and
``max_inflight_messages 0`` (the defaults silently drop offline QoS 1 messages
and stall manual acks), ``user root`` under root (otherwise it drops to user
``mosquitto`` and cannot write the persistence file). Tests skip when no
mosquitto binary is found (``scripts/install_broker.sh`` installs it).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

_SEARCH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin", "/sbin"])


def mosquitto_path() -> str | None:
    return shutil.which("mosquitto", path=_SEARCH)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Broker:
    """A running mosquitto; `restart` keeps port and persistence (a graceful restart)."""

    port: int
    workdir: Path
    users: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    host: str = "127.0.0.1"

    def _config(self) -> Path:
        lines = [
            f"listener {self.port} 127.0.0.1",
            f"allow_anonymous {'false' if self.users else 'true'}",
            "persistence true",
            f"persistence_location {self.workdir}/",
            "autosave_interval 1",
            "max_queued_messages 0",
            "max_inflight_messages 0",
            "log_dest stderr",
            "log_type error",
        ]
        if os.geteuid() == 0:
            lines.append("user root")
        if self.users:
            pwfile = self.workdir / "passwords"
            pwfile.write_text("".join(f"{u}:{p}\n" for u, p in self.users.items()))
            pwfile.chmod(0o600)
            tool = shutil.which("mosquitto_passwd", path=_SEARCH)
            if tool is None:
                pytest.skip("mosquitto_passwd not found: cannot make a password file")
            subprocess.run([tool, "-U", str(pwfile)], check=True, capture_output=True)
            lines.append(f"password_file {pwfile}")
        conf = self.workdir / "mosquitto.conf"
        conf.write_text("\n".join(lines) + "\n")
        return conf

    def start(self) -> None:
        exe = mosquitto_path()
        if exe is None:
            pytest.skip("mosquitto not installed (run scripts/install_broker.sh)")
        with (self.workdir / "broker.log").open("ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen([exe, "-c", str(self._config())], stdout=log, stderr=log)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # wait for the listener, polling a TCP connect
            if self.proc.poll() is not None:
                raise RuntimeError(f"mosquitto exited: {(self.workdir / 'broker.log').read_text()}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.005)
        raise RuntimeError(f"mosquitto did not accept connections on port {self.port} within 10 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()


def start_broker(users: dict[str, str] | None = None) -> Broker:
    broker = Broker(free_port(), Path(tempfile.mkdtemp(prefix="riverbed-mqtt-")), dict(users or {}))
    broker.start()
    return broker


@pytest.fixture
def broker() -> Iterator[Broker]:
    """A fresh mosquitto per test (it starts in ~20 ms), stopped at teardown."""
    b = start_broker()
    try:
        yield b
    finally:
        b.stop()
        shutil.rmtree(b.workdir, ignore_errors=True)
