"""``riverbed run graph.py``: load a graph script and run it on the asyncio runtime.

A graph script is plain Python. It defines either ``build(params)``, which
returns a `Graph` built from the ``--param`` values, or a module-level
``graph``. The command validates the graph, runs it with a live status view
(a rich table on a terminal, plain lines otherwise), and stops cleanly on
the first Ctrl-C/SIGTERM: sources end, final punctuation drains the graph,
sinks flush. A second signal aborts at once.

Exit codes: 0 the graph drained (it ended, or was stopped cleanly); 1 an
operator failed; 2 the script, its parameters or its graph are invalid;
3 aborted by a second signal.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import difflib
import json
import math
import os
import runpy
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from .graph import FrozenGraph, Graph, GraphError, GraphValidationError
from .runtime import (
    MIN_CHECKPOINT_PERIOD,
    Job,
    JobError,
    RealClock,
    RestoreRefused,
    StatusView,
    VirtualClock,
    configure_logging,
    get_logger,
    run_virtual,
    serve_metrics,
)
from .supervise import RESTARTS_ENV, follow_supervisor

__all__ = ["EXIT_ABORTED", "EXIT_FAILED", "EXIT_INVALID", "EXIT_OK", "load_graph", "load_script",
           "parse_params", "run"]

EXIT_OK, EXIT_FAILED, EXIT_INVALID, EXIT_ABORTED = 0, 1, 2, 3
DEFAULT_CHECKPOINT_PERIOD = "5s"  # --checkpoint-dir alone: a checkpoint directory that never got one
# would restore nothing after a crash while the log promised exactly-once


class ScriptError(Exception):
    """The graph script cannot be loaded or does not produce a graph."""


def parse_params(items: Sequence[str]) -> dict[str, Any]:
    """``name=value`` pairs; a value is read as JSON when it parses (numbers, booleans, lists)."""
    params: dict[str, Any] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep or not name.isidentifier():
            raise ScriptError(f"--param {item!r}: expected name=value with an identifier name")
        try:  # (NaN and Infinity are not JSON: Python's parser takes them, this one does not)
            params[name] = json.loads(raw, parse_constant=_not_json, parse_float=_finite)
        except (json.JSONDecodeError, ValueError):
            params[name] = raw
    return params


def _not_json(word: str) -> Any:
    raise ValueError(f"{word} is not JSON")  # the value stays the text given


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999: an infinity, as NaN and Infinity would be
        raise ValueError(f"{text} is beyond the float range")  # the value stays the text given
    return value


def load_graph(script: str | Path, params: dict[str, Any],
               warn: Callable[[str], None] | None = None) -> FrozenGraph:
    """Run the script and freeze the graph it builds."""
    return load_script(script, params, warn)[0]


def _console_address(text: str) -> tuple[str, int]:
    """``--console``'s address, parsed, and bound once and let go (a port taken, a host this
    machine does not have): `ScriptError` before the graph script runs."""
    from .console import ConsoleError, listen, parse_address

    try:
        host, port = parse_address(text)
        listen(host, port).close()  # (port 0 too: a host this machine lacks is refused now)
    except ConsoleError as exc:
        raise ScriptError(f"--console {text}: {exc}") from None
    return host, port


def _warn_on_stderr(message: str) -> None:
    print(f"riverbed: warning: {message}", file=sys.stderr)


def load_script(script: str | Path, params: dict[str, Any],
                warn: Callable[[str], None] | None = None) -> tuple[FrozenGraph, dict[str, Any]]:
    """Run the script; the graph it builds, frozen, and the script's namespace (for the hooks
    other hosts look for, such as ``spark_inputs``). ``warn`` hears of a ``-p`` that looks like
    a misspelling of one ``build`` read (stderr by default)."""
    path = Path(script)
    if not path.is_file():
        raise ScriptError(f"{path}: no such graph script")
    # As `python graph.py` does: the script imports modules kept beside it. The processes the
    # job starts import them too (Spark's Python workers unpickle the graph's functions).
    here = str(path.resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)
    paths = os.environ.get("PYTHONPATH", "")
    if here not in paths.split(os.pathsep):
        os.environ["PYTHONPATH"] = here + (os.pathsep + paths if paths else "")
    try:
        namespace = runpy.run_path(str(path), run_name="__riverbed_graph__")
    except (GraphError, GraphValidationError):
        raise
    except Exception as exc:
        raise ScriptError(f"{path}: the script failed: {type(exc).__name__}: {exc}"
                          f"{_where(exc, path)}") from exc
    build = namespace.get("build")
    if callable(build):
        read = _ReadParams(params)
        try:
            graph = build(read)
        except (GraphError, GraphValidationError):
            raise
        except Exception as exc:
            raise ScriptError(f"{path}: build(params) failed: {_build_failure(exc, read)}"
                              f"{_where(exc, path)}") from exc
        for message in _misspelled(read, _script_words(path)):
            (warn or _warn_on_stderr)(message)
    elif params:
        raise ScriptError(f"{path}: --param given but the script has no build(params) function")
    else:
        graph = namespace.get("graph")
    if isinstance(graph, Graph):
        return graph.freeze(), namespace
    if isinstance(graph, FrozenGraph):
        return graph, namespace
    if callable(build):
        raise ScriptError(f"{path}: build(params) returned {type(graph).__name__}, not a riverbed "
                          "Graph (a missing 'return g'?)")
    if graph is None:
        raise ScriptError(f"{path}: the script defines neither build(params) nor a module-level "
                          "'graph': define build(params) returning a riverbed Graph")
    raise ScriptError(f"{path}: its module-level 'graph' is a {type(graph).__name__}, not a "
                      "riverbed Graph")


class _ReadParams(dict[str, Any]):
    """The ``-p`` values, remembering which ones ``build`` read (to name them when it fails) and
    which it asked for and did not get (a misspelled ``-p``, `_misspelled`)."""

    def __init__(self, params: dict[str, Any]) -> None:
        super().__init__(params)
        self.read: list[str] = []
        self.missing: list[str] = []
        self.defaulted: list[str] = []  # asked with get() and not given: their default went
        self.merged: list[str] = []  # given and merged over defaults (`__ror__`): not a culprit
        self.read_at: dict[str, tuple[str, int]] = {}  # where each was last read (file, line)

    def _was_read(self, name: str) -> None:
        self.read.append(name)
        caller = sys._getframe(2)  # (the code that asked: get() or [] is one frame below)
        self.read_at[name] = (caller.f_code.co_filename, caller.f_lineno)

    def __getitem__(self, name: str) -> Any:
        if name not in self:
            self.missing.append(name)
        else:
            self._was_read(name)
        return super().__getitem__(name)

    def get(self, name: str, default: Any = None) -> Any:
        if name in self:
            self._was_read(name)
        else:
            self.defaulted.append(name)
        return super().get(name, default)

    def __ror__(self, defaults: Any) -> Any:
        """``defaults | params`` (the examples' idiom) asks for each of the defaults' names: a
        ``-p`` close to one of them is a misspelling as with `get` (the union bypassed both
        and no warning came)."""
        if not isinstance(defaults, dict):
            return NotImplemented
        for name in defaults:
            (self.merged if name in self else self.defaulted).append(name)
        return dict(defaults) | dict(self)


def _misspelled(params: _ReadParams, words: frozenset[str] = frozenset()) -> list[str]:
    """``-p`` names ``build`` never read that are close to one it asked for (``-p sensor=5``
    where it reads ``sensors``): the run would silently go on with that one's default. A name
    with no close match is left alone: an operator may read it later (``context.params``).

    ``words`` are the script's own string constants: a merge the wrapper does not see
    (``{**defaults, **params}``, ``dict.update``) asks for no name, so a ``-p`` the script
    never even mentions, close to a word it does, is named the same way."""
    asked = set(params.read) | set(params.missing) | set(params.defaulted) | set(params.merged)
    mentioned = sorted(words - set(params))
    out = []
    for name in params:
        if name in asked:
            continue
        value = dict.get(params, name)
        close = difflib.get_close_matches(name, sorted(asked), n=1, cutoff=0.75)
        if close:
            used = "" if close[0] in params else " (it used its default)"
            out.append(f"-p {name}={value!r}: build() never read {name!r}; did you mean "
                       f"{close[0]!r}{used}?")
            continue
        if name in words:
            continue
        close = difflib.get_close_matches(name, mentioned, n=1, cutoff=0.75)
        if close:
            out.append(f"-p {name}={value!r}: the script never mentions {name!r}; did you mean "
                       f"{close[0]!r}?")
    return out


def _script_words(path: Path) -> frozenset[str]:
    """The script's string constants that could name a parameter (identifier-like)."""
    try:
        tree = ast.parse(path.read_bytes(), str(path))
    except (OSError, SyntaxError, ValueError):
        return frozenset()
    return frozenset(node.value for node in ast.walk(tree)
                     if isinstance(node, ast.Constant) and isinstance(node.value, str)
                     and node.value.isidentifier())


def _where(exc: BaseException, script: Path) -> str:
    """Where in the script ``exc`` was raised (its deepest frame in the script's own file:
    " (at graph.py:12, in helper)"), or nothing when none is (a SyntaxError says its line)."""
    found = None
    tb = exc.__traceback__
    target = script.resolve()
    while tb is not None:
        code = tb.tb_frame.f_code
        if Path(code.co_filename).resolve() == target:
            found = (tb.tb_lineno, code.co_name)
        tb = tb.tb_next
    if found is None:
        return ""
    line, function = found
    return f" (at {script.name}:{line}" + ("" if function == "<module>" else f", in {function}") + ")"


def _build_failure(exc: Exception, params: _ReadParams) -> str:
    """What went wrong in ``build(params)``, naming the parameter behind it where one is."""
    if isinstance(exc, KeyError) and params.missing and exc.args and exc.args[0] == params.missing[-1]:
        name = params.missing[-1]
        return f"parameter {name!r} is required: pass -p {name}=VALUE"
    text = f"{type(exc).__name__}: {exc}"
    # A conversion that failed says the value ("could not convert string to float: 'abc'"):
    # name the parameter that holds it; else the last one read if the failing line read it
    # (``int(params["n"])``). A failure elsewhere (a mistyped keyword three lines on) is the
    # code's: blaming the last -p read sent the user after a value that was fine.
    # (a parameter merged over defaults, ``defaults | params``, can hold that value too)
    culprits = [n for n in dict.fromkeys([*reversed(params.read), *params.merged])
                if isinstance(dict.get(params, n), str) and repr(dict.get(params, n)) in str(exc)]
    if not culprits and params.read and isinstance(exc, ValueError | TypeError | ArithmeticError):
        last = params.read[-1]
        failed_at = {(f.f_code.co_filename, line) for f, line in traceback.walk_tb(exc.__traceback__)}
        if params.read_at.get(last) in failed_at:
            culprits = [last]
    if culprits:
        name = culprits[0]
        text += f" (parameter -p {name}={dict.get(params, name)!r})"
    return text


def parse_period(text: str) -> float:
    """``5s``, ``500ms``, ``2m`` or plain seconds, as seconds (finite, >= 10 ms)."""
    units = {"ms": 0.001, "s": 1.0, "m": 60.0}
    for suffix in ("ms", "s", "m"):
        if text.endswith(suffix):
            number, scale = text[: -len(suffix)], units[suffix]
            break
    else:
        number, scale = text, 1.0
    try:
        value = float(number) * scale
    except ValueError:
        raise ScriptError(f"period {text!r}: expected seconds such as 5, 5s, 500ms or 2m") from None
    if not math.isfinite(value) or value < MIN_CHECKPOINT_PERIOD:
        raise ScriptError(f"period {text!r}: expected a finite period of at least "
                          f"{MIN_CHECKPOINT_PERIOD * 1000:g} ms, such as 5s or 500ms")
    return value


class _LoggedStore:
    """A checkpoint store whose skipped (damaged) checkpoints are logged, then the next tried."""

    def __init__(self, store: Any, log: Any) -> None:
        self.store = store
        self.log = log

    def save(self, checkpoint_id: int, states: Any, *, job: str, time_ns: int) -> None:
        self.store.save(checkpoint_id, states, job=job, time_ns=time_ns)

    def newest_id(self) -> int | None:
        return self._read(self.store.newest_id)  # type: ignore[no-any-return]

    def held_ids(self) -> list[int]:
        return self._read(self.store.held_ids)  # type: ignore[no-any-return]

    def load(self, checkpoint_id: int) -> Any:
        return self.store.load(checkpoint_id)

    @property
    def keep_last(self) -> int:
        return self.store.keep_last  # type: ignore[no-any-return]

    def latest_good(self) -> Any:
        def skipped(checkpoint_id: int, error: Exception) -> None:
            self.log.warning("checkpoint skipped", checkpoint=checkpoint_id, reason=str(error),
                             action="falling back to the previous checkpoint")

        return self._read(lambda: self.store.latest_good(on_skip=skipped))

    @staticmethod
    def _read(read: Callable[[], Any]) -> Any:
        """``read()``; damage that keeps the store from being read at all (not one checkpoint,
        skipped) is `RestoreRefused`: the job does not start, and says so in one line (exit 2)
        instead of a traceback, and under --restarts again at each restart."""
        from .checkpoint import CheckpointError  # (loaded already: the store is one of its)

        try:
            return read()
        except CheckpointError as exc:
            raise RestoreRefused(f"{exc} (nothing was restored, nothing ran)") from exc


def _json_lines(script: str) -> Callable[[str], None]:
    """The command's own messages (a failure, an invalid graph, an abort) as error events,
    for a log pipeline reading stderr as JSON lines: ``{"event": "riverbed run", "message":
    ...}``, the message whole (its lines in one string)."""
    import structlog

    logger = structlog.get_logger().bind(script=script)

    def say(message: str) -> None:
        logger.error("riverbed run", message=message.removeprefix("riverbed run: "))

    return say


class _AbortedEarly(BaseException):
    """A second SIGINT/SIGTERM outside the job's loop (a ``build()`` that hangs on a network or
    a database): the command ends at once, as a second signal does once the job runs. A
    BaseException, as KeyboardInterrupt is: a script's ``except Exception`` must not eat it."""


class _EarlySignals(list[int]):
    """The SIGINT/SIGTERMs caught before the job's loop runs; ``aborts``: a second one ends
    the command there and then (while the script loads; not once stores and servers are
    open, which only the job's own ending closes: the loop takes the signals soon after)."""

    aborts = True
    say: Callable[[str], None] | None = None  # how the command reports (JSON lines, once chosen)


@contextlib.contextmanager
def _early_signals() -> Iterator[_EarlySignals]:
    """Catch SIGINT/SIGTERM from the start of the command, not only once the job's loop runs:
    a stop asked for while the graph loads is honoured when the job starts (its default
    action would kill the process mid-start-up, unlike a stop at any later instant); a second
    one aborts there and then (`_AbortedEarly`)."""
    early = _EarlySignals()
    previous: dict[int, Any] = {}

    def caught(number: int, _frame: Any) -> None:
        early.append(number)
        if len(early) > 1 and early.aborts:
            raise _AbortedEarly

    try:
        for wanted in (signal.SIGINT, signal.SIGTERM):
            previous[wanted] = signal.signal(wanted, caught)
    except ValueError:  # not the main thread: nothing to catch early
        pass
    try:
        yield early
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def run(script: str, *, params: Sequence[str] = (), log_format: str = "auto", log_level: str = "info",
        metrics_port: int | None = None, status: bool = True, status_interval: float = 1.0,
        virtual_clock: bool = False, checkpoint_dir: str | None = None,
        checkpoint_period: str | None = None, echo: Callable[[str], None] | None = None,
        console: str | None = None, linger: float = 0.0) -> int:
    """The ``riverbed run`` command; returns the exit code."""
    early: _EarlySignals | None = None
    try:
        with _early_signals() as early:
            follow_supervisor()  # (its SIGTERM, if it has gone, is caught as a stop)
            return _run(script, params=params, log_format=log_format, log_level=log_level,
                        metrics_port=metrics_port, status=status, status_interval=status_interval,
                        virtual_clock=virtual_clock, checkpoint_dir=checkpoint_dir,
                        checkpoint_period=checkpoint_period, echo=echo, early=early,
                        console=console, linger=linger)
    except _AbortedEarly:
        say = early.say if early is not None else None  # (JSON lines with --log-format json)
        (say or echo or (lambda msg: print(msg, file=sys.stderr)))(
            f"riverbed run: {script}: aborted by a second signal")
        return EXIT_ABORTED


def _run(script: str, *, params: Sequence[str] = (), log_format: str = "auto", log_level: str = "info",
        metrics_port: int | None = None, status: bool = True, status_interval: float = 1.0,
        virtual_clock: bool = False, checkpoint_dir: str | None = None,
        checkpoint_period: str | None = None, echo: Callable[[str], None] | None = None,
        early: _EarlySignals, console: str | None = None, linger: float = 0.0) -> int:
    """The command's body (`run` catches early signals around it)."""
    err = echo or (lambda msg: print(msg, file=sys.stderr))
    address: tuple[str, int] | None = None
    try:
        logs = configure_logging(log_format, log_level, route_stdlib=True)  # type: ignore[arg-type]
        if logs == "json" and echo is None:  # stderr stays JSON lines: the failures too
            err = early.say = _json_lines(script)
        if console is not None:  # before the script runs: a typo or a taken port loads nothing
            address = _console_address(console)
        if metrics_port is not None and not 0 <= metrics_port <= 65535:
            raise ScriptError(f"--metrics-port {metrics_port}: expected a TCP port, 0 to 65535")
        if not (linger >= 0 and math.isfinite(linger)):
            raise ScriptError(f"--linger {linger}: expected seconds, 0 or more")
        if linger and metrics_port is None and console is None:  # (it did nothing, silently)
            raise ScriptError(f"--linger {linger:g}: keeps --metrics-port or --console serving "
                              "after the job; give one of them")
        if not (math.isfinite(status_interval) and status_interval > 0):
            raise ScriptError(f"--status-interval {status_interval:g}: expected a number of "
                              "seconds > 0")
        if checkpoint_period is not None and checkpoint_dir is None:
            raise ScriptError("--checkpoint-period needs --checkpoint-dir")
        if checkpoint_dir is not None and not str(checkpoint_dir).strip():
            # (Path("") is the working directory: RocksDB's files, LOG among them, went there)
            raise ScriptError("--checkpoint-dir '': expected a directory for the checkpoints")
        period_default = checkpoint_dir is not None and checkpoint_period is None
        period = None if checkpoint_dir is None else parse_period(checkpoint_period or
                                                                  DEFAULT_CHECKPOINT_PERIOD)
        import structlog

        warnings = structlog.get_logger().bind(script=script)
        graph = load_graph(script, parse_params(params),
                           warn=lambda message: warnings.warning("parameter", message=message))
    except (ScriptError, GraphError, GraphValidationError, ValueError) as exc:
        err(f"riverbed run: {exc}")
        return EXIT_INVALID
    early.aborts = False  # stores and servers open from here: the job's ending closes them
    clock = VirtualClock() if virtual_clock else RealClock()
    log = get_logger(graph.name)
    if graph.regions and checkpoint_dir is None:
        err(f"riverbed run: the graph declares consistent region(s) "
            f"{', '.join(repr(r.name) for r in graph.regions)}: give them --checkpoint-dir DIR")
        return EXIT_INVALID
    if graph.regions and checkpoint_period is not None:
        err("riverbed run: --checkpoint-period: the graph's consistent regions set their own period")
        return EXIT_INVALID
    stores: dict[str, Any] = {}
    if checkpoint_dir is not None:
        from .checkpoint import CheckpointError, RocksDBStore, StoreFull

        def store_warning(warning: Any) -> None:
            log.warning("checkpoint store", kind=warning.kind, reason=warning.message,
                        checkpoints=list(warning.checkpoint_ids) or None)

        # The job's own region uses DIR; each declared region a directory of its own in it.
        places = {r.name: Path(checkpoint_dir) / r.name for r in graph.regions} or {"": Path(checkpoint_dir)}
        mismatch = _layout_mismatch(Path(checkpoint_dir), [r.name for r in graph.regions])
        if mismatch is not None:
            err(f"riverbed run: checkpoint directory {checkpoint_dir}: {mismatch}")
            return EXIT_INVALID
        for name, place in places.items():
            try:
                stores[name] = RocksDBStore(place, on_warning=store_warning)
            except CheckpointError as exc:
                for opened in stores.values():
                    _close_store(opened, log)
                err(f"riverbed run: checkpoint directory {place}: {exc}")
                # A full disk is a failure, which --restarts tries again (as a full disk in the
                # middle of a run); anything else about the directory is the user's to fix.
                return EXIT_FAILED if isinstance(exc, StoreFull) else EXIT_INVALID
    logged = {name: _LoggedStore(store, log) for name, store in stores.items()}
    job = Job(graph, clock=clock, checkpoints=logged.get(""),
              checkpoint_period=period if "" in logged else None,
              region_checkpoints={k: v for k, v in logged.items() if k} or None, logger=log)
    job.metrics.restarts = int(os.environ.get(RESTARTS_ENV, "0") or 0)
    for running in job.regions:
        guarantee, why = graph.guarantee()
        log.info("checkpoints", directory=str(places[running.name]), region=running.name or None,
                 guarantee=guarantee, because=why or None, period_s=running.period,
                 period_default=(period_default and running.spec is None) or None,
                 heals=running.heals, operators=len(running.members))
    server = None
    if metrics_port is not None:
        try:
            server = serve_metrics(job, metrics_port)
        except OSError as exc:
            err(f"riverbed run: cannot serve metrics on 127.0.0.1:{metrics_port}: {exc}")
            return EXIT_INVALID
        log.info("metrics", url=server.url)
    console_server = None  # --console: the live web page (riverbed.console), closed with the job
    if address is not None:
        from .console import ConsoleError, serve_console

        try:
            console_server = serve_console(job, graph, address)
        except ConsoleError as exc:
            if server is not None:
                server.close()
            for store in stores.values():
                _close_store(store, log)
            err(f"riverbed run: --console {console}: {exc}")
            return EXIT_INVALID
        log.info("console", url=console_server.url)
    aborted = False
    finished = False  # the job ended without an error or an abort: its servers may linger

    async def main() -> None:
        nonlocal aborted
        loop = asyncio.get_running_loop()
        signals = 0

        def on_signal(signum: int) -> None:
            nonlocal signals, aborted
            signals += 1
            if signals == 1:
                hint = ("a checkpoint, then every operator ends where it is (no final "
                        "punctuation: a restart goes on from there)" if job.regions else
                        "an operator failed: its drain is already under way" if job.failures
                        else "sources end, final punctuation drains the graph")
                log.info("stopping", signal=signal.Signals(signum).name,
                         hint=f"{hint}; signal again to abort")
                job.stop()
            else:
                aborted = True
                log.warning("aborting", signal=signal.Signals(signum).name)
                job.abort()

        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, on_signal, signum)
        for number in early:  # asked for before the loop ran
            on_signal(number)
        early.clear()
        # JSON logs stay JSON lines: off a terminal the report is a log event of its own
        events = (lambda lines: log.info("status", lines=lines)) if logs == "json" else None
        view = StatusView(job, interval=status_interval, events=events) if status else None
        view_task = loop.create_task(view.run(), name=f"{job.name}/status") if view else None
        log.info("job started", operators=len(graph.operators))
        try:
            await job.run()
        finally:
            if view_task is not None:
                view_task.cancel()
                await asyncio.gather(view_task, return_exceptions=True)
            for signum in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.remove_signal_handler(signum)

    try:
        if virtual_clock:
            run_virtual(main(), clock)  # type: ignore[arg-type]
        else:
            asyncio.run(main())
    except JobError as exc:
        if aborted and not job.failures:
            err(f"riverbed run: job {job.name!r} aborted")
            return EXIT_ABORTED
        if aborted:  # while a failure drained: the failure is what the user must hear of
            err(f"riverbed run: {exc} (aborted while draining)")
            return EXIT_FAILED
        if len(exc.errors) == 1 and isinstance(exc.errors[0], RestoreRefused):
            err(f"riverbed run: {checkpoint_dir}: {exc.errors[0]}")
            return EXIT_INVALID
        err(f"riverbed run: {exc}")
        return EXIT_FAILED
    except asyncio.CancelledError:
        err(f"riverbed run: job {job.name!r} aborted")
        return EXIT_ABORTED
    else:
        finished = not aborted
    finally:
        if not finished:
            _close_servers(server, console_server)
        for store in stores.values():
            _close_store(store, log)
    if aborted:
        err(f"riverbed run: job {job.name!r} aborted")
        return EXIT_ABORTED
    _tell_late(job, log)
    log.info("job finished", stopped=job.stopping, suspended=job.suspended or None,
             restored_from=job.restored_from, last_checkpoint=job.last_checkpoint or None,
             hint="a restart with the same --checkpoint-dir continues from the last checkpoint"
             if job.suspended else None)
    try:
        if linger and (server is not None or console_server is not None):
            log.info("serving the final counts", seconds=linger, hint="a signal ends it sooner")
            _linger(linger)
    finally:
        _close_servers(server, console_server)
    return EXIT_OK


def _close_servers(metrics: Any, console: Any) -> None:
    if console is not None:
        console.close()
    if metrics is not None:
        metrics.close()


def _linger(seconds: float) -> None:
    """``--linger``: wait ``seconds`` (or until SIGINT or SIGTERM) while the metrics and console
    threads go on serving the finished job's final counts: a job that ends between two
    Prometheus scrapes would otherwise never show its last ones. Only after a job that finished:
    one that failed ends at once, so that ``--restarts`` starts the next on the same ports."""
    done = threading.Event()
    previous = {number: signal.signal(number, lambda *_: done.set())
                for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        done.wait(seconds)  # (a signal's handler runs here: the wait is interruptible)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _layout_mismatch(directory: Path, regions: list[str]) -> str | None:
    """What ``directory`` holds that this graph's regions would not restore, or None: a job-wide
    region's store where regions are declared, or regions (or other names of them) where the
    graph now has others. A renamed region, or a switch between the job's region and declared
    ones, started over from nothing with exit 0, beside the old checkpoints; and a job-wide run
    and a declared-region run could share the directory at once (each locked its own store)."""
    from .checkpoint import RocksDBStore

    kind, found = RocksDBStore.layout(directory)
    if kind == "none" and regions:
        # Each declared region's store goes in a directory of its own in it: a directory of the
        # user's would get them among its files (and lose them all to an `rm -r` of the
        # checkpoints).
        names = os.listdir(directory) if os.path.isdir(directory) else []
        foreign = RocksDBStore.foreign(n for n in names if n not in regions)
        if foreign is not None:
            return (f"it holds files that are not checkpoints ({foreign}): the checkpoint directory "
                    "is the job's own: give a path that does not exist yet, or an empty directory")
    if kind == "store" and regions:
        return (f"it holds the checkpoints of the job's own region, and this graph declares "
                f"region(s) {', '.join(map(repr, regions))}: run the graph as it was, or give it "
                "another directory")
    if kind == "regions":
        if not regions:
            return (f"it holds the checkpoints of region(s) {', '.join(map(repr, found))}, and "
                    "this graph declares none: run the graph as it was, or give it another "
                    "directory")
        other = [name for name in found if name not in regions]
        if other:
            return (f"it holds the checkpoints of region(s) {', '.join(map(repr, other))}, which "
                    f"this graph does not declare (it declares {', '.join(map(repr, regions))}): "
                    "a renamed region would start over; run the graph as it was, or give it "
                    "another directory")
    return None


def _tell_late(job: Any, log: Any) -> None:
    """Name the operators whose timeInterval windows dropped tuples as too late, with how many
    (the status view and the metrics count them as they go): a single far-future event time
    closes every pane and makes the rest of a stream late, and a count alone did not say so."""
    for name, m in job.metrics.operators.items():
        late = sum(p.tuples_dropped_late for p in m.inputs)
        if late:
            log.warning("late tuples dropped", operator=name, tuples=late,
                        hint="tuples behind their window's drop point (the watermark less "
                             "discardAge) are dropped, as in SPL; a source's lag= lets later "
                             "tuples in, and a far-future event time makes all the rest late")


def _close_store(store: Any, log: Any) -> None:
    """Close the checkpoint store; a failure is logged, not raised: every checkpoint was
    already written and synced when it committed, and the job's own outcome decides the exit
    code (a damaged file or a full disk must not turn a drained job into a traceback)."""
    try:
        store.close()
    except Exception as exc:  # the store's own typed errors, or the engine's under them
        log.warning("checkpoint store close failed", error=f"{type(exc).__name__}: {exc}",
                    consequence="the committed checkpoints are unaffected")


def checkpoints_command(action: str, directory: str, checkpoint_id: int | None,
                        echo: Callable[[str], None] | None = None) -> int:
    """``riverbed checkpoints list|show|repair DIR [ID]``: what a checkpoint directory holds.

    ``list`` and ``show`` open the store read-only, so they work next to a
    running job; damaged checkpoints are listed as such, and so are committed
    ones that are gone, with what the store noticed on the way (its warnings).
    ``repair`` runs RocksDB's repair (the job must be stopped) and reports the
    checkpoints before and after. A directory holding one store per declared
    consistent region (``--checkpoint-dir`` of such a graph) is listed region by
    region; ``show`` and ``repair`` ask for one region's directory. A directory
    holding no store is refused before anything is opened, so nothing is written
    into it.
    """
    from .checkpoint import CheckpointError, CheckpointInfo, RocksDBStore, StoreWarning

    out = echo or print

    def line(entry: CheckpointInfo) -> str:
        status = entry.status if entry.status == "ok" else f"{entry.status}: {entry.reason}"
        job = "?" if entry.job is None else entry.job
        return f"{entry.id:>8}  {job}  {entry.total_bytes:>12,} bytes  {len(entry.sizes)} states  {status}"

    if not Path(directory).is_dir():
        out(f"riverbed checkpoints: {directory}: no such checkpoint directory")
        return EXIT_INVALID
    kind, regions = RocksDBStore.layout(directory)
    if kind == "none":
        out(f"riverbed checkpoints {action}: {directory} holds no checkpoint store (no RocksDB files, "
            "and no directory of a consistent region holding one)")
        return EXIT_INVALID
    if kind == "regions":
        places = [str(Path(directory) / name) for name in regions]
        if action != "list":
            out(f"riverbed checkpoints {action}: {directory} holds one store per consistent region "
                f"({', '.join(regions)}); give a region's directory, e.g. "
                f"riverbed checkpoints {action} {places[0]}")
            return EXIT_INVALID
        worst = EXIT_OK
        for name, place in zip(regions, places, strict=True):
            out(f"region {name} ({place}):")
            worst = max(worst, checkpoints_command(action, place, checkpoint_id, out))
        return worst
    if action == "repair":
        try:
            report = RocksDBStore.repair(directory)
        except CheckpointError as exc:
            out(f"riverbed checkpoints repair: {exc}")
            return EXIT_FAILED
        if report.before is None:
            out(f"before: the store could not be opened: {report.before_error}")
        else:
            out(f"before: {len(report.before)} checkpoint(s)")
            for entry in report.before:
                out(line(entry))
        lost = Path(directory) / "lost"
        out(f"repaired {directory} with RocksDB's repair; damaged table files moved to {lost}: "
            f"{', '.join(report.damaged_tables) or 'none'}")
        out(f"after: {len(report.after)} checkpoint(s)")
        for entry in report.after:
            out(line(entry))
        for note in report.warnings:
            out(f"warning: {note.message}")
        if report.before is not None:
            out(f"dropped by the repair: {', '.join(map(str, report.dropped)) or 'none'}")
        newest = next((i.id for i in reversed(report.after) if i.status == "ok"), None)
        resume = f"checkpoint {newest}" if newest is not None else "its initial state (no good checkpoint)"
        out(f"a job restarted on this directory resumes from {resume}")
        return EXIT_OK
    notes: list[StoreWarning] = []
    try:
        with RocksDBStore(directory, read_only=True, on_warning=notes.append) as store:
            infos = store.list()
            for note in notes:
                out(f"warning: {note.message}")
            if action == "list":
                if not infos:
                    out(f"{directory}: no checkpoints")
                for entry in infos:
                    out(line(entry))
                if infos and all(entry.status != "ok" for entry in infos):
                    out(f"{directory}: no good checkpoint: a job restarted on it starts from its "
                        "initial state (riverbed checkpoints repair may recover some)")
                    return EXIT_FAILED  # a script checking the store before a restart sees it
                return EXIT_OK
            wanted = checkpoint_id if checkpoint_id is not None else (infos[-1].id if infos else None)
            if wanted is None:
                out(f"{directory}: no checkpoints")
                return EXIT_INVALID
            info = next((i for i in infos if i.id == wanted), None)
            if info is None:
                out(f"{directory}: no checkpoint {wanted}")
                return EXIT_INVALID
            status = info.status if info.status == "ok" else f"{info.status}: {info.reason}"
            out(f"checkpoint {info.id} of job {info.job!r}, {info.total_bytes:,} bytes, {status}")
            for key, size in sorted(info.sizes.items()):
                out(f"  {key:<40} {size:>12,} bytes")
            if info.status == "ok":
                for name, state in store.load(wanted).states.items():
                    for text in _describe_state(name, state):
                        out(text)
            return EXIT_OK
    except CheckpointError as exc:
        out(f"riverbed checkpoints: {exc}")
        return EXIT_FAILED


def _describe_state(name: str, state: Any) -> list[str]:
    """Per operator: its own state's size and, per windowed port, the partitions and tuples."""
    lines = []
    windows = state.get("windows") if isinstance(state, dict) else None
    for port, window in enumerate(windows if isinstance(windows, list) else []):
        if isinstance(window, dict):
            parts = window.get("partitions") or window.get("panes") or []
            parts = parts if isinstance(parts, list) else []
            count = sum(len(p["tuples"]) if isinstance(p, dict) and isinstance(p.get("tuples"), list) else 0
                        for p in parts)
            if isinstance(window.get("tuples"), list):
                count = len(window["tuples"])
            lines.append(f"  {name} port {port}: {window.get('clause')}: {len(parts)} "
                         f"{'panes' if 'panes' in window else 'partitions'}, {count} tuples")
    return lines
