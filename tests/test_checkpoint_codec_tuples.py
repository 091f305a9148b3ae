"""Python tuples in checkpoints (`riverbed.checkpoint._codec`, extension type 4): they come back as
tuples, at any depth, as dict keys and set items too.

The codec stored a tuple as a msgpack array, which comes back a list. A window of a schema-less
stream holds whatever its tuples' attributes hold: after a real restart an operator doing
``{t["k"] for t in event.tuples}`` over a tuple-valued ``k`` failed with "unhashable type:
'list'" at every restart (the job could never resume), and output printing the value differed
(``[0, 'x']`` for ``(0, 'x')``); a reset in place keeps the objects and did not show it (a
review). Records written before (tuples as arrays) still decode, their tuples as lists.
"""

from __future__ import annotations

import collections
import enum
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import msgpack  # type: ignore[import-untyped]
import pytest

from riverbed.checkpoint import CheckpointCorrupt, CheckpointEncodeError, MemoryStore, RocksDBStore, _codec
from riverbed.checkpoint._codec import TUPLE_EXT, decode_value, encode_value
from riverbed.graph import Graph, Operator, Source
from riverbed.runtime import Job, VirtualClock
from riverbed.testing import run_until_crash
from riverbed.windows import EventType, StreamWindowEvent

S = 1_000_000_000


def round_trip(value: Any) -> Any:
    return decode_value(encode_value(value, checkpoint_id=1, key="op"), checkpoint_id=1, key="op")


def shape(value: Any) -> Any:
    """``value`` with every container tagged by its exact type (``(1, 2) == [1, 2]`` is already
    False, but ``{1} == frozenset({1})`` is True, and a namedtuple equals its plain tuple)."""
    if isinstance(value, dict):
        return (type(value).__name__, {shape(k): shape(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return (type(value).__name__, tuple(shape(v) for v in value))
    if isinstance(value, set | frozenset):
        return (type(value).__name__, frozenset(shape(v) for v in value))
    return (type(value).__name__, value)


class Point(NamedTuple):
    x: int
    y: Any


class Level(enum.IntEnum):
    HIGH = 3


class Name(str):
    pass


# ---------------------------------------------------------------------- round trips


@pytest.mark.parametrize("value", [
    (),
    (1,),
    (0, "x"),
    (1, (2, (3, ()))),
    (True, None, 1.5, "s", b"b", -(2**70), Decimal("1.20")),
    ([1, 2], {"a": (3,)}),  # a list inside a tuple stays a list, a dict a dict
    [(1, 2), [(3, [4, (5,)])]],
    {"k": (0, "x"), "path": ((1, (2,)), [3])},
    {"tuples": [{"i": n, "k": (n % 3, "x")} for n in range(20)]},  # a window's contents
    {(1, 2): "a", ((1,), "b"): [(), ()], (): 0},  # tuple keys, nested, empty
    {(1, (2, "a")): {(3,): (4,)}},
    {(1, 2), (3, (4, ())), ()},  # tuples in a set
    ({(1, 2)},),  # a set in a tuple
    {(1, frozenset({2})): 3},  # a tuple key holding a frozenset
    ({frozenset({1}): (2,)},),  # a dict with a frozenset key inside a tuple
    (("x" * 100,) * 50,),
    ((1,),) * 1000,
])
def test_a_tuple_comes_back_a_tuple(value: Any) -> None:
    assert shape(round_trip(value)) == shape(value)


def test_a_frozenset_comes_back_a_set_except_where_it_must_hash() -> None:
    """As before: a frozenset is stored as a set, and comes back a frozenset only as a dict key or
    a set item (or inside one), where it must be hashable."""
    value = {"f": (frozenset({1}),), "s": {(1, frozenset({2}))}}
    back = round_trip(value)
    assert type(back["f"]) is tuple and type(back["f"][0]) is set and back["f"][0] == {1}
    (item,) = back["s"]
    assert type(item) is tuple and type(item[1]) is frozenset and item == (1, frozenset({2}))


def test_a_namedtuple_comes_back_a_plain_tuple() -> None:
    back = round_trip({"p": Point(1, Point(2, [3])), "ps": [Point(4, 5)], "keys": {Point(6, 7): 8}})
    assert shape(back) == shape({"p": (1, (2, [3])), "ps": [(4, 5)], "keys": {(6, 7): 8}})


def test_subclasses_of_plain_types_are_stored_as_their_base_type() -> None:
    """Tuples need msgpack's ``strict_types``, which sends subclasses to the codec too: they are
    stored as before, as their base type."""
    counts = collections.Counter(a=2)
    value = {"counter": counts, "ordered": collections.OrderedDict(b=(1,)),
             "default": collections.defaultdict(int, c=3), "level": Level.HIGH,
             "name": Name("s\udcff"), "bytes": bytearray(b"ab"), "view": memoryview(b"cd"),
             Name("key"): 1, Level.HIGH: (Level.HIGH,)}
    back = round_trip(value)
    assert shape(back) == shape({"counter": {"a": 2}, "ordered": {"b": (1,)}, "default": {"c": 3},
                                 "level": 3, "name": "s\udcff", "bytes": b"ab", "view": b"cd",
                                 "key": 1, 3: (3,)})


def test_records_written_before_still_decode_their_tuples_as_lists() -> None:
    """Bytes written by riverbed before tuples had an extension type (this value, encoded by it):
    tuples came back lists, except dict keys and set items, tuples because they must hash."""
    old = bytes.fromhex(
        "85a67475706c65739182a16901a16b9201a178a46b6579738192019202a161a176a3736574d60391920102"
        "a164d601312e3230a66e657374656491920192029103")
    # written from {"tuples": [{"i": 1, "k": (1, "x")}], "keys": {(1, (2, "a")): "v"},
    #               "set": {(1, 2)}, "d": Decimal("1.20"), "nested": ((1, [2, (3,)]),)}
    back = decode_value(old, checkpoint_id=1, key="op")
    assert shape(back) == shape({"tuples": [{"i": 1, "k": [1, "x"]}], "keys": {(1, (2, "a")): "v"},
                                 "set": {(1, 2)}, "d": Decimal("1.20"), "nested": [[1, [2, [3]]]]})


def test_tuples_nested_too_deep_are_refused_when_saving_with_their_path() -> None:
    deep: Any = ()
    for _ in range(99):
        deep = (deep,)
    assert round_trip({"x": deep}) == {"x": deep}  # 100 levels: stored
    with pytest.raises(CheckpointEncodeError, match=r"the value at \['x'\]" + r"\[0\]" * 100
                                                    + r": tuples are nested deeper than 100 levels"):
        encode_value({"x": (deep,)}, checkpoint_id=7, key="op")
    assert round_trip([(1,)]) == [(1,)]  # the codec is still usable


def test_a_tuple_in_a_cycle_or_holding_what_cannot_be_stored_is_refused_with_its_path() -> None:
    cycle: list[Any] = []
    cycle.append((cycle,))
    with pytest.raises(CheckpointEncodeError, match="contains itself"):
        encode_value({"x": cycle}, checkpoint_id=7, key="op")
    with pytest.raises(CheckpointEncodeError, match=r"\['x'\]\[1\]\[0\].*a object is not plain data"):
        encode_value({"x": (1, (object(),))}, checkpoint_id=7, key="op")
    # The packers the failures left half-way are reset: the next record is right.
    assert shape(round_trip({"k": (1, (2, "x"))})) == shape({"k": (1, (2, "x"))})


def test_the_packers_of_tuples_are_all_free_again_after_each_record() -> None:
    """A packer is not reentrant: each level of nested tuples takes its own. After a record, failed
    or not, every packer is free again, and one that packed a large tuple is not kept (its
    buffer stays at the size it grew to)."""
    packers = _codec._PACKERS  # (this thread's: earlier tests may have made some)
    before = packers.made
    big = (tuple(range(100_000)), ("x" * 70_000,))  # both levels pack 64 KiB or more
    assert shape(round_trip({"big": big})) == shape({"big": big})
    assert packers.made == len(packers.free) == max(before, 2) - 2
    assert round_trip([((1, (2, (3,))),)]) == [((1, (2, (3,))),)]  # four levels
    assert packers.made == len(packers.free) == max(before - 2, 4)
    with pytest.raises(CheckpointEncodeError):
        encode_value([((1, (object(),)),)], checkpoint_id=7, key="op")  # fails three levels down
    assert packers.made == len(packers.free) == max(before - 2, 4) - 3


def test_a_tuple_extension_holding_no_list_is_corrupt() -> None:
    payload = msgpack.packb({"k": msgpack.ExtType(TUPLE_EXT, msgpack.packb(5))})
    with pytest.raises(CheckpointCorrupt, match="a tuple extension holds no list"):
        decode_value(payload, checkpoint_id=3, key="op")


def test_threads_encoding_at_once_each_get_their_own_bytes() -> None:
    """The packers of tuples' items are kept per thread: a packer is not reentrant."""
    values = [{"t": [(n, (m, "x" * m), [m]) for m in range(40)]} for n in range(8)]
    expected = [encode_value(v, checkpoint_id=1, key="op") for v in values]
    got: list[list[bytes]] = [[] for _ in values]

    def work(i: int) -> None:
        for _ in range(200):
            got[i].append(encode_value(values[i], checkpoint_id=1, key="op"))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(values))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(all(b == expected[i] for b in got[i]) for i in range(len(values)))
    assert shape(decode_value(expected[3], checkpoint_id=1, key="op")) == shape(values[3])


# ------------------------------------------------------------- through a restarted job


class Numbers(Source):
    """A replayable source of schema-less tuples holding Python tuples: ten every 0.1 s."""

    replayable = True

    def __init__(self, n: int) -> None:
        self.n = n
        self.offset = 0

    async def run(self) -> None:
        ctx: Any = self.context
        while self.offset < self.n:
            i = self.offset
            await ctx.sleep_until((i // 10 + 1) * S // 10)
            self.submit({"i": i, "k": (i % 3, "x"), "path": ((i % 2, (i % 5,)), [i % 7])})
            self.offset += 1

    def snapshot(self) -> Any:
        return self.offset

    def restore(self, state: Any) -> None:
        self.offset = state


class Distinct(Operator):
    """Per pane, the distinct values of the tuple attributes (they must hash) and their repr."""

    window_events = frozenset({EventType.EVICTION})

    def on_window_event(self, event: StreamWindowEvent[Any], port: int) -> None:
        ts = event.tuples
        if ts:
            self.submit({"part": repr(event.partition), "first": ts[0]["i"],
                         "distinct": len({t["k"] for t in ts}),
                         "heads": len({t["path"][0] for t in ts}),
                         "k0": repr(ts[0]["k"]), "path0": repr(ts[0]["path"])})


class Rows(Operator):
    """A sink whose output is its state: what a checkpoint restores is what was 'written'."""

    def __init__(self) -> None:
        self.rows: list[Any] = []

    def on_tuple(self, tup: Any, port: int) -> None:
        self.rows.append(tup)

    def snapshot(self) -> Any:
        return list(self.rows)

    def restore(self, state: Any) -> None:
        self.rows = list(state)


def build(n: int, panes: Rows, keyed: Rows) -> Graph:
    g = Graph("tuplewin")
    s = g.source("numbers", Numbers(n))
    g.sink("panes", panes, [g.operator("distinct", Distinct(), [s.window("tumbling, count(10)")])])
    by_k = g.operator("by_k", Distinct(), [s.window("tumbling, count(4), partitioned", partition_by="k")])
    g.sink("keyed", keyed, [by_k])
    return g


def reference(n: int) -> tuple[list[Any], list[Any]]:
    panes, keyed = Rows(), Rows()
    assert run_until_crash(Job(build(n, panes, keyed), clock=VirtualClock()), None)
    assert panes.rows[0] == {"part": "None", "first": 0, "distinct": 3, "heads": 10,
                             "k0": "(0, 'x')", "path0": "((0, (0,)), [0])"}
    return panes.rows, keyed.rows


def window_tuples(checkpoint: Any) -> list[Any]:
    """The tuples the windows of a checkpoint of `build`'s graph hold."""
    return [t for op in ("distinct", "by_k") for w in checkpoint.states[op]["windows"]
            for p in w["partitions"] for t in p["tuples"]]


class Stores:
    """A store per run of a job, on the same records: memory, or a RocksDB directory reopened
    (as a new process would)."""

    def __init__(self, kind: str, path: Path) -> None:
        self.kind, self.path = kind, path
        self.records: dict[bytes, bytes] = {}
        self.ledger: dict[str, bytes] = {}

    def open(self) -> Any:
        if self.kind == "memory":
            return MemoryStore(self.records, keep_last=1000, ledger=self.ledger)
        return RocksDBStore(self.path / "ckpt", keep_last=1000)


@pytest.mark.parametrize("kind", ["memory", "rocksdb"])
@pytest.mark.parametrize("crash", [0.75, 1.55, 2.35])
def test_a_window_of_tuples_holding_tuples_restarts_after_a_crash_as_if_uninterrupted(
        kind: str, crash: float, tmp_path: Path) -> None:
    """The review's graph: with a checkpoint restored, ``{t["k"] for t in event.tuples}`` failed
    (unhashable list) at every restart; now the output is the uninterrupted run's."""
    n = 300
    expected = reference(n)
    stores = Stores(kind, tmp_path)
    store = stores.open()
    first = Rows(), Rows()
    try:
        assert not run_until_crash(Job(build(n, *first), clock=VirtualClock(), checkpoints=store,
                                       checkpoint_period=0.35), round(crash * S))
        stored = store.latest_good()
        assert stored is not None and window_tuples(stored), "a restore of windows holding tuples"
    finally:
        store.close()
    store = stores.open()
    second = Rows(), Rows()
    try:
        restarted = Job(build(n, *second), clock=VirtualClock(), checkpoints=store, checkpoint_period=0.35)
        assert run_until_crash(restarted, None)
    finally:
        store.close()
    assert restarted.restored_from is not None
    assert (second[0].rows, second[1].rows) == expected, f"restored from {restarted.restored_from}"


@pytest.mark.parametrize("stop", [0.75, 2.05])  # (the windows hold tuples then)
def test_a_window_of_tuples_holding_tuples_continues_after_a_stop(stop: float, tmp_path: Path) -> None:
    n = 300
    expected = reference(n)
    with RocksDBStore(tmp_path / "ckpt", keep_last=1000) as store:
        first = Rows(), Rows()
        assert run_until_crash(Job(build(n, *first), clock=VirtualClock(), checkpoints=store,
                                   checkpoint_period=0.35), None, [(stop, Job.stop)])
        stored = store.latest_good()
        assert stored is not None
        held = window_tuples(stored)
        assert held and all(type(t["k"]) is tuple for t in held), "the windows' tuples as stored"
    with RocksDBStore(tmp_path / "ckpt", keep_last=1000) as store:
        second = Rows(), Rows()
        restarted = Job(build(n, *second), clock=VirtualClock(), checkpoints=store, checkpoint_period=0.35)
        assert run_until_crash(restarted, None)
    assert restarted.restored_from == stored.id
    assert (second[0].rows, second[1].rows) == expected


# ------------------------------------------------- an operator's own state: reset and restart


class LastSeen(Operator):
    """Keeps the last tuple's ``k`` (a Python tuple) in its state; raises once at ``fail_at``.
    ``restored`` records the type each restore got back."""

    restored: ClassVar[list[str]] = []

    def __init__(self, fail_at: int | None = None) -> None:
        self.fail_at = fail_at
        self.last: Any = None

    def on_tuple(self, tup: Any, port: int) -> None:
        if tup["i"] == self.fail_at:
            self.fail_at = None
            raise RuntimeError("injected")
        self.last = tup["k"]
        self.submit({"i": tup["i"], "last": repr(self.last)})

    def snapshot(self) -> Any:
        return {"last": self.last}

    def restore(self, state: Any) -> None:
        self.last = state["last"]
        LastSeen.restored.append(type(self.last).__name__)


def test_an_operators_tuple_comes_back_a_tuple_from_a_reset_as_from_a_restart() -> None:
    """"A reset restores what a restart restores": a restart now gives the tuple back."""

    def run(fail_at: int | None, crash: float | None, stores: Stores) -> list[str]:
        LastSeen.restored = []
        g = Graph("last")
        s = g.source("numbers", Numbers(200))
        out = Rows()
        g.sink("out", out, [g.operator("last", LastSeen(fail_at), [s])])
        g.consistent_region(s, name="r", period=0.35)
        job = Job(g, clock=VirtualClock(), checkpoints=stores.open())
        run_until_crash(job, None if crash is None else round(crash * S))
        return LastSeen.restored

    stores = Stores("memory", Path())
    assert run(None, 1.05, stores) == []
    assert run(None, None, stores) == ["tuple"]  # a restart
    assert run(117, None, Stores("memory", Path())) == ["tuple"]  # a reset in place
