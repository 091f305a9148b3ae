"""Runs of tuples into a tumbling count window, fed in batches where they raise nothing.

A key group's host feeds a tuple at a time where what a tuple raises must be
ordered after that tuple (its outputs carry the order key of their cause, and
the next stage and the driver stage merge every group's outputs by it). A
call through the host costs tens of microseconds, far more than the window's
own insert, so a tuple at a time made the first of two count-window stages
the slowest part of the query.

A ``tumbling, count(N)`` window raises an event only when a tuple fills its
partition (the N-th since the last tumble). `FillSplitter` counts, for a run
of tuples, how full each partition is (`Window.contents` the first time a run
meets a key, then one more per tuple), and cuts the run before each filling
tuple: the tuples in between go in as one batch (the window's `inserter`
path, through the host), raising nothing, and the filling tuple alone, so
what it raises is ordered after it. The host checks that a batch raised
nothing (`SilentBatchError` otherwise): the cut is exact or the query stops.

Only where nothing else can answer a tuple: the operator asks for no
INSERTION events (an operator that does could submit on any tuple), the
window has no partition eviction (which evicts on insert) and the operator
has no error port (an invalid tuple is routed at once).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any

from ..core import SyncGraph
from ..graph import FrozenGraph
from ..windows import Count, EventType, WindowSpec, WindowType

__all__ = ["FillSplitter", "SilentBatchError", "feed_cut", "ignores_marks"]


class SilentBatchError(RuntimeError):
    """Tuples fed as one batch because none of them could fill its window raised something:
    the window or operator answers tuples in a way `FillSplitter` did not foresee."""


class FillSplitter:
    """Cuts runs of tuples into a tumbling count window before each tuple that fills its
    partition (see the module docstring)."""

    def __init__(self, window: Any, key_of: Callable[[Any], Hashable] | None, size: int, *,
                 marked: bool = False) -> None:
        self.window = window
        self.key_of = key_of
        self.size = size
        # True: each filling tuple's outputs end with one window mark (an Aggregate, then only
        # operators that forward marks after their outputs), so a whole run goes in at once and
        # its exits are cut after each mark (`feed_cut`).
        self.marked = marked
        self.fill: dict[Hashable, int] = {}  # tuples in each partition's pane, as far as known

    @classmethod
    def of(cls, graph: FrozenGraph, host: SyncGraph, member: str,
           after: Sequence[str] = ()) -> FillSplitter | None:
        """A splitter for the window of stage member ``member`` (its first; ``after``: the
        members after it in the host), or None where the cut would not be exact."""
        from ..operators import Aggregate

        odef = graph.operator(member)
        if len(odef.inputs) != 1 or not odef.inputs[0].windowed or odef.error_port is not None:
            return None
        inp = odef.inputs[0]
        spec = inp.window
        if (not isinstance(spec, WindowSpec) or spec.type is not WindowType.TUMBLING
                or not isinstance(spec.eviction, Count) or spec.eviction.size < 1
                or spec.partition_eviction is not None):
            return None
        events = type(odef.operator).window_events
        if events is None or EventType.INSERTION in events:
            return None
        windows = host.core(member).windows
        if not windows or windows[0] is None:
            return None
        by = inp.partition_by
        key_of: Callable[[Any], Hashable] | None
        if by is None:
            key_of = None
        elif isinstance(by, str):
            key_of = _Item(by)
        else:
            key_of = by
        # Aggregate's contract: at each flush of a tumbling window, its rows, then one mark.
        marked = type(odef.operator) is Aggregate and all(_forwards(graph.operator(m)) for m in after)
        return cls(windows[0], key_of, spec.eviction.size, marked=marked)

    def forget(self) -> None:
        """Anything but a tuple reached the window (a mark, final, a restore): count afresh."""
        self.fill.clear()

    def cuts(self, tuples: Sequence[Any]) -> Iterator[tuple[int, int]]:
        """``(a, j)`` pairs covering ``tuples`` in order: ``tuples[a:j]`` fill nothing, and
        ``tuples[j]`` fills its partition (``j == len(tuples)``: the run ended first). A tuple
        whose key cannot be read is treated as filling: fed alone, its error is the runtime's."""
        fill, size, key_of, window = self.fill, self.size, self.key_of, self.window
        a = 0
        for j, tup in enumerate(tuples):
            try:
                key = key_of(tup) if key_of is not None else None
                n = fill.get(key)
                if n is None:
                    n = len(window.contents(key))
            except Exception:  # no usable key: the window raises (or routes) it, alone
                yield a, j
                a = j + 1
                self.fill.clear()
                continue
            n += 1
            if n >= size:
                fill[key] = 0
                yield a, j
                a = j + 1
            else:
                fill[key] = n
        if a < len(tuples):
            yield a, len(tuples)


def ignores_marks(odef: Any) -> bool:
    """Whether a window mark reaching operator ``odef`` changes nothing: an Aggregate (it drops
    incoming marks, its ``on_punct`` does nothing) on one window that ignores them (any but a
    ``punct()`` window, R37). Skipping such a mark leaves only the port's count of marks
    processed (a metric) lower than the runtime's."""
    from ..operators import Aggregate
    from ..windows import Punct as PunctPolicy

    if type(odef.operator) is not Aggregate or len(odef.inputs) != 1:
        return False
    spec = odef.inputs[0].window
    return isinstance(spec, WindowSpec) and not isinstance(spec.eviction, PunctPolicy)


def _forwards(odef: Any) -> bool:
    """A member after the window's that answers each tuple at once and forwards each mark after
    what it answered: one plain port, one output, marks preserved, no window, no error port."""
    return (len(odef.inputs) == 1 and not odef.inputs[0].windowed and len(odef.outputs) == 1
            and odef.error_port is None and odef.operator.window_punctuation == "preserving")


class _Item:
    """``t[name]`` as a picklable function."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, tup: Any) -> Hashable:
        return tup[self.name]  # type: ignore[no-any-return]


def feed_cut(host: SyncGraph, entry: tuple[str, int], splitter: FillSplitter, tuples: Sequence[Any], *,
             ord_of: Callable[[int], bytes], taken: Callable[[bytes], None], where: str) -> None:
    """Feed a run of tuples on stream ``entry`` in batches cut by ``splitter``; ``taken(ord)``
    collects what each filling tuple raised, ordered after it (``ord_of(j)``: tuple j's), from
    the host's exits."""
    n = len(tuples)
    cuts = list(splitter.cuts(tuples))
    if splitter.marked and not host.exits:
        fills = [j for _, j in cuts if j < n]
        host.feed(*entry, tuples if type(tuples) is list else list(tuples))
        groups = _after_marks(host.take_exits())
        if len(groups) != len(fills) + 1 or groups[-1]:
            raise SilentBatchError(
                f"{where}: {len(fills)} tuples filling their tumbling count window raised "
                f"{len(groups) - 1} window marks (and {len(groups[-1])} items after the last): "
                "run this graph with mode='driver' and report it")
        for j, group in zip(fills, groups, strict=False):
            host.exits = group
            taken(ord_of(j))
        return
    for a, j in cuts:
        if j > a:
            before_n = len(host.exits)
            host.feed(*entry, list(tuples[a:j]) if a or j < n else tuples)
            if len(host.exits) != before_n:
                raise SilentBatchError(
                    f"{where}: {j - a} tuples fed in one batch, none filling its tumbling count "
                    f"window, raised {len(host.exits) - before_n} items; run this graph with "
                    "mode='driver' and report it")
        if j < n:
            host.feed(*entry, [tuples[j]])
            taken(ord_of(j))


def _after_marks(exits: list[tuple[str, int, Any]]) -> list[list[tuple[str, int, Any]]]:
    """Exits cut after each window mark: what each filling tuple raised, in order."""
    from ..graph import Punct

    groups: list[list[tuple[str, int, Any]]] = [[]]
    for ex in exits:
        item = ex[2]
        if type(item) is list:
            if item:
                groups[-1].append(ex)
            continue
        groups[-1].append(ex)
        if item is Punct.WINDOW:
            groups.append([])
    return groups
