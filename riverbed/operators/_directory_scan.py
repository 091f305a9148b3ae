"""DirectoryScan (SPL ``spl.adapter::DirectoryScan``): the files that appear in a directory.

An asynchronous source: every ``sleep_time`` seconds of the job's clock
(measured from the start of the previous scan) it lists the directory and
submits ``{"path": <absolute path>}`` for each regular file (or link to one)
it has not reported yet, in ``sort_by`` order. A file is reported once,
until it is re-created: the scan remembers each file's change time
(``st_ctime_ns``), and forgets a file that has gone, so a file deleted and
created again is reported again.

Two deviations from IBM's operator, both for determinism: ``sort_by="date"``
orders by modification time (``st_mtime_ns``; then by name), which a test or
a producer can set, where IBM uses the change time; and ``scans=N`` (not in
SPL) ends the source after N scans, so a batch job over a directory
finishes: the runtime then sends final. Without ``scans`` it scans until the
job stops.

``move_to_directory``: each file is moved there before its tuple is
submitted, and the tuple names the moved file.

Punctuation: none (SPL ``Free``); final when the source ends.

State: the files already reported (name and change time) and the number of
scans done; a restored DirectoryScan reports neither those files again nor,
when ``ignore_existing_files_at_startup``, skips what appeared while the job
was down. It is replayable (files reported after the checkpoint are reported
again) unless it moves the files it reports.
"""

from __future__ import annotations

import os
import re
from typing import Any, Literal

from ..graph import Source
from ._file_common import move_into, require, with_spl_names
from ._params import OperatorParameterError

__all__ = ["DirectoryScan", "DirectoryScanError"]

_NS = 1_000_000_000

SortBy = Literal["date", "name"]
Order = Literal["ascending", "descending"]


class DirectoryScanError(RuntimeError):
    """The directory cannot be scanned or a file cannot be moved; names the operator."""


class DirectoryScan(Source):
    """Reports the files of a directory, each once (SPL DirectoryScan); see the module docstring.

    Window modes: none (a source). Punctuation: emits no window marks; final
    when ``scans`` scans are done (or the job stops).

    Parameters (SPL spellings such as ``sleepTime`` are accepted too):
    ``directory``; ``pattern`` (a regular expression searched in the file's
    name, as SPL's ``regexMatch``); ``sleep_time`` (seconds between scan
    starts, default 5.0); ``init_delay`` (seconds before the first scan);
    ``sort_by`` (``"date"`` or ``"name"``) and ``order`` (``"ascending"``
    or ``"descending"``); ``move_to_directory``; ``ignore_dot_files``;
    ``ignore_existing_files_at_startup`` (files there before the first scan,
    checked before ``init_delay``, are never reported); ``scans`` (end after
    this many scans; None: scan until the job stops).
    """

    window_punctuation = "free"
    replayable = True  # what it reported after the checkpoint is reported again after a restore

    def __init__(self, directory: str | os.PathLike[str], *, pattern: str | None = None,
                 sleep_time: float = 5.0, init_delay: float = 0.0, sort_by: SortBy = "date",
                 order: Order = "ascending", move_to_directory: str | os.PathLike[str] | None = None,
                 ignore_dot_files: bool = False, ignore_existing_files_at_startup: bool = False,
                 scans: int | None = None, **spl: Any) -> None:
        given = {k: v for k, v in locals().items() if k not in ("self", "spl", "__class__")}
        p = with_spl_names("DirectoryScan", DirectoryScan.__init__, given, spl)
        op = "DirectoryScan"
        self.directory = os.fspath(p["directory"])
        pat = p["pattern"]
        try:
            self.pattern = None if pat is None else re.compile(pat)
        except (re.error, TypeError) as exc:
            raise OperatorParameterError(f"{op}: pattern={pat!r} is not a valid regular "
                                         f"expression: {exc}") from None
        for name in ("sleep_time", "init_delay"):
            v = p[name]
            require(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0, op,
                    f"{name}={v!r}: expected seconds >= 0")
        require(p["sort_by"] in ("date", "name"), op, f"sort_by={p['sort_by']!r}: expected 'date' or "
                                                      "'name'")
        require(p["order"] in ("ascending", "descending"), op,
                f"order={p['order']!r}: expected 'ascending' or 'descending'")
        scans = p["scans"]
        require(scans is None or (type(scans) is int and scans >= 1), op,
                f"scans={scans!r}: expected a number of scans >= 1, or None to scan until the job stops")
        self.sleep_time: float = float(p["sleep_time"])
        self.init_delay: float = float(p["init_delay"])
        self.sort_by: SortBy = p["sort_by"]
        self.order: Order = p["order"]
        move = p["move_to_directory"]
        self.move_to_directory = None if move is None else os.fspath(move)
        if move is not None:
            vars(self)["replayable"] = False  # a moved file is not found again by a replay
        self.ignore_dot_files = bool(p["ignore_dot_files"])
        self.ignore_existing_files_at_startup = bool(p["ignore_existing_files_at_startup"])
        self.scans: int | None = scans
        self._seen: dict[str, int] = {}  # file name -> change time when reported
        self._scans_done = 0
        self._restored = False
        self._last_scan: int | None = None  # when the last scan started (checkpointed)
        self._startup: dict[str, int] | None = None  # the files there at startup, once listed

    @property
    def _op(self) -> str:
        ctx = getattr(self, "context", None)
        return f"DirectoryScan {ctx.name!r}" if ctx is not None else "DirectoryScan"

    def setup(self) -> None:
        for name, path in (("directory", self.directory), ("move_to_directory", self.move_to_directory)):
            if path is not None and not os.path.isdir(path):
                raise DirectoryScanError(f"{self._op}: {name}={path!r} is not an existing directory")

    # ----------------------------------------------------------------- state

    def snapshot(self) -> Any:
        return {"seen": [[name, ctime] for name, ctime in self._seen.items()], "scans": self._scans_done,
                "last_scan": self._last_scan}

    def restore(self, state: Any) -> None:
        try:
            self._seen = {str(name): int(ctime) for name, ctime in state["seen"]}
            self._scans_done = int(state["scans"])
            last = state.get("last_scan")  # (absent in a checkpoint of an older riverbed)
            self._last_scan = None if last is None else int(last)
        except (KeyError, TypeError, ValueError):
            raise DirectoryScanError(f"{self._op}: cannot restore from {state!r}: expected the dict "
                                     "snapshot() returns") from None
        self._restored = True

    def reset_to_initial_state(self) -> None:
        self._seen, self._scans_done, self._restored, self._last_scan = {}, 0, False, None

    # ----------------------------------------------------------------- scanning

    async def run(self) -> None:
        ctx: Any = self.context
        if self.ignore_existing_files_at_startup and not self._restored:
            # Listed once: a reset to the initial state (no checkpoint yet) takes this listing
            # back, where listing again took the files that came since for existing ones.
            if self._startup is None:
                self._startup = {name: ctime for name, ctime, _ in self._candidates()}
            self._seen = dict(self._startup)
        period = round(self.sleep_time * _NS)
        if self.scans is not None and self._scans_done >= self.scans:
            return  # restored after its last scan
        if self._last_scan is not None:  # restored after a scan: the schedule goes on, at the
            due = self._last_scan + period  # period given now (no init delay again)
            if due > ctx.now():
                await ctx.sleep_until(due)
        elif self.init_delay:
            await ctx.sleep_until(ctx.now() + round(self.init_delay * _NS))
        while not ctx.stopping and (self.scans is None or self._scans_done < self.scans):
            started = self._last_scan = ctx.now()
            self._scan()
            if self.scans is not None and self._scans_done >= self.scans:
                break
            await ctx.sleep_until(started + period)

    def _scan(self) -> None:
        """One scan: submit the files not reported yet, forget those that have gone."""
        found = self._candidates()
        present = {name for name, _, _ in found}
        self._seen = {name: t for name, t in self._seen.items() if name in present}
        fresh = [(name, ctime, mtime) for name, ctime, mtime in found if self._seen.get(name) != ctime]
        if self.sort_by == "date":
            fresh.sort(key=lambda f: (f[2], f[0]), reverse=self.order == "descending")
        else:
            fresh.sort(key=lambda f: f[0], reverse=self.order == "descending")
        for name, ctime, _ in fresh:
            path = os.path.abspath(os.path.join(self.directory, name))
            if self.move_to_directory is not None:
                try:
                    path = os.path.abspath(move_into(path, self.move_to_directory))
                except FileNotFoundError:
                    continue  # gone since the listing (another scanner took it)
                except OSError as exc:
                    raise DirectoryScanError(f"{self._op}: cannot move {path!r} to "
                                             f"{self.move_to_directory!r}: {exc.strerror}") from None
            self._seen[name] = ctime
            self.submit({"path": path})
        self._scans_done += 1

    def _candidates(self) -> list[tuple[str, int, int]]:
        """(name, change time, modification time) of the regular files that qualify."""
        out = []
        try:
            entries = list(os.scandir(self.directory))
        except OSError as exc:
            raise DirectoryScanError(f"{self._op}: cannot scan {self.directory!r}: "
                                     f"{exc.strerror}") from None
        for entry in entries:
            name = entry.name
            if self.ignore_dot_files and name.startswith("."):
                continue
            if self.pattern is not None and self.pattern.search(name) is None:
                continue
            try:
                if not entry.is_file():
                    continue
                st = entry.stat()
            except OSError:
                continue  # vanished meanwhile
            out.append((name, st.st_ctime_ns, st.st_mtime_ns))
        return out
