"""A trace case (``FORMAT.md``): its file, its window, its typed steps.

`load_cases` reads a case file as the format defines it (one case or an
array; a missing name becomes ``<stem>[i]``) and leaves the cases as JSON
objects, which is what a checker compares with. `parse_case` turns one into
a `Case` that hosts replay: the clause parsed, the steps typed and checked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..windows import TimeIntervalSpec, WindowError, WindowSpec, WindowType, parse_window_clause
from ._steps import CaseError, Step, parse_steps

__all__ = ["FLAVORS", "Case", "load_cases", "parse_case"]

FLAVORS = ("java", "cpp")
_RUNTIMES = ("any", *FLAVORS)
_ORDERS = (None, "listed", "by_key")
_INT_TYPES = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}
_FLOAT_TYPES = {"float32", "float64"}


def load_cases(path: Path | str) -> list[dict[str, Any]]:
    """The cases of one file (one case object or a JSON array of them), each named."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CaseError(f"{path}: cannot read the case: {exc}") from None
    cases = data if isinstance(data, list) else [data]
    for i, case in enumerate(cases):
        if not isinstance(case, dict):
            raise CaseError(f"{path}[{i}]: a case must be a JSON object")
        case.setdefault("name", f"{path.stem}[{i}]")
    return cases


@dataclass(frozen=True, slots=True)
class Case:
    """One case, ready to replay. ``partition_by`` is None for an unpartitioned window;
    ``schema`` maps attribute names to SPL types; ``raw`` is the case as read."""

    name: str
    spec: WindowSpec | TimeIntervalSpec
    partition_by: str | None
    schema: Mapping[str, str]
    runtime: str
    steps: tuple[Step, ...]
    raw: Mapping[str, Any]

    @property
    def time_interval(self) -> bool:
        return isinstance(self.spec, TimeIntervalSpec)

    @property
    def sliding(self) -> bool:
        return isinstance(self.spec, WindowSpec) and self.spec.type is WindowType.SLIDING

    @property
    def names_steps(self) -> bool:
        """Whether the expectation gives the ``step`` of its events (older A cases do not)."""
        expect = self.raw.get("expect")
        return isinstance(expect, list) and any(isinstance(e, dict) and "step" in e for e in expect)

    def applies_to(self, flavor: str) -> bool:
        """Whether the case holds for a flavor: its ``runtime``, or both for timeInterval windows
        (IBM has them in C++ only; both of our flavors behave as C++ there)."""
        return self.time_interval or self.runtime in ("any", flavor)

    @property
    def default_partition(self) -> Any:
        """SPL's default value of the partition attribute's type: the key a ``cpp`` window-wide
        timer flushes when no partition exists."""
        spl_type = self.schema.get(self.partition_by or "")
        if spl_type in _INT_TYPES or spl_type == "timestamp":
            return 0
        if spl_type in _FLOAT_TYPES:
            return 0.0
        if spl_type == "boolean":
            return False
        return ""


def parse_case(raw: Mapping[str, Any]) -> Case:
    """Check a case and type its steps; every error names the case and says what is wrong."""
    name = str(raw.get("name", "?"))
    where = f"case {name}"
    clause = raw.get("window")
    if not isinstance(clause, str):
        raise CaseError(f"{where}: 'window' must be the SPL clause text, e.g. \"tumbling, count(4)\"")
    try:
        spec = parse_window_clause(clause)
    except WindowError as exc:
        raise CaseError(f"{where}: {exc}") from None
    partition_by = raw.get("partition_by")
    if not spec.partitioned:
        partition_by = None
    elif not isinstance(partition_by, str):
        raise CaseError(f"{where}: a partitioned window needs 'partition_by', the attribute whose "
                        f"value is the partition key; got {json.dumps(partition_by)}")
    schema = raw.get("schema") or {}
    if not isinstance(schema, dict) or not all(isinstance(v, str) for v in schema.values()):
        raise CaseError(f"{where}: 'schema' maps attribute names to SPL type names, e.g. "
                        "{\"v\": \"float64\"}")
    runtime = raw.get("runtime", "any")
    if runtime not in _RUNTIMES:
        raise CaseError(f"{where}: 'runtime' is one of {', '.join(_RUNTIMES)}, got {json.dumps(runtime)}")
    if raw.get("order") not in _ORDERS:
        raise CaseError(f"{where}: 'order' is \"listed\" or \"by_key\", got {json.dumps(raw.get('order'))}")
    steps = parse_steps(raw.get("steps", []), where, timed=isinstance(spec, TimeIntervalSpec),
                        partitioned=spec.partitioned, schema=schema)
    return Case(name, spec, partition_by, schema, runtime, steps, raw)
