"""Deploys riverbed graphs as Spark Structured Streaming queries, with the same window events.

``deploy(graph, spark)`` starts a graph as one query (``riverbed spark run``
from the command line); ``plan(graph)`` says how each operator translates
(``riverbed spark explain``). PySpark is an optional dependency
(``riverbed[spark]``): importing this package does not import it; the
functions that need Spark do.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._errors import SparkSetupError, TranslationError
from ._keyed import KeyGroupError

if TYPE_CHECKING:
    from ._cli import spark_command
    from ._deploy import Deployment, deploy
    from ._inputs import SparkInput, file_input, mqtt_input, rate_input
    from ._outputs import SparkOutput, spark_ddl
    from ._plan import Plan, plan
    from ._session import check_java, spark_session
    from ._trace import replay_on_spark

# Every query start runs each graph source in a fresh Python process (`_feeder`), and Spark
# starts fresh worker processes for the keyed stage; they import this package to unpickle
# the graph. Loading deployment, the checkpoint store and the planner only on first use keeps
# those imports (paid at every query start) to what they need.
_LAZY = {
    "Deployment": "._deploy", "deploy": "._deploy",
    "SparkInput": "._inputs", "file_input": "._inputs", "mqtt_input": "._inputs", "rate_input": "._inputs",
    "SparkOutput": "._outputs", "spark_ddl": "._outputs",
    "Plan": "._plan", "plan": "._plan",
    "check_java": "._session", "spark_session": "._session",
    "spark_command": "._cli",
    "replay_on_spark": "._trace",  # `riverbed trace --host spark`
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "Deployment",
    "KeyGroupError",
    "Plan",
    "SparkInput",
    "SparkOutput",
    "SparkSetupError",
    "TranslationError",
    "check_java",
    "deploy",
    "file_input",
    "mqtt_input",
    "plan",
    "rate_input",
    "replay_on_spark",
    "spark_command",
    "spark_ddl",
    "spark_session",
]
