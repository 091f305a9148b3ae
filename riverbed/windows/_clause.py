"""Parser for SPL window clauses, as written after ``window P :``.

The grammar (IBM Streams SPL reference, window clause)::

    clause    := 'tumbling' ',' evict [',' part]
               | 'sliding' ',' evict [',' trigger] [',' part]
    evict     := count(N) | time(T) | delta(attr, D) | punct()     (punct: tumbling only)
    trigger   := count(N) | time(T) | delta(attr, D)
    part      := 'partitioned' [',' partitionAge(T) | partitionCount(N) | tupleCount(N)]
    clause    := 'timeInterval' ',' intervalDuration(D) {',' creationPeriod(P)
                 | discardAge(A) | intervalOffset(O)} [',' 'partitioned']

Errors quote the clause with a caret under the offending part and say what
would be valid there.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from ._errors import WindowClauseError
from ._policy import (
    Count,
    Delta,
    PartitionAge,
    PartitionCount,
    Punct,
    Time,
    TimeIntervalSpec,
    TupleCount,
    WindowSpec,
    WindowType,
)

__all__ = ["parse_window_clause"]

_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$", re.ASCII)
_ITEM = re.compile(r"\s*([A-Za-z_]\w*)\s*(\((.*)\))?\s*$", re.DOTALL)

_POLICIES = ("count", "time", "delta", "punct")
_PARTITION_POLICIES = ("partitionAge", "partitionCount", "tupleCount")
_INTERVAL_OPTIONS = {
    "intervalDuration": "duration",
    "creationPeriod": "period",
    "discardAge": "discard_age",
    "intervalOffset": "offset",
}
_EVICT_HELP = "count(N), time(T), delta(attribute, D) or punct()"
_TRIGGER_HELP = "count(N), time(T) or delta(attribute, D)"


@dataclass(frozen=True, slots=True)
class _Item:
    text: str
    start: int
    name: str
    args: list[tuple[str, int]] | None  # (argument text, offset in clause); None: no parentheses


def _split_top_level(clause: str) -> list[tuple[str, int]]:
    """Split at commas outside parentheses; keep each piece's offset."""
    pieces: list[tuple[str, int]] = []
    depth = 0
    start = 0
    for i, ch in enumerate(clause):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise WindowClauseError("unbalanced ')'", clause, i)
        elif ch == "," and depth == 0:
            pieces.append((clause[start:i], start))
            start = i + 1
    if depth != 0:
        raise WindowClauseError("unbalanced '(': a policy's argument list is not closed", clause,
                                clause.rfind("("))
    pieces.append((clause[start:], start))
    return pieces


def _item(clause: str, text: str, offset: int) -> _Item:
    stripped = text.strip()
    start = offset + (len(text) - len(text.lstrip()))
    if not stripped:
        raise WindowClauseError("empty element: a comma with nothing before or after it",
                                clause, max(0, start - 1))
    m = _ITEM.match(text)
    if m is None:
        raise WindowClauseError(f"cannot read {stripped!r}: expected a name such as "
                                f"'sliding' or a policy such as count(10)", clause, start, len(stripped))
    args: list[tuple[str, int]] | None = None
    if m.group(2) is not None:
        inner = m.group(3)
        inner_offset = offset + m.start(3)
        args = []
        if inner.strip():
            pos = 0
            for part in inner.split(","):
                lead = len(part) - len(part.lstrip())
                args.append((part.strip(), inner_offset + pos + lead))
                pos += len(part) + 1
    return _Item(stripped, start, m.group(1), args)


def _suggest(name: str, choices: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(name, choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _number(clause: str, item: _Item, arg: tuple[str, int], what: str) -> float:
    text, pos = arg
    if not _NUMBER.match(text):
        raise WindowClauseError(f"{item.name}(): {what} must be a number, got {text!r}",
                                clause, pos, max(1, len(text)))
    try:
        if re.fullmatch(r"[+-]?\d+", text, re.ASCII):
            return int(text)
        return float(text)
    except ValueError:
        raise WindowClauseError(f"{item.name}(): {what} {text[:20]}... has too many digits",
                                clause, pos, len(text)) from None


def _integer(clause: str, item: _Item, arg: tuple[str, int], what: str) -> int:
    text, pos = arg
    if not re.fullmatch(r"[+-]?\d+", text, re.ASCII):
        raise WindowClauseError(f"{item.name}(): {what} must be a whole number, got {text!r}",
                                clause, pos, max(1, len(text)))
    try:
        return int(text)
    except ValueError:
        raise WindowClauseError(f"{item.name}(): {what} {text[:20]}... has too many digits",
                                clause, pos, len(text)) from None


def _arity(clause: str, item: _Item, expected: int, usage: str) -> list[tuple[str, int]]:
    args = item.args
    if args is None:
        raise WindowClauseError(f"{item.name} needs an argument list: write {usage}",
                                clause, item.start, len(item.text))
    if len(args) != expected:
        raise WindowClauseError(
            f"{item.name}() takes {expected} argument{'s' if expected != 1 else ''} "
            f"({usage}), got {len(args)}", clause, item.start, len(item.text))
    return args


def _wrap(clause: str, item: _Item, exc: WindowClauseError) -> WindowClauseError:
    return WindowClauseError(exc.reason, clause, item.start, len(item.text))


def _policy(clause: str, item: _Item, role: str) -> Count | Time | Delta | Punct:
    name = item.name
    try:
        if name == "count":
            (arg,) = _arity(clause, item, 1, "count(N)")
            return Count(_integer(clause, item, arg, "the size"))
        if name == "time":
            (arg,) = _arity(clause, item, 1, "time(T) with T in seconds")
            return Time(_number(clause, item, arg, "the duration"))
        if name == "delta":
            attr, bound = _arity(clause, item, 2, "delta(attribute, D)")
            if not attr[0].isidentifier():
                raise WindowClauseError(
                    f"delta(): the first argument must be an attribute name, got {attr[0]!r}",
                    clause, attr[1], max(1, len(attr[0])))
            return Delta(attr[0], _number(clause, item, bound, "the delta"))
        if name == "punct":
            _arity(clause, item, 0, "punct()")
            return Punct()
    except WindowClauseError as exc:
        if exc.clause is None:
            raise _wrap(clause, item, exc) from None
        raise
    help_text = _EVICT_HELP if role == "eviction" else _TRIGGER_HELP
    raise WindowClauseError(
        f"unknown {role} policy {item.text!r}{_suggest(name, _POLICIES)}; expected {help_text}",
        clause, item.start, len(item.text))


def _partition_policy(clause: str, item: _Item) -> PartitionAge | PartitionCount | TupleCount:
    name = item.name
    try:
        if name == "partitionAge":
            (arg,) = _arity(clause, item, 1, "partitionAge(T) with T in seconds")
            return PartitionAge(_number(clause, item, arg, "the age"))
        if name == "partitionCount":
            (arg,) = _arity(clause, item, 1, "partitionCount(N)")
            return PartitionCount(_integer(clause, item, arg, "the count"))
        if name == "tupleCount":
            (arg,) = _arity(clause, item, 1, "tupleCount(N)")
            return TupleCount(_integer(clause, item, arg, "the count"))
    except WindowClauseError as exc:
        if exc.clause is None:
            raise _wrap(clause, item, exc) from None
        raise
    raise WindowClauseError(
        f"unknown partition eviction policy {item.text!r}{_suggest(name, _PARTITION_POLICIES)}; "
        "expected partitionAge(T), partitionCount(N) or tupleCount(N)",
        clause, item.start, len(item.text))


def parse_window_clause(clause: str) -> WindowSpec | TimeIntervalSpec:
    """Parse SPL window clause text into a `WindowSpec` or, for ``timeInterval``, a `TimeIntervalSpec`.

    Raises `WindowClauseError` quoting the clause and pointing at the
    offending part.
    """
    if not isinstance(clause, str):
        raise WindowClauseError(f"a window clause must be text, got {type(clause).__name__}")
    items = [_item(clause, text, offset) for text, offset in _split_top_level(clause)]
    head = items[0]
    if head.name == "timeInterval" and head.args is None:
        return _time_interval(clause, items[1:])
    if head.name not in ("tumbling", "sliding") or head.args is not None:
        raise WindowClauseError(
            f"a window clause starts with 'tumbling' or 'sliding', not {head.text!r}"
            f"{_suggest(head.name, ('tumbling', 'sliding', 'timeInterval'))}",
            clause, head.start, len(head.text))
    wtype = WindowType(head.name)
    rest = items[1:]
    if not rest:
        raise WindowClauseError(f"{head.name} needs an eviction policy: {_EVICT_HELP}",
                                clause, len(clause.rstrip()))
    if rest[0].name == "partitioned":
        raise WindowClauseError(f"the eviction policy comes before 'partitioned': {_EVICT_HELP}",
                                clause, rest[0].start, len(rest[0].text))
    eviction = _policy(clause, rest[0], "eviction")
    if wtype is WindowType.SLIDING and isinstance(eviction, Punct):
        raise WindowClauseError("a sliding window cannot be evicted by punct(); "
                                "use 'tumbling, punct()' or a count, time or delta eviction",
                                clause, rest[0].start, len(rest[0].text))
    index = 1
    trigger: Count | Time | Delta | None = None
    if index < len(rest) and rest[index].name in _PARTITION_POLICIES:
        item = rest[index]
        raise WindowClauseError(f"{item.text} evicts partitions, so it needs 'partitioned' "
                                "before it", clause, item.start, len(item.text))
    if index < len(rest) and rest[index].name != "partitioned":
        item = rest[index]
        if wtype is WindowType.TUMBLING:
            raise WindowClauseError(
                f"a tumbling window has no trigger policy, found {item.text!r}; "
                "use 'sliding, EVICT, TRIGGER' to trigger, or remove it",
                clause, item.start, len(item.text))
        policy = _policy(clause, item, "trigger")
        if isinstance(policy, Punct):
            raise WindowClauseError(f"punct() is not a trigger policy; expected {_TRIGGER_HELP}",
                                    clause, item.start, len(item.text))
        trigger = policy
        index += 1
    partitioned = False
    partition_eviction = None
    if index < len(rest):
        item = rest[index]
        if item.name != "partitioned" or item.args is not None:
            raise WindowClauseError(
                f"unexpected {item.text!r}{_suggest(item.name, ('partitioned',))}; "
                "only 'partitioned' (optionally followed by a partition eviction policy) "
                "may come here", clause, item.start, len(item.text))
        partitioned = True
        index += 1
    if index < len(rest):
        partition_eviction = _partition_policy(clause, rest[index])
        index += 1
    if index < len(rest):
        item = rest[index]
        raise WindowClauseError(f"unexpected {item.text!r} after the end of the clause",
                                clause, item.start, len(item.text))
    return WindowSpec(wtype, eviction, trigger, partitioned, partition_eviction)


def same_clause(clause: object, spec: WindowSpec | TimeIntervalSpec) -> bool:
    """Whether clause text ``clause`` is the window ``spec``, however each was written
    (``time(1)``, ``time(1.0)``): a checkpoint records the clause as text, and a restart
    compares it with the graph's window."""
    if not isinstance(clause, str):
        return False
    try:
        return bool(parse_window_clause(clause) == spec)
    except WindowClauseError:
        return False


def _time_interval(clause: str, items: list[_Item]) -> TimeIntervalSpec:
    """The options of a timeInterval clause, each at most once, then optionally 'partitioned'."""
    values: dict[str, float] = {}
    partitioned = False
    for index, item in enumerate(items):
        if item.name == "partitioned" and item.args is None:
            if index != len(items) - 1:
                nxt = items[index + 1]
                if nxt.name in _PARTITION_POLICIES:
                    raise _no_partition_eviction(clause, nxt)
                raise WindowClauseError(f"unexpected {nxt.text!r} after 'partitioned': it ends the "
                                        "clause", clause, nxt.start, len(nxt.text))
            partitioned = True
            break
        if item.name in _PARTITION_POLICIES:
            raise _no_partition_eviction(clause, item)
        field = _INTERVAL_OPTIONS.get(item.name)
        if field is None:
            raise WindowClauseError(
                f"unknown timeInterval option {item.text!r}"
                f"{_suggest(item.name, (*_INTERVAL_OPTIONS, 'partitioned'))}; expected "
                "intervalDuration(D), creationPeriod(P), discardAge(A), intervalOffset(O) "
                "or partitioned", clause, item.start, len(item.text))
        if field in values:
            raise WindowClauseError(f"{item.name} is given twice", clause, item.start, len(item.text))
        (arg,) = _arity(clause, item, 1, f"{item.name}(seconds)")
        values[field] = _number(clause, item, arg, "the value in seconds")
    if "duration" not in values:
        end = len(clause.rstrip())
        raise WindowClauseError("timeInterval needs intervalDuration(D): the length of each pane "
                                "in seconds", clause, end)
    try:
        return TimeIntervalSpec(partitioned=partitioned, **values)
    except WindowClauseError as exc:
        # Point at the option whose value is wrong: the spec names it first in its message.
        for item in items:
            if exc.reason.startswith(f"{item.name}("):
                raise WindowClauseError(exc.reason, clause, item.start, len(item.text)) from None
        raise WindowClauseError(exc.reason, clause) from None


def _no_partition_eviction(clause: str, item: _Item) -> WindowClauseError:
    return WindowClauseError(
        f"{item.text}: timeInterval windows have no partition eviction policy; panes are "
        "discarded when they close (see discardAge)", clause, item.start, len(item.text))
