"""The store's own record of which checkpoints it committed, kept outside the storage engine.

RocksDB recovers its newest writes from its log (WAL). When the log is
damaged or removed, it opens anyway and the newest checkpoints are simply
not there: nothing in the store itself can tell that anything is missing.
So after each save the store also writes, in a small file of its own, the
id it just committed and the ids it keeps (``riverbed-committed.json`` in
the store's directory, written to a temporary file, fsynced and renamed, so
it is always one whole version). On open, an id in that record with no
records in the store was committed and then lost.

The record is written *after* the checkpoint is durable in the store: a
crash between the two leaves it one save behind, which can make it miss a
loss but never report one that did not happen.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["LEDGER_FILE", "LEDGER_FORMAT", "Ledger", "decode_ledger", "encode_ledger"]

LEDGER_FILE: Final = "riverbed-committed.json"
LEDGER_FORMAT: Final = "riverbed.checkpoint.committed"
_VERSION: Final = 1


@dataclass(frozen=True, slots=True)
class Ledger:
    """The newest id a save committed, and the ids the store held right after it (newest first)."""

    newest: int
    kept: tuple[int, ...]


def encode_ledger(ledger: Ledger) -> bytes:
    return json.dumps({"format": LEDGER_FORMAT, "version": _VERSION, "newest": ledger.newest,
                       "kept": list(ledger.kept)}).encode("ascii") + b"\n"


def decode_ledger(data: bytes) -> Ledger:
    """The ledger in ``data``; ValueError saying what is wrong with it."""
    try:
        doc: Any = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"it is not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != LEDGER_FORMAT:
        raise ValueError(f"it is not a {LEDGER_FORMAT!r} record")
    if doc.get("version") != _VERSION:
        raise ValueError(f"its version {doc.get('version')!r} is not {_VERSION}")
    newest, kept = doc.get("newest"), doc.get("kept")
    if type(newest) is not int or not isinstance(kept, list) or any(type(k) is not int for k in kept):
        raise ValueError("it does not hold an int 'newest' and a list of int 'kept'")
    return Ledger(newest, tuple(kept))
