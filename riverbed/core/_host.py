"""What an operator core asks of its host, and the small handles it gives its operator.

`CoreHost` is the whole interface between `OperatorCore` and whatever drives it (the asyncio
runner, `SyncGraph`, a worker process): a host that implements it can run any operator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ._core import OperatorCore

__all__ = ["CoreHost", "FinalHold", "TimerHandle"]


class CoreHost(Protocol):
    """What a core asks of the host that drives it."""

    @property
    def job_name(self) -> str: ...

    @property
    def stopping(self) -> bool:
        """The job was asked to stop: a source should return soon."""
        ...

    def now(self) -> int:
        """The host's clock (ns)."""
        ...

    def report_checkpoint(self, checkpoint_id: int, operator: str, state: Any) -> None:
        """The operator's state for checkpoint ``checkpoint_id``, taken at its barrier."""
        ...

    def request_checkpoint(self) -> int | None:
        """An operator asks for a checkpoint now (SPL operator-driven regions)."""
        ...

    def operator_finished(self, core: OperatorCore) -> None:
        """The operator ended (after final, or a stop)."""
        ...

    def wake(self, core: OperatorCore) -> None:
        """The core changed outside `handle` and `on_time` (a deferred final was released,
        perhaps from another task): the host should look at it again."""
        ...

    async def flush(self, core: OperatorCore) -> None:
        """A source asks its output to be delivered (waits while downstream is full)."""
        ...

    async def sleep_until(self, core: OperatorCore, when: int) -> None:
        """A source waits for the clock."""
        ...

    async def make_consistent(self, core: OperatorCore) -> bool:
        """A source of an operator-driven region asks for a checkpoint and waits for it."""
        ...


class FinalHold:
    """A deferred final (`OperatorCore.defer_final`): call it once to release it."""

    __slots__ = ("_core", "epoch", "released")

    def __init__(self, core: OperatorCore, epoch: int) -> None:
        self._core = core
        self.epoch = epoch
        self.released = False

    @property
    def active(self) -> bool:
        """Still holding final back: not released, and taken since the core's last reset."""
        return not self.released and self.epoch == self._core._epoch

    def __call__(self) -> None:
        if not self.released:
            self.released = True
            self._core._release_hold(self)


class TimerHandle:
    """An operator timer (`OperatorCore.call_at`); ``cancel`` forgets it."""

    __slots__ = ("callback", "cancelled", "when")

    def __init__(self, when: int, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True
