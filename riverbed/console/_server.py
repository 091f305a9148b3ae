"""The console's HTTP server: aiohttp on an event loop of its own, in a daemon thread.

Its own loop, not the job's: the job may run on a virtual clock (``--virtual-clock``),
where a timer of the console's would move the job's time, and a page being served must
never hold up an operator. It reads the job's metrics the way the Prometheus endpoint
does, from its thread (ints the job's loop replaces whole; see `Sampler`).

Routes (all read-only): ``/`` the page, ``/assets/NAME`` its script and style (shipped in
this package), ``/graph.svg`` the drawing, ``/api/graph`` the graph as JSON,
``/api/history`` the samples kept and the checkpoint history, ``/events`` the samples as
server-sent events, one per interval. Bound to 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from importlib import resources
from types import TracebackType
from typing import Any

import orjson
from aiohttp import web

from riverbed.graph import FrozenGraph

from ..runtime import close_in_workers, forget_in_workers
from ._address import ConsoleError, listen, parse_address
from ._layout import LayoutError, lay_out
from ._sampler import MetricsSource, Sampler
from ._svg import render_svg
from ._view import view_of

__all__ = ["ConsoleError", "ConsoleServer", "parse_address", "serve_console"]

_ASSETS = {"console.js": "text/javascript", "console.css": "text/css", "index.html": "text/html"}
_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    # Everything the page uses comes from this server; the drawing carries an inline <style>.
    "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:",
}
_QUEUE = 8  # samples waiting per page; a page that reads slower loses the oldest


def _asset(name: str) -> bytes:
    return resources.files("riverbed.console").joinpath("assets", name).read_bytes()


class ConsoleServer:
    """A running console; `close` stops it (also a context manager)."""

    def __init__(self, job: MetricsSource, graph: FrozenGraph, host: str, port: int, *, interval: float,
                 history: int) -> None:
        self.job = job
        self.interval = interval
        view = view_of(graph)
        resolution = next((op.event_time.resolution for op in graph.operators if op.event_time), "ns")
        self.sampler = Sampler(job, view, history=history, resolution=resolution)
        try:
            self.svg = render_svg(lay_out(view, live=True)).encode()
        except LayoutError as exc:
            raise ConsoleError(str(exc)) from exc
        self.graph_json = orjson.dumps({"job": job.name, **view.as_dict(), "interval": interval})
        self.assets = {name: _asset(name) for name in _ASSETS}
        self._socket = listen(host, port)
        self._host, self._port = host, int(self._socket.getsockname()[1])
        self._fd = self._socket.fileno()
        close_in_workers(self._fd)  # a worker that outlives the job must not hold the port
        self._loop = asyncio.new_event_loop()
        self._pages: set[asyncio.Queue[bytes | None]] = set()
        self._started = threading.Event()
        self._failure: BaseException | None = None
        self._stop: asyncio.Event | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._main, name=f"riverbed-console:{port}", daemon=True)
        self._thread.start()
        self._started.wait()
        failure = self._start_failure()
        if failure is not None:
            self._thread.join()
            self._socket.close()
            forget_in_workers(self._fd)
            raise ConsoleError(f"cannot serve on {host}:{port}: {failure}") from failure

    def _start_failure(self) -> BaseException | None:
        """What stopped the server thread from serving (set by that thread), if anything."""
        return self._failure

    # ----------------------------------------------------------------- the thread

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve())
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        app = web.Application()
        app.router.add_get("/", self._index)
        app.router.add_get("/assets/{name}", self._static)
        app.router.add_get("/graph.svg", self._svg)
        app.router.add_get("/api/graph", self._graph)
        app.router.add_get("/api/history", self._history)
        app.router.add_get("/events", self._events)
        runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.5)
        try:
            await runner.setup()
            await web.SockSite(runner, self._socket).start()
        except BaseException as exc:
            self._failure = exc
            self._started.set()
            await runner.cleanup()
            return
        self._started.set()
        sampling = asyncio.create_task(self._sample_forever())
        try:
            await self._stop.wait()
        finally:
            sampling.cancel()
            await asyncio.gather(sampling, return_exceptions=True)
            for queue in list(self._pages):
                if queue.full():  # a page that stopped reading: its oldest sample makes room
                    queue.get_nowait()
                queue.put_nowait(None)
            await runner.cleanup()

    async def _sample_forever(self) -> None:
        while True:
            self._publish(self.sampler.sample())
            await asyncio.sleep(self.interval)

    def _publish(self, sample: dict[str, Any]) -> None:
        if not self._pages:  # no page open: the sample is only kept for later
            return
        data = b"event: sample\ndata: " + orjson.dumps(sample) + b"\n\n"
        for queue in self._pages:
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(data)

    # ------------------------------------------------------------------- routes

    def _bytes(self, body: bytes, content_type: str) -> web.Response:
        return web.Response(body=body, content_type=content_type, charset="utf-8", headers=_HEADERS)

    async def _index(self, request: web.Request) -> web.Response:
        return self._bytes(self.assets["index.html"], "text/html")

    async def _static(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in self.assets or name == "index.html":
            raise web.HTTPNotFound(text=f"no asset {name!r}")
        return self._bytes(self.assets[name], _ASSETS[name])

    async def _svg(self, request: web.Request) -> web.Response:
        return self._bytes(self.svg, "image/svg+xml")

    async def _graph(self, request: web.Request) -> web.Response:
        return self._bytes(self.graph_json, "application/json")

    async def _history(self, request: web.Request) -> web.Response:
        return self._bytes(orjson.dumps(self.sampler.history()), "application/json")

    async def _events(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={**_HEADERS, "Content-Type": "text/event-stream",
                                               "X-Accel-Buffering": "no"})
        await response.prepare(request)
        queue: asyncio.Queue[bytes | None] = asyncio.Queue(_QUEUE)
        self._pages.add(queue)
        try:
            await response.write(f"retry: {int(self.interval * 1000)}\n\n".encode())
            if self.sampler.samples:  # the newest at once, not an interval later
                await response.write(b"event: sample\ndata: " + orjson.dumps(self.sampler.samples[-1])
                                     + b"\n\n")
            while (data := await queue.get()) is not None:
                await response.write(data)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._pages.discard(queue)
        return response

    # ------------------------------------------------------------------ control

    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> int:
        """The bound port: the one asked for, or the one the OS chose for 0."""
        return self._port

    @property
    def url(self) -> str:
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self._port}/"

    @property
    def pages(self) -> int:
        """Pages open now (event streams being served)."""
        return len(self._pages)

    def cpu_seconds(self) -> float:
        """CPU time the console's thread has used so far (sampling, serving, pushing): what it
        costs the job's process. 0.0 once closed."""
        ident = self._thread.ident
        if ident is None or not self._thread.is_alive():
            return 0.0
        try:
            return time.clock_gettime(time.pthread_getcpuclockid(ident))
        except (OSError, AttributeError):  # a platform without per-thread CPU clocks
            return 0.0

    def close(self) -> None:
        """Stop serving and wait for the thread. Closing twice is a no-op."""
        if self._closed:
            return
        self._closed = True
        stop = self._stop
        if stop is not None and self._thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop already ended
                self._loop.call_soon_threadsafe(stop.set)
        self._thread.join()
        forget_in_workers(self._fd)

    def __enter__(self) -> ConsoleServer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def serve_console(job: MetricsSource, graph: FrozenGraph, address: str | tuple[str, int] = "127.0.0.1:0", *,
                  interval: float = 1.0, history: int = 600) -> ConsoleServer:
    """Serve the live console of ``job`` (running ``graph``) at ``address`` ([HOST:]PORT).

    Samples every ``interval`` seconds and keeps the last ``history`` samples (ten
    minutes by default) for the plots of a page opened later. Raises `ConsoleError` when
    the address is bad, the port taken or the graph cannot be laid out.
    """
    host, port = parse_address(address) if isinstance(address, str) else address
    if not interval > 0:
        raise ConsoleError(f"console interval {interval!r}: expected seconds > 0")
    return ConsoleServer(job, graph, host, port, interval=interval, history=history)
