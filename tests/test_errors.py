"""Error messages: bad clauses, bad tuples, operations invalid in the window's state."""

import math

import pytest

from riverbed.windows import (
    StreamWindow,
    WindowClauseError,
    WindowError,
    WindowStateError,
    WindowTupleError,
    parse_window_clause,
)

# ------------------------------------------------------------------ clauses


def _clause_error(clause, match):
    with pytest.raises(WindowClauseError, match=match) as info:
        parse_window_clause(clause)
    return info.value


def _assert_points_at(exc, clause, position, width):
    """The message quotes the clause and puts `width` carets under `position`."""
    assert exc.clause == clause
    assert exc.position == position
    lines = str(exc).split("\n")
    assert lines[0] == exc.reason
    assert lines[-2] == "    " + clause
    assert lines[-1] == "    " + " " * position + "^" * width


# (clause, offending text, message pattern); the offending text occurs once in the clause.
BAD_CLAUSES = [
    ("tumbling, cnt(3)", "cnt(3)",
     r"unknown eviction policy 'cnt\(3\)' \(did you mean 'count'\?\); "
     r"expected count\(N\), time\(T\), delta\(attribute, D\) or punct\(\)"),
    ("tumbling, count(3), count(2)", "count(2)",
     r"a tumbling window has no trigger policy, found 'count\(2\)'; "
     r"use 'sliding, EVICT, TRIGGER' to trigger, or remove it"),
    ("sliding, punct()", "punct()",
     r"a sliding window cannot be evicted by punct\(\); use 'tumbling, punct\(\)' "
     r"or a count, time or delta eviction"),
    ("tumbling, count(-1)", "count(-1)", r"count\(-1\): the size must be >= 0"),
    ("tumbling, count(2.5)", "2.5", r"count\(\): the size must be a whole number, got '2.5'"),
    ("sliding, time(0)", "time(0)", r"time\(0\): the duration must be > 0 seconds"),
    ("sliding, delta(x, -1.0)", "delta(x, -1.0)", r"delta\(x, -1.0\): the delta must be >= 0"),
    ("sliding, delta(1x, 2)", "1x",
     r"delta\(\): the first argument must be an attribute name, got '1x'"),
    ("tumbling, count(3), partitionAge(2)", "partitionAge(2)",
     r"partitionAge\(2\) evicts partitions, so it needs 'partitioned' before it"),
    ("tumbling, count(3), partitioned, partitionFoo(2)", "partitionFoo(2)",
     r"unknown partition eviction policy 'partitionFoo\(2\)' \(did you mean 'partition(Age|Count)'\?\); "
     r"expected partitionAge\(T\), partitionCount\(N\) or tupleCount\(N\)"),
    ("hopping, count(3)", "hopping",
     r"a window clause starts with 'tumbling' or 'sliding', not 'hopping'"),
    ("tumbling, count(3), partitioned, tupleCount(2), extra", "extra",
     r"unexpected 'extra' after the end of the clause"),
    ("tumbling, count(  2.5 )", "2.5", r"count\(\): the size must be a whole number"),
    ("sliding, delta( 1x , 2)", "1x", r"the first argument must be an attribute name, got '1x'"),
    ("sliding, delta(x,  abc)", "abc", r"delta\(\): the delta must be a number, got 'abc'"),
    ("sliding, count(3), count(2, 3)", "count(2, 3)",
     r"count\(\) takes 1 argument \(count\(N\)\), got 2"),
    ("sliding, count(3), punct()", "punct()",
     r"punct\(\) is not a trigger policy; expected count\(N\), time\(T\) or delta\(attribute, D\)"),
    ("tumbling, partitioned", "partitioned", r"the eviction policy comes before 'partitioned'"),
    ("sliding, count(3), count(2), time(1)", "time(1)",
     r"unexpected 'time\(1\)'; only 'partitioned' .* may come here"),
    ("Tumbling, count(3)", "Tumbling", r"not 'Tumbling' \(did you mean 'tumbling'\?\)"),
]


@pytest.mark.parametrize(("clause", "offending", "match"), BAD_CLAUSES, ids=[c for c, _, _ in BAD_CLAUSES])
def test_bad_clause_error_points_at_offending_part(clause, offending, match):
    assert clause.count(offending) == 1
    exc = _clause_error(clause, match)
    _assert_points_at(exc, clause, clause.index(offending), len(offending))


def test_missing_eviction_points_after_the_clause():
    exc = _clause_error("tumbling", r"tumbling needs an eviction policy: count\(N\), time\(T\), "
                                    r"delta\(attribute, D\) or punct\(\)")
    _assert_points_at(exc, "tumbling", len("tumbling"), 1)


def test_missing_eviction_ignores_trailing_blanks():
    exc = _clause_error("sliding   ", r"sliding needs an eviction policy")
    _assert_points_at(exc, "sliding   ", len("sliding"), 1)


def test_unclosed_parenthesis_points_at_it():
    clause = "tumbling, count(3"
    exc = _clause_error(clause, r"unbalanced '\(': a policy's argument list is not closed")
    _assert_points_at(exc, clause, clause.index("("), 1)


def test_extra_closing_parenthesis_points_at_it():
    clause = "tumbling, count(3))"
    exc = _clause_error(clause, r"unbalanced '\)'")
    _assert_points_at(exc, clause, len(clause) - 1, 1)


def test_trailing_comma_points_at_it():
    clause = "tumbling, count(3),"
    exc = _clause_error(clause, r"empty element: a comma with nothing before or after it")
    _assert_points_at(exc, clause, len(clause) - 1, 1)


def test_empty_clause_is_a_clause_error():
    exc = _clause_error("", r"empty element")
    assert exc.position == 0


def test_non_text_clause_is_a_clause_error_without_position():
    with pytest.raises(WindowClauseError, match=r"a window clause must be text, got int") as info:
        parse_window_clause(3)
    assert info.value.clause is None
    assert info.value.position is None
    assert str(info.value) == info.value.reason


def test_clause_errors_are_value_errors_and_window_errors():
    exc = _clause_error("hopping, count(3)", "hopping")
    assert isinstance(exc, ValueError)
    assert isinstance(exc, WindowError)


def test_bad_clause_given_to_stream_window_raises_clause_error():
    with pytest.raises(WindowClauseError, match=r"did you mean 'count'") as info:
        StreamWindow("tumbling, cnt(3)")
    assert info.value.position == len("tumbling, ")


def test_huge_count_literal_is_a_clause_error():
    with pytest.raises(WindowClauseError):
        parse_window_clause("tumbling, count(" + "1" * 5000 + ")")


def test_stream_window_points_a_time_interval_clause_to_the_event_time_window():
    with pytest.raises(WindowClauseError, match=r"event-time window; build it with TimeIntervalWindow"):
        StreamWindow("timeInterval, intervalDuration(5)")


# ------------------------------------------------------------------- tuples


class Recorder:
    def __init__(self):
        self.events = []

    def __call__(self, event):
        self.events.append((event.type.name, event.partition, list(event.tuples)))


def _window(clause, **kwargs):
    rec = Recorder()
    return StreamWindow(clause, listeners=[rec], **kwargs), rec


def _snapshot(w):
    keys = w.partitions() if w.is_partitioned else [None]
    return {k: w.contents(k) for k in keys}


def _assert_bad_tuple_changes_nothing(clause, before, bad, after, match, **kwargs):
    """Insert `before`, then `bad` (must raise), then `after`; compare with a window without `bad`."""
    w, rec = _window(clause, **kwargs)
    ref, ref_rec = _window(clause, **kwargs)
    for t in before:
        w.insert(t)
        ref.insert(t)
    state = _snapshot(w)
    seen = len(rec.events)
    with pytest.raises(WindowTupleError, match=match):
        w.insert(bad)
    assert rec.events[seen:] == []
    assert _snapshot(w) == state
    for t in after:
        w.insert(t)
        ref.insert(t)
    assert rec.events == ref_rec.events
    assert _snapshot(w) == _snapshot(ref)
    return rec


def test_missing_delta_attribute_leaves_window_unchanged():
    rec = _assert_bad_tuple_changes_nothing(
        "tumbling, delta(x, 2)", [{"x": 0}, {"x": 1}], {"y": 9}, [{"x": 2}, {"x": 3}],
        r"eviction policy delta\(x, 2\): the tuple has no attribute 'x'; tuple: \{'y': 9\}")
    assert ("EVICTION", None, [{"x": 0}, {"x": 1}, {"x": 2}]) in rec.events


def test_missing_trigger_attribute_after_valid_eviction_attribute_leaves_window_unchanged():
    _assert_bad_tuple_changes_nothing(
        "sliding, delta(x, 2), delta(y, 1)", [{"x": 0, "y": 0}, {"x": 1, "y": 2}], {"x": 9},
        [{"x": 3, "y": 4}, {"x": 4, "y": 6}],
        r"trigger policy delta\(y, 1\): the tuple has no attribute 'y'")


def test_missing_delta_attribute_creates_no_partition():
    _assert_bad_tuple_changes_nothing(
        "tumbling, delta(x, 2), partitioned, partitionCount(1)", [{"k": "a", "x": 0}], {"k": "b"},
        [{"k": "a", "x": 1}, {"k": "c", "x": 0}],
        r"eviction policy delta\(x, 2\): the tuple has no attribute 'x'", partition_by="k")


def test_non_numeric_delta_value_leaves_window_unchanged():
    _assert_bad_tuple_changes_nothing(
        "sliding, delta(x, 1), count(2)", [{"x": 0}, {"x": 1}], {"x": "abc"}, [{"x": 5}],
        r"the value must be a number, got str 'abc'")


def test_nan_delta_value_leaves_window_unchanged():
    _assert_bad_tuple_changes_nothing(
        "tumbling, delta(x, 1.0)", [{"x": 0.0}, {"x": 0.5}], {"x": math.nan}, [{"x": 5.0}],
        r"the value is NaN, which has no order")


def test_float_in_int32_delta_attribute_leaves_window_unchanged():
    _assert_bad_tuple_changes_nothing(
        "tumbling, delta(x, 2)", [{"x": 0}, {"x": 1}], {"x": 5.0}, [{"x": 5}],
        r"an integer attribute must hold an int, got 5.0", attribute_types={"x": "int32"})


def test_float_in_timestamp_delta_attribute_leaves_window_unchanged():
    _assert_bad_tuple_changes_nothing(
        "sliding, delta(ts, 1.0), count(1)", [{"ts": 0}, {"ts": 500_000_000}], {"ts": 2.5},
        [{"ts": 2_000_000_000}],
        r"a timestamp attribute must be integer nanoseconds, got 2.5",
        attribute_types={"ts": "timestamp"})


def test_int_in_timestamp_attribute_is_accepted_as_ns():
    w, rec = _window("tumbling, delta(ts, 1.0)", attribute_types={"ts": "timestamp"})
    for ts in (0, 1_000_000_000, 1_000_000_001):
        w.insert({"ts": ts})
    assert ("EVICTION", None, [{"ts": 0}, {"ts": 1_000_000_000}]) in rec.events


def test_missing_partition_attribute_leaves_window_unchanged():
    _assert_bad_tuple_changes_nothing(
        "sliding, count(2), count(1), partitioned, tupleCount(3)",
        [{"k": "a", "v": 1}, {"k": "b", "v": 2}, {"k": "a", "v": 3}], {"v": 4},
        [{"k": "b", "v": 5}, {"k": "c", "v": 6}],
        r"cannot compute the partition key \(k\) of tuple \{'v': 4\}: KeyError",
        partition_by="k")


def test_unhashable_partition_key_leaves_window_unchanged():
    _assert_bad_tuple_changes_nothing(
        "tumbling, count(2), partitioned, partitionCount(1)",
        [{"k": "a", "v": 1}], {"k": [1, 2], "v": 2}, [{"k": "a", "v": 3}, {"k": "b", "v": 4}],
        r"partition key \[1, 2\] of tuple .* is not hashable", partition_by="k")


def test_bad_tuple_error_is_a_value_error():
    w, _ = _window("tumbling, delta(x, 1)")
    with pytest.raises(ValueError, match="no attribute 'x'"):
        w.insert({})


def test_bad_first_tuple_raises_no_event_even_before_activation():
    _assert_bad_tuple_changes_nothing(
        "sliding, time(5), delta(x, 1)", [], {"y": 1}, [{"x": 0}, {"x": 2}],
        r"trigger policy delta\(x, 1\): the tuple has no attribute 'x'")


# -------------------------------------------------------------------- state


def test_time_going_backwards_is_a_state_error_and_keeps_the_time():
    w, _ = _window("sliding, time(1), count(1)")
    w.advance_time(10)
    with pytest.raises(WindowStateError,
                       match=r"time cannot go backwards: the window is at 10 ns, asked to move to 5 ns"):
        w.advance_time(5)
    assert w.now == 10
    w.advance_time(10)  # the same instant is not backwards


def test_non_integer_time_is_a_state_error():
    w, _ = _window("sliding, time(1), count(1)")
    with pytest.raises(WindowStateError, match=r"time must be integer nanoseconds, got 1.5"):
        w.advance_time(1.5)


def test_insert_after_final_mark_is_a_state_error_in_java():
    w, rec = _window("tumbling, count(3)")
    w.insert({"v": 1})
    w.final_mark()
    with pytest.raises(WindowStateError, match=r"received final punctuation; no tuple may follow"):
        w.insert({"v": 2})
    assert w.contents() == [{"v": 1}]
    assert rec.events[-1] == ("FINAL", None, [{"v": 1}])


def test_insert_after_final_mark_is_allowed_in_cpp():
    w, _ = _window("tumbling, count(3)", flavor="cpp")
    w.insert({"v": 1})
    w.final_mark()
    w.insert({"v": 2})
    assert w.contents() == [{"v": 1}, {"v": 2}]


@pytest.mark.parametrize(("call", "name"), [
    (lambda w: w.evict_partition("a"), "evict_partition()"),
    (lambda w: w.partitions(), "partitions()"),
    (lambda w: w.needs_partition_eviction(), "needs_partition_eviction()"),
])
def test_partition_operations_on_unpartitioned_window_are_state_errors(call, name):
    w, _ = _window("tumbling, count(3)")
    w.insert({"v": 1})
    with pytest.raises(WindowStateError,
                       match=rf"{name.replace('(', '[(]').replace(')', '[)]')} needs a partitioned "
                             r"window; 'tumbling, count\(3\)' is not"):
        call(w)
    assert w.contents() == [{"v": 1}]


def test_partition_operations_work_on_partitioned_window():
    w, _ = _window("tumbling, count(3), partitioned", partition_by="k")
    w.insert({"k": "a"})
    assert w.partitions() == ["a"]
    assert not w.needs_partition_eviction()
    w.evict_partition("a")
    assert w.partitions() == []


def test_partitioner_on_unpartitioned_window_is_a_state_error():
    with pytest.raises(WindowStateError, match=r"is not partitioned; add 'partitioned'"):
        StreamWindow("tumbling, count(3)", partition_by="k")


def test_partitioned_window_without_partitioner_is_a_state_error_on_insert():
    w, rec = _window("tumbling, count(3), partitioned")
    with pytest.raises(WindowStateError, match=r"partitioned but has no partitioner; pass partition_by="):
        w.insert({"k": "a"})
    assert w.partitions() == []
    assert rec.events == []


def test_sliding_count_0_is_a_state_error_in_java():
    with pytest.raises(WindowStateError,
                       match=r"sliding, count\(0\): IBM's Java window fails .* use flavor='cpp'"):
        StreamWindow("sliding, count(0)")


def test_sliding_count_0_is_allowed_in_cpp_and_keeps_nothing():
    w, rec = _window("sliding, count(0)", flavor="cpp")
    w.insert({"v": 1})
    assert w.contents() == []
    assert ("TRIGGER", None, []) in rec.events


def test_state_errors_are_runtime_errors_and_window_errors():
    with pytest.raises(RuntimeError) as info:
        StreamWindow("sliding, count(0)", flavor="java")
    assert isinstance(info.value, WindowError)
