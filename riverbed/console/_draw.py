"""``riverbed graph graph.py --format svg|dot|mermaid [-o FILE]``: draw a graph without running it.

For a README or a review. An invalid graph is drawn all the same, each validation error
written on the operator it names (and all of them under the drawing), and the command
exits 2 so a check in CI still fails.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from riverbed.graph import GraphError, GraphValidationError, InvalidGraphError

from ._layout import LayoutError, lay_out, to_dot, to_mermaid
from ._svg import render_svg
from ._view import GraphView, view_of, view_of_declared

__all__ = ["FORMATS", "draw", "graph_command", "load_view"]

FORMATS = ("svg", "dot", "mermaid")
EXIT_OK, EXIT_INVALID = 0, 2


def load_view(script: str | Path, params: Sequence[str] = ()) -> GraphView:
    """The view of the graph a script builds: valid, or with its validation errors.

    Raises what `riverbed.run.load_script` raises for a script that builds no graph at
    all (`ScriptError`, a `GraphError` raised while building, ``ValueError``), and a
    `GraphValidationError` that does not say what was declared (one a script raised itself)."""
    from riverbed.run import load_script, parse_params

    try:
        graph = load_script(script, parse_params(params))[0]
    except InvalidGraphError as failure:  # `Graph.freeze` says what was declared, and what is wrong
        return view_of_declared(failure.declared, failure.errors)
    return view_of(graph)


def draw(view: GraphView, fmt: str) -> str:
    """The drawing's text in ``fmt`` (svg, dot or mermaid)."""
    if fmt == "dot":
        return to_dot(view)
    if fmt == "mermaid":
        return to_mermaid(view)
    if fmt == "svg":
        return render_svg(lay_out(view))
    raise ValueError(f"format {fmt!r}: expected one of {', '.join(FORMATS)}")


def graph_command(script: str, *, params: Sequence[str] = (), fmt: str = "svg", output: str | None = None,
                  echo: Callable[[str], None] | None = None) -> int:
    """The command; returns the exit code (0 drawn, 2 drawn but invalid, or nothing to draw)."""
    err = echo or (lambda msg: print(msg, file=sys.stderr))
    from riverbed.run import ScriptError

    try:
        view = load_view(script, params)
        text = draw(view, fmt)
    except (ScriptError, GraphError, GraphValidationError, LayoutError, ValueError) as exc:
        err(f"riverbed graph: {exc}")
        return EXIT_INVALID
    if output is None or output == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        try:
            Path(output).write_text(text, encoding="utf-8")
        except OSError as exc:
            err(f"riverbed graph: cannot write {output}: {exc.strerror or exc}")
            return EXIT_INVALID
    if not view.valid:
        err(f"riverbed graph: graph {view.name!r} is invalid ({len(view.errors)} error"
            f"{'s' if len(view.errors) != 1 else ''}, marked on the drawing):")
        for error in view.errors:
            err(f"  - {error}")
        return EXIT_INVALID
    return EXIT_OK
