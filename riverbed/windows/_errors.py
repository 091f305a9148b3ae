"""Typed errors of the window library.

Every error says what was wrong, where, and what would be valid, so that a user
porting an SPL application can fix the clause or the data without reading our
source.
"""

from __future__ import annotations

__all__ = [
    "SnapshotError",
    "WatermarkError",
    "WindowClauseError",
    "WindowError",
    "WindowStateError",
    "WindowTupleError",
]


class WindowError(Exception):
    """Base class of every error raised by ``riverbed.windows``."""


class WindowClauseError(WindowError, ValueError):
    """An SPL window clause (or the equivalent policy objects) is invalid.

    ``clause`` is the whole text, ``position`` the 0-based offset of the
    offending part in it (``None`` when the error is not tied to one place).
    The message quotes the clause with a caret under the offending part.
    """

    def __init__(self, reason: str, clause: str | None = None, position: int | None = None,
                 length: int = 1) -> None:
        self.reason = reason
        self.clause = clause
        self.position = position
        if clause is not None and position is not None:
            caret = " " * position + "^" * max(1, length)
            message = f"{reason}\n    {clause}\n    {caret}"
        elif clause is not None:
            message = f"{reason}\n    {clause}"
        else:
            message = reason
        super().__init__(message)


class WindowTupleError(WindowError, ValueError):
    """A tuple cannot go into the window (missing or invalid attribute).

    The window is left exactly as it was before the call: no event was raised
    and no state changed, so the host may route the tuple elsewhere and go on.
    """


class WindowStateError(WindowError, RuntimeError):
    """An operation is not valid in the window's current state or configuration."""


class PunctuationError(WindowError, ValueError):
    """A punctuation kind the window does not know (``punctuate`` takes "window" or "final")."""

    def __init__(self, kind: object) -> None:
        super().__init__(f"unknown punctuation {kind!r}; expected 'window' or 'final'")


class SnapshotError(WindowError, ValueError):
    """A snapshot cannot be restored: corrupt, foreign, or for another window."""


class WatermarkError(WindowError, ValueError):
    """A watermark value is not a valid event time (not an integer, out of range).

    A watermark that is valid but does not advance is not an error: SPL
    ignores it (rule E11) and so do we.
    """
