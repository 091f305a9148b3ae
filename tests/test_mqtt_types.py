"""SPL types beyond JSON's through MQTT: what an MQTTSink publishes, an MQTTSource with the same
schema reads back equal, value and Python type (decimal, set, blob, maps with integer keys,
timestamps), as FileSink and FileSource do for a file."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any

import msgpack
import orjson
import pytest

from riverbed.graph import Graph, Schema
from riverbed.mqtt import Codec, MQTTSink, MQTTSource
from riverbed.runtime import Job
from riverbed.testing import ListSink, ListSource

from .mqtt_broker import Broker, broker

__all__ = ["broker"]  # the fixture, imported for pytest

TYPED = Schema(id="int32", price="decimal64", tags="set<rstring>", raw="blob",
               names="map<int32, rstring>", prices="list<decimal64>", at="timestamp",
               x="float64", nested="map<rstring, set<int64>>")


def _record(i: int) -> dict[str, Any]:
    return {"id": i, "price": Decimal(f"{i}.10"), "tags": {"a", f"t{i}"}, "raw": bytes([0, 255, i]),
            "names": {1: "one", i + 2: "more"}, "prices": [Decimal("0.5"), Decimal(i)],
            "at": 1_700_000_000_000_000_000 + i, "x": float(i), "nested": {"k": {i, 2**40}}}


def _same(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert got == want
    for name, value in want.items():  # equal is not enough: Decimal("1") == 1, a set is no list
        assert type(got[name]) is type(value), (name, got[name])
    assert all(type(p) is Decimal for p in got["prices"])
    assert all(type(k) is int for k in got["names"])


@pytest.mark.parametrize("fmt", ["json", "msgpack"])
def test_a_record_encoded_decodes_equal_one_and_batched(fmt: str) -> None:
    codec = Codec(fmt, TYPED)  # type: ignore[arg-type]
    records = [_record(i) for i in range(3)]
    (one,), bad = codec.decode(codec.encode(records[:1], batch=False))
    assert bad == []
    _same(one, records[0])
    many, bad = codec.decode(codec.encode(records, batch=True))
    assert bad == [] and len(many) == 3
    for got, want in zip(many, records, strict=True):
        _same(got, want)


def test_a_value_of_the_wrong_kind_is_refused_naming_the_attribute_the_others_kept() -> None:
    codec = Codec("json", TYPED)
    good = orjson.loads(codec.encode([_record(1)], batch=False))
    wrong = dict(good, raw="not base64!")
    good_back, bad = codec.decode(orjson.dumps([good, wrong]))
    assert len(good_back) == 1 and len(bad) == 1
    assert bad[0].index == 1 and "attribute 'raw'" in bad[0].reason and "base64" in bad[0].reason
    mp = Codec("msgpack", TYPED)
    packed = msgpack.unpackb(mp.encode([_record(1)], batch=False), strict_map_key=False)
    _, bad = mp.decode(msgpack.packb(dict(packed, names={"x": "one"})))  # a key that is no int32
    assert len(bad) == 1 and "attribute 'names'" in bad[0].reason


@pytest.mark.parametrize("fmt", ["json", "msgpack"])
def test_sink_to_source_through_the_broker_keeps_every_type(broker: Broker, fmt: str) -> None:
    records = [_record(i) for i in range(20)]
    source = MQTTSource(broker.host, broker.port, topics=[f"typed/{fmt}"], schema=TYPED,
                        format=fmt, topic_attribute=None, max_records=len(records))  # type: ignore[arg-type]
    consumer = Graph("typed_in")
    got = ListSink()
    consumer.sink("out", got, [consumer.source("mqtt", source, schema=TYPED)])
    producer = Graph("typed_out")
    producer.sink("pub", MQTTSink(broker.host, broker.port, topic=f"typed/{fmt}", format=fmt, batch=3),  # type: ignore[arg-type]
                  [producer.source("list", ListSource(records), schema=TYPED)])

    async def main() -> None:
        job = asyncio.create_task(Job(consumer).run())
        subscribed = asyncio.create_task(source.subscribed.wait())
        done, _ = await asyncio.wait({job, subscribed}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        assert subscribed in done, "the source ended before subscribing"
        await asyncio.wait_for(Job(producer).run(), 30)
        await asyncio.wait_for(job, 30)

    asyncio.run(main())
    assert len(got.tuples) == len(records)
    for have, want in zip(sorted(got.tuples, key=lambda t: t["id"]), records, strict=True):
        _same(have, want)
