"""Sustained ingest through mosquitto into a windowed Aggregate, batched and unbatched.

Usage::

    .venv/bin/python bench/mqtt.py [--batched-n N] [--unbatched-n M] [--batch B] [--format json|msgpack]

Setup: a mosquitto on 127.0.0.1 (``riverbed.mqtt._broker.start_broker``); a
publisher in a **separate process** (an aiomqtt client through riverbed's
`MQTTClient`, QoS 1, 64 publishes in flight) sends readings
``{sensor, seq, temp, pub}`` to ``bench/<sensor>``; ``pub`` is the wall
clock (ns) when the message was handed to the client. The riverbed job is
``MQTTSource(topics=["bench/+"], qos=1) -> Aggregate(tumbling, count(100):
count, average temp, max pub) -> sink``, on the real clock.

Two shapes: **batched** (``B`` records per message, an array) and
**unbatched** (one record per message). Each runs twice:

* **flood**: the publisher sends as fast as it can; records/s = records /
  (time of the last window result - publish time of the first record). This is
  the sustained ingest rate; its latency includes the queueing of a flood.
* **paced** at half the flood rate: end-to-end latency from ``pub`` of the
  window's newest record to the moment the Aggregate's result reaches the
  sink (p50/p99 over all window results): publish -> broker -> source ->
  window -> result, without a backlog.

Every run is checked before its figures are printed (`check`): the record
count, full windows, and the temperatures summing to what was published; a
difference exits with status 1.

The three processes (publisher, broker, riverbed) share the machine's CPUs,
as they would on one box. Numbers vary with machine load (see
``notes/dependencies.md``: a 2-vCPU VM, 1.4 k msgs/s through aiomqtt).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from riverbed.graph import Graph, Operator, Punct, Schema  # noqa: E402
from riverbed.mqtt import ClientConfig, Codec, MQTTClient, MQTTSource  # noqa: E402
from riverbed.mqtt._broker import start_broker  # noqa: E402
from riverbed.operators import Aggregate, Average, Count, Max, Min  # noqa: E402
from riverbed.runtime import Job  # noqa: E402

READING = Schema(sensor="rstring", seq="int64", temp="float64", pub="int64")
WINDOW = 100  # records per Aggregate result
SENSORS = 10


class Latencies(Operator):
    """Each result's age: now minus the newest ``pub`` of its window; plus when the last came."""

    def __init__(self) -> None:
        self.ages: list[int] = []
        self.records = 0
        self.last_ns = 0
        self.first_pub = sys.maxsize
        self.temps: list[float] = []  # each result's temperature sum (average x count)
        self.short = 0  # results of fewer than WINDOW records (a tumbling count never has one)

    def on_tuple(self, tup: Any, port: int) -> None:
        now = time.time_ns()
        self.ages.append(now - tup["pub"])
        self.records += tup["n"]
        self.temps.append(tup["avg"] * tup["n"])
        self.short += tup["n"] != WINDOW
        self.last_ns = now
        self.first_pub = min(self.first_pub, tup["first"])

    def on_punct(self, punct: Punct, port: int) -> None:
        pass


# ------------------------------------------------------------------ the publisher process


async def _publish(port: int, n: int, batch: int, fmt: str, rate: float) -> None:
    codec = Codec(fmt, READING)  # type: ignore[arg-type]
    window = 64
    async with MQTTClient(ClientConfig("127.0.0.1", port)) as client:
        start = time.perf_counter()
        pending: list[asyncio.Task[None]] = []
        seq = 0
        msg = 0
        while seq < n:
            if rate > 0:  # paced: message k leaves at start + k * batch / rate
                delay = start + msg * batch / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            count = min(batch, n - seq)
            pub = time.time_ns()
            records = [{"sensor": f"s{(seq + i) % SENSORS}", "seq": seq + i, "temp": temp_of(seq + i),
                        "pub": pub} for i in range(count)]
            payload = codec.encode(records, batch=batch > 1)
            pending.append(asyncio.ensure_future(client.publish(f"bench/s{msg % SENSORS}", payload, 1)))
            if len(pending) >= window:
                await asyncio.gather(*pending)
                pending.clear()
            seq += count
            msg += 1
        await asyncio.gather(*pending)


# ------------------------------------------------------------------ one measured run


def temp_of(seq: int) -> float:
    """The temperature the publisher sends with record ``seq``."""
    return 20.0 + seq % 7


def check(lat: Latencies, n: int) -> None:
    """Every run's results, before any figure of it is printed: as many records as complete
    windows hold, each result of WINDOW records, and (when every record falls in a complete
    window, whatever the arrival order) the temperatures summing to what was sent: a record
    lost, or delivered twice in place of another, shows. A difference exits with status 1."""
    expected = n - n % WINDOW
    problem = None
    if lat.records != expected:
        problem = f"{lat.records} records in window results, expected {expected}"
    elif lat.short:
        problem = f"{lat.short} window results hold fewer than {WINDOW} records"
    elif n % WINDOW == 0:
        sent = math.fsum(temp_of(seq) for seq in range(n))
        got = math.fsum(lat.temps)
        if not math.isclose(got, sent, rel_tol=1e-9):
            problem = f"the results' temperatures sum to {got}, the records sent to {sent}"
    if problem is not None:
        raise SystemExit(f"MISMATCH, no figures printed: {n} records published: {problem}")


def run_once(port: int, n: int, batch: int, fmt: str, rate: float) -> dict[str, float]:
    src = MQTTSource("127.0.0.1", port, topics=["bench/+"], qos=1, format=fmt,  # type: ignore[arg-type]
                     schema=READING,
                     topic_attribute=None, max_records=n)
    g = Graph("mqtt_bench")
    readings = g.source("mqtt", src, schema=READING)
    outputs = {"n": Count(), "avg": Average("temp"), "pub": Max("pub"), "first": Min("pub")}
    agg = g.operator("agg", Aggregate(outputs), [readings.window(f"tumbling, count({WINDOW})")], [None])
    lat = Latencies()
    g.sink("lat", lat, [agg])

    async def main() -> None:
        task = asyncio.create_task(Job(g).run())
        await asyncio.wait_for(src.subscribed.wait(), 30)
        pub = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--publisher", str(port), str(n), str(batch), fmt, str(rate))
        await asyncio.wait_for(task, 600)
        await pub.wait()

    asyncio.run(main())
    check(lat, n)
    secs = (lat.last_ns - lat.first_pub) / 1e9
    ages = sorted(lat.ages)
    q = statistics.quantiles(ages, n=100, method="inclusive") if len(ages) > 1 else ages * 99
    return {"records_s": lat.records / secs, "msgs_s": lat.records / batch / secs,
            "p50_ms": q[49] / 1e6, "p99_ms": q[98] / 1e6, "seconds": secs}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--publisher":
        argv = sys.argv[2:7]
        asyncio.run(_publish(int(argv[0]), int(argv[1]), int(argv[2]), argv[3], float(argv[4])))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batched-n", type=int, default=300_000, help="records in the batched runs")
    ap.add_argument("--unbatched-n", type=int, default=6_000, help="records (= messages) unbatched")
    ap.add_argument("--batch", type=int, default=500, help="records per message when batched")
    ap.add_argument("--format", choices=("json", "msgpack"), default="msgpack")
    args = ap.parse_args()
    rows: list[tuple[str, int, str, int, dict[str, float]]] = []
    with start_broker(prefer="mosquitto") as broker:
        shapes: list[tuple[str, int, int]] = [("batched", args.batched_n, args.batch),
                                              ("unbatched", args.unbatched_n, 1)]
        for shape, n, batch in shapes:  # (name, records, records per message)
            flood = run_once(broker.port, n, batch, args.format, 0.0)
            paced_rate = flood["records_s"] / 2
            paced = run_once(broker.port, max(n // 3, 20 * WINDOW), batch, args.format, paced_rate)
            rows.append((shape, batch, "flood", n, flood))
            rows.append((shape, batch, f"paced {paced_rate:,.0f}/s", max(n // 3, 20 * WINDOW), paced))
    print(f"mosquitto, {args.format}, QoS 1, Aggregate tumbling count({WINDOW}); latency = publish -> "
          "window result")
    print(f"{'shape':<10} {'rec/msg':>7} {'mode':<18} {'records':>8} {'records/s':>11} {'msgs/s':>9} "
          f"{'p50 ms':>8} {'p99 ms':>8}")
    for shape, batch, mode, n, r in rows:
        print(f"{shape:<10} {batch:>7} {mode:<18} {n:>8,} {r['records_s']:>11,.0f} {r['msgs_s']:>9,.0f} "
              f"{r['p50_ms']:>8.1f} {r['p99_ms']:>8.1f}")


if __name__ == "__main__":
    main()
