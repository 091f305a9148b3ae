"""A local MQTT broker for demos and tests: mosquitto if installed, else amqtt in a child process.

``start_broker(host="127.0.0.1", port=0)`` returns a running `Broker` (also a
context manager that stops it). Port 0 picks a free port.

* **mosquitto** (preferred) runs as a subprocess with a generated config.
  Every line is there for a trap reproduced in ``notes/dependencies.md``
  §2.4: ``listener PORT HOST`` (a bare port binds 0.0.0.0),
  ``allow_anonymous`` (mosquitto 2 defaults to false per listener),
  ``max_queued_messages 0`` and ``max_inflight_messages 0`` (the defaults
  silently drop offline QoS 1 messages and stall manual acks), ``user root``
  under root (otherwise it drops to user ``mosquitto`` and cannot write its
  persistence file). ``settings`` replaces or adds lines (``{"max_packet_size":
  "1000"}``); a value of None drops the generated line, so mosquitto's own
  default applies (tests of what those defaults cost).
* **amqtt 0.12.1** (``pip install 'riverbed[embedded-broker]'``) when no
  ``mosquitto`` binary is found: in a child Python process, bound to the
  host given (127.0.0.1 by default). It has real gaps, logged at start:
  state in memory only (a restart loses sessions), MQTT 3.1.1 only, unacked
  in-flight QoS 1 messages are not resent after a reconnect, offline
  messages for anonymous clients are dropped, and it costs ~8x the CPU of
  mosquitto per message.

Neither available: `BrokerUnavailable`, saying how to install one.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

__all__ = ["AMQTT_GAPS", "Broker", "BrokerUnavailable", "free_port", "mosquitto_path", "start_broker"]

Kind = Literal["mosquitto", "amqtt"]

_log = logging.getLogger("riverbed.mqtt.broker")

_SEARCH_DIRS = ("/usr/sbin", "/usr/local/sbin", "/sbin")

AMQTT_GAPS = ("state in memory only (a broker restart loses sessions and queued messages); "
              "MQTT 3.1.1 only (no MQTT 5); unacknowledged in-flight QoS 1 messages are NOT resent "
              "after a reconnect (persistent sessions can lose messages); offline messages for "
              "anonymous clients are dropped; ~8x mosquitto's CPU per message. Install mosquitto "
              "(apt-get install mosquitto, or scripts/install_broker.sh) for the full guarantees")

INSTALL_HINT = ("no MQTT broker available: install mosquitto (apt-get install -y mosquitto, or "
                "scripts/install_broker.sh), or the embedded fallback with "
                ".venv/bin/pip install 'riverbed[embedded-broker]' (amqtt 0.12.1)")


class BrokerUnavailable(RuntimeError):
    """No broker can be started here; the message says what to install."""


def mosquitto_path() -> str | None:
    """The ``mosquitto`` binary (PATH, then the sbin directories), or None."""
    search = os.pathsep.join([os.environ.get("PATH", ""), *_SEARCH_DIRS])
    return shutil.which("mosquitto", path=search)


def amqtt_available() -> bool:
    return importlib.util.find_spec("amqtt") is not None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class Broker:
    """A broker running in a child process on ``host:port``; `restart` keeps port and
    (mosquitto) persistence. ``kind`` is ``"mosquitto"`` or ``"amqtt"``."""

    def __init__(self, kind: Kind, host: str, port: int, workdir: Path, *,
                 users: dict[str, str] | None = None, own_workdir: bool = True,
                 settings: Mapping[str, str | None] | None = None) -> None:
        self.kind: Kind = kind
        self.host = host
        self.port = port
        self.workdir = workdir
        self.users = dict(users or {})
        self.settings = dict(settings or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self._own_workdir = own_workdir

    def __repr__(self) -> str:
        return f"Broker({self.kind}, {self.host}:{self.port})"

    @property
    def log_file(self) -> Path:
        return self.workdir / "broker.log"

    def _mosquitto_config(self) -> Path:
        generated = {
            "listener": f"{self.port} {self.host}",
            "allow_anonymous": "false" if self.users else "true",
            "persistence": "true",
            "persistence_location": f"{self.workdir}/",
            "autosave_interval": "1",
            "max_queued_messages": "0",
            "max_inflight_messages": "0",
            "log_dest": "stderr",
            "log_type": "error",
        } | self.settings
        lines = [f"{key} {value}" for key, value in generated.items() if value is not None]
        if os.geteuid() == 0:
            lines.append("user root")
        if self.users:
            pwfile = self.workdir / "passwords"
            pwfile.write_text("".join(f"{u}:{p}\n" for u, p in self.users.items()))
            pwfile.chmod(0o600)
            search = os.pathsep.join([os.environ.get("PATH", ""), *_SEARCH_DIRS])
            tool = shutil.which("mosquitto_passwd", path=search)
            if tool is None:
                raise BrokerUnavailable("mosquitto_passwd not found: cannot make a password file")
            subprocess.run([tool, "-U", str(pwfile)], check=True, capture_output=True)
            lines.append(f"password_file {pwfile}")
        conf = self.workdir / "mosquitto.conf"
        conf.write_text("\n".join(lines) + "\n")
        return conf

    def _command(self) -> list[str]:
        if self.settings and self.kind != "mosquitto":
            raise BrokerUnavailable("broker settings are mosquitto configuration lines; "
                                    "install mosquitto to use them")
        if self.kind == "mosquitto":
            exe = mosquitto_path()
            if exe is None:
                raise BrokerUnavailable(INSTALL_HINT)
            return [exe, "-c", str(self._mosquitto_config())]
        if self.users:
            raise BrokerUnavailable("the embedded amqtt broker is started without users; "
                                    "install mosquitto for password files")
        return [sys.executable, "-m", "riverbed.mqtt._broker", "amqtt", self.host, str(self.port)]

    def start(self, timeout: float = 15.0) -> None:
        cmd = self._command()
        with self.log_file.open("ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                         start_new_session=True)  # Ctrl-C in a shell: we stop it
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:  # wait for the listener, polling a TCP connect
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited with {self.proc.returncode}: "
                                   f"{self.log_file.read_text(errors='replace')[-2000:]}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.005)
        self.stop()
        raise RuntimeError(f"{self.kind} did not accept connections on {self.host}:{self.port} "
                           f"within {timeout} s")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def kill(self) -> None:
        """SIGKILL, as a crash or an OOM kill would: mosquitto saves nothing on the way out."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        """Stop the broker and remove its working directory (if `start_broker` made it)."""
        self.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def start_broker(host: str = "127.0.0.1", port: int = 0, *, users: dict[str, str] | None = None,
                 prefer: Kind | None = None, workdir: str | Path | None = None,
                 settings: Mapping[str, str | None] | None = None) -> Broker:
    """Start mosquitto (found on PATH or in sbin), else amqtt in a child process; see the module
    doc. ``prefer`` forces one kind; ``users`` and ``settings`` (mosquitto only) turn on a
    password file and replace configuration lines."""
    kind: Kind
    if prefer is not None:
        kind = prefer
        if kind == "mosquitto" and mosquitto_path() is None:
            raise BrokerUnavailable(f"mosquitto asked for but not found; {INSTALL_HINT}")
        if kind == "amqtt" and not amqtt_available():
            raise BrokerUnavailable("amqtt asked for but not installed: "
                                    ".venv/bin/pip install 'riverbed[embedded-broker]'")
    elif mosquitto_path() is not None:
        kind = "mosquitto"
    elif amqtt_available():
        kind = "amqtt"
    else:
        raise BrokerUnavailable(INSTALL_HINT)
    if kind == "amqtt":
        why = "as asked" if prefer == "amqtt" else "no mosquitto binary found"
        _log.warning("%s: starting the embedded amqtt broker in a child process on %s. Its gaps: %s",
                     why, host, AMQTT_GAPS)
    own = workdir is None
    path = Path(tempfile.mkdtemp(prefix="riverbed-mqtt-")) if workdir is None else Path(workdir)
    path.mkdir(parents=True, exist_ok=True)
    broker = Broker(kind, host, port or free_port(host), path, users=users, own_workdir=own,
                    settings=settings)
    try:
        broker.start()
    except BaseException:
        broker.close()
        raise
    return broker


# ------------------------------------------------------------------ the amqtt child process


def _amqtt_main(host: str, port: int) -> None:  # pragma: no cover - runs in the child process
    import asyncio

    config: dict[str, Any] = {
        "listeners": {"default": {"type": "tcp", "bind": f"{host}:{port}"}},
        "plugins": {"amqtt.plugins.authentication.AnonymousAuthPlugin": {"allow_anonymous": True}},
    }
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    async def serve() -> None:
        broker_mod = importlib.import_module("amqtt.broker")
        broker = broker_mod.Broker(config)
        await broker.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await broker.shutdown()

    asyncio.run(serve())


if __name__ == "__main__":  # pragma: no cover - the child process
    if len(sys.argv) != 4 or sys.argv[1] != "amqtt":
        sys.exit("usage: python -m riverbed.mqtt._broker amqtt HOST PORT")
    _amqtt_main(sys.argv[2], int(sys.argv[3]))
