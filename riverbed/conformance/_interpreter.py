"""The one interpreter of a case's steps, for every host.

It tells the host what each step means and attributes the events the host
reports to the step that raised them. Checkpoints, restarts and resets are
decided here once: a restart stops the PE (its events no longer count) until
the next reset, which first starts a new PE (whose own start-up events do not
count either, FORMAT.md) and then resets it; a reset names a state that an
earlier `Host.checkpoint` returned.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..windows import WindowError
from ._cases import Case
from ._events import Event, EventLog
from ._host import Host
from ._steps import (
    AtStep,
    CaseError,
    CheckpointStep,
    EvictPartitionStep,
    PunctStep,
    ResetStep,
    RestartStep,
    Step,
    TupleStep,
    WatermarkStep,
)

__all__ = ["Replay", "replay"]


class Replay:
    """One case on one host. `run` applies the steps one at a time, so that a host that has to
    wait after each (the asyncio runtime) can drive it; `replay` runs it through."""

    def __init__(self, case: Case, host: Host) -> None:
        self.case = case
        self.host = host
        self.log = EventLog()
        self._states: dict[str, object] = {}
        self._stopped = False

    @property
    def events(self) -> list[Event]:
        return self.log.events

    def run(self) -> Iterator[Step | None]:
        """Start the host (yields None), then apply each step (yields it once applied). When
        the steps are done the log is muted: a host's own ending is not part of the case."""
        log = self.log
        try:
            self.host.start(log)
        except WindowError as exc:
            raise self._error(exc) from None
        yield None
        for index, step in enumerate(self.case.steps):
            log.step = index
            try:
                self._apply(step)
            except WindowError as exc:
                raise self._error(exc) from None
            yield step
        log.muted = True

    def _error(self, exc: WindowError) -> CaseError:
        """A window refused a step (a tuple without its partition attribute, say)."""
        step = self.log.step
        return CaseError(f"case {self.case.name}{'' if step < 0 else f', step {step}'}: {exc}")

    def _apply(self, step: Step) -> None:
        host = self.host
        match step:
            case TupleStep():
                host.insert(step)
            case AtStep(time=now):
                host.advance(now)
            case PunctStep(kind=kind):
                host.punctuate(kind)
            case WatermarkStep(value=value):
                host.watermark(value)
            case EvictPartitionStep(partition=partition):
                host.evict_partition(partition)
            case CheckpointStep(name=name):
                self._states[name] = host.checkpoint()
            case RestartStep():
                self._stopped = self.log.muted = True
                host.stop()
            case ResetStep(name=name):
                if self._stopped:
                    host.new_instance()  # still muted: what a new PE raises on its own is not expected
                    self._stopped = False
                self.log.muted = False
                host.reset(None if name is None else self._states[name])


def replay(case: Case, host: Host) -> list[Event]:
    """Replay ``case`` on ``host``; the events it raised, each with its step and clock time."""
    run = Replay(case, host)
    for _ in run.run():
        pass
    return run.events
