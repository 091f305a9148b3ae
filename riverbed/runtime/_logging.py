"""Structured logs for a running job: one event per line, with job/operator/port as keys.

Logging is configured once per process with `configure_logging` and read by
every operator through a logger from `get_logger`, bound once when the
operator starts. Two things decide the design:

* **A filtered-out call must cost next to nothing**, because operators may log
  from per-batch code. structlog's `make_filtering_bound_logger` builds a class
  whose methods below the level are a bare ``return None`` (~60 ns a call),
  but only on a *concrete* bound logger: calling through the lazy proxy that
  ``structlog.get_logger()`` returns costs ~1 µs even when filtered, and the
  stdlib integration ~7 µs. So `get_logger` always returns a concrete logger,
  and the level is fixed when that logger is made.
* **Logs go to stderr**, which is looked up at every write, not once at
  configuration. stdout stays free for a job's own output, and whoever
  replaces ``sys.stderr`` later (rich's live status view prints log lines
  above its table that way; pytest's capture does the same) still sees them.

JSON lines are for machines (CI, log shippers); the console format is for a
person at a terminal. Tracebacks never include local variables in either
format: they could hold tuple payloads or secrets.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Callable
from typing import Any, Literal

import structlog
from structlog.typing import FilteringBoundLogger, Processor

__all__ = ["LogFormat", "configure_logging", "get_logger"]

LogFormat = Literal["json", "console", "auto"]

_LEVELS = ("debug", "info", "warning", "error", "critical")


class _Stderr:
    """Writes to whatever ``sys.stderr`` is at the moment of the write (see the module docstring)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def _json_serializer() -> Callable[..., str]:
    """orjson when it is installed (several times faster than json), else the stdlib."""
    try:
        import orjson
    except ImportError:  # pragma: no cover - orjson is a dependency; the fallback keeps logs working
        def dumps_json(obj: Any, **kw: Any) -> str:
            return json.dumps(obj, default=str, **kw)

        return dumps_json

    def dumps_orjson(obj: Any, **_kw: Any) -> str:
        # default=str: a value orjson cannot encode (bytes, Decimal) is logged as its str, not lost.
        return orjson.dumps(obj, default=str).decode()

    return dumps_orjson


def configure_logging(fmt: LogFormat, level: str = "info", *,
                      route_stdlib: bool = False) -> Literal["json", "console"]:
    """Configure structlog process-wide: events at ``level`` and above go to stderr in ``fmt``.

    ``fmt`` is ``"json"`` (one JSON object per line, with ``timestamp`` in UTC
    ISO 8601 and ``level``), ``"console"`` (aligned, coloured only when stderr
    is a terminal) or ``"auto"`` (console on a terminal, JSON otherwise).
    ``level`` is one of debug, info, warning, error, critical (any case).

    Loggers made by `get_logger` *before* this call keep the old
    configuration, so configure first, then start the job. Returns the format
    chosen (``"auto"`` resolved). With ``route_stdlib`` (what ``riverbed run``
    asks: the process is the job's), Python warnings, the stdlib loggers'
    records (a handler is added to the root logger) and exceptions that end a
    thread are logged through it too; a program of its own keeps its logging.
    """
    if fmt not in ("json", "console", "auto"):
        raise ValueError(f"log format {fmt!r}: expected 'json', 'console' or 'auto'")
    name = level.lower()
    if name not in _LEVELS:
        raise ValueError(f"log level {level!r}: expected one of {', '.join(_LEVELS)}")
    tty = _stderr_is_terminal()
    if fmt == "auto":
        fmt = "console" if tty else "json"
    processors: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if fmt == "json":
        processors += [
            structlog.processors.ExceptionRenderer(
                structlog.tracebacks.ExceptionDictTransformer(show_locals=False)),
            structlog.processors.JSONRenderer(serializer=_json_serializer()),
        ]
    else:
        # rich tracebacks colour even off a terminal, so they are only for one.
        formatter = (structlog.dev.RichTracebackFormatter(show_locals=False) if tty
                     else structlog.dev.plain_traceback)
        processors.append(structlog.dev.ConsoleRenderer(colors=tty, exception_formatter=formatter))
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(name),
        logger_factory=structlog.PrintLoggerFactory(file=_Stderr()),  # type: ignore[arg-type]
        context_class=dict,
        cache_logger_on_first_use=True,
    )
    if route_stdlib:
        _route_the_rest()
    return fmt


class _ToStructlog(logging.Handler):
    """Records of the stdlib's loggers (third-party libraries, aiohttp's server, Python's
    warnings) as events of this configuration: with JSON logs, stderr stays JSON lines."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            fields: dict[str, Any] = {"logger": record.name}
            if record.exc_info and record.exc_info[0] is not None:
                fields["exc_info"] = record.exc_info
            log = structlog.get_logger()
            level = record.levelname.lower()
            getattr(log, level if level in _LEVELS else "warning")(record.getMessage(), **fields)
        except Exception:  # a log call must not fail the caller
            self.handleError(record)


def _route_the_rest() -> None:
    """Python warnings, the stdlib's loggers and exceptions that end a thread, which printed
    plain text beside the JSON lines, go through structlog. The root logger keeps its level
    (WARNING unless the program set another) and its other handlers (pytest's capture)."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _ToStructlog)]:
        root.removeHandler(handler)
    root.addHandler(_ToStructlog())
    logging.captureWarnings(True)
    threading.excepthook = _thread_failed


def _thread_failed(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:
        return  # (as the default hook: a thread's sys.exit() is its own business)
    name = args.thread.name if args.thread is not None else None
    structlog.get_logger().error("thread failed", thread=name,
                                 exc_info=(args.exc_type, args.exc_value, args.exc_traceback))


def get_logger(job: str, operator: str | None = None, port: int | None = None) -> FilteringBoundLogger:
    """A concrete logger with ``job`` (and ``operator``, ``port`` when given) bound to every event.

    Make it once per operator (or port) and keep it: each call of this
    function builds a logger, while calls on the logger it returns are cheap,
    and free when filtered out. Call `configure_logging` first.
    """
    context: dict[str, Any] = {"job": job}
    if operator is not None:
        context["operator"] = operator
    if port is not None:
        context["port"] = port
    # .bind() on the lazy proxy returns the concrete logger built from the current configuration.
    logger: FilteringBoundLogger = structlog.get_logger().bind(**context)
    return logger


def _stderr_is_terminal() -> bool:
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty is not None and isatty())
