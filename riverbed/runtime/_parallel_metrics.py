"""A parallel region's operators, as the job's metrics show them: what their instances in the
channels counted, reported by the workers (every few answers and at the end), folded into the
job's own `OperatorMetrics` of each member.

The job counts two things itself: the tuples it hands the region (the first member's
``tuples_processed``, counted as the channel answers each batch, so what a reset drops from
the queues is not counted) and what leaves the region through its merges
(the output ports that leave it: what downstream sees, merged). A worker killed outright
cannot report what it counted since its last report (at most `METRICS_EVERY` answers): those
counts of the members after the first are lost with it. Everything else an instance
counts happens in its worker: errors and late tuples, marks, what it submitted inside the
region, its watermark and its own counters. Those are summed over the channels (a watermark:
the lowest of them, once every channel reported one), so a region of width 2 reads as width 1
does.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from typing import Any

from ..core import Counter

__all__ = ["fold_member_metrics", "retire_reports"]

def _total(field: str, values: list[int]) -> int:
    """The region's count from its channels': tuples, errors and late tuples are each
    channel's own, so they add up; punctuation and watermarks reach (or leave) every channel
    alike, so the region saw as many as one channel did."""
    if "punct" in field or "watermark" in field:
        return max(values, default=0)
    return sum(values)


def _by_operator(reports: Iterable[Mapping[str, Mapping[str, Any]]],
                 into: dict[str, list[Mapping[str, Any]]] | None = None
                 ) -> dict[str, list[Mapping[str, Any]]]:
    """Each operator's metrics from ``reports`` (operator name -> metrics, one a channel), in
    report order, added to ``into`` when given."""
    by_operator = {} if into is None else into
    for report in reports:
        for name, metrics in report.items():
            by_operator.setdefault(name, []).append(metrics)
    return by_operator


_INPUT_FIELDS = ("window_puncts_processed", "final_puncts_processed", "tuples_dropped_late", "errors")


def fold_member_metrics(runners: Mapping[str, Any], reports: Iterable[Mapping[str, Mapping[str, Any]]],
                        *, first: str, merged: Container[tuple[str, int]],
                        retired: Iterable[Mapping[str, Mapping[str, Any]]] = (),
                        failures: Mapping[tuple[str, int], int] | None = None) -> None:
    """Set each member's metrics in ``runners`` to the sum of the channels' ``reports`` (one
    per channel: operator name -> `OperatorMetrics.as_dict`); ``first``: the member whose
    input tuples the job counts itself; ``merged``: the (operator, port) outputs leaving the
    region, which the job counts at the merge.

    ``retired``: the last reports of workers a reset replaced. Their counts add to the new
    workers' (which count from zero), as the counts the job keeps itself go on across resets;
    their watermarks are past. ``failures``: errors the workers could not count, each told by
    the failure that ended a worker, by (operator, input port)."""
    by_operator = _by_operator(reports)
    current = {name: len(reported) for name, reported in by_operator.items()}
    for name, _ in failures or ():
        by_operator.setdefault(name, [])  # a failure before its first report
    _by_operator(retired, by_operator)
    for name, reported in by_operator.items():
        runner = runners.get(name)
        if runner is None:
            continue
        target = runner.metrics
        fields = _INPUT_FIELDS if name == first else (*_INPUT_FIELDS, "tuples_processed")
        for i, port in enumerate(target.inputs):
            for field in fields:
                setattr(port, field, _total(field, [m["inputs"][i][field] for m in reported
                                                    if i < len(m["inputs"])]))
            if failures:
                port.errors += failures.get((name, i), 0)
        for i, port in enumerate(target.outputs):
            if (name, i) in merged:
                continue
            for field in port.__slots__:
                setattr(port, field, _total(field, [m["outputs"][i][field] for m in reported
                                                    if i < len(m["outputs"])]))
        marks = [m["watermark"] for m in reported[:current.get(name, 0)]]
        if marks and None not in marks:
            target.watermark = min(marks)
        totals: dict[str, int] = {}
        for m in reported:
            for counter, value in m["counters"].items():
                totals[counter] = totals.get(counter, 0) + value
        for counter, value in totals.items():
            target.counters.setdefault(counter, Counter()).value = value


def retire_reports(reports: Iterable[Mapping[str, Mapping[str, Any]]]
                   ) -> dict[str, dict[str, Any]]:
    """The reports of workers a reset replaced, as one (`fold_member_metrics`'s ``retired``):
    each count as `_total` makes it (summed, or the most for punctuation and watermarks), the
    counters summed, no watermark (it is past). One report however many resets came: the fold
    reads it beside the new workers' without a list growing at every reset."""
    out: dict[str, dict[str, Any]] = {}
    for name, reported in _by_operator(reports).items():
        def ports(kind: str, reported: list[Mapping[str, Any]] = reported) -> list[dict[str, int]]:
            width = max(len(m[kind]) for m in reported)
            return [{f: _total(f, [m[kind][i][f] for m in reported if i < len(m[kind])])
                     for f in next(m[kind][i] for m in reported if i < len(m[kind]))}
                    for i in range(width)]

        counters: dict[str, int] = {}
        for m in reported:
            for counter, value in m["counters"].items():
                counters[counter] = counters.get(counter, 0) + value
        out[name] = {"inputs": ports("inputs"), "outputs": ports("outputs"), "watermark": None,
                     "counters": counters}
    return out
