"""MQTT into a riverbed graph on Spark: the broker's messages through the MQTT Spark source,
submitted by the graph's source in the driver stage, windowed as in the runtime."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import orjson

from riverbed.graph import Graph, Schema
from riverbed.mqtt import MQTTSource
from riverbed.operators import Aggregate, Count, Sum
from riverbed.runtime import VirtualClock, run_graph
from riverbed.spark_bridge import mqtt_input
from riverbed.spark_bridge._deploy import deploy
from riverbed.spark_bridge.mqtt_source import read_status
from riverbed.testing import ListSink, ListSource
from tests.spark.test_mqtt_source import _publish, _subscribed, _until, broker  # noqa: F401  (the fixture)


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


def test_bad_payloads_on_spark_are_counted_and_dead_lettered_not_dropped_silently(
        spark: Any, broker: int, tmp_path: Path) -> None:  # noqa: F811
    """mqtt_input decodes as MQTTSource does (schema, batches of records) and reports what it
    refuses as MQTTSource does; before issue 17 the refused payloads vanished without a word."""
    schema = Schema(sensor="rstring", v="int64", topic="rstring")
    good = [{"sensor": f"s{i % 2}", "v": i} for i in range(6)]
    messages = [
        orjson.dumps(good[0]), b"{oops", orjson.dumps(good[1]), orjson.dumps({"sensor": "s0"}),
        orjson.dumps([good[2], "x", good[3]]),  # a batch: two records and a refused one
        orjson.dumps({"sensor": "s1", "v": "four"}), orjson.dumps(good[4]), orjson.dumps(good[5]),
    ]
    expected_graph = _graph(ListSource([{**m, "topic": "bad/in"} for m in good]))
    run_graph(expected_graph, clock=VirtualClock())
    want = [t for t in expected_graph.freeze().operator("sink").operator.items if isinstance(t, dict)]
    assert len(want) == 2
    spool = tmp_path / "spool"
    src = mqtt_input(spark, topic="bad/#", client_id="riverbed-bad-test", spool=str(spool), port=broker,
                     schema=schema, dead_letter_topic="dead/spark", max_records_per_batch=5)
    d = deploy(_graph(MQTTSource("127.0.0.1", broker, topics=["bad/#"], schema=schema)), spark,
               inputs={"readings": src}, checkpoint=str(tmp_path / "ck"), available_now=False,
               processing_time="100 milliseconds")
    letters: list[dict[str, Any]] = []
    try:
        with _subscribed(broker, "dead/spark", lambda payload: letters.append(orjson.loads(payload))):
            d.query.processAllAvailable()  # the reader has connected and subscribed
            _publish(broker, [("bad/in", m) for m in messages])
            _until(lambda: d.query.processAllAvailable() or len(_outputs(d)) >= 2, "2 windows", 60)
            _until(lambda: len(letters) == 4, "4 dead letters")
            # The subscriber can hear the 4th letter before the reader has its acknowledgement
            # and counts it; the reader's status file is rewritten every receive round.
            _until(lambda: ((read_status(str(spool)) or {}).get("dead_letters") or {}).get("published") == 4,
                   "the status counting 4 dead letters published")
    finally:
        d.stop()
    assert _outputs(d) == want
    assert [(x["kind"], x["index"]) for x in letters] == [("undecodable", None), ("invalid", None),
                                                          ("invalid", 1), ("invalid", None)]
    assert "missing attribute(s) v" in letters[1]["reason"] and letters[3]["payload"].endswith('"four"}')
    status = read_status(str(spool))
    assert status is not None and status["bad"] == {"undecodable": 1, "invalid": 3}
    assert status["messages"] == len(messages) and status["dead_letters"]["published"] == 4
