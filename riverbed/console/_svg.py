"""The SVG drawing of a laid-out graph, standalone (``riverbed graph``) or live (the console).

Self-contained: styles inline in the file, no fonts or scripts fetched. Every element the
console's script updates has an id: ``op-N`` (an operator's group, N its index in the
view), ``op-N-rates`` and ``op-N-state`` (its metric lines), ``edge-K`` and
``edge-K-label`` (the K-th stream edge and its rate), ``par-J-channels`` (the rates of
the J-th parallel region's channels, under its label). An operator of a parallel region
is drawn as a stack of boxes, one showing for its channels.
"""

from __future__ import annotations

import math
from html import escape

from ._layout import CHAR_W, LINE_H, PAD_X, PAD_Y, Layout, wrap

__all__ = ["render_svg"]

STACK_STEP = 3.0  # px between the boxes of a parallel operator's stack

_STYLE = """
.rb text { font-family: 'DejaVu Sans Mono', 'Menlo', monospace; font-size: 11px; fill: #1f2933; }
.rb .title { font-weight: bold; font-size: 12px; }
.rb .type { fill: #52606d; }
.rb .port { fill: #334e68; }
.rb .metric { fill: #0b6e4f; }
.rb .error { fill: #c62828; }
.rb .box { fill: #ffffff; stroke: #486581; stroke-width: 1.4; }
.rb .source .box { fill: #f0f7ff; }
.rb .sink .box { fill: #f7f3ff; }
.rb .invalid .box { stroke: #c62828; stroke-width: 2.5; fill: #fff5f5; }
.rb .edge { fill: none; stroke: #627d98; stroke-width: 1.6; }
.rb .edge.feedback { stroke-dasharray: 5 4; }
.rb .arrow { fill: #627d98; }
.rb .cluster { fill: #fffbea; stroke: #cb6e17; stroke-dasharray: 6 4; }
.rb .cluster-label { fill: #8d2b0b; font-size: 11px; }
.rb .edge-label { fill: #243b53; font-size: 10px; paint-order: stroke; stroke: #ffffff;
  stroke-width: 3px; }
.rb .graph-errors { fill: #c62828; }
.rb .parallel-cluster { fill: #eef8f4; fill-opacity: 0.85; stroke: #147d64; stroke-width: 1.4;
  stroke-dasharray: 4 3; }
.rb .parallel-label { fill: #0c6b58; font-size: 11px; }
.rb .channels { fill: #0b6e4f; font-size: 11px; }
.rb .stack { fill: #f4fbf8; stroke: #147d64; stroke-width: 1.1; }
"""


def _path(points: tuple[tuple[float, float], ...]) -> str:
    if not points:
        return ""
    head = f"M{points[0][0]:.1f},{points[0][1]:.1f}"
    rest = points[1:]
    curves = [" C" + " ".join(f"{x:.1f},{y:.1f}" for x, y in rest[i:i + 3])
              for i in range(0, len(rest) - len(rest) % 3, 3)]
    return head + "".join(curves)


def _arrowhead(tip: tuple[float, float], base: tuple[float, float]) -> str:
    dx, dy = tip[0] - base[0], tip[1] - base[1]
    length = math.hypot(dx, dy) or 1.0
    ux, uy = dx / length, dy / length
    size = 9.0
    bx, by = tip[0] - ux * size, tip[1] - uy * size
    left = (bx - uy * size * 0.45, by + ux * size * 0.45)
    right = (bx + uy * size * 0.45, by - ux * size * 0.45)
    return (f'<polygon class="arrow" points="{tip[0]:.1f},{tip[1]:.1f} {left[0]:.1f},{left[1]:.1f} '
            f'{right[0]:.1f},{right[1]:.1f}"/>')


def _midpoint(points: tuple[tuple[float, float], ...]) -> tuple[float, float]:
    if not points:
        return 0.0, 0.0
    # The middle of the middle Bezier segment: on the curve, near its halfway point.
    segments = max(1, (len(points) - 1) // 3)
    start = 3 * (segments // 2)
    p = points[start: start + 4]
    if len(p) < 4:
        return points[len(points) // 2]
    return ((p[0][0] + 3 * p[1][0] + 3 * p[2][0] + p[3][0]) / 8,
            (p[0][1] + 3 * p[1][1] + 3 * p[2][1] + p[3][1]) / 8)


def render_svg(layout: Layout) -> str:
    """The drawing as one SVG document."""
    view = layout.view
    width = layout.width
    error_lines = [line for error in view.errors for line in wrap(error.splitlines()[0], 110, 2)]
    width = max(width, max((len(x) for x in error_lines), default=0) * CHAR_W + 2 * PAD_X)
    footer = (len(error_lines) + 1) * LINE_H + 8 if error_lines else 0.0
    height = layout.height + footer
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="rb" width="{width:.0f}" height="{height:.0f}" '
           f'viewBox="0 0 {width:.0f} {height:.0f}" data-graph="{escape(view.name)}">',
           f"<title>graph {escape(view.name)}</title>",
           f"<style>{_STYLE}</style>",
           f'<rect x="0" y="0" width="{width:.0f}" height="{height:.0f}" fill="#ffffff"/>']
    for cluster in layout.clusters:
        x, y = cluster.x0, cluster.y0
        size = (f'x="{x:.1f}" y="{y:.1f}" width="{cluster.x1 - x:.1f}" '
                f'height="{cluster.y1 - y:.1f}" rx="6"')
        if cluster.kind == "parallel":
            par = view.parallel[cluster.index]
            out.append(f'<g class="parallel" id="par-{cluster.index}" data-name="{escape(par.name)}" '
                       f'data-width="{par.width}"><rect class="parallel-cluster" {size}/>'
                       f'<text class="parallel-label" x="{x + 8:.1f}" y="{y + 14:.1f}">'
                       f"{escape(cluster.label)}</text>")
            if layout.live:
                out.append(f'<text class="channels" id="par-{cluster.index}-channels" x="{x + 8:.1f}" '
                           f'y="{y + 14 + LINE_H:.1f}"></text>')
            out.append("</g>")
            continue
        out.append(f'<g class="region"><rect class="cluster" {size}/>'
                   f'<text class="cluster-label" x="{x + 8:.1f}" y="{y + 14:.1f}">'
                   f"{escape(cluster.label)}</text></g>")
    for edge in layout.edges:
        e = view.edges[edge.index]
        classes = "edge feedback" if e.feedback else "edge"
        out.append(f'<g class="stream" id="edge-{edge.index}" data-stream="{escape(e.stream)}" '
                   f'data-source="{escape(e.source)}" data-target="{escape(e.target)}">'
                   f"<title>{escape(e.source)} out{e.source_port} \u2192 {escape(e.target)} "
                   f"in{e.target_port}</title>"
                   f'<path class="{classes}" d="{_path(edge.points)}"/>')
        if edge.arrow is not None and edge.points:
            out.append(_arrowhead(edge.arrow, edge.points[-1]))
        if layout.live:
            mx, my = _midpoint(edge.points)
            out.append(f'<text class="edge-label" id="edge-{edge.index}-label" x="{mx:.1f}" '
                       f'y="{my - 4:.1f}" text-anchor="middle"></text>')
        out.append("</g>")
    groups = {r.name for r in layout.view.parallel if r.process}  # one worker: no channels
    for index, box in enumerate(layout.boxes):
        op = box.op
        classes = f"operator {op.kind}" + (" invalid" if op.errors else "")
        x0, y0 = box.x - box.width / 2, box.y - box.height / 2
        out.append(f'<g class="{classes}" id="op-{index}" data-name="{escape(op.name)}">'
                   f"<title>{escape(op.name)} ({escape(op.type_name)})</title>")
        if op.parallel is not None and op.parallel not in groups:  # its channels, behind it
            for shift in (STACK_STEP * 2, STACK_STEP):
                out.append(f'<rect class="stack" x="{x0 + shift:.1f}" y="{y0 - shift:.1f}" '
                           f'width="{box.width:.1f}" height="{box.height:.1f}" rx="5"/>')
        out.append(f'<rect class="box" x="{x0:.1f}" y="{y0:.1f}" width="{box.width:.1f}" '
                   f'height="{box.height:.1f}" rx="5"/>')
        for n, line in enumerate(box.lines):
            ty = y0 + PAD_Y + LINE_H * n + 11
            ident = f' id="op-{index}-{line.slot}"' if line.slot else ""
            tip = f"<title>{escape(line.full)}</title>" if line.full != line.text else ""
            out.append(f'<text class="{line.kind}"{ident} x="{x0 + PAD_X:.1f}" y="{ty:.1f}">'
                       f"{escape(line.text)}{tip}</text>")
        out.append("</g>")
    if error_lines:
        y = layout.height + LINE_H
        out.append(f'<text class="graph-errors title" x="{PAD_X:.1f}" y="{y:.1f}">'
                   f"graph {escape(view.name)} is invalid ({len(view.errors)} "
                   f"error{'s' if len(view.errors) != 1 else ''}):</text>")
        for n, text in enumerate(error_lines, start=1):
            out.append(f'<text class="graph-errors" x="{PAD_X:.1f}" y="{y + n * LINE_H:.1f}">'
                       f"{escape(text)}</text>")
    out.append("</svg>")
    return "\n".join(out) + "\n"
