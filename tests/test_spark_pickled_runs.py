"""A source's checked runs travel to the key groups as pickles, and every part of a round is
split among the groups in order, without Spark (`_source._routed_rows`, `_rows.pack_run`)."""

from __future__ import annotations

from typing import Any

import pytest

from riverbed.graph import FrozenGraph, Graph, Schema, Source
from riverbed.operators import Aggregate, Count
from riverbed.spark_bridge._keyed import expand, group_of
from riverbed.spark_bridge._rows import KIND_BUNDLE, KIND_TUPLE, decode, encode, source_ord
from riverbed.spark_bridge._source import CHECKED, TUPLES, item_rows, route_of, source_rows
from riverbed.testing import ListSink

SCALARS = Schema(k="int64", v="float64", s="rstring", b="boolean", raw="blob", small="uint8")


class _Given(Source):
    replayable = True

    def __init__(self, items: list[Any]) -> None:
        self.items = items

    def generate(self) -> Any:
        yield from self.items


def _graph(items: list[Any], schema: Schema | None) -> FrozenGraph:
    g = Graph("pickled")
    src = g.source("src", _Given(items), schema=schema)
    agg = g.operator("agg", Aggregate({"n": Count()}, copy=("k",)),
                     [src.window("tumbling, count(3), partitioned", partition_by="k")])
    g.sink("sink", ListSink(), [agg])
    return g.freeze()


def _scalar_items(n: int) -> list[Any]:
    items: list[Any] = []
    for i in range(n):
        t = {"k": i % 5, "v": i / 4 if i % 3 else i, "s": f"s{i}", "b": i % 2 == 0, "raw": bytes([i % 256]),
             "small": i % 256}
        if i % 7 == 0:  # the same attributes in another order: the schema check allows it
            t = dict(reversed(list(t.items())))
        items.append(t)
    return items


def _runs(rows: list[Any]) -> list[Any]:
    return [e[3] for row in rows if row[1] == KIND_BUNDLE for e in decode(row[4])[1] if e[0] == KIND_TUPLE]


def _opened(rows: list[Any], groups: int) -> list[list[Any]]:
    per_group: list[list[Any]] = [[] for _ in range(groups)]
    for row in rows:
        per_group[row[5]] += [it[4] for it in expand([row[:5]]) if it[1] == KIND_TUPLE]
    return per_group


def _same(a: list[Any], b: list[Any]) -> bool:
    """Equal dicts with their keys in the same order and values of the same types."""
    return a == b and all(list(x.items()) == list(y.items())
                          and [type(v) for v in x.values()] == [type(v) for v in y.values()]
                          for x, y in zip(a, b, strict=True))


def test_a_checked_run_of_scalar_tuples_travels_as_one_pickle_and_opens_to_the_same_dicts() -> None:
    items = _scalar_items(60)
    checked = _graph(items, SCALARS)
    rows = list(source_rows(checked, "src", 0, route=route_of(checked, "agg", 2, 16, [0, 1])))
    runs = _runs(rows)
    assert runs and all(type(r) is bytes for r in runs)  # pickles, not msgpack lists
    plain = _graph(items, None)  # no schema: msgpack, as before
    plain_rows = list(source_rows(plain, "src", 0, route=route_of(plain, "agg", 2, 16, [0, 1])))
    assert all(type(r) is list for r in _runs(plain_rows))
    got, want = _opened(rows, 2), _opened(plain_rows, 2)
    for g in range(2):
        assert _same(got[g], want[g])
        assert _same(got[g], [t for t in items if group_of(t["k"], 2) == g])
    assert [r[:5] for r in rows if r[1] != KIND_BUNDLE] == [r[:5] for r in plain_rows if r[1] != KIND_BUNDLE]
    assert [(r[0], r[2], r[5]) for r in rows] == [(r[0], r[2], r[5]) for r in plain_rows]


@pytest.mark.parametrize("schema", [Schema(k="int64", when="timestamp"), Schema(k="int64", xs="list<int64>"),
                                    None])
def test_tuples_of_other_schemas_travel_as_msgpack(schema: Schema | None) -> None:
    # A timestamp may be any int (msgpack refuses one beyond 64 bits); a list attribute may hold
    # what msgpack gives back otherwise; without a schema nothing is known of the tuples.
    names = schema.names if schema is not None else ("k", "when", "xs")
    values = {"k": lambda i: i, "when": lambda i: i, "xs": lambda i: [i]}
    items: list[Any] = [{name: values[name](i) for name in names} for i in range(20)]
    graph = _graph(items, schema)
    rows = list(source_rows(graph, "src", 0, route=route_of(graph, "agg", 2, 8, [0, 1])))
    runs = _runs(rows)
    assert runs and all(type(r) is list for r in runs)
    assert sorted((t for g in _opened(rows, 2) for t in g), key=lambda t: t["k"]) == items


def _kinds_of_runs(kinds: list[int]) -> list[type]:
    items = iter([(kind, 0, 0, [{"k": i, "n": j}]) for j, kind in enumerate(kinds) for i in range(2)])
    rows = list(item_rows(items, 0, route=(None, 1, 64, [0])))
    return [type(r) for r in _runs(rows)]


def test_a_run_is_pickled_only_when_every_tuple_in_it_was_checked() -> None:
    assert _kinds_of_runs([CHECKED, CHECKED]) == [bytes]
    assert _kinds_of_runs([CHECKED, TUPLES]) == [list]
    assert _kinds_of_runs([TUPLES, CHECKED]) == [list]


KEYS: list[Any] = [5, -3, 2**40, "east", True, 0, None, (1, 2), 7, 12, "west", 2**63 - 1]


@pytest.mark.parametrize("groups", [1, 2, 3, 8, 9, 13])
@pytest.mark.parametrize("bundle", [5, 64])
def test_every_tuple_goes_to_its_keys_group_in_order_with_its_own_sequence_number(groups: int,
                                                                                  bundle: int) -> None:
    tuples: list[Any] = [{"k": KEYS[i % len(KEYS)], "i": i} if i % 11 else {"i": i} for i in range(50)]
    items = iter([(TUPLES, 0, 0, tuples[:17]), (TUPLES, 0, 0, tuples[17:])])
    rows = list(item_rows(items, 2, route=(lambda t: t["k"], groups, bundle, list(range(groups)))))
    got: list[list[Any]] = [[] for _ in range(groups)]
    for row in rows:
        got[row[5]] += [(it[0], it[4]) for it in expand([row[:5]]) if it[1] == KIND_TUPLE]
    want: list[list[Any]] = [[] for _ in range(groups)]
    for i, t in enumerate(tuples):
        g = group_of(t["k"], groups) if "k" in t else 0
        want[g].append((source_ord(0, 2, i + 1), decode(encode(t))))  # msgpack: (1, 2) a list
    assert got == want
    assert sum(map(len, got)) == 50


class _Name(str):
    """A key that is a ``str`` subclass: the schema check accepts it (it equals the name)."""


def test_a_checked_run_keeps_what_msgpack_changed_or_refused() -> None:
    # msgpack made the key a plain str and refused the int (the feeder stopped with OverflowError);
    # the runtime hands the window both as they are, and so does the pickled run now.
    items: list[Any] = [{_Name("k"): 1, "v": 2**70}, {"k": 2, "v": 0.5}]
    graph = _graph(items, Schema(k="int64", v="float64"))
    rows = list(source_rows(graph, "src", 0, route=route_of(graph, "agg", 1, 8, [0])))
    (got,) = _opened(rows, 1)
    assert got == items
    assert type(next(iter(got[0]))) is _Name and type(got[0]["v"]) is int
