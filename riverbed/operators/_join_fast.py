"""Join's compiled window handlers: the common cases of `Join._arrived` and `Join._evicted`
with their state in closure cells, so that an arrival costs one Python call.

Three shapes, chosen per side at set-up (`arrival_handler`, `eviction_handler`):

- the reference handlers (``_fast`` off, no equality keys, a partitioned window on
  either side): a call into `Join`'s generic methods per event;
- equality keys and two unpartitioned windows: the arrival and the eviction each
  inlined, one listener per event type;
- the same with a ``count(N)`` window on an inner side (its unmatched tuples never go
  out), which `counts_own_evictions`: the side keeps its mirror's entries in arrival
  order too (``_Side.fifo``, each entry ``[tuple, matched, key]``), and the arrival
  drops the oldest entry itself when the mirror holds N. The window raises the
  EVICTION of a count window just before the INSERTION that caused it and never
  evicts otherwise (sliding count windows ignore window marks and time), so the
  entry dropped is the one the EVICTION would name; no EVICTION listener is
  registered, and the window does not build or dispatch that event at all.

With neither ``match`` nor ``output`` (every key match is a pair, the merged tuple
goes out), a pair is built inline (the `_merge` it replaces: the left tuple wins a
name clash) and an arrival's pairs go out in one ``batch_submit``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..graph import Punct
from ..windows import Count, StreamWindowEvent
from ._join_parts import Entry, _merge, _Side
from ._utility_support import batch_submit, result_submit

if TYPE_CHECKING:
    from ._join import Join

__all__ = ["NO_KEY", "arrival_handler", "counts_own_evictions", "eviction_handler"]

Handler = Callable[[StreamWindowEvent[Any]], None]


class _NoKey:
    """The index key of a tuple whose equality key could not be computed (the error went to the
    host, which routed the tuple or stopped): it stays in the window, so its place in the
    mirror's arrival order is kept, under a key no probe can look up."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<no equality key>"


NO_KEY: Any = _NoKey()


def _compiled_shape(join: Join, side: _Side) -> bool:
    other = join._sides[1 - side.port]
    return (join._fast and side.key_of is not None and not side.partitioned
            and other.window is not None and not other.partitioned)


def counts_own_evictions(join: Join, side: _Side, *, forwarding: bool) -> bool:
    """True when ``side``'s arrivals drop its evicted tuples from the mirror themselves (see the
    module's docstring); ``forwarding``: a subclass sees every window event (no fast path)."""
    window = side.window
    return (not forwarding and _compiled_shape(join, side) and window is not None
            and not side.outer and isinstance(window.spec.eviction, Count))


def arrival_handler(join: Join, side: _Side) -> Handler:
    """The handler of ``side``'s INSERTION events (`Join._arrived` in effect)."""
    if not _compiled_shape(join, side):
        return lambda event: join._arrived(side, event.partition, event.tuples[0])
    arrive = _keyed_arrival(join, side)
    join._compiled.append(arrive)
    return arrive


def eviction_handler(join: Join, side: _Side) -> Handler:
    """The handler of ``side``'s EVICTION events (`Join._evicted` in effect): the evicted tuple is
    normally the oldest of its key; anything else goes the reference way. A side that
    `counts_own_evictions` registers none (its handler is then the reference one, for
    `Join.on_window_event` called by a subclass)."""
    key_of = side.key_of
    if side.fifo is not None or not _compiled_shape(join, side) or key_of is None:
        return lambda event: join._evicted(side, event.partition, event.tuples, None)
    index, outer, hold = side.index, side.outer, side.evicts_on_arrival
    remove, unmatched = join._remove, join._unmatched
    port, on_event = side.port, join.on_window_event

    def evict(event: StreamWindowEvent[Any]) -> None:
        if join._pending:  # restored: on_window_event rebuilds the mirrors first
            on_event(event, port)
            return
        part = event.partition
        for t in event.tuples:
            try:
                key = key_of(t)
            except Exception:  # its arrival failed on this: it was never stored
                continue
            dq = index.get(key)
            if dq and dq[0][0] is t:
                e: Entry | None = dq.popleft()
                if not dq:
                    del index[key]
            else:
                e = remove(side, part, t)
            if outer and e is not None and not e[1]:
                unmatched(side, t, hold=hold)

    join._compiled.append(evict)
    return evict


def _keyed_arrival(join: Join, side: _Side) -> Handler:
    """Equality keys, both windows unpartitioned. A side that `counts_own_evictions` (``fifo``)
    first drops the entry its window just evicted (the oldest, once the mirror holds the
    window's N) and keeps its entries in arrival order; the others hear EVICTION events."""
    other = join._sides[1 - side.port]
    key_of, fifo, window = side.key_of, side.fifo, side.window
    assert key_of is not None
    size = 0
    if fifo is not None:
        assert window is not None
        eviction = window.spec.eviction
        assert isinstance(eviction, Count)
        size = eviction.size
    attr = join._key_attrs[side.port]
    index, other_index = side.index, other.index
    match, out, submit, submit_punct = join._match, join._output, join.submit, join.submit_punct
    held, flush_held, left = join._held, join._flush_held, side.port == 0
    put, result = batch_submit(join, 0), result_submit(join, 0)
    plain = match is None and out is _merge
    mark = Punct.WINDOW
    port, on_event = side.port, join.on_window_event

    def arrive(event: StreamWindowEvent[Any]) -> None:
        if join._pending:  # restored: on_window_event rebuilds the mirrors, then calls back
            on_event(event, port)
            return
        t = event.tuples[0]
        if fifo is not None and len(fifo) >= size:
            # The window evicted its oldest tuple just before this INSERTION.
            old = fifo.popleft()
            gone = old[2]
            dq = index[gone]
            dq.popleft()  # the oldest of the window is the oldest of its key
            if not dq:
                del index[gone]
        try:
            key = t[attr] if attr is not None else key_of(t)
        except BaseException:
            if fifo is not None:  # the window keeps the tuple: so does the arrival order
                entry: Entry = [t, False, NO_KEY]
                fifo.append(entry)
                dq = index.get(NO_KEY)
                if dq is None:
                    index[NO_KEY] = deque((entry,))
                else:
                    dq.append(entry)
            raise
        if fifo is None:
            entry = [t, False]
        else:
            entry = [t, False, key]
            fifo.append(entry)
        dq = index.get(key)
        if dq is None:
            index[key] = deque((entry,))
        else:
            dq.append(entry)
        found = other_index.get(key)
        if found:  # never empty: a key's last entry takes its deque with it
            if plain:  # every entry of the key pairs up
                if len(found) == 1:
                    e = found[0]
                    row = {**e[0], **t} if left else {**t, **e[0]}
                    e[1] = True
                    if not held:  # the one pair and its mark in one call
                        entry[1] = True
                        result(row)
                        return
                    put((row,))
                else:
                    pairs: list[dict[str, Any]] = []
                    add = pairs.append
                    if left:
                        for e in found:
                            add({**e[0], **t})
                            e[1] = True
                    else:
                        for e in found:
                            add({**t, **e[0]})
                            e[1] = True
                    put(pairs)
            else:
                n = 0
                for e in found:
                    lhs, rhs = (t, e[0]) if left else (e[0], t)
                    if match is None or match(lhs, rhs):
                        submit(out(lhs, rhs))
                        e[1] = True
                        n += 1
                if not n:
                    if held and flush_held():
                        submit_punct(mark, 0)
                    return
            entry[1] = True
            if held:
                flush_held()
            submit_punct(mark, 0)
            return
        if held and flush_held():
            submit_punct(mark, 0)

    return arrive
