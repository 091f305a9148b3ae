"""Compiled insert paths for the most common windows.

The generic engine (`WindowEngine._insert_generic`) handles every policy
combination and both flavors, and stays the reference. For the hot
combinations (count, delta, time and punct tumbling windows; count-, time- and
delta-evicting sliding windows with a count trigger; all without partition
eviction) a window compiles two functions that do the same work with its
configuration bound in closure cells: insert one tuple, and insert a host's
batch. A tuple they do not handle (a new partition, a bad key, a partition
not yet initially full...) goes to the generic path, so the two can never
disagree on a rare case; property tests compare them on random inputs.

The functions are generated Python source, compiled once per *shape* (which
step, partitioned or not, the flavor choices) and process, then bound to each
window through a factory. Each policy's insertion step is written once below
(`_STEPS`), and so is each rule the steps share: reading a delta value
(`_READ`), locating the partition (`_locate`), raising a one-tuple event on
a reused spare (`_one`), raising a trigger on the partition's cached event
(`_TRIGGER`), the staleness check and the batch loops (`_source`). Written
out by hand, those rules were repeated in every function; calling them as
helpers instead would cost CPython about 40 ns a call, per tuple, on paths
that take 70 to 300 ns a tuple. The generated source is registered with
`linecache`, so tracebacks through it show its lines.

Batches: with no listener there is no event to raise, so a batch runs the
step without events in one loop (a tumbling time or punct window without
INSERTION listeners extends its list in one call); with listeners it runs the
step with its events, inline too. A tumbling count window whose listeners hear
nothing but the tumble (an Aggregate's EVICTION) raises nothing per tuple, so
its batch loop checks staleness only after a tumble or a generic insert, the
calls that can reach a listener, not before each tuple. A key that is an
attribute read by the default getter is read as ``parts[t[key_attr]]``: the
same read as ``operator.itemgetter``, without the calls. No timer fires inside
a batch (the clock only moves in `advance_time`), so a batch arrives at one
instant. The index of
a failing tuple (``batch_failed_at``) comes from the list iterator's length
hint when something raises, which costs nothing per tuple.

Staleness: the window compiles new functions whenever its insert path changes
(activation, a final mark, a restore or reset, a C++ checkpoint suspending
time...). A function compiled before checks first that it is still current
and otherwise hands its tuple or batch to the window's current one, so a host
that kept it never runs it on stale state. A listener can change the path
during a batch: the loop with events checks before each tuple and hands the
rest of the batch over.

The window's tuple total (for ``tupleCount``) is not maintained here: the
compiled paths exist only for windows without partition eviction.

The one-tuple events (INSERTION, and EVICTION of a sliding count window) are
built once per compiled path and reused: an event is valid during the
listener call only (the documented contract of `StreamWindowEvent` and
``Operator.on_window_event``), so the path sets the partition and tuple,
dispatches, and empties the event afterwards (a listener that kept it sees no
stale tuple). A listener that re-enters the window during the call finds the
spare in use and gets a fresh event. Building an event costs about as much as
the rest of a sliding insert's bookkeeping. A sliding partition's TRIGGER
event is built once too (`Partition.trigger_event`): its fields are the same
at every trigger of the partition.
"""

from __future__ import annotations

import linecache
import re
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from operator import length_hint
from typing import Any

from ._config import COUNT, DELTA, TIME, WindowConfig
from ._delta import MISSING, SAFE_INT_MAX, SAFE_INT_MIN, out_of_delta_cpp, out_of_delta_java
from ._events import EventType, StreamWindowEvent
from ._listeners import ListenerRegistry
from ._partition import Partition
from ._state import WindowState

__all__ = ["SHAPES", "EngineHooks", "Inserters", "Shape", "compile_inserters", "shape_for"]

Insert = Callable[[Any], None]
InsertTuples = Callable[[Sequence[Any]], None]
Inserters = tuple[Insert, InsertTuples]


@dataclass(frozen=True, slots=True)
class EngineHooks:
    """The window's engine functions a compiled path calls (bound to that window)."""

    generic: Callable[[Any], None]  # inserts any tuple, the reference path
    flush: Callable[[Partition], None]  # tumble: EVICTION of all the partition's tuples
    arm_evict: Callable[[Partition], None]  # arm a sliding partition's time eviction
    evict_expired: Callable[[Partition], None]  # sliding time eviction, now
    delta_evict: Callable[[Partition, Any], None]  # sliding delta eviction, with its events
    check_tie: Callable[[], None]  # lazy time eviction: evict on time if arrivals now may tie
    tied: list[int]  # lazy time eviction: the last time `check_tie` let stay lazy


@dataclass(frozen=True, slots=True)
class Shape:
    """What one compiled path is specialised for: a step and the choices fixed at compile time."""

    step: str
    partitioned: bool
    compare: str = "call"  # delta comparison: "java", "cpp" (inlined) or "call" (``out``)
    java_time_trigger: bool = False  # sliding time: a count trigger first evicts (Java)
    tracks_order: bool = False  # sliding delta: C++ order tracking, the engine's eviction
    periodic: bool = False  # sliding count or time: a time(T) trigger (a timer's), none on insert
    lazy: bool = False  # sliding time: no eviction timer, evictions wait for the next tick (C++)
    keyed: bool = False  # partitioned by an attribute read as ``t[key_attr]`` (the default getter)


@dataclass(frozen=True, slots=True)
class _Step:
    body: Callable[[Shape], str]
    reads_value: bool = False  # a delta step: ``value`` is the tuple's validated delta value
    # Which listeners make a batch run the step with its events (and check staleness per tuple:
    # any listener the step may call, directly or through the engine, can change the path).
    events_when: str = "listeners or inserted"
    # The same for one tuple, which checks staleness once anyway: only the events the step
    # raises inline count (a tumble raises its EVICTION through the engine).
    tuple_events_when: str = "listeners or inserted"
    bulk_single: str | None = None  # the eventless batch of an unpartitioned window, in one call
    # The step calls listeners only through ``flush`` (its last statement) and the generic path,
    # unless INSERTION is heard: with other listeners only, a batch checks staleness after those
    # calls, not before every tuple, and raises nothing per tuple (a tumbling count window).
    flush_last: bool = False


# --------------------------------------------------------------------- the steps
#
# One policy's insertion of tuple ``t`` into partition ``part``, in the engine's order. Lines
# starting with ``@`` are the shared rules: ``@one TYPE x`` raises a one-tuple event of ``x`` on
# the reused spare, ``@all TYPE xs`` a fresh event of ``xs``, ``@trigger`` the partition's
# TRIGGER, ``@miss`` hands the tuple to the generic path. ``OUT(new, old)`` is the flavor's
# delta comparison; ``NOW`` the window's time.


def _tumbling_count(s: Shape) -> str:
    return """
    tuples = part.tuples
    tuples.append(t)
    @one INSERTION t
    if len(tuples) == size:
        flush(part)
    """


def _tumbling_append(s: Shape) -> str:
    """Tumbling time(T) and punct(): an insertion only appends (the tumble is a timer's or a
    mark's)."""
    return """
    part.tuples.append(t)
    @one INSERTION t
    """


def _tumbling_delta(s: Shape) -> str:
    return """
    values = part.values
    if values:
        old = values[0]
        if OUT(value, old):
            flush(part)  # spec R13: EVICTION before the arriving tuple's INSERTION
            values.clear()
            values.append(value)
    else:
        values.append(value)
    part.tuples.append(t)
    @one INSERTION t
    """


_COUNT_TRIGGER = """
    count = part.trigger_count + 1
    if count >= every:
        part.trigger_count = 0
        {before}
        @trigger
    else:
        part.trigger_count = count
    """


def _count_trigger(s: Shape, before: str = "pass") -> str:
    """A count trigger's step after the insertion; nothing with a time trigger (its timer
    triggers)."""
    return "" if s.periodic else textwrap.dedent(_COUNT_TRIGGER.format(before=before))


def _sliding_count(s: Shape) -> str:
    return textwrap.dedent("""
    tuples = part.tuples
    if len(tuples) >= size:
        old = tuples.popleft()
        part.evicted += 1
        @one EVICTION old
    tuples.append(t)
    @one INSERTION t
    if not part.seen_full and len(tuples) == size:
        part.seen_full = True
        @all INITIAL_FULL tuples
    """) + _count_trigger(s)


def _sliding_time(s: Shape) -> str:
    evict_first = "evict_expired(part)" if s.java_time_trigger else "pass"
    if s.lazy:
        # Lazy time eviction (`WindowEngine._settle`): when every tuple of the partition is due,
        # C++ has dropped it by now, so the generic path settles it and makes a new one.
        drop = """
        arrivals = part.arrivals
        if arrivals and arrivals[-1] < NOW - ev_ns:
            @miss
        """ if s.partitioned else ""
        return textwrap.dedent("""
        if not part.seen_full:  # C++ raises INITIAL_FULL before the first insertion
            @miss
        """) + textwrap.dedent(drop) + textwrap.dedent("""
        part.tuples.append(t)
        part.arrivals.append(NOW)
        @one INSERTION t
        """) + _count_trigger(s)
    return textwrap.dedent("""
    if not part.seen_full:  # C++ raises INITIAL_FULL before the first insertion
        @miss
    tuples = part.tuples
    tuples.append(t)
    part.arrivals.append(NOW)
    if part.evict_timer is None:
        arm(part)
    @one INSERTION t
    """) + _count_trigger(s, evict_first)


def _sliding_delta(s: Shape) -> str:
    """Sliding delta(a, D) with a count trigger: eviction without events is inlined (Java)."""
    if s.tracks_order:  # C++ tracks the order of arrivals: always the engine's eviction
        evict = """
        if values:
            delta_evict(part, value)
        """
    else:
        evict = """
        if values:
            if listeners or not part.seen_full:
                delta_evict(part, value)  # events or INITIAL_FULL: the engine's
            else:
                while values:
                    old = values[0]
                    if not OUT(value, old):
                        break
                    values.popleft()
                    tuples.popleft()
        """
    return textwrap.dedent("""
    values = part.values
    tuples = part.tuples
    """) + textwrap.dedent(evict) + textwrap.dedent("""
    tuples.append(t)
    values.append(value)
    @one INSERTION t
    count = part.trigger_count + 1
    if count >= every:
        part.trigger_count = 0
        @trigger
    else:
        part.trigger_count = count
    """)


_STEPS = {
    "tumbling_count": _Step(_tumbling_count, tuple_events_when="inserted", flush_last=True),
    "tumbling_append": _Step(_tumbling_append, events_when="inserted", tuple_events_when="inserted",
                             bulk_single="single.tuples.extend(batch)"),
    "tumbling_delta": _Step(_tumbling_delta, reads_value=True, tuple_events_when="inserted"),
    "sliding_count": _Step(_sliding_count),
    "sliding_time": _Step(_sliding_time),
    "sliding_delta": _Step(_sliding_delta, reads_value=True),
}


# --------------------------------------------------------------- the shared rules

# `DeltaReader.read`, inlined: exact ints and finite floats as they are, the rest validated.
_READ = """
try:
    v = attr_of(t)
except MISSING:
    raise missing(t) from None
cls = v.__class__
if cls is float:
    value = v if exact_float and v - v == 0.0 else check(t, v)
elif cls is int and exact_int and SAFE_INT_MIN < v < SAFE_INT_MAX:
    value = v
else:
    value = check(t, v)
"""

_TRIGGER = """
if triggered_to:
    event = part.trigger_event
    if event is None or event.tuples is not tuples:
        event = part.trigger_event = Event(window, TRIGGER, part.key, tuples)
    for handle in triggered_to:
        handle(event)
"""

# Event type -> (its handler list, its reused spare event).
_ONE_TUPLE = {"INSERTION": ("inserted", "spare_insertion"), "EVICTION": ("evicted_to", "spare_eviction")}
_ALL_TUPLES = {"INITIAL_FULL": "full_to"}

_COMPARE = {
    "java": "({new} >= {old} and not {old} >= {new} - bound)",
    "cpp": "({new} - {old} > bound)",
    "call": "out({new}, {old}, bound)",
}
_OUT = re.compile(r"OUT\((\w+), (\w+)\)")
_NOW = re.compile(r"\bNOW\b")


def _one(etype: str, expr: str) -> str:
    handlers, spare = _ONE_TUPLE[etype]
    # A listener raising at INSERTION does not stop the insertion's policy (the tumble, the
    # trigger count): its error is raised once the step is done (`_FAILED_AFTER`).
    caught = ("\n        except BaseException as exc:\n            failed = exc"
              if etype == "INSERTION" else "")
    return f"""
    if {handlers}:
        event = {spare}
        if event.tuples:  # in use: a listener re-entered the window
            event = Event(window, {etype}, part.key, ({expr},))
        else:
            event.partition, event.tuples = part.key, ({expr},)
        try:
            for handle in {handlers}:
                handle(event){caught}
        finally:
            event.tuples = ()
    """


_FAILED_AFTER = ["if failed is not None:  # an INSERTION listener raised: the step is done",
                 "    raise failed"]


def _all(etype: str, expr: str) -> str:
    handlers = _ALL_TUPLES[etype]
    return f"""
    if {handlers}:
        event = Event(window, {etype}, part.key, {expr})
        for handle in {handlers}:
            handle(event)
    """


def _locate(partitioned: bool, keyed: bool = False) -> str:
    if not partitioned:
        return "part = single"
    # keyed: ``key_of`` is ``itemgetter(key_attr)``, so the same read (and a dict's) without calls
    lookup = "parts[t[key_attr]]" if keyed else "parts.get(key_of(t))"
    return f"""
    try:
        part = {lookup}
    except Exception:  # a bad key (keyed: or a new partition): the generic path raises the typed error
        part = None
    if part is None:  # a new partition (or a bad key)
        @miss
    """


def _lines(source: str) -> list[str]:
    return textwrap.dedent(source).strip("\n").splitlines()


def _expand(source: str, *, events: bool, miss: str, now: str, compare: str) -> list[str]:
    """The step's (or rule's) lines with every ``@`` rule, ``OUT`` and ``NOW`` written out."""
    out: list[str] = []
    for line in _lines(source):
        text = line.lstrip()
        indent = line[: len(line) - len(text)]
        if not text:
            continue
        if text.startswith("@"):
            rule, *args = text.split()
            if rule == "@miss":
                snippet = miss
            elif not events:
                snippet = "pass"
            elif rule == "@one":
                snippet = _one(*args)
            elif rule == "@all":
                snippet = _all(*args)
            elif rule == "@trigger":
                snippet = _TRIGGER
            else:
                raise ValueError(f"unknown rule {rule!r} in a fast-path step")
            out.extend(indent + s for s in _expand(snippet, events=events, miss=miss, now=now,
                                                   compare=compare))
        else:
            compared = _OUT.sub(lambda m: compare.format(new=m[1], old=m[2]), line)
            out.append(_NOW.sub(now, compared))
    return out


def _flush_last_loop(step: _Step, insertion: Callable[..., list[str]]) -> list[str]:
    """The batch loop of a `_Step.flush_last` step while listeners hear anything but INSERTION:
    the step without per-tuple events, staleness checked after each call that may reach a
    listener. A changed path, or an INSERTION listener a listener registered, then gets the
    rest of the batch (``t`` becomes ``handed``: this tuple is done)."""
    if not step.flush_last:
        return []
    stale = ["if not live[0] or inserted:  # a listener changed the path or listens: hand over",
             "    t = handed", "    break"]
    lines = insertion(False, "\n".join(["generic(t)", *stale, "continue"]), "state.now")
    assert lines[-1].strip() == "flush(part)", lines  # the check below goes right after it
    indent = lines[-1][: len(lines[-1]) - len(lines[-1].lstrip())]
    lines += [indent + line for line in stale]
    return ["            if listeners and not inserted:",
            "                for t in rest:",
            *_indent(lines, 5),
            "                else:",
            "                    return"]


def _indent(lines: list[str], depth: int) -> list[str]:
    return ["    " * depth + line for line in lines]


def _source(shape: Shape, names: Sequence[str]) -> str:
    """The factory binding a window's ``env`` to its two compiled functions."""
    step = _STEPS[shape.step]
    body = step.body(shape)
    compare = _COMPARE[shape.compare]
    read = _lines(_READ) if step.reads_value else []

    def insertion(events: bool, miss: str, now: str) -> list[str]:
        lines = [*read, *_expand(_locate(shape.partitioned, shape.keyed), events=events, miss=miss,
                                 now=now, compare=compare),
                 *_expand(body, events=events, miss=miss, now=now, compare=compare)]
        if events:  # every step raises INSERTION (``failed`` is None from the call's start)
            lines += _FAILED_AFTER
        return lines

    one_miss, loop_miss = "return generic(t)", "generic(t)\ncontinue"
    if step.bulk_single is not None and not shape.partitioned:
        quiet = [step.bulk_single]
    else:
        quiet = ["now = state.now", "for t in rest:",
                 *_indent(insertion(False, loop_miss, "now"), 1)]
    # Lazy time eviction: arrivals at a time not yet looked at may tie with a tick
    # (`WindowEngine._check_tie`), which hands over to timers before anything is inserted.
    tie = ["        if state.now != tied[0]:",
           "            check_tie()",
           "            if not live[0]:",
           "                return window.{}",
           ] if shape.lazy else []
    src = [
        "def factory(env):",
        *(f"    {name} = env[{name!r}]" for name in names),
        "",
        "    def insert(t):",
        "        if not live[0]:  # compiled before the window's insert path changed",
        "            return window.insert(t)",
        "        failed = None",
        *(line.format("insert(t)") for line in tie),
        f"        if {step.tuple_events_when}:",
        *_indent(insertion(True, one_miss, "state.now"), 3),
        "        else:",
        *_indent(insertion(False, one_miss, "state.now"), 3),
        "",
        "    def insert_tuples(batch):",
        "        if not live[0]:  # compiled before the window's insert path changed",
        "            return window.insert_tuples(batch)",
        "        failed = None",
        *(line.format("insert_tuples(batch)") for line in tie),
        "        n = len(batch)",
        "        rest = iter(batch)",
        "        try:",
        *_flush_last_loop(step, insertion),
        f"            {'elif' if step.flush_last else 'if'} {step.events_when}:",
        "                for t in rest:",
        "                    if not live[0]:  # a listener changed the insert path: hand over",
        "                        break",
        *_indent(insertion(True, loop_miss, "state.now"), 5),
        "                else:",
        "                    return",
        "            else:",
        *_indent(quiet, 4),
        "                return",
        "        except BaseException:",
        "            window.batch_failed_at = n - length_hint(rest) - 1",
        "            raise",
        "        retry = [*rest] if t is handed else [t, *rest]",
        "        done = n - len(retry)",
        "        try:",
        "            window.insert_tuples(retry)",
        "        except BaseException:",
        "            window.batch_failed_at += done",
        "            raise",
        "",
        "    return insert, insert_tuples",
    ]
    return "\n".join(src) + "\n"


_NAMES = (
    "window", "state", "single", "parts", "key_of", "live", "generic", "flush", "arm",
    "evict_expired", "delta_evict", "listeners", "inserted", "evicted_to", "full_to",
    "triggered_to", "spare_insertion", "spare_eviction", "Event", "INSERTION", "EVICTION",
    "TRIGGER", "INITIAL_FULL", "size", "every", "ev_ns", "attr_of", "missing", "check", "exact_int",
    "exact_float", "out", "bound", "MISSING", "SAFE_INT_MIN", "SAFE_INT_MAX", "length_hint",
    "check_tie", "tied", "key_attr", "handed",
)

_HANDED = object()  # a batch loop's ``t`` when the tuple is done and the rest is handed over

_FACTORIES: dict[Shape, Callable[[dict[str, Any]], Inserters]] = {}


def _factory(shape: Shape) -> Callable[[dict[str, Any]], Inserters]:
    factory = _FACTORIES.get(shape)
    if factory is None:
        source = _source(shape, _NAMES)
        filename = f"<riverbed.windows fast path {shape}>"
        namespace: dict[str, Any] = {}
        exec(compile(source, filename, "exec"), namespace)  # generated from the fixed steps above
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        factory = _FACTORIES[shape] = namespace["factory"]
    return factory


# ------------------------------------------------------------------- choosing


def shape_for(config: WindowConfig, lazy: bool = False) -> Shape | None:
    """The compiled path for this configuration, or None when only the generic path fits.

    ``lazy``: the window evicts by time lazily (no eviction timer to arm).
    """
    if config.evictor is not None:
        return None
    partitioned = config.spec.partitioned
    if not config.sliding:
        if config.ev == COUNT:
            return Shape("tumbling_count", partitioned) if config.ev_n > 0 else None
        if config.ev == DELTA:
            return Shape("tumbling_delta", partitioned, compare=_compare(config.ev_out))
        return Shape("tumbling_append", partitioned)  # time(T) or punct()
    if config.tr == TIME:  # a timer triggers: the insertion only evicts and inserts
        if config.ev == COUNT:
            return Shape("sliding_count", partitioned, periodic=True) if config.ev_n > 0 else None
        if config.ev == TIME:
            return Shape("sliding_time", partitioned, periodic=True, lazy=lazy)
        return None
    if config.tr != COUNT:
        return None
    if config.ev == COUNT:
        return Shape("sliding_count", partitioned) if config.ev_n > 0 else None
    if config.ev == TIME:
        return Shape("sliding_time", partitioned, java_time_trigger=config.java)
    if config.ev == DELTA:
        return Shape("sliding_delta", partitioned, compare=_compare(config.ev_out),
                     tracks_order=config.rules.delta_eviction_tracks_order)
    return None


def _compare(out: Callable[[Any, Any, Any], bool]) -> str:
    if out is out_of_delta_java:
        return "java"
    if out is out_of_delta_cpp:
        return "cpp"
    return "call"


def compile_inserters(window: Any, config: WindowConfig, state: WindowState, *,
                      key_of: Callable[[Any], Any] | None, listeners: ListenerRegistry,
                      live: list[bool], hooks: EngineHooks, lazy: bool = False,
                      key_attr: str | None = None) -> Inserters | None:
    """The compiled ``(insert, insert_tuples)`` of a window in this state, or None.

    ``live`` is the window's flag for this compilation: the window clears it
    when it compiles again, and the functions then hand over to its current
    ones (``window.insert``, ``window.insert_tuples``). ``key_attr``: the partition key's
    attribute when ``key_of`` is ``operator.itemgetter`` of it.
    """
    shape = shape_for(config, lazy)
    if shape is None:
        return None
    if key_attr is not None and shape.partitioned:
        shape = replace(shape, keyed=True)
    handlers = listeners.handlers
    reader = config.ev_reader
    env: dict[str, Any] = {
        "window": window, "state": state, "single": state.parts.get(None), "parts": state.parts,
        "key_of": key_of, "live": live, "generic": hooks.generic, "flush": hooks.flush,
        "arm": hooks.arm_evict, "evict_expired": hooks.evict_expired, "delta_evict": hooks.delta_evict,
        "check_tie": hooks.check_tie, "tied": hooks.tied,
        "listeners": listeners.gate, "inserted": handlers[EventType.INSERTION],
        "evicted_to": handlers[EventType.EVICTION], "full_to": handlers[EventType.INITIAL_FULL],
        "triggered_to": handlers[EventType.TRIGGER],
        "spare_insertion": StreamWindowEvent(window, EventType.INSERTION, None, ()),
        "spare_eviction": StreamWindowEvent(window, EventType.EVICTION, None, ()),
        "Event": StreamWindowEvent, "INSERTION": EventType.INSERTION, "EVICTION": EventType.EVICTION,
        "TRIGGER": EventType.TRIGGER, "INITIAL_FULL": EventType.INITIAL_FULL,
        "size": config.ev_n, "every": config.tr_n, "ev_ns": config.ev_ns,
        "attr_of": reader.get if reader else None, "missing": reader.missing if reader else None,
        "check": reader.check if reader else None, "exact_int": reader.exact_int if reader else False,
        "exact_float": reader.exact_float if reader else False,
        "out": config.ev_out, "bound": config.ev_bound,
        "MISSING": MISSING, "SAFE_INT_MIN": SAFE_INT_MIN, "SAFE_INT_MAX": SAFE_INT_MAX,
        "length_hint": length_hint, "key_attr": key_attr, "handed": _HANDED,
    }
    return _factory(shape)(env)


SHAPES = tuple(
    Shape(step, partitioned, compare, java, order, periodic, lazy, keyed)
    for step in _STEPS for partitioned in (False, True) for compare in ("java", "cpp", "call")
    for java in (False, True) for order in (False, True) for periodic in (False, True)
    for lazy in (False, True) for keyed in (False, True))
"""Every shape the generator accepts (more than `shape_for` picks), for a test that compiles all."""
