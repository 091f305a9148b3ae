"""Prometheus export of a job's metrics, read at scrape time.

The runtime already counts everything in plain integer fields, once per
batch (`riverbed.runtime.JobMetrics`). Rather than mirror those counts into
prometheus-client ``Counter`` objects on the hot path (0.7-3.5 µs an
increment), a custom collector reads `Job.snapshot_metrics()` when Prometheus
scrapes and turns it into metric families. Between scrapes the exporter
costs nothing.

The scrape runs on the HTTP server's thread while the job runs on its event
loop. That is safe here: the collector only reads ints that the loop
replaces whole (the GIL makes each read atomic), and the operator and port
collections never change once a job exists. Counts of different ports may
come from slightly different instants, which Prometheus tolerates.

The server binds to 127.0.0.1 by default (prometheus-client's own default is
every interface) and uses a private `CollectorRegistry`, so two jobs in one
process, or a test, never collide in the global registry.
"""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Callable, Iterator
from socketserver import ThreadingMixIn
from types import TracebackType
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import structlog
from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..core import InputPortMetrics
from ._parallel import close_in_workers, forget_in_workers
from ._status import MetricsSource

__all__ = ["JobCollector", "MetricsServer", "serve_metrics"]

# (metric name without _total, help text, the InputPortMetrics value): one counter per input port each.
_INPUT_COUNTERS: tuple[tuple[str, str, Callable[[InputPortMetrics], int]], ...] = (
    ("riverbed_tuples_processed", "Tuples processed on an input port.", lambda p: p.tuples_processed),
    ("riverbed_window_puncts_processed", "Window punctuations processed on an input port.",
     lambda p: p.window_puncts_processed),
    ("riverbed_final_puncts_processed", "Final punctuations processed on an input port.",
     lambda p: p.final_puncts_processed),
    ("riverbed_late_tuples", "Tuples dropped on an input port as too late for a timeInterval window.",
     lambda p: p.tuples_dropped_late),
    ("riverbed_errors", "Errors raised while processing an input port.", lambda p: p.errors),
)
_PORT_LABELS = ("job", "operator", "port")
_OPERATOR_LABELS = ("job", "operator")


class JobCollector:
    """A prometheus-client collector that reads a job's metrics each time it is collected."""

    def __init__(self, job: MetricsSource) -> None:
        self.job = job

    def collect(self) -> Iterator[Metric]:
        metrics = self.job.snapshot_metrics()
        inputs = [CounterMetricFamily(name, doc, labels=_PORT_LABELS) for name, doc, _ in _INPUT_COUNTERS]
        submitted = CounterMetricFamily("riverbed_tuples_submitted", "Tuples submitted on an output port.",
                                        labels=_PORT_LABELS)
        waits = CounterMetricFamily("riverbed_backpressure_waits",
                                    "Times an upstream waited on this operator's full inbox.",
                                    labels=_OPERATOR_LABELS)
        size = GaugeMetricFamily("riverbed_queue_size", "Batches waiting in the operator's inbox.",
                                 labels=_OPERATOR_LABELS)
        capacity = GaugeMetricFamily("riverbed_queue_capacity", "Batches the operator's inbox holds.",
                                     labels=_OPERATOR_LABELS)
        high_water = GaugeMetricFamily("riverbed_queue_high_water", "Most batches ever queued at once.",
                                       labels=_OPERATOR_LABELS)
        watermark = GaugeMetricFamily("riverbed_watermark",
                                      "The operator's event-time watermark in ticks (absent until set).",
                                      labels=_OPERATOR_LABELS)
        own = CounterMetricFamily("riverbed_operator_events",
                                  "Counts an operator keeps of its own (context.counter).",
                                  labels=[*_OPERATOR_LABELS, "name"])
        for name, op in metrics.operators.items():
            # A copy taken at once: an operator may add a counter on the job's loop while this
            # thread scrapes. (``list(d.items())`` is not one: a collection it triggers may run
            # Python code, and another thread with it; ``dict.copy`` makes no object a time.)
            for counter_name, counter in op.counters.copy().items():
                own.add_metric([metrics.job, name, counter_name], counter.value)
            for port, pm in enumerate(op.inputs):
                labels = [metrics.job, name, str(port)]
                for family, (_, _, value) in zip(inputs, _INPUT_COUNTERS, strict=True):
                    family.add_metric(labels, value(pm))
            for port, om in enumerate(op.outputs):
                submitted.add_metric([metrics.job, name, str(port)], om.tuples_submitted)
            labels = [metrics.job, name]
            waits.add_metric(labels, op.backpressure_waits)
            size.add_metric(labels, op.queue_size)
            capacity.add_metric(labels, op.queue_capacity)
            high_water.add_metric(labels, op.queue_high_water)
            if op.watermark is not None:
                watermark.add_metric(labels, op.watermark)
        yield from inputs
        yield from (submitted, waits, size, capacity, high_water, watermark, own)
        yield from _region_metrics(metrics)
        yield from _channel_metrics(metrics.job, self.job)


def _channel_metrics(job_name: str, job: Any) -> Iterator[Metric]:
    """Parallel regions: each channel's worker process, tuples in and out, its bounded queue,
    the messages its worker sent, the writes that carried them, and its CPU time."""
    channels: list[Any] = getattr(job, "channel_metrics", list)()
    if not channels:
        return
    labels = ["job", "region", "channel"]
    alive = GaugeMetricFamily("riverbed_channel_alive", "1 while the channel's worker process runs.",
                              labels=[*labels, "pid"])
    tuples_in = CounterMetricFamily("riverbed_channel_tuples_in", "Tuples sent into the channel.",
                                    labels=labels)
    tuples_out = CounterMetricFamily("riverbed_channel_tuples_out", "Tuples merged out of the channel.",
                                     labels=labels)
    in_flight = GaugeMetricFamily("riverbed_channel_batches_in_flight",
                                  "Batches sent to the channel and not yet answered.", labels=labels)
    waits = CounterMetricFamily("riverbed_channel_backpressure_waits",
                                "Times the split waited for room in the channel's queue.", labels=labels)
    messages = CounterMetricFamily("riverbed_channel_worker_messages",
                                   "Messages read from the channel's worker.", labels=labels)
    writes = CounterMetricFamily("riverbed_channel_worker_writes",
                                 "Writes that carried the worker's messages, as it last said.",
                                 labels=labels)
    cpu = CounterMetricFamily("riverbed_channel_cpu_seconds",
                              "CPU seconds of the channel's worker process, as it last said "
                              "(channels sharing a process each show the process's).",
                              labels=labels)
    for m in channels:
        values = [job_name, m.region, str(m.channel)]
        alive.add_metric([*values, str(m.pid)], 1 if m.alive else 0)
        tuples_in.add_metric(values, m.tuples_in)
        tuples_out.add_metric(values, m.tuples_out)
        in_flight.add_metric(values, m.batches_in_flight)
        waits.add_metric(values, m.backpressure_waits)
        messages.add_metric(values, m.worker_messages)
        writes.add_metric(values, m.worker_writes)
        cpu.add_metric(values, m.cpu_seconds)
    yield from (alive, tuples_in, tuples_out, in_flight, waits, messages, writes, cpu)


def _region_metrics(metrics: Any) -> Iterator[Metric]:
    """Consistent regions: state (one gauge per state, 1 for the current one), last committed
    checkpoint, the last drain and save durations, checkpoints and resets; process restarts."""
    labels = ["job", "region"]
    state = GaugeMetricFamily("riverbed_region_state", "1 for the region's current state.",
                              labels=[*labels, "state"])
    last = GaugeMetricFamily("riverbed_region_last_checkpoint", "The last committed checkpoint id.",
                             labels=labels)
    drain = GaugeMetricFamily("riverbed_region_drain_seconds", "The last checkpoint's drain time.",
                              labels=labels)
    save = GaugeMetricFamily("riverbed_region_checkpoint_seconds", "The last checkpoint's save time.",
                             labels=labels)
    recovery = GaugeMetricFamily("riverbed_region_recovery_seconds",
                                 "The last reset: from the failure to processing again.", labels=labels)
    checkpoints = CounterMetricFamily("riverbed_region_checkpoints", "Checkpoints committed.",
                                      labels=labels)
    resets = CounterMetricFamily("riverbed_region_resets", "Resets after a failure.", labels=labels)
    for name, rm in metrics.regions.items():
        key = [metrics.job, name or "job"]
        for value in ("processing", "draining", "resetting", "failed"):
            state.add_metric([*key, value], 1.0 if rm.state == value else 0.0)
        if rm.last_committed is not None:
            last.add_metric(key, rm.last_committed)
        drain.add_metric(key, rm.drain_ms / 1000)
        save.add_metric(key, rm.checkpoint_ms / 1000)
        recovery.add_metric(key, rm.last_recovery_ms / 1000)
        checkpoints.add_metric(key, rm.checkpoints)
        resets.add_metric(key, rm.resets)
    restarts = CounterMetricFamily("riverbed_job_restarts", "Job processes restarted (--restarts).",
                                   labels=["job"])
    restarts.add_metric([metrics.job], metrics.restarts)
    yield from (state, last, drain, save, recovery, checkpoints, resets, restarts)


class MetricsServer:
    """The running ``/metrics`` HTTP endpoint; `close` stops it (it is also a context manager)."""

    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread
        self._closed = False

    @property
    def host(self) -> str:
        return str(self._server.server_address[0])

    @property
    def port(self) -> int:
        """The bound port: the one asked for, or the one the OS chose when asked for 0."""
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving, release the port and wait for the server thread. Closing twice is a no-op."""
        if self._closed:
            return
        self._closed = True
        fd = self._server.fileno()
        self._server.shutdown()
        self._server.server_close()
        forget_in_workers(fd)
        self._thread.join()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    """One thread per scrape, so a stuck client cannot block the next scrape."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A request that broke off (too many headers, a reset): one debug event, not the
        traceback socketserver prints on stderr, where any local client could put plain text
        among a job's JSON log lines."""
        error = sys.exc_info()[1]
        structlog.get_logger().debug("metrics request failed", client=str(client_address),
                                     error=repr(error))


class _ThreadingWSGIServer6(_ThreadingWSGIServer):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    """No access log line on stderr per scrape: stderr belongs to the job's logs."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve_metrics(job: MetricsSource, port: int, host: str = "127.0.0.1") -> MetricsServer:
    """Serve ``job``'s metrics for Prometheus at ``http://host:port/metrics`` from a daemon thread.

    Port 0 picks a free port (read it from `MetricsServer.port`). Counters,
    labelled ``job, operator, port`` (input ports, or output ports for
    submitted): ``riverbed_tuples_processed_total``,
    ``riverbed_tuples_submitted_total``,
    ``riverbed_window_puncts_processed_total``,
    ``riverbed_final_puncts_processed_total``, ``riverbed_late_tuples_total``,
    ``riverbed_errors_total``; labelled ``job, operator``:
    ``riverbed_backpressure_waits_total``. Gauges labelled ``job, operator``:
    ``riverbed_queue_size``, ``riverbed_queue_capacity``,
    ``riverbed_queue_high_water``, ``riverbed_watermark`` (absent until the
    operator has a watermark). The values stay readable after the job ends,
    until `MetricsServer.close`.
    """
    if not 0 <= port <= 65535:
        raise ValueError(f"metrics port {port}: expected 0..65535 (0 picks a free port)")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(JobCollector(job))
    server_class = _ThreadingWSGIServer6 if ":" in host else _ThreadingWSGIServer
    try:
        server = make_server(host, port, make_wsgi_app(registry), server_class=server_class,
                             handler_class=_QuietHandler)
    except OSError as exc:
        raise OSError(exc.errno, f"metrics endpoint {host}:{port}: {exc.strerror}; choose another port, "
                                 "or 0 for any free one") from exc
    # The poll interval bounds how long close() waits for the thread (the stdlib default is 0.5 s).
    close_in_workers(server.fileno())  # a worker that outlives the job must not hold the port
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              name=f"riverbed-metrics:{server.server_port}", daemon=True)
    thread.start()
    return MetricsServer(server, thread)
