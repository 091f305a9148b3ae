"""Compare a replayed trace with a case's expectation, under FORMAT.md's rules.

Rules: adjacent EVICTIONs of one partition (and one step, where both sides
name it) compare as one; optional fields are compared only when the case uses
them; ``unordered`` ranges compare as multisets; ``order: by_key`` compares per
(pane, partition) key; events between a restart and its reset are ignored;
numbers compare with a 1e-6 tolerance.
"""

from __future__ import annotations

import json
from typing import Any

OPTIONAL = ("pane", "pane_index", "pane_timing", "at", "step")


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return abs(float(a) - float(b)) <= 1e-6
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _merge(events: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[int]]:
    out: list[dict[str, Any]] = []
    index: list[int] = []
    for ev in events:
        prev = out[-1] if out else None
        if (prev is not None and ev["event"] == "EVICTION" == prev["event"]
                and ev.get("partition") == prev.get("partition")
                and ev.get("step", prev.get("step")) == prev.get("step", ev.get("step"))):
            out[-1] = dict(prev, tuples=list(prev["tuples"]) + list(ev["tuples"]))
        else:
            out.append(dict(ev))
        index.append(len(out) - 1)
    return out, index


def _without_restarted(case: dict[str, Any], actual: list[dict[str, Any]]) -> list[dict[str, Any]]:
    spans: list[tuple[int, int]] = []
    start = None
    for i, step in enumerate(case.get("steps", [])):
        if step.get("restart"):
            start = i
        elif "reset" in step and start is not None:
            spans.append((start, i))
            start = None
    return [a for a in actual if not any(lo <= a.get("step", -2) < hi for lo, hi in spans)]


def mismatch(case: dict[str, Any], actual: list[dict[str, Any]]) -> str | None:
    """None when the trace matches, else what differs first."""
    expect = case.get("expect", [])
    keys = sorted({k for e in expect for k in OPTIONAL if k in e})

    def view(e: dict[str, Any]) -> dict[str, Any]:
        return {k: e.get(k) for k in ("event", "partition", "tuples", *keys)}

    exp_m, emap = _merge(expect)
    act_m, _ = _merge(_without_restarted(case, actual))
    exp, act = [view(e) for e in exp_m], [view(a) for a in act_m]
    if case.get("order") == "by_key":
        groups: dict[str, tuple[list[Any], list[Any]]] = {}
        for e in exp:
            groups.setdefault(json.dumps([e.get("pane"), e["partition"]]), ([], []))[0].append(e)
        for a in act:
            groups.setdefault(json.dumps([a.get("pane"), a["partition"]]), ([], []))[1].append(a)
        for key, (ge, ga) in sorted(groups.items()):
            if len(ge) != len(ga) or not all(_same(x, y) for x, y in zip(ge, ga, strict=True)):
                return f"key {key}: expected {ge} got {ga}"
        return None
    for lo, hi in case.get("unordered", []):
        a, b = emap[lo], emap[hi]
        exp[a:b + 1] = sorted(exp[a:b + 1], key=lambda e: json.dumps(e, sort_keys=True))
        act[a:b + 1] = sorted(act[a:b + 1], key=lambda e: json.dumps(e, sort_keys=True))
    for i, e in enumerate(exp):
        if i >= len(act):
            return f"missing event #{i}: {e}"
        if not _same(e, act[i]):
            return f"event #{i}: expected {e} got {act[i]}"
    if len(act) > len(exp):
        return f"extra event #{len(exp)}: {act[len(exp)]}"
    return None
