"""`riverbed trace`: replay window trace cases and print the events they raise.

The command line only: reading, checking and replaying cases is
`riverbed.conformance`'s. Each case file's events go to stdout, one JSON
object per line (``FORMAT.md``), or with ``--out DIR`` to
``DIR/<file stem>.jsonl``. ``--host`` picks where the window lives: the
window library, a one-operator job in the asyncio runtime, or the Spark
bridge's keyed stage (every case of every file in one query, since a Spark
session costs seconds to start).
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TextIO

from .conformance import Case, CaseError, Event, WindowHost, load_cases, parse_case, replay, trace_records

__all__ = ["HOSTS", "load_cases", "main"]

HOSTS = ("windows", "runtime", "spark")


def main(paths: list[str], flavor: str | None, host: str, out_dir: str | None,
         echo: Callable[[str], None] | None = None) -> int:
    """The ``riverbed trace`` command; returns the exit code. ``flavor`` None: each case's own
    ``runtime`` (java for a case of either)."""
    err = echo or (lambda msg: print(msg, file=sys.stderr))
    if host not in HOSTS:
        err(f"riverbed trace: unknown host {host!r}; use --host windows, runtime or spark")
        return 2
    if out_dir is not None:  # before any case runs: a Spark replay takes a while
        try:
            Path(out_dir).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            err(f"riverbed trace: --out {out_dir}: {exc.strerror or exc}")
            return 2
    status = 0
    files: list[tuple[Path, list[Case]]] = []
    for raw in paths:
        path = Path(raw)
        if not path.is_file():  # a path that is wrong, as a missing script is for `riverbed run`: 2
            err(f"riverbed trace: {raw}: no such case file")
            status = 2
            continue
        try:
            raw_cases = load_cases(path)  # (its errors name the file)
        except CaseError as exc:
            err(f"riverbed trace: {exc}")
            status = max(status, 1)
            continue
        try:
            files.append((path, [parse_case(case) for case in raw_cases]))
        except CaseError as exc:  # a file of several cases: say which file
            err(f"riverbed trace: {path}: {exc}")
            status = max(status, 1)
    if out_dir is not None:  # DIR/<stem>.jsonl: two inputs of one name would write one file
        stems: dict[str, Path] = {}
        for path, _ in files:
            if path.stem in stems:
                err(f"riverbed trace: {stems[path.stem]} and {path} would both write "
                    f"{Path(out_dir) / (path.stem + '.jsonl')}: give --out inputs of distinct names")
                return 2
            stems[path.stem] = path
    for path, cases in files:
        for case in cases:
            if flavor is not None and not case.applies_to(flavor):  # (asked for: said, not refused)
                err(f"riverbed trace: {path}: case {case.name!r} is of the {case.runtime} "
                    f"runtime; replayed with --flavor {flavor} as asked")
    if host == "spark":
        from .spark_bridge import replay_on_spark

        try:
            results = iter(replay_on_spark([(c, flavor or _own_flavor(c))
                                            for _, cases in files for c in cases]))
        except CaseError as exc:
            err(f"riverbed trace: {exc}")
            return 1
        for path, cases in files:
            _output(path, ((c, lambda: next(results)) for c in cases), len(cases), out_dir)
        return status
    run = _replayer(host, flavor)
    for path, cases in files:
        try:
            _output(path, ((case, functools.partial(run, case)) for case in cases), len(cases), out_dir)
        except CaseError as exc:
            err(f"riverbed trace: {path}: {exc}")
            status = max(status, 1)
    return status


def _own_flavor(case: Case) -> str:
    """The flavor a case is of: its ``runtime``, java for a case of either."""
    return case.runtime if case.runtime in ("java", "cpp") else "java"


def _replayer(host: str, flavor: str | None) -> Callable[[Case], list[Event]]:
    if host == "runtime":
        from .runtime import replay_in_runtime

        return lambda case: replay_in_runtime(case, flavor or _own_flavor(case))
    return lambda case: replay(case, WindowHost(case, flavor or _own_flavor(case)))


def _output(path: Path, results: Iterable[tuple[Case, Callable[[], list[Event]]]], n: int,
            out_dir: str | None) -> None:
    """A case file's events, case by case as each is replayed (a failing case leaves those
    before it written): to DIR/<stem>.jsonl with --out, else to stdout. A file of several cases
    names each event's case (``"case"``), or their events ran together."""
    with contextlib.ExitStack() as stack:
        stream: TextIO = (stack.enter_context(open(Path(out_dir) / f"{path.stem}.jsonl", "w"))
                          if out_dir is not None else sys.stdout)
        for case, replayed in results:
            records = trace_records(case, replayed())
            if n > 1:
                records = [{"case": case.name, **r} for r in records]
            _write(records, stream)
            stream.flush()


def _write(records: list[dict[str, Any]], stream: TextIO) -> None:
    for record in records:
        stream.write(json.dumps(record) + "\n")
