"""``riverbed spark run|explain graph.py``: the Spark bridge from the command line.

Exit codes as for ``riverbed run``: 0 the query ended (its sources did) or
was stopped; 1 it failed; 2 the script, its parameters or the translation
are invalid (nothing was deployed); 3 Spark or Java is missing; 130 interrupted (Ctrl-C) before
the query ran.
"""

from __future__ import annotations

import re
import signal
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from ..graph import GraphError, GraphValidationError
from ..run import EXIT_FAILED, EXIT_INVALID, EXIT_OK, ScriptError, load_script, parse_params
from ._errors import SparkSetupError, TranslationError
from ._inputs import SparkInput
from ._outputs import SparkOutput, with_outputs
from ._plan import plan

__all__ = ["EXIT_NO_SPARK", "spark_command"]

EXIT_NO_SPARK = 3
EXIT_INTERRUPTED = 130  # a Ctrl-C before the query ran (the shell's convention for SIGINT)


def spark_command(action: str, script: str, *, params: Sequence[str] = (), master: str = "local[2]",
                  checkpoint: str | None = None, mode: str = "auto", trigger: str | None = None,
                  max_records: int = 100_000, echo: Any = print) -> int:
    """The script may define ``spark_outputs(params)``, sinks to replace by Spark's writers
    (name -> `SparkOutput`), and ``spark_inputs(spark, params)``, sources to replace by Spark
    streams (name -> `SparkInput`); the graph itself stays what ``riverbed run`` runs. With
    ``spark_inputs``, even ``explain`` starts Spark: the inputs are Spark streams."""
    try:
        _check_options(master, trigger, max_records)
        parsed = parse_params(params)
        graph, namespace = load_script(script, parsed)
        outputs = _hook(namespace, "spark_outputs", SparkOutput, parsed)
        if outputs:
            graph = with_outputs(graph, outputs)
        make_inputs = namespace.get("spark_inputs")
        if make_inputs is None:
            p = plan(graph, mode)  # type: ignore[arg-type]  # refuse before starting Spark
            if action == "explain":
                echo(p.explain())
                return EXIT_OK
            if checkpoint is not None:
                from ._deploy import refuse_checkpoint
                refuse_checkpoint(graph, checkpoint, mode)  # type: ignore[arg-type]
    except (ScriptError, GraphValidationError, GraphError, TranslationError) as exc:
        print(f"riverbed spark: {exc}", file=sys.stderr)
        return EXIT_INVALID
    from ._deploy import deploy
    from ._session import spark_session

    try:
        spark = spark_session(master)
    except SparkSetupError as exc:
        print(f"riverbed spark: {exc}", file=sys.stderr)
        return EXIT_NO_SPARK
    except KeyboardInterrupt:
        print("riverbed spark: interrupted while Spark started; nothing was deployed", file=sys.stderr)
        return EXIT_INTERRUPTED
    try:
        inputs = _hook(namespace, "spark_inputs", SparkInput, spark, parsed) if make_inputs else {}
        if action == "explain":
            echo(plan(graph, mode, inputs=set(inputs)).explain())  # type: ignore[arg-type]
            return EXIT_OK
        d = deploy(graph, spark, mode=mode, checkpoint=checkpoint,  # type: ignore[arg-type]
                   available_now=trigger is None, processing_time=trigger,
                   max_records_per_batch=max_records, inputs=inputs)
    except (ScriptError, TranslationError) as exc:
        print(f"riverbed spark: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except KeyboardInterrupt:
        print("riverbed spark: interrupted while the query was deployed; it did not start",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    echo(d.plan.explain())
    echo(f"checkpoint: {d.checkpoint}")

    requested: list[int] = []

    def stop(signum: int, frame: Any) -> None:
        requested.append(signum)  # acted on by the loop below: py4j calls must not nest

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        while not requested:
            if d.await_termination(0.5):  # waits on the query; True once it ended
                break
        if requested:
            echo("riverbed spark: stopping the query" + (
                " (its checkpoint is temporary: a run starts over)" if d.temporary else
                f" (a run with --checkpoint {d.checkpoint} resumes from it)"))
            d.stop()
    except Exception as exc:  # a failed query: Spark's StreamingQueryException
        if not requested or _riverbed_failure(exc) or not (_jvm_gone(exc) or _from_spark(exc)):
            print(f"riverbed spark: the query failed: {failure_of(_text(exc))}", file=sys.stderr)
            return EXIT_FAILED
        # Stopped, and the signal reached Spark's own processes as well: ``kill -- -PGID``,
        # ``timeout`` and systemd signal the whole process group, and the JVM (which pyspark
        # shields from SIGINT only) ended before it could stop the query. What its checkpoint
        # committed stands, and the batch it was in is run again by the next run.
        d.abandon()
        echo("riverbed spark: stopped; Spark's processes ended with the signal before the query "
             f"could stop ({failure_of(_text(exc))})" + (
                 ": its checkpoint is temporary, a run starts over" if d.temporary else
                 f": a run with --checkpoint {d.checkpoint} resumes from its last committed "
                 "micro-batch"))
        return EXIT_OK
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    echo(f"done: {d.stage.batches} micro-batches, {d.stage.rows} rows into the driver stage")
    return EXIT_OK


# The riverbed error a task raised, as the Python traceback inside Spark's message ends with it:
# its class (module-qualified or not), then what it says (an operator's error names it).
# Any error class of riverbed's own modules, and the ones a traceback may name unqualified. A
# JobError lists its failures on the lines after it, each indented by two spaces.
_RIVERBED_ERROR = re.compile(r"^(?:riverbed\.[\w.]+\.(\w+)|(?:[\w.]+\.)?(OperatorError|SchemaViolation|"
                             r"KeyGroupError|JobError|PartReadError|FileSourceError|FileFormatError))"
                             r": (.+)((?:\n  .+)*)$", re.MULTILINE)


_JVM_GONE = ("Connection refused", "Answer from Java side is empty", "Error while receiving",
             "Error while sending")  # py4j's words when the gateway's socket is gone


def _jvm_gone(exc: BaseException) -> bool:
    """Whether ``exc`` says Spark's JVM can no longer be reached (py4j's connection refused,
    reset or closed), as when a signal to the process group ended it: a stop, not a failure.
    A query or driver stage that failed for its own reasons says something else."""
    return any(isinstance(e, (ConnectionError, EOFError)) or type(e).__name__ == "Py4JNetworkError"
               or any(sign in _text(e) for sign in _JVM_GONE) for e in _chain(exc))


def _text(exc: BaseException) -> str:
    """What ``exc`` says; py4j's Java errors ask the JVM for it, and a JVM the signal ended
    raised ConnectionRefusedError from ``str()`` itself (a traceback, exit 1, seen under load)."""
    try:
        return str(exc)
    except Exception:
        return f"{type(exc).__name__} (its message was in Spark's JVM, which is gone)"


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and what caused it, each once."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not e for e in seen):
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _riverbed_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is or carries a riverbed error (an operator's, a key group's, a
    source's, the driver stage's: raised here, or in a task whose traceback Spark's message
    holds): the graph failed, signal or not (a review found a driver-stage failure read as a
    stop, exit 0)."""
    return any(type(e).__module__.startswith("riverbed.") or _RIVERBED_ERROR.search(_text(e))
               for e in _chain(exc))


def _from_spark(exc: BaseException) -> bool:
    """Whether ``exc`` comes from Spark's JVM (a query's failure through py4j). After a stop
    signal to the process group, such a failure without a riverbed error is Spark's side ending
    of the signal: a process the JVM was spawning ("spawn helper ... signal: 15"), Hadoop's
    shell ("ExitCodeException exitCode=143"), each seen about 1 run in 3 on a loaded machine
    (exit 1, and the stop-38 test failed); a stop (exit 0), its batch run again by the next
    run, where a real failure would fail again."""
    return any(type(e).__module__.startswith(("py4j", "pyspark")) for e in _chain(exc))


def failure_of(message: str) -> str:
    """What a failed query's message says went wrong: the riverbed error a task raised (the
    operator, port and tuple, as ``riverbed run`` names them) when the message carries one,
    with a JobError's failures, each on its line, else its first line (Spark's own)."""
    found = list(_RIVERBED_ERROR.finditer(message))
    if found:
        last = found[-1]
        said = last.group(3) + last.group(4)
        if said.rstrip().endswith(":"):  # a Spark error whose text is on the next line
            said = said.rstrip() + " " + _next_line(message, last.end())
        return said
    lines = [line for line in message.splitlines() if line.strip()]
    if not lines:
        return "(no message)"
    if lines[0].rstrip().endswith(":") and len(lines) > 1:
        return f"{lines[0].rstrip()} {lines[1].strip()}"
    return lines[0]


def _next_line(message: str, at: int) -> str:
    """The first non-empty line of ``message`` after position ``at`` ("" if none)."""
    return next((line.strip() for line in message[at:].splitlines() if line.strip()), "")


_MASTER = re.compile(r"local(\[(\*|\d+)(,\d+)?\])?|yarn|(spark|k8s|mesos)://\S+")
_UNITS = ("ms|millis|milli|millisecond|milliseconds|s|sec|secs|second|seconds|m|min|mins|minute|"
          "minutes|h|hour|hours|d|day|days")
# A space between each number and its unit, as Spark parses an interval ('1second' passed here,
# then Spark refused it with a traceback).
_AMOUNT = rf"\d+(\.\d+)?\s+({_UNITS})"
_INTERVAL = re.compile(rf"\s*(interval\s+)?{_AMOUNT}(\s+{_AMOUNT})*\s*", re.IGNORECASE)


def _check_options(master: str, trigger: str | None, max_records: int) -> None:
    """Refuse what Spark would refuse later with a stack trace, or hang on (exit 2)."""
    if isinstance(max_records, bool) or not isinstance(max_records, int) or max_records < 1:
        raise ScriptError(f"--max-records {max_records}: expected a number of records >= 1 a "
                          "micro-batch")
    if trigger is not None and not _INTERVAL.fullmatch(trigger):
        raise ScriptError(f"--trigger {trigger!r}: expected an interval such as '1 second', "
                          "'500 milliseconds' or '2 minutes'")
    if not _MASTER.fullmatch(master):
        raise ScriptError(f"--master {master!r}: expected local, local[N], local[*], yarn, or a "
                          "spark://, k8s:// or mesos:// URL")


def _hook(namespace: dict[str, Any], name: str, kind: type, *args: Any) -> dict[str, Any]:
    """Call the script's hook ``name`` if it has one: a mapping of operator names to ``kind``."""
    hook = namespace.get(name)
    if hook is None:
        return {}
    try:
        found = hook(*args)
    except Exception as exc:
        raise ScriptError(f"{name}() failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(found, Mapping) or not all(
            isinstance(k, str) and isinstance(v, kind) for k, v in found.items()):
        raise ScriptError(f"{name}() must return a dict of operator names to {kind.__name__}, "
                          f"got {found!r}")
    return dict(found)
