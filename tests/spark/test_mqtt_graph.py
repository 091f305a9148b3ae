"""MQTT into a riverbed graph on Spark: the broker's messages through the MQTT Spark source,
submitted by the graph's source in the driver stage, windowed as in the runtime."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from riverbed.graph import Graph
from riverbed.mqtt import MQTTSource
from riverbed.operators import Aggregate, Count, Sum
from riverbed.runtime import VirtualClock, run_graph
from riverbed.spark_bridge import mqtt_input
from riverbed.spark_bridge._deploy import deploy
from riverbed.testing import ListSink, ListSource
from tests.spark.test_mqtt_source import _publish, broker  # noqa: F401  (the broker fixture)


def _graph(source: Any) -> Graph:
    g = Graph("mqtt-spark")
    readings = g.source("readings", source)
    sums = g.operator("sums", Aggregate({"total": Sum("v"), "n": Count()}, copy=("sensor",)),
                      [readings.window("tumbling, count(3), partitioned", partition_by="sensor")])
    g.sink("sink", ListSink(), [sums])
    return g


def test_mqtt_messages_are_windowed_on_spark_as_in_the_runtime(spark: Any, broker: int,  # noqa: F811
                                                               tmp_path: Path) -> None:
    messages = [{"sensor": f"s{i % 3}", "v": i} for i in range(30)]
    expected_graph = _graph(ListSource([{**m, "topic": f"sensors/{m['sensor']}"} for m in messages]))
    g = _graph(MQTTSource("127.0.0.1", broker, topics=["sensors/#"]))
    run_graph(expected_graph, clock=VirtualClock())
    src = mqtt_input(spark, topic="sensors/#", client_id="riverbed-graph-test", spool=str(tmp_path / "spool"),
                     port=broker, max_records_per_batch=7)
    d = deploy(g, spark, inputs={"readings": src}, checkpoint=str(tmp_path / "ck"), available_now=False,
               processing_time="100 milliseconds")
    assert d.plan.mode == "driver"
    assert "SparkInput" in d.plan.explain()
    try:
        d.query.processAllAvailable()  # the reader has connected and subscribed
        for m in messages:  # one at a time: the spool's order is the publishing order
            _publish(broker, [(f"sensors/{m['sensor']}", json.dumps(m).encode())])
        deadline = time.monotonic() + 60
        while len(_outputs(d)) < 9:  # 10 readings per sensor: 3 full windows each
            assert time.monotonic() < deadline, f"only {_outputs(d)} after 60 s"
            d.query.processAllAvailable()  # returns once what is available now is processed
    finally:
        d.stop()
    got = _outputs(d)
    want = [t for t in expected_graph.freeze().operator("sink").operator.items if isinstance(t, dict)]
    assert len(want) == 9  # Aggregate reports full count windows only, at final as well
    assert got == want


def _outputs(d: Any) -> list[Any]:
    try:
        return [t for t in d.stage.operator("sink").items if isinstance(t, dict)]
    except LookupError:
        return []
