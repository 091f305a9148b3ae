"""A source's checked runs travel to the key groups as marshal strings, pickles only where marshal
refuses an object, and open to the same dicts either way (`_rows.pack_run`, `_rows.run_tuples`)."""

from __future__ import annotations

import marshal
import pickle
from typing import Any

from riverbed.spark_bridge._keyed import expand
from riverbed.spark_bridge._rows import KIND_BUNDLE, KIND_TUPLE, decode, pack_run, run_tuples
from riverbed.spark_bridge._source import route_of, source_rows
from tests.test_spark_pickled_runs import SCALARS, _graph


def _runs(rows: list[Any]) -> list[Any]:
    return [e[3] for row in rows if row[1] == KIND_BUNDLE for e in decode(row[4])[1] if e[0] == KIND_TUPLE]


def _typed(tuples: list[Any]) -> list[Any]:
    return [[(k, type(k), v, type(v)) for k, v in t.items()] for t in tuples]


def test_a_checked_run_of_scalar_tuples_is_one_marshal_string_that_opens_to_the_same_dicts() -> None:
    items: list[Any] = [{"k": i % 3, "v": i / 3 if i % 2 else i, "s": f"s{i}", "b": i % 4 == 0,
                         "raw": bytes([i]), "small": i, } for i in range(40)]
    items[5] = dict(reversed(list(items[5].items())))  # another order: the check allows it
    items[6]["v"] = 2**70  # an int in a float attribute, beyond 64 bits: the check allows it
    graph = _graph(items, SCALARS)
    rows = list(source_rows(graph, "src", 0, route=route_of(graph, "agg", 2, 16, [0, 1])))
    runs = _runs(rows)
    assert runs and all(type(r) is bytes and r[0] != 0x80 for r in runs)  # not a pickle
    opened = [it[4] for row in rows for it in expand([row[:5]]) if it[1] == KIND_TUPLE]
    for k in range(3):  # each key's tuples in order, with their keys and values of the same types
        assert _typed([t for t in opened if t["k"] == k]) == _typed([t for t in items if t["k"] == k])
    assert len(opened) == len(items)
    assert [t for r in runs for t in marshal.loads(r)] == [t for r in runs for t in run_tuples(r)]


def test_a_dict_that_appears_twice_in_a_run_comes_back_as_one_object() -> None:
    shared = {"k": 1, "v": 0.5}
    got = run_tuples(pack_run([shared, {"k": 2, "v": 1.5}, shared]))
    assert got == [shared, {"k": 2, "v": 1.5}, shared]
    assert got[0] is got[2]


class _Name(str):
    """A key that is a ``str`` subclass: the schema check accepts it, marshal refuses it."""


def test_what_marshal_refuses_travels_as_a_pickle_and_keeps_its_types() -> None:
    items: list[Any] = [{_Name("k"): 1, "v": 2.0}, {"k": 2, "v": 0.5}]
    data = pack_run(items)
    assert data[0] == 0x80 and pickle.loads(data) == items
    got = run_tuples(data)
    assert got == items and type(next(iter(got[0]))) is _Name


def test_a_msgpack_list_is_returned_as_it_is() -> None:
    run = [{"k": 1}]
    assert run_tuples(run) is run
