"""Deploys riverbed graphs as Spark Structured Streaming queries, with the same window events.

``deploy(graph, spark)`` starts a graph as one query (``riverbed spark run``
from the command line); ``plan(graph)`` says how each operator translates
(``riverbed spark explain``). PySpark is an optional dependency
(``riverbed[spark]``): importing this package does not import it; the
functions that need Spark do.
"""

from ._deploy import Deployment, deploy
from ._errors import SparkSetupError, TranslationError
from ._inputs import SparkInput, mqtt_input, rate_input
from ._keyed import KeyGroupError
from ._plan import Plan, plan
from ._session import check_java, spark_session

__all__ = [
    "Deployment",
    "KeyGroupError",
    "Plan",
    "SparkInput",
    "SparkSetupError",
    "TranslationError",
    "check_java",
    "deploy",
    "mqtt_input",
    "plan",
    "rate_input",
    "spark_session",
]
