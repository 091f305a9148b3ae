"""Deploys riverbed graphs as Spark Structured Streaming queries, with the same window events.

PySpark is an optional dependency (``riverbed[spark]``): importing this
package does not import it; the functions that need Spark do.
"""

from ._errors import SparkSetupError, TranslationError
from ._inputs import SparkInput, mqtt_input, rate_input
from ._session import check_java, spark_session

__all__ = ["SparkInput", "SparkSetupError", "TranslationError", "check_java", "mqtt_input", "rate_input",
           "spark_session"]
