"""The SparkSession riverbed deploys onto: local by default, with what the bridge needs.

Key groups keep their state in the RocksDB state-store provider (restarts
resume from its checkpoints without holding every version in memory, as the
default HDFS-backed one does), and the Python workers must run the interpreter that has
riverbed installed. Locally the driver binds to 127.0.0.1 only and the UI is
off, so parallel sessions do not clash on ports. The C1-only JIT halves the
JVM's start-up CPU, which dominates short local runs. The fork server that graph sources'
feeder processes start from (`_forks`) is started with the session, so its imports overlap
the JVM's start instead of a query's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ._errors import SparkSetupError
from ._forks import start_fork_server

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DEFAULT_CONF", "check_java", "spark_session"]

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

DEFAULT_CONF: dict[str, str] = {
    "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.streaming.noDataMicroBatches.enabled": "true",
}

LOCAL_CONF: dict[str, str] = {
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
}


def check_java() -> str:
    """The ``java -version`` line Spark will use; raises if there is no Java 17+."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        raise SparkSetupError("Spark needs Java 17 or newer: no `java` on PATH and JAVA_HOME unset")
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False).stderr
    first = out.splitlines()[0] if out else ""
    try:
        version = first.split('"')[1]
        major = int(version.split(".")[0])
    except (IndexError, ValueError):
        raise SparkSetupError(f"cannot read the Java version from {first!r} ({java})") from None
    if major < 17:
        raise SparkSetupError(f"Spark 4 needs Java 17 or newer; {java} is {version}")
    return first


def spark_session(master: str = "local[2]", *, app_name: str = "riverbed",
                  conf: Mapping[str, Any] | None = None, local_dir: str | None = None) -> SparkSession:
    """Get or create the session; ``conf`` overrides the defaults above."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise SparkSetupError("the Spark bridge needs PySpark: pip install 'riverbed[spark]'") from None
    check_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    local = master.startswith("local")
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.master(master).appName(app_name)
    settings = dict(DEFAULT_CONF)
    if local:
        settings.update(LOCAL_CONF)
    if local_dir:
        settings["spark.local.dir"] = local_dir
    settings.update({k: str(v) for k, v in (conf or {}).items()})
    for key, value in settings.items():
        builder = builder.config(key, value)
    start_fork_server()  # graph sources' feeders fork from it: it warms up beside the JVM
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
