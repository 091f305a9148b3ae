"""Compare a replayed trace with a case's expectation, under FORMAT.md's rules, as the format's
own checker (``shared/conformance/run.py``) applies them.

- Optional fields (``pane``, ``pane_index``, ``pane_timing``, ``at``, ``step``) are compared
  only where the case uses them: a field is compared on the events that give it.
- Numbers compare with a 1e-6 tolerance (times are seconds); a boolean compares by equality.
- Merged evictions: for sliding windows only, adjacent EVICTIONs of one partition compare as
  one (the concatenation of their tuples), unless both name different steps. A tumbling
  flush is one event: split in two, it is a mismatch.
- ``unordered`` ranges (indexes into ``expect``) compare as multisets of
  (event, partition, tuples).
- ``order: by_key`` compares the events of each key, (pane, partition), in order, with no
  order between keys.
- Events raised by steps from a restart up to (not including) its reset are ignored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

OPTIONAL = ("pane", "pane_index", "pane_timing", "at", "step")
TOLERANCE = 1e-6

Record = dict[str, Any]


def same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return abs(float(a) - float(b)) <= TOLERANCE
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def matches(expected: Mapping[str, Any], actual: Mapping[str, Any]) -> bool:
    """An expected event matches an actual one; an optional field it does not give is not checked."""
    return all(same(v, actual.get(k)) for k, v in expected.items() if v is not None or k not in OPTIONAL)


def merge_evictions(events: Sequence[Mapping[str, Any]], sliding: bool) -> tuple[list[Record], list[int]]:
    """Adjacent EVICTIONs of one partition (and one step, where both name it) as one, for a
    sliding window; with the index of each input event's merged event."""
    out: list[Record] = []
    index: list[int] = []
    for ev in events:
        prev = out[-1] if out else None
        if (sliding and prev is not None and ev.get("event") == "EVICTION" == prev.get("event")
                and ev.get("partition") == prev.get("partition")
                and ev.get("step", prev.get("step")) == prev.get("step", ev.get("step"))):
            out[-1] = dict(prev, tuples=list(prev.get("tuples") or []) + list(ev.get("tuples") or []))
        else:
            out.append(dict(ev))
        index.append(len(out) - 1)
    return out, index


def without_restarted(case: Mapping[str, Any], actual: Sequence[Record]) -> list[Record]:
    """The events of a fresh PE between a restart step and its reset are not expected."""
    spans: list[tuple[int, int]] = []
    start = None
    for i, step in enumerate(case.get("steps", [])):
        if step.get("restart"):
            start = i
        elif "reset" in step and start is not None:
            spans.append((start, i))
            start = None
    return [a for a in actual if not any(lo <= a.get("step", -2) < hi for lo, hi in spans)]


def _key(ev: Mapping[str, Any]) -> str:
    return json.dumps([ev.get("pane"), ev.get("partition")])


def _canonical(evs: list[Record]) -> list[Record]:
    return sorted(evs, key=lambda e: json.dumps({k: e.get(k) for k in ("event", "partition", "tuples")},
                                                sort_keys=True))


def mismatch(case: Mapping[str, Any], actual: Sequence[Record]) -> str | None:
    """None when the trace matches the case's ``expect``, else what differs first."""
    expect = case.get("expect", [])
    keys = sorted({k for e in expect for k in OPTIONAL if k in e})

    def view(e: Mapping[str, Any]) -> Record:
        return {k: e.get(k) for k in ("event", "partition", "tuples", *keys)}

    sliding = str(case.get("window", "")).strip().startswith("sliding")
    exp_m, emap = merge_evictions(expect, sliding)
    act_m, _ = merge_evictions(without_restarted(case, actual), sliding)
    exp, act = [view(e) for e in exp_m], [view(a) for a in act_m]
    if case.get("order") == "by_key":
        groups: dict[str, tuple[list[Record], list[Record]]] = {}
        for e in exp:
            groups.setdefault(_key(e), ([], []))[0].append(e)
        for a in act:
            groups.setdefault(_key(a), ([], []))[1].append(a)
        for key in sorted(groups):
            ge, ga = groups[key]
            for i in range(max(len(ge), len(ga))):
                if i >= len(ga):
                    return f"key {key}: missing {json.dumps(ge[i])}"
                if i >= len(ge):
                    return f"key {key}: extra {json.dumps(ga[i])}"
                if not matches(ge[i], ga[i]):
                    return f"key {key} event #{i}: expected {json.dumps(ge[i])} got {json.dumps(ga[i])}"
        return None
    for first, last in case.get("unordered", []):
        lo, hi = emap[first], emap[last]
        exp[lo:hi + 1] = _canonical(exp[lo:hi + 1])
        if len(act) > hi:
            act[lo:hi + 1] = _canonical(act[lo:hi + 1])
    for i, e in enumerate(exp):
        if i >= len(act):
            return f"missing event #{i}: {json.dumps(e)}"
        if not matches(e, act[i]):
            return f"event #{i}: expected {json.dumps(e)} got {json.dumps(act[i])}"
    if len(act) > len(exp):
        return f"extra event #{len(exp)}: {json.dumps(act[len(exp)])}"
    return None
