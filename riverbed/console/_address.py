"""The console's address, ``[HOST:]PORT``: checked on its own, before anything is loaded.

Apart from the server so that ``riverbed run --console`` can refuse a bad address at once,
before the graph script runs, without importing the HTTP library.
"""

from __future__ import annotations

import errno
import socket

__all__ = ["DEFAULT_HOST", "ConsoleError", "listen", "parse_address"]

DEFAULT_HOST = "127.0.0.1"


class ConsoleError(RuntimeError):
    """The console cannot start: a bad address, a port in use, no layout."""


def parse_address(text: str) -> tuple[str, int]:
    """``PORT``, ``HOST:PORT`` or ``[IPV6]:PORT`` as (host, port); the host defaults to 127.0.0.1."""
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host = DEFAULT_HOST
    elif host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ConsoleError(f"{text!r}: write an IPv6 host in brackets, as [::1]:8080")
    if not host:
        host = DEFAULT_HOST
    try:
        port = int(port_text)
    except ValueError:
        raise ConsoleError(f"{text!r}: expected [HOST:]PORT, such as 8080 or 0.0.0.0:8080") from None
    if not 0 <= port <= 65535:
        raise ConsoleError(f"{text!r}: port {port} is not a TCP port (0 to 65535; 0 picks a free one)")
    return host, port


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (an IPv6 host when it has a colon), or
    `ConsoleError` saying why not: the console's, or a bind tried and let go before the graph
    script runs (`riverbed run`), so a port in use is refused before anything loads."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            hint = "choose another port, or 0 for any free one"
        elif exc.errno == errno.EACCES:
            hint = "ports below 1024 need privileges: choose another, or 0 for any free one"
        else:  # a host this machine does not have, or a name that does not resolve
            hint = "give an address of this machine (127.0.0.1 by default)"
        raise ConsoleError(f"cannot serve on {host}:{port}: {exc.strerror or exc}; {hint}") from exc
