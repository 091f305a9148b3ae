"""An operator core's state: what a checkpoint holds, and taking it back (restore, reset).

Kept apart from `OperatorCore`'s item handling; the core's methods of the same names call
these.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import operator
import sys
import types
from typing import TYPE_CHECKING, Any

from ..graph import CheckpointBarrier, Operator, OperatorDef
from ._errors import OperatorError
from ._loops import LoopLog
from ._loops import decode as decode_loop

if TYPE_CHECKING:
    from ._core import OperatorCore

__all__ = ["check_aligned", "checkpoint_state", "describe_key", "port_shapes", "reset", "restore",
           "same_key"]


def checkpoint_state(core: OperatorCore, *, drain: bool, drain_operator: bool | None) -> dict[str, Any]:
    """`OperatorCore.checkpoint_state`."""
    if drain if drain_operator is None else drain_operator:
        core.guard(core.op.drain)
    windows = [None if w is None else core.guard(w.checkpoint if drain else w.snapshot)
               for w in core.windows]
    return {
        "operator": core.guard(core.op.snapshot),
        "ports": core.port_shapes,
        "windows": windows,
        "watermark": {"in": list(core._wm_in), "value": core._watermark, "sent": core._last_sent},
        "finals": list(core._final_from),
    }


def port_shapes(odef: OperatorDef) -> list[list[str | None]]:
    """Each input port's window clause and partition key, as a checkpoint records them: a
    restore into a graph whose ports differ is refused before the job starts (`Region`), since
    the windows' state would not fit, or would fit wrongly (partitions of another key merged
    with this one's, exit 0)."""
    shapes: list[list[str | None]] = []
    for port in odef.inputs:
        spec: Any = port.window
        clause = None if spec is None else spec.clause() if hasattr(spec, "clause") else str(spec)
        shapes.append([clause, describe_key(port.partition_by)])
    return shapes


_OLD_KEY_FUNCTION = "a key function"  # what checkpoints of riverbed before stop 41 recorded


def describe_key(key: Any) -> str | None:
    """A partition key as a checkpoint records it: the attribute name(s), or a key function by
    its name and a digest of its code (and the values it closes over), so a restart with
    another function is refused instead of regrouping the state (exit 0, partitions of the old
    key under the new). The Python version is part of it: bytecode differs between versions,
    where only the name is compared (`same_key`)."""
    if key is None or isinstance(key, str):
        return key
    if isinstance(key, (tuple, list)) and all(isinstance(k, str) for k in key):
        return ",".join(key)
    name = getattr(key, "__qualname__", None) or type(key).__qualname__
    digest = hashlib.sha1(_stable_text(key, 4).encode()).hexdigest()[:12]
    python = f"py{sys.version_info[0]}.{sys.version_info[1]}"
    return f"{_OLD_KEY_FUNCTION} {name} #{digest} {python}"


_PLAIN = (str, int, float, complex, bool, bytes, type(None), type(...))
_LARGEST = 1000  # containers larger than this are described by their size (a key's table)
_GETTERS = (operator.itemgetter, operator.attrgetter, operator.methodcaller)


def _stable_text(value: Any, depth: int) -> str:
    """``value`` as text that is the same in every process running the same script: a set in
    sorted order (a set's order follows the process's string hash seed), a function by its
    code, defaults and the values it closes over, a partial by its function and arguments, a
    bound method with its object, an object of another kind by its type, its ``__call__``'s
    code and its ``__dict__`` (never its repr: it may hold an address)."""
    if isinstance(value, _PLAIN):
        return repr(value)
    if depth <= 0:
        return type(value).__qualname__
    inner = depth - 1
    if isinstance(value, (tuple, list, set, frozenset, dict)) and len(value) > _LARGEST:
        return f"{type(value).__name__}[{len(value)}]"  # a lookup table: its size only
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__}({','.join(_stable_text(v, inner) for v in value)})"
    if isinstance(value, (set, frozenset)):
        return "set(" + ",".join(sorted(_stable_text(v, inner) for v in value)) + ")"
    if isinstance(value, dict):
        return "dict(" + ",".join(sorted(f"{_stable_text(k, inner)}:{_stable_text(v, inner)}"
                                         for k, v in value.items())) + ")"
    if isinstance(value, _GETTERS):
        return repr(value)  # operator.itemgetter('sensor')
    if isinstance(value, functools.partial):
        return (f"partial({_stable_text(value.func, inner)},{_stable_text(value.args, inner)},"
                f"{_stable_text(value.keywords, inner)})")
    if isinstance(value, types.MethodType):  # the function and the object it is bound to
        return f"method({_stable_text(value.__func__, inner)},{_stable_text(value.__self__, inner)})"
    if isinstance(value, types.CodeType):
        consts = ",".join(_stable_text(c, inner) for c in value.co_consts)
        return f"code({value.co_code.hex()}|{consts}|{','.join(value.co_names)})"
    code = getattr(value, "__code__", None)
    if isinstance(code, types.CodeType):
        cells = []
        for cell in getattr(value, "__closure__", None) or ():
            try:
                cells.append(_stable_text(cell.cell_contents, inner))
            except ValueError:  # an empty cell
                cells.append("empty")
        return (f"function({getattr(value, '__qualname__', '')}|{_stable_text(code, inner)}|"
                f"{_stable_text(getattr(value, '__defaults__', None), inner)}|"
                f"{_stable_text(getattr(value, '__kwdefaults__', None), inner)}|{','.join(cells)})")
    if isinstance(value, (type, types.ModuleType)):
        return f"{type(value).__name__}({value.__qualname__ if isinstance(value, type) else value.__name__})"
    kind = type(value)
    text = kind.__qualname__
    call = next((c.__dict__["__call__"] for c in kind.__mro__ if "__call__" in c.__dict__), None)
    if isinstance(getattr(call, "__code__", None), types.CodeType):  # a callable object's code
        text += f"|{_stable_text(call, inner)}"
    attributes = getattr(value, "__dict__", None)
    if isinstance(attributes, dict):  # an object's own state: two buckets of 4 and 8 differ
        text += f"|{_stable_text(attributes, inner)}"
    return text


def same_key(was: str | None, now: str | None) -> bool:
    """Whether a recorded partition key (`describe_key`) is the graph's now. A checkpoint of an
    older riverbed said only "a key function": any function is taken for it. Under another
    Python version a function is compared by name only."""
    if was == now:
        return True
    if was is None or now is None or not was.startswith(_OLD_KEY_FUNCTION) \
            or not now.startswith(_OLD_KEY_FUNCTION):
        return False
    if was == _OLD_KEY_FUNCTION:
        return True
    was_name, _, was_rest = was[len(_OLD_KEY_FUNCTION) + 1:].partition(" #")
    now_name, _, now_rest = now[len(_OLD_KEY_FUNCTION) + 1:].partition(" #")
    if was_name != now_name:
        return False
    return was_rest.partition(" ")[2] != now_rest.partition(" ")[2]  # another Python: the name


def restore(core: OperatorCore, state: Any, *, reset: bool) -> None:
    """`OperatorCore.restore`."""
    try:
        windows = state["windows"]
        marks = state["watermark"]
        finals = state["finals"]
        if len(windows) != len(core.windows) or len(finals) != len(core._final_from):
            raise ValueError("the checkpoint has a different number of ports or connections")
    except (KeyError, TypeError, ValueError) as exc:
        raise OperatorError(core.name, None, None, ValueError(
            f"cannot restore from this checkpoint: {exc}")) from None
    core._wm_in = list(marks["in"])
    core._in_wm = min((v for v in core._wm_in if v is not None), default=None)
    core._watermark = core.metrics.watermark = marks["value"]
    core._last_sent = marks["sent"]
    # Connections that had ended stay ended: their ports' finals were already handled
    # (and are reflected in the operator's restored state).
    core._final_from = [bool(f) for f in finals]
    needed = [0] * len(core.odef.inputs)
    for conn, port in enumerate(core.conn_port):
        if not core.conn_feedback[conn] and not core._final_from[conn]:
            needed[port] += 1
    core._finals_needed = needed
    core._ports_open = sum(1 for n in needed if n > 0)
    core.guard(core.op.restore, None, state["operator"])
    for w, snap in zip(core.windows, windows, strict=True):
        if w is not None:
            core.guard(w.reset if reset else w.restore, None, snap)
    # What was in flight round a loop at the checkpoint arrives again, first (`_loops`).
    for conn, entries in state.get("loop", ()):
        for item in decode_loop(entries):
            core.handle(conn, item)


def reset(core: OperatorCore, state: Any, *, initial_operator_state: Any) -> None:
    """`OperatorCore.reset`."""
    core.cancel_timers()
    core._aligning, core._aligned = None, set()
    core._loop = None
    core._loop_early.clear()
    core._held.clear()
    core._replay.clear()
    core._barrier_request = None
    core._holds = 0
    core._epoch += 1
    core.input_paused = False
    core.finished = core.metrics.finished = False
    core.final_state = None
    for out in core.outputs:
        out.reset()
    if state is not None:
        core.restore(state)
        return
    core._wm_in = list(core._wm_initial)
    core._in_wm = None
    core._watermark = core.metrics.watermark = None
    core._last_sent = None
    core._final_from = [False] * len(core.conn_port)
    core._finals_needed = [sum(1 for c in inp.connections if not c.feedback)
                           for inp in core.odef.inputs]
    core._ports_open = sum(1 for n in core._finals_needed if n > 0)
    if type(core.op).reset_to_initial_state is not Operator.reset_to_initial_state:
        core.guard(core.op.reset_to_initial_state)
    else:
        core.guard(core.op.restore, None, initial_operator_state)
    for w in core.windows:
        if w is not None:
            core.guard(w.reset, None, None)


def check_aligned(core: OperatorCore) -> None:
    """`OperatorCore._check_aligned`: every live connection delivered the barrier: report the
    state, forward the barrier, then the items held meanwhile."""
    live = {c for c in core._barrier_conns
            if not core.conn_feedback[c] and not core._final_from[c]}
    if not live <= core._aligned:
        return
    checkpoint_id = core._aligning
    assert checkpoint_id is not None
    state = core.checkpoint_state()
    early = core._loop_early
    loops = [c for c in core._barrier_conns if core.conn_feedback[c] and not core._final_from[c]
             and early.get(c) != checkpoint_id]  # (what came before it is in the state)
    early.clear()
    if loops:  # reported once the barrier came back round them, with what was in flight
        # A copy: the report waits for a loop's round trip, and a snapshot that returned a
        # live structure would meanwhile take in the very items the log hands back on restore.
        core._loop = LoopLog(checkpoint_id, copy.deepcopy(state), loops)
    else:
        core.host.report_checkpoint(checkpoint_id, core.name, state)
    barrier = CheckpointBarrier(checkpoint_id, core.region or "")
    for out in core.outputs:
        out.control(barrier)
    core._aligning = None
    core._aligned = set()
    core._replay.extend(core._held)
    core._held.clear()
