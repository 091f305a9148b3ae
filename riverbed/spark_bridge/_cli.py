"""``riverbed spark run|explain graph.py``: the Spark bridge from the command line.

Exit codes as for ``riverbed run``: 0 the query ended (its sources did) or
was stopped; 1 it failed; 2 the script, its parameters or the translation
are invalid (nothing was deployed); 3 Spark or Java is missing.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence
from typing import Any

from ..graph import GraphError, GraphValidationError
from ..run import EXIT_FAILED, EXIT_INVALID, EXIT_OK, ScriptError, load_graph, parse_params
from ._errors import SparkSetupError, TranslationError
from ._plan import plan

__all__ = ["EXIT_NO_SPARK", "spark_command"]

EXIT_NO_SPARK = 3


def spark_command(action: str, script: str, *, params: Sequence[str] = (), master: str = "local[2]",
                  checkpoint: str | None = None, mode: str = "auto", trigger: str | None = None,
                  max_records: int = 100_000, echo: Any = print) -> int:
    try:
        graph = load_graph(script, parse_params(params))
        if action == "explain":
            echo(plan(graph, mode).explain())  # type: ignore[arg-type]
            return EXIT_OK
        plan(graph, mode)  # type: ignore[arg-type]  # refuse before starting Spark
    except (ScriptError, GraphValidationError, GraphError) as exc:
        print(f"riverbed spark: {exc}", file=sys.stderr)
        return EXIT_INVALID
    from ._deploy import deploy
    from ._session import spark_session

    try:
        spark = spark_session(master)
    except SparkSetupError as exc:
        print(f"riverbed spark: {exc}", file=sys.stderr)
        return EXIT_NO_SPARK
    try:
        d = deploy(graph, spark, mode=mode, checkpoint=checkpoint,  # type: ignore[arg-type]
                   available_now=trigger is None, processing_time=trigger,
                   max_records_per_batch=max_records)
    except TranslationError as exc:
        print(f"riverbed spark: {exc}", file=sys.stderr)
        return EXIT_INVALID
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
            echo("riverbed spark: stopping the query (a restart resumes from its checkpoint)")
            d.stop()
    except Exception as exc:  # a failed query: Spark's StreamingQueryException
        print(f"riverbed spark: the query failed: {str(exc).splitlines()[0]}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    echo(f"done: {d.stage.batches} micro-batches, {d.stage.rows} rows into the driver stage")
    return EXIT_OK
