"""Sources inside a parallel region: one replica per channel, driven inside the channel's worker.

Why: with the source in the job's process, every tuple is generated, stamped, split and
pickled there (~3 us a tuple), and on a machine with as many cores as channels that process
caps the region's speed-up. SPL replicates every operator of a region, sources included: each
replica learns its channel and the width (``getChannel()`` / ``getMaxChannels()``) and reads
its own share (its files, its partitions of a topic, its keys). Here a replica's tuples go
straight into its channel's operators, in the worker: no split, no pickling.

A replica is a ``generate()`` source: the worker pulls a batch from it, hands it to its
operators and sends what leaves the region to the job, between two looks at the job's
messages (ticks, commits, a stop, the hang-up). The socket to the job bounds how far a
replica runs ahead of the merge: the worker blocks on its send while the job does not read.

In a consistent region, the job's region asks every worker to start a checkpoint (a
``CHECKPOINT`` message, read between two batches): each live replica serves it before its next
batch, as a source runner does in the job's process: its state (its position) is reported with
the channel's operators' and its barrier goes out after everything it emitted so far. A
restored replica resumes where its state says (``generate()`` is called after the restore), so
after a reset (a worker killed, an operator failed) nothing is lost or emitted twice. A stop
that suspends the job ends a replica right after that barrier, without final punctuation.

In a keyed region (width > 1) a replica that emits a tuple whose key belongs to another
channel would break SPL's promise that a key's tuples meet in one channel (its windows would
be split over channels, silently). The worker checks each batch (a set of its keys against the
keys already seen to be the channel's, ~130 ns a tuple alone on the loaded machine, within the
noise of whole runs; a key is hashed to its channel once) and fails the job naming the source,
the tuple, its key and both channels (`ReplicaKeyError`). It is an error, not a tuple for an error port: a
source has none, and a replica emitting another channel's keys is a bug in how it finds its
share, not bad input.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from typing import Any

from ..core import ManualWatermark, OperatorCore, OperatorError, SyncGraph
from ..graph import Punct, Source
from ._parallel_split import SplitFailed, Splitter
from ._parallel_wire import channel_of

__all__ = ["ReplicaKeyError", "Replicas", "place"]


_KEYS_KEPT = 1 << 20  # keys known to be this channel's (forgotten when full)


def _no_key(tup: Any) -> None:
    return None


class ReplicaKeyError(ValueError):
    """A replicated source emitted a tuple whose partition key belongs to another channel."""


def place(target: object, channel: int, width: int) -> None:
    """Give an operator core (or, in a worker process, the core class: every core there runs in
    that channel) its channel and its region's width: what ``context.channel`` and
    ``context.width`` read (SPL ``getChannel()`` / ``getMaxChannels()``; 0 and 1 outside any
    region)."""
    for attr, value in (("channel", channel), ("width", width)):
        setattr(target, attr, value)


def _generate(core: OperatorCore) -> Iterator[Any]:
    src = core.op
    assert isinstance(src, Source)
    return iter(src.generate())


def _serve_barrier(core: OperatorCore) -> None:
    core.serve_barrier()


class Replicas:
    """The member sources of one channel, pulled a batch at a time."""

    def __init__(self, sync: SyncGraph, *, channel: int, width: int,
                 key: Callable[[Any], Hashable] | None, batch: int) -> None:
        self.sync = sync
        self.channel = channel
        self.width = width
        self.batch = batch
        self._check = key is not None and width > 1
        self._key: Callable[[Any], Hashable] = key if key is not None else _no_key
        self._mine: set[Hashable] = set()  # keys seen, all of this channel
        self._splitter = Splitter(width, key)
        self._live: dict[str, tuple[OperatorCore, Iterator[Any]]] = {}
        for core in sync.cores:
            if core.odef.kind == "source" and not core.finished:
                items = sync.call(core.name, _generate)
                if not core.finished:  # (a generate() that raised ended it: a drain's failure)
                    self._live[core.name] = (core, items)
        self.emitted = 0
        self.suspend = False  # a stop ends the replicas without final (the job suspends)

    @property
    def live(self) -> bool:
        """A replica still produces."""
        return bool(self._live)

    def step(self) -> None:
        """One batch from each live replica (or its end: a stop, or its items ran out); a
        checkpoint asked of a replica is served first, at the batch boundary."""
        sync = self.sync
        for name, (core, it) in list(self._live.items()):
            if core.barrier_requested:
                sync.call(name, _serve_barrier)
            if sync.stopping:
                del self._live[name]
                if not self.suspend:
                    sync.end(name)
                continue
            chunk = self._pull(name, core, it)
            if not chunk or self._emit(name, chunk):  # its items ran out, or a final ends it
                del self._live[name]
                sync.end(name)

    def _pull(self, name: str, core: OperatorCore, it: Iterator[Any]) -> list[Any]:
        chunk: list[Any] = []
        try:
            core.pull_items(it, self.batch, chunk)
        except Exception as exc:
            raise OperatorError(name, None, None, exc) from exc
        return chunk

    def _emit(self, name: str, chunk: list[Any]) -> bool:
        """Emit ``chunk``; True when a final among it ended the replica."""
        if self._check:
            self.check(name, chunk)
        self.emitted += len(chunk)
        return self.sync.emit(name, chunk)

    def check(self, name: str, chunk: list[Any]) -> None:
        """Every tuple of ``chunk`` has a key of this channel, or `ReplicaKeyError`. A key is
        hashed to its channel once (`channel_of`); a batch whose keys were all seen costs one
        membership test a tuple (``issuperset`` over the keys, no set built: ~50 ns a tuple,
        two thirds of building the batch's key set)."""
        mine = self._mine
        tuples = chunk
        try:  # the steady state: every key seen before (no set of the batch's keys is built)
            if mine.issuperset(map(self._key, chunk)):
                return
        except Exception:
            pass  # a window mark or a manual watermark among them, or a key missing or
            # unhashable: see below
        try:
            keys: set[Hashable] | None = set(map(self._key, tuples))
        except Exception:  # a window mark among them, or a key missing or unhashable
            tuples = [t for t in chunk if type(t) is not Punct and type(t) is not ManualWatermark]
            try:
                keys = set(map(self._key, tuples))
            except Exception:
                keys = None  # the split's loop says which tuple, and why
        if keys is not None:
            if keys <= mine:
                return
            if len(mine) >= _KEYS_KEPT:
                mine.clear()
            me, width = self.channel, self.width
            if all(channel_of(k, width) == me for k in keys - mine):
                mine |= keys
                return
        self._refuse(name, [t for t in tuples if type(t) is not Punct and type(t) is not ManualWatermark])

    def _refuse(self, name: str, tuples: list[Any]) -> None:
        splitter, me = self._splitter, self.channel
        try:
            chans = splitter.channels(tuples)
        except SplitFailed as exc:
            raise OperatorError(name, None, exc.tuple, type(exc.error)(
                f"replica {me} of {self.width}: the region splits by a key this tuple does not "
                f"have: {exc.error!r}")) from exc.error
        i = next((i for i, c in enumerate(chans) if c != me), None)
        if i is None:  # a key function that took a window mark for a tuple: all are mine
            return
        tup = tuples[i]
        raise OperatorError(name, None, tup, ReplicaKeyError(
            f"replica {me} of {self.width} (context.channel={me}, context.width={self.width}): in "
            "a keyed parallel region each replica must emit only its own channel's keys (a key's "
            "tuples meet in one channel); keep the tuples whose channel_of(key, width) == "
            "context.channel (riverbed's stable key hash), or put the source before the with "
            f"block. Key {self._key(tup)!r} belongs to channel {chans[i]}, and this replica "
            "emitted it"))
