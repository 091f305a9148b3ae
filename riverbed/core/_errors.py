"""Errors a running job reports: always naming the operator, and the port and tuple if any."""

from __future__ import annotations

from typing import Any

from ..windows import WindowTupleError

__all__ = ["USER_FAILURES", "JobError", "OperatorError", "RestoreRefused", "SchemaViolation",
           "TupleFailed", "reason_of", "with_notes"]

# What user code raising fails its operator with: any error, and ``sys.exit()`` too, which
# otherwise left the event loop as SystemExit and ended ``riverbed run`` with exit 0 and half
# the output (a review). KeyboardInterrupt stays the user's interrupt.
USER_FAILURES: tuple[type[BaseException], ...] = (Exception, SystemExit)


def _short(tup: Any, limit: int = 200) -> str:
    text = repr(tup)
    return text if len(text) <= limit else text[:limit] + "..."


def with_notes(text: str, exc: BaseException) -> str:
    """``text`` with ``exc``'s notes after it: what an operator added to a user function's
    exception, which it leaves as it is (the output or sort key that raised), a traceback
    shows them and ``str()`` does not."""
    notes = getattr(exc, "__notes__", None)
    if not notes or not isinstance(notes, list):
        return text
    return f"{text} ({'; '.join(map(str, notes))})"


def reason_of(exc: BaseException) -> str:
    """What an error port's record says of ``exc``: riverbed's own tuple errors by their text,
    anything else by its repr (its type shows), and its notes."""
    text = str(exc) if isinstance(exc, (WindowTupleError, SchemaViolation)) else repr(exc)
    return with_notes(text, exc)


class TupleFailed:
    """An item a host delivers in a tuple's place: ``tuple`` could not reach the operator
    (``error``: why; a parallel region's split found no partition key for it). The operator
    fails on it as on a tuple of its own (`OperatorCore.fail_or_route`: its error port, else
    its failure), in the tuple's place among its input: after the barriers before it, held
    with the rest while a checkpoint aligns."""

    __slots__ = ("error", "tuple")

    def __init__(self, tup: Any, error: BaseException) -> None:
        self.tuple = tup
        self.error = error

    def __reduce__(self) -> tuple[Any, ...]:
        return TupleFailed, (self.tuple, self.error)


class OperatorError(Exception):
    """User code (or a window it drives) raised: the job stops with this, unless the
    operator has an error port, where the tuple and the error go instead."""

    def __init__(self, operator: str, port: int | None, tup: Any, cause: BaseException, *,
                 event: str | None = None) -> None:
        self.operator = operator
        self.port = port
        self.tuple = tup
        self.cause = cause
        where = f"operator {operator!r}"
        if port is not None:
            where += f", input port {port}"
        if event is not None:  # a window's event failed: the tuple only set it off
            what = f" at {event}" + (f", set off by tuple {_short(tup)}" if tup is not None else "")
        else:
            what = f" on tuple {_short(tup)}" if tup is not None else ""
        super().__init__(f"{where}: {with_notes(f'{type(cause).__name__}: {cause}', cause)}{what}")


class SchemaViolation(ValueError):
    """A submitted tuple does not match its output port's declared schema."""

    def __init__(self, operator: str, port: int, tup: Any, why: str) -> None:
        self.operator = operator
        self.port = port
        self.tuple = tup
        self.why = why
        super().__init__(f"operator {operator!r}, output port {port}: {why}: {_short(tup)}")


class RestoreRefused(ValueError):
    """The newest good checkpoint cannot be this graph's state (another job's, another graph's):
    restoring it would mix two jobs' data, so the job does not start."""


class JobError(Exception):
    """A job stopped because of an error; ``errors`` holds what each failing operator raised."""

    def __init__(self, job: str, errors: list[BaseException]) -> None:
        self.job = job
        self.errors = errors
        lines = "\n".join(f"  {e}" for e in errors)
        super().__init__(f"job {job!r} failed:\n{lines}")
