"""What a user operator is: handlers for tuples, window events and punctuation, plus state.

An operator is a plain Python object. The host (the asyncio runtime, or the
Spark bridge later) gives it an `OperatorContext` before anything else, then
calls its handlers one at a time, never concurrently, in the order the items
arrived: SPL's per-tuple semantics, whatever batching the host does inside.

Tuples on a windowed input port go into that port's window; the operator
sees them through the window's events (`on_window_event`), exactly as an SPL
operator sees its windows through the StreamWindow listener API. Tuples on
a plain port go to `on_tuple`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from ..windows import EventType
from ._punct import Punct
from ._schema import Schema

if TYPE_CHECKING:
    from ..windows import StreamWindow, StreamWindowEvent, TimeIntervalSpec, TimeIntervalWindow, WindowSpec

__all__ = ["Operator", "OperatorContext", "PortLayout", "Source", "SourceContext",
           "WindowPunctuationMode"]

WindowPunctuationMode = Literal["preserving", "generating", "free"]


class OperatorContext(Protocol):
    """What the host offers an operator (SPL ``OperatorContext`` + output ports)."""

    @property
    def name(self) -> str: ...

    @property
    def job(self) -> str: ...

    @property
    def channel(self) -> int:
        """The parallel-region channel this operator runs in (SPL ``getChannel()``): a replicated
        source reads its share by it; 0 outside any region."""
        ...

    @property
    def width(self) -> int:
        """The width of the operator's parallel region (SPL ``getMaxChannels()``); 1 outside any
        region."""
        ...

    @property
    def consistent_region(self) -> str | None:
        """The consistent region whose checkpoints hold this operator's state (SPL's optional
        ``ConsistentRegionContext``): a declared region's name, or "" for the job's own region
        (a job taking checkpoints with none declared); None when no checkpoint holds it, so
        nothing it keeps or acknowledges is ever saved. Known from ``setup()`` on."""
        ...

    def submit(self, tup: Any, port: int = 0) -> None: ...

    def submit_punct(self, punct: Punct = Punct.WINDOW, port: int = 0) -> None: ...

    def window(self, port: int = 0) -> StreamWindow[Any] | TimeIntervalWindow[Any]: ...

    def now(self) -> int: ...

    @property
    def watermark(self) -> int | None: ...

    def call_at(self, when: int, callback: Callable[[], None]) -> Any:
        """Run ``callback`` in the operator's task at clock time ``when`` (ns); returns a handle
        with ``cancel()``. Operators that wait on time (Delay, Throttle) use it. Timers are not
        in checkpoints: keep what they would do in ``snapshot()`` and set them again in
        ``restore()``. Those still pending when final punctuation ends the operator never fire
        (see `defer_final`)."""
        ...

    def defer_final(self) -> Callable[[], None]:
        """Keep the operator running after its inputs ended until the returned function is
        called; final punctuation is forwarded only then. A reset or restart drops the holds
        taken before it: take a new one in ``restore()`` if work is still due."""
        ...

    @property
    def input_ports(self) -> int: ...

    @property
    def output_ports(self) -> int: ...

    def output_schema(self, port: int = 0) -> Schema | None: ...

    def input_schema(self, port: int = 0) -> Schema | None:
        """The declared schema of the streams ``port`` takes (None: undeclared)."""
        ...

    def request_checkpoint(self) -> int | None: ...

    def pause_input(self, paused: bool = True) -> None:
        """Stop (or resume) taking input while the operator's buffer is full (backpressure)."""
        ...

    def submit_watermark(self, value: int) -> None:
        """Send a watermark on every data output port (only for ``holds_watermarks`` operators)."""
        ...

    def counter(self, name: str) -> Any:
        """A named counter (``inc(n)``, ``value``) shown in the status view and metrics."""
        ...


class SourceContext(OperatorContext, Protocol):
    """What the host offers a source beyond `OperatorContext`: waiting (``async run`` sources),
    stop requests and manual watermarks."""

    @property
    def stopping(self) -> bool:
        """True once the job was asked to stop: the source should return soon."""
        ...

    async def flush(self) -> None:
        """Deliver what the source submitted (waits while downstream is full: backpressure).

        What was submitted since the last flush goes on as one batch, and stays one batch
        through every operator downstream: a flush after each tuple costs ~5 µs a tuple at each
        hop (25x a loop through three operators, against 1.6x when the source submits a run
        and flushes once). Flush when a run ends or the source is about to wait; waiting for
        the clock (`sleep_until`) flushes anyway.
        """
        ...

    async def sleep_until(self, when: int) -> None:
        """Flush, then wait until the clock reaches ``when`` (ns)."""
        ...

    def set_watermark(self, value: int) -> None:
        """Manual watermarks (``manual_watermarks=True``): the source's watermark is ``value``."""
        ...

    async def make_consistent(self) -> bool:
        """In an operator-driven consistent region: checkpoint the region now and wait; True
        once it committed, False if the region was reset instead (SPL ``makeConsistent``)."""
        ...


@dataclass(frozen=True, slots=True)
class PortLayout:
    """The ports a graph gives an operator, as declared: what `Operator.check_ports` judges
    when the graph is frozen, before anything runs.

    ``windows`` has one entry per input port: its parsed window clause, or None for a plain
    port. ``input_schemas`` has the declared schema of each input port's streams (None when
    undeclared). ``outputs`` counts the data output ports (an error port is not one);
    ``output_schemas`` has their declared schemas."""

    operator: str
    windows: tuple[WindowSpec | TimeIntervalSpec | None, ...]
    input_schemas: tuple[Schema | None, ...]
    outputs: int
    output_schemas: tuple[Schema | None, ...] = ()

    def input_schema(self, port: int = 0) -> Schema | None:
        """Input ``port``'s declared schema; None when undeclared or the port is not there."""
        return self.input_schemas[port] if port < len(self.input_schemas) else None

    def output_schema(self, port: int = 0) -> Schema | None:
        """Data output ``port``'s declared schema; None when undeclared or not there."""
        return self.output_schemas[port] if port < len(self.output_schemas) else None


def own_rules(operator: Any, method: str, *args: Any) -> list[str]:
    """What an operator's own rule ``method`` (`Operator.check_ports`, `check_parallel`) finds
    wrong, one message per broken rule, when the graph is frozen. None is "nothing wrong" (a
    check that returns only when it finds something), and a lone message is one problem, not
    one per character; a check that fails is itself reported (user code)."""
    check = getattr(operator, method, None)
    if check is None:  # (a source that is not an Operator)
        return []
    try:
        found = check(*args)
        return [] if found is None else [found] if isinstance(found, str) else [str(m) for m in found]
    except Exception as exc:
        return [f"{type(operator).__name__}.{method} raised {exc!r}"]


class Operator:
    """Base class of operators: override the handlers the operator needs.

    ``window_punctuation`` is SPL's ``windowPunctuationOutputMode``:
    ``"preserving"`` forwards incoming window marks to every output port
    after `on_punct` ran; ``"generating"`` and ``"free"`` drop them (a
    generating operator submits its own with `submit_punct`). Final marks
    are never the operator's business: the host forwards one on every output
    port once all input ports have seen final (SPL rule P1).

    ``window_events`` names the window event types `on_window_event` wants
    (None: all). A window raises an INSERTION per tuple; an operator that
    only needs, say, EVICTION and TRIGGER should say so: the events it does
    not want are then never built.

    State: `snapshot` returns the operator's own state as plain data and
    `restore` takes it back; windows on its ports are persisted by the host
    (SPL rule C1), not by the operator.

    Tuples on a plain port go to `on_tuple` one at a time, or, when the
    operator defines `on_tuples`, a whole run of them (between two marks) in
    one call: the stateless standard operators do, to pay one call per batch
    instead of one per tuple, with the same per-tuple results and errors.
    """

    window_punctuation: ClassVar[WindowPunctuationMode] = "preserving"
    window_events: ClassVar[frozenset[EventType] | None] = None
    # Checkpoint guarantees (`FrozenGraph.guarantee`): a sink whose output becomes visible only
    # on `on_checkpoint_committed`, and whose `restore` drops what came after, is transactional.
    transactional: ClassVar[bool] = False
    # An operator that holds tuples back for later (Delay, Throttle, Gate) holds watermarks with
    # them: the host then does not forward its input watermark, the operator passes each one on
    # with ``context.submit_watermark`` once the tuples that arrived before it have left. A
    # watermark must never overtake the tuples it follows (E30), or a downstream timeInterval
    # window drops them as late.
    holds_watermarks: ClassVar[bool] = False
    # A port's final punctuation reaches its window (Java flavor, R38: FINAL events, and its
    # timers stop for good). Join's windows are SPL's C++ ones, which never see final: with one
    # input ended, the other goes on, and time still evicts on both (an outer join's unmatched
    # tuples leave when evicted); Join says False.
    windows_hear_final: ClassVar[bool] = True
    context: OperatorContext

    # -- lifecycle ----------------------------------------------------------

    def check_ports(self, ports: PortLayout) -> Iterable[str]:
        """What is wrong with the ports the graph gives this operator, one message per broken
        rule (default: nothing; None and an empty list say the same, one string is one
        message). `Graph.freeze` asks every operator, sources too, so ``riverbed run`` and
        ``riverbed graph`` refuse such a graph before it starts (exit 2) and list every rule
        with the others, where a check in `setup` would fail the running job at its first."""
        return ()

    def check_parallel(self, width: int) -> Iterable[str]:
        """What is wrong with running a copy of this operator in each of the ``width`` channels
        of a parallel region it was put in (default: nothing), as `check_ports` says it: a sink
        whose copies would all write one file or table says so here, and the graph is refused
        before it starts (exit 2) instead of the channels' output overwriting each other."""
        return ()

    def setup(self) -> None:
        """Called once before any item, with `context` set: register listeners, read windows."""

    def on_ports_ready(self) -> None:
        """All ports are connected and every operator has been set up (SPL allPortsReady)."""

    def on_shutdown(self) -> None:
        """The job is ending (after final punctuation, or on a stop): flush and close."""

    # -- data ---------------------------------------------------------------

    def on_tuple(self, tup: Any, port: int) -> None:
        """A tuple arrived on a plain (unwindowed) input port."""
        raise NotImplementedError(
            f"{type(self).__name__} receives tuples on input port {port} but does not define on_tuple")

    def on_tuples(self, tuples: Iterator[Any], port: int) -> None:
        """A run of tuples arrived on a plain input port: override it to handle many at once.

        A call per tuple costs more than most stateless operators' work; a
        handler that runs ``map``, ``filter`` or a comprehension over
        ``tuples`` (submitting through the host's ``batch_submit``) does not
        pay it. Whatever it does, the result must be what `on_tuple` on each
        tuple in turn gives, and it must keep to one rule so that errors stay
        per tuple: take the tuples from ``tuples`` in order, one at a time,
        finishing each (submitting its output) before taking the next, and
        take them all. If a tuple fails, let the exception out: the host
        routes the tuple taken last (to the error port, or the job stops
        naming it) and calls again with the same iterator, positioned after
        it. Window marks and watermarks are never inside ``tuples``: they
        come between two calls. The default calls `on_tuple` for each;
        the host calls `on_tuple` directly when this is not overridden.
        """
        on_tuple = self.on_tuple
        for tup in tuples:
            on_tuple(tup, port)

    def on_window_event(self, event: StreamWindowEvent[Any], port: int) -> None:
        """An event of the window on input port ``port``; valid only during the call."""

    def on_punct(self, punct: Punct, port: int) -> None:
        """A window mark, or the final mark once every connection of ``port`` sent one."""

    def on_watermark(self, value: int) -> None:
        """The operator's input watermark advanced (after its timeInterval windows saw it)."""

    # -- output -------------------------------------------------------------

    def submit(self, tup: Any, port: int = 0) -> None:
        """Send a tuple on an output port (the host replaces this with its fast path)."""
        self.context.submit(tup, port)

    def submit_punct(self, punct: Punct = Punct.WINDOW, port: int = 0) -> None:
        self.context.submit_punct(punct, port)

    # -- state --------------------------------------------------------------

    def drain(self) -> None:
        """A checkpoint is about to be taken: finish anything in flight (SPL StateHandler.drain)."""

    def snapshot(self) -> Any:
        """The operator's state as plain data (None: stateless): dicts, lists, tuples, str,
        int, float, bool, None, bytes, Decimal. `restore` gets it back as the checkpoint store
        keeps it, after a reset in place as after a restart: tuples as tuples (a namedtuple as a
        plain tuple), a dict or list subclass (Counter, defaultdict) as a plain dict or list."""
        return None

    def restore(self, state: Any) -> None:
        """Take back a `snapshot`; the default accepts only None (stateless)."""
        if state is not None:
            raise NotImplementedError(f"{type(self).__name__} has state to restore but no restore()")

    def reset_to_initial_state(self) -> None:
        """Forget everything, as if just set up (default: nothing to forget)."""

    def on_checkpoint_committed(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id``, which holds this operator's state, is durably stored:
        a sink can make its output of that checkpoint visible, a source acknowledge input."""

    def retire_checkpoint(self, checkpoint_id: int) -> None:
        """The store dropped checkpoint ``checkpoint_id`` (it keeps the newest few): state kept
        outside it for that checkpoint can go (SPL StateHandler.retireCheckpoint)."""


class Source(Operator):
    """An operator without input ports that produces a stream.

    ``replayable`` says that `restore` resumes exactly after the last item
    the checkpoint covers (a file offset, a broker's unacknowledged
    messages, a deterministic generator's position); with checkpoints, a
    graph whose sources all replay loses nothing on a crash.

    Override `generate` for a synchronous source: the host pulls items
    (tuples, or `Punct.WINDOW` marks) in batches, fast. Override ``run`` (an
    ``async def``) for a source that waits on the outside world or on the
    clock (``await self.context.sleep_until(t)`` where the host offers it);
    it submits with `submit`. Either way the host sends final punctuation
    when the source ends.

    Where a checkpoint is taken: a `generate` source's `snapshot` is called
    between two items it yielded (at a batch boundary: just after a ``yield``,
    before the generator resumes), a ``run`` source's at a `flush` or a
    ``sleep_until``. A replayable source's position must therefore count
    exactly the items yielded (or submitted) so far: advance it before each
    ``yield``, not after, and not a chunk ahead (a reader that advanced its
    offset by a chunk before yielding the chunk's items lost them after a
    kill -9).
    """

    replayable: ClassVar[bool] = False
    context: SourceContext

    def generate(self) -> Iterable[Any]:
        """The items of a synchronous source: tuples, and `Punct.WINDOW` marks between them."""
        raise NotImplementedError(f"{type(self).__name__} must define generate() or async run()")

    async def run(self) -> None:
        """An asynchronous source's body; the host calls it instead of `generate` if overridden."""
        raise NotImplementedError(f"{type(self).__name__} must define generate() or async run()")
