"""What FileSource, FileSink and DirectoryScan share: parameter spellings, schemas, moving files."""

from __future__ import annotations

import inspect
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..graph import Schema
from ._params import OperatorParameterError, spl_aliases

__all__ = ["CHECKED_BYTES", "as_schema", "bytes_before", "declared_schema", "move_into", "require",
           "with_spl_names"]

CHECKED_BYTES = 64  # of a file before an offset a checkpoint holds, kept to know the file again


def with_spl_names(operator: str, init: Any, given: dict[str, Any], spl: Mapping[str, Any],
                   renamed: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The constructor's keyword arguments with SPL spellings (``spl``) folded in.

    ``given`` are the Pythonic arguments as received (defaults included);
    ``renamed`` maps SPL names whose snake_case is not the Pythonic name
    (``hasHeaderLine`` -> ``has_header``). A parameter given both ways is refused.
    """
    defaults = {name: p.default for name, p in inspect.signature(init).parameters.items()
                if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and name != "self"}
    renamed = dict(renamed or {})
    extra = spl_aliases(operator, spl, frozenset(defaults) | frozenset(renamed))
    out = dict(given)
    for spelled, value in extra.items():
        name = renamed.get(spelled, spelled)
        if out[name] is not defaults[name]:
            raise OperatorParameterError(f"{operator}: parameter {name!r} given twice")
        out[name] = value
    return out


def require(ok: bool, operator: str, message: str) -> None:
    """Refuse a bad parameter value: ``message`` says what is wrong and what would be valid."""
    if not ok:
        raise OperatorParameterError(f"{operator}: {message}")


def as_schema(operator: str, schema: Schema | Mapping[str, str] | None) -> Schema | None:
    if schema is None or isinstance(schema, Schema):
        return schema
    if isinstance(schema, Mapping):
        return Schema(schema)
    raise OperatorParameterError(f"{operator}: schema={schema!r}: expected a riverbed Schema or a "
                                 "mapping of attribute names to SPL types")


def declared_schema(context: Any, port: int) -> Schema | None:
    """The schema the graph declares for one of the operator's output ports, if the host says.

    The operator context has no call for it; the asyncio runtime's context
    carries the operator's frozen definition, which holds the output schemas.
    """
    outputs = getattr(getattr(context, "odef", None), "outputs", None)
    if not isinstance(outputs, tuple) or not 0 <= port < len(outputs):
        return None
    schema = outputs[port]
    return schema if isinstance(schema, Schema) else None


def move_into(path: str, directory: str) -> str:
    """Move a file into ``directory`` (replacing a file of the same name); the new path."""
    target = os.path.join(directory, os.path.basename(path))
    try:
        os.replace(path, target)
    except OSError:
        if Path(target).exists():
            os.unlink(target)
        shutil.move(path, target)  # another file system: copy, then remove
    return target


def bytes_before(path: str, end: int) -> bytes | None:
    """The last `CHECKED_BYTES` bytes of ``path`` before byte ``end`` (fewer if it is shorter
    now); None if it cannot be read. A checkpoint keeps them to tell the file it read or wrote
    from another one put under the same name since."""
    start = max(0, end - CHECKED_BYTES)
    try:
        with open(path, "rb") as f:
            f.seek(start)
            return f.read(end - start)
    except OSError:
        return None
