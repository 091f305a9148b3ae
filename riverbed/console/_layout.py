"""Laying a graph out with Graphviz's ``dot``, and the DOT and Mermaid texts of a graph.

``dot`` (Debian's ``graphviz`` package) does the layered layout: ranks from sources to
sinks, few crossings, consistent regions kept together as clusters. It is asked for
positions only (``-Tjson0``); the drawing itself is ours (`riverbed.console._svg`), so the
static SVG and the live console are one picture, with the element ids the console's
script updates. Each operator box is sized here from the lines it will show, and handed
to ``dot`` as a fixed-size box. Parallel regions are clusters too, labelled with their
channels (width and partition key), nested in the consistent region that holds all their
operators (an invalid graph can have one); the live drawing's label has a second line for
the channels' rates.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any

from ._view import GraphView, OperatorView, ParallelView, RegionView

__all__ = ["CHANNELS_SHOWN", "Box", "ClusterLayout", "EdgeLayout", "Layout", "LayoutError", "box_lines",
           "lay_out", "parallel_label", "region_label", "to_dot", "to_mermaid", "wrap"]

CHAR_W = 6.7  # px per character of the 11 px monospace face the boxes use (DejaVu Sans Mono: 0.6 em)
LINE_H = 15.0
PAD_X, PAD_Y = 10.0, 8.0
MAX_CHARS = 56  # a longer line (a long window clause, an error) is cut with an ellipsis
DOT_TIMEOUT_S = 30.0


class LayoutError(RuntimeError):
    """The graph could not be laid out: ``dot`` is missing, failed or said nonsense."""


@dataclass(frozen=True, slots=True)
class Line:
    text: str
    kind: str  # title, type, port, metric, error
    full: str  # the uncut text (a tooltip when `text` was cut)
    slot: str | None = None  # the console fills this line: its id suffix


@dataclass(frozen=True, slots=True)
class Box:
    """An operator's box: centre, size (px, y down) and its lines."""

    op: OperatorView
    x: float
    y: float
    width: float
    height: float
    lines: tuple[Line, ...]


@dataclass(frozen=True, slots=True)
class EdgeLayout:
    index: int
    points: tuple[tuple[float, float], ...]  # a cubic B-spline: 3n+1 points
    arrow: tuple[float, float] | None  # where the arrowhead points (the port)


@dataclass(frozen=True, slots=True)
class ClusterLayout:
    """A region's rectangle: ``kind`` "consistent" or "parallel", ``index`` its place in the
    view's regions or parallel regions."""

    name: str
    x0: float
    y0: float
    x1: float
    y1: float
    label: str
    kind: str = "consistent"
    index: int = 0


@dataclass(frozen=True, slots=True)
class Layout:
    view: GraphView
    width: float
    height: float
    boxes: tuple[Box, ...]
    edges: tuple[EdgeLayout, ...]
    clusters: tuple[ClusterLayout, ...]
    live: bool


def _cut(text: str, most: int = MAX_CHARS) -> str:
    return text if len(text) <= most else text[: most - 1] + "\u2026"


def wrap(text: str, width: int = MAX_CHARS, most: int = 3) -> list[str]:
    words, lines, line = text.split(), [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    lines.append(line)
    if len(lines) > most:
        lines = [*lines[: most - 1], _cut(" ".join(lines[most - 1:]), width)]
    return [_cut(x, width) for x in lines]


def box_lines(op: OperatorView, live: bool) -> tuple[Line, ...]:
    """What an operator's box says, top to bottom; ``live`` adds the lines the console fills."""
    lines = [Line(op.name, "title", op.name)]
    what = op.type_name if op.kind == "operator" else f"{op.type_name} \u00b7 {op.kind}"
    if op.event_time:
        what += f" \u00b7 event time {op.event_time}"
    lines.append(Line(_cut(what), "type", what))
    for port in op.inputs:
        text = f"in{port.index}: {port.window}" if port.window else f"in{port.index}: no window"
        lines.append(Line(_cut(text), "port", text))
    if live:
        lines.append(Line("in -/s  out -/s", "metric", "", "rates"))
        lines.append(Line("queue -  wm -  late -  err -", "metric", "", "state"))
    for error in op.errors:
        lines.extend(Line(part, "error", "\u2717 " + error) for part in wrap("\u2717 " + error))
    return tuple(lines)


def label_lines(op: OperatorView) -> list[str]:
    """An operator's lines uncut, each error once: the label of a text format (DOT, Mermaid)."""
    return list(dict.fromkeys(line.full for line in box_lines(op, live=False)))


def _box_size(lines: tuple[Line, ...]) -> tuple[float, float]:
    chars = max(*(len(line.text) for line in lines), 24 if any(x.slot for x in lines) else 0)
    return chars * CHAR_W + 2 * PAD_X, len(lines) * LINE_H + 2 * PAD_Y


def _quote(name: str) -> str:
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _edge_ok(view: GraphView) -> list[int]:
    names = {op.name for op in view.operators}
    return [i for i, e in enumerate(view.edges) if e.source in names and e.target in names]


@dataclass
class _Group:
    """A cluster to draw: a consistent region (holding parallel regions) or a parallel one."""

    label: str
    ident: str
    operators: list[OperatorView] = field(default_factory=list)
    nested: list[_Group] = field(default_factory=list)
    parallel: ParallelView | None = None


def region_label(region: RegionView) -> str:
    period = f", every {region.period:g} s" if region.period else ""
    return f"consistent region {region.name} ({region.trigger}{period})"


def parallel_label(region: ParallelView) -> str:
    if region.process:
        return f"process group {region.name} (one worker process)"
    return f"parallel region {region.name} ({region.how})"


def channels_placeholder(region: ParallelView) -> str:
    """Room, in the live drawing's label, for the channels' rates the page writes there."""
    return "0" * (13 * min(region.width, CHANNELS_SHOWN) + (12 if region.width > CHANNELS_SHOWN else 0))


CHANNELS_SHOWN = 8  # channels whose rate a parallel region's label shows; the page's table has all


def _groups(view: GraphView) -> tuple[list[_Group], list[OperatorView]]:
    """The clusters, outermost first, and the operators in none. An operator in a parallel
    region is drawn in it; a parallel region whose operators are all in one consistent region
    is drawn inside it."""
    names = {op.name for op in view.operators}
    owner = {m: i for i, r in enumerate(view.regions) for m in r.members}
    channels: dict[str, int] = {}
    for j, par in enumerate(view.parallel):
        for m in par.members:
            if m in names:
                channels.setdefault(m, j)
    outer = [_Group(region_label(r), f"cluster_{i}") for i, r in enumerate(view.regions)]
    top: list[_Group] = list(outer)
    for j, par in enumerate(view.parallel):
        group = _Group(parallel_label(par), f"cluster_par{j}", parallel=par,
                       operators=[op for op in view.operators if channels.get(op.name) == j])
        if not group.operators:
            continue
        hosts = {owner.get(op.name) for op in group.operators}
        host = hosts.pop() if len(hosts) == 1 else None
        (outer[host].nested if host is not None else top).append(group)
    for op in view.operators:
        if op.name not in channels and op.name in owner:
            outer[owner[op.name]].operators.append(op)
    loose = [op for op in view.operators if op.name not in channels and op.name not in owner]
    return top, loose


def _parallel_index(ident: str) -> int:
    return int(ident.removeprefix("cluster_par"))


def to_dot(view: GraphView, *, sizes: dict[str, tuple[float, float]] | None = None,
           live: bool = False) -> str:
    """The graph as Graphviz DOT. With ``sizes`` (px per operator) the boxes are fixed,
    unlabelled shapes for laying out (``live``: room under a parallel region's label for its
    channels' rates); without, a readable DOT file with text labels, and invalid operators
    outlined in red."""
    out = [f"digraph {_quote(view.name)} {{",
           "  rankdir=LR; nodesep=0.35; ranksep=1.1; splines=spline;",
           '  node [shape=box, fontname="DejaVu Sans Mono", fontsize=10];']
    if sizes is None:
        out.append(f"  label={_quote('graph ' + view.name)}; labelloc=t;")

    def node(op: OperatorView) -> str:
        if sizes is not None:
            w, h = sizes[op.name]
            return f'{_quote(op.name)} [label="", fixedsize=true, width={w / 72:.3f}, height={h / 72:.3f}];'
        text = "\\n".join(line.replace("\\", "\\\\").replace('"', '\\"') for line in label_lines(op))
        extra = ', color="#c62828", fontcolor="#c62828", penwidth=2' if op.errors else ""
        return f'{_quote(op.name)} [label="{text}"{extra}];'

    def cluster(group: _Group, indent: str) -> None:
        out.append(f"{indent}subgraph {group.ident} {{")
        label = _quote(group.label)
        if group.parallel is not None:
            if live and sizes is not None:
                label = _quote(group.label)[:-1] + "\\n" + channels_placeholder(group.parallel) + '"'
            out.append(f'{indent}  label={label}; style="dashed,rounded"; fontname="DejaVu Sans Mono"; '
                       "fontsize=11; margin=14;")
        else:
            out.append(f"{indent}  label={label}; style=dashed;")
        out.extend(f"{indent}  {node(op)}" for op in group.operators)
        for inner in group.nested:
            cluster(inner, indent + "  ")
        out.append(f"{indent}}}")

    top, loose = _groups(view)
    for group in top:
        cluster(group, "  ")
    out.extend(f"  {node(op)}" for op in loose)
    for i in _edge_ok(view):
        e = view.edges[i]
        attrs = [f'id="e{i}"']
        if e.feedback:
            attrs.append("style=dashed")
        if sizes is None:
            attrs.append(f'label="{e.source_port}\u2192{e.target_port}"')
        out.append(f"  {_quote(e.source)} -> {_quote(e.target)} [{', '.join(attrs)}];")
    for error in (e for e in view.errors if sizes is None):
        out.append(f"  // invalid: {error.splitlines()[0]}")
    out.append("}")
    return "\n".join(out) + "\n"


def to_mermaid(view: GraphView) -> str:
    """The graph as a Mermaid flowchart (renders in GitHub and GitLab markdown)."""
    ids = {op.name: f"op{i}" for i, op in enumerate(view.operators)}

    def esc(text: str) -> str:
        return text.replace("&", "#amp;").replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")

    def node(op: OperatorView) -> str:
        label = "<br/>".join(esc(line) for line in label_lines(op))
        shape = ('[/"', '"/]') if op.kind == "source" else (('[\\"', '"\\]') if op.kind == "sink"
                                                            else ('["', '"]'))
        return f"{ids[op.name]}{shape[0]}{label}{shape[1]}"

    out = ["flowchart LR"]

    def subgraph(group: _Group, indent: str) -> None:
        ident = (f"parallel{_parallel_index(group.ident)}" if group.parallel is not None
                 else group.ident.replace("cluster_", "region"))
        out.append(f'{indent}subgraph {ident}["{esc(group.label)}"]')
        out.extend(f"{indent}  {node(op)}" for op in group.operators)
        for inner in group.nested:
            subgraph(inner, indent + "  ")
        out.append(f"{indent}end")

    top, loose = _groups(view)
    for group in top:
        subgraph(group, "  ")
    out.extend(f"  {node(op)}" for op in loose)
    for i in _edge_ok(view):
        e = view.edges[i]
        arrow = "-.->" if e.feedback else "-->"
        out.append(f"  {ids[e.source]} {arrow}|{e.source_port}\u2192{e.target_port}| {ids[e.target]}")
    bad = [ids[op.name] for op in view.operators if op.errors]
    if bad:
        out.append("  classDef invalid stroke:#c62828,stroke-width:3px,color:#c62828")
        out.append(f"  class {','.join(bad)} invalid")
    out.extend(f"  %% invalid: {error.splitlines()[0]}" for error in view.errors)
    return "\n".join(out) + "\n"


def _dot_binary() -> str:
    found = shutil.which("dot")
    if found is None:
        raise LayoutError("Graphviz's dot is not on PATH: the graph drawing needs it for the layout; "
                          "install it (Debian/Ubuntu: apt-get install graphviz; macOS: brew install "
                          "graphviz), or draw with --format dot or mermaid, which need no layout")
    return found


def _run_dot(text: str) -> dict[str, Any]:
    dot = _dot_binary()
    try:
        done = subprocess.run([dot, "-Tjson0"], input=text.encode(), capture_output=True,
                              timeout=DOT_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        raise LayoutError(f"{dot} took more than {DOT_TIMEOUT_S:g} s to lay the graph out") from exc
    if done.returncode != 0:
        raise LayoutError(f"{dot} failed (exit {done.returncode}): "
                          f"{done.stderr.decode(errors='replace').strip()[:500]}")
    try:
        result: dict[str, Any] = json.loads(done.stdout)
    except ValueError as exc:
        raise LayoutError(f"{dot} -Tjson0 printed something that is not JSON: {exc}") from exc
    return result


def _point(text: str) -> tuple[float, float]:
    x, y = text.split(",")[:2]
    return float(x), float(y)


MARGIN = 12.0


def lay_out(view: GraphView, *, live: bool = False) -> Layout:
    """Positions for every operator box, stream and region (px, y down), from ``dot``."""
    lines = {op.name: box_lines(op, live) for op in view.operators}
    sizes = {name: _box_size(ls) for name, ls in lines.items()}
    data = _run_dot(to_dot(view, sizes=sizes, live=live))
    try:
        _, _, bw, bh = (float(v) for v in str(data["bb"]).split(","))

        def flip(p: tuple[float, float]) -> tuple[float, float]:
            return p[0] + MARGIN, bh - p[1] + MARGIN

        boxes: list[Box] = []
        clusters: list[ClusterLayout] = []
        by_name = {op.name: op for op in view.operators}
        for obj in data.get("objects", []):
            name = str(obj.get("name", ""))
            # A cluster is a subgraph (it has a bounding box, a node has a position): an
            # operator may be named cluster_health too.
            if name.startswith("cluster_") and "bb" in obj and "pos" not in obj:
                x0, y0, x1, y1 = (float(v) for v in str(obj["bb"]).split(","))
                (ax, ay), (bx, by) = flip((x0, y1)), flip((x1, y0))
                label = str(obj.get("label", "")).split("\\n")[0]
                if name.startswith("cluster_par"):
                    clusters.append(ClusterLayout(name, ax, ay, bx, by, label, "parallel",
                                                  _parallel_index(name)))
                else:
                    clusters.append(ClusterLayout(name, ax, ay, bx, by, label, "consistent",
                                                  int(name.removeprefix("cluster_"))))
            elif name in by_name:
                x, y = flip(_point(str(obj["pos"])))
                w, h = sizes[name]
                boxes.append(Box(by_name[name], x, y, w, h, lines[name]))
        edges: list[EdgeLayout] = []
        for edge in data.get("edges", []):
            index = int(str(edge.get("id", "e-1"))[1:])
            arrow: tuple[float, float] | None = None
            points: list[tuple[float, float]] = []
            for part in str(edge["pos"]).split():
                if part.startswith("e,"):
                    arrow = flip(_point(part[2:]))
                elif part.startswith("s,"):
                    continue
                else:
                    points.append(flip(_point(part)))
            edges.append(EdgeLayout(index, tuple(points), arrow))
    except (KeyError, ValueError, TypeError) as exc:
        raise LayoutError(f"unexpected layout from dot: {type(exc).__name__}: {exc}") from exc
    order = {op.name: i for i, op in enumerate(view.operators)}
    boxes.sort(key=lambda b: order[b.op.name])
    edges.sort(key=lambda e: e.index)
    clusters.sort(key=lambda c: c.kind == "parallel")  # drawn after (over) the region holding it
    return Layout(view, bw + 2 * MARGIN, bh + 2 * MARGIN, tuple(boxes), tuple(edges), tuple(clusters), live)
