"""`riverbed graph`: a graph drawn without running it, as SVG (laid out by dot), DOT or Mermaid.

The browser-side checks of these drawings (rendered to PNG) are in test_console_browser.py.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from riverbed.cli import main
from riverbed.console import (
    GraphView,
    LayoutError,
    draw,
    lay_out,
    load_view,
    render_svg,
    view_of,
    view_of_declared,
)
from riverbed.graph import Connection, Graph, GraphValidationError, InvalidGraphError, Operator, Source

ROOT = Path(__file__).resolve().parent.parent
SENSORS = str(ROOT / "examples" / "sensors.py")
SVG = "{http://www.w3.org/2000/svg}"
needs_dot = pytest.mark.skipif(shutil.which("dot") is None,
                               reason="no Graphviz dot (scripts/install_console_deps.sh installs it)")

BROKEN = '''
from riverbed.graph import Graph, Operator, Source

class S(Source):
    replayable = True
    async def run(self):
        return None

class W(Operator):
    pass

def build(params):
    g = Graph("broken", params)
    s = g.source("src", S(), schema={"k": "rstring", "v": "float64"})
    a = g.operator("avg", W(), [s.window("sliding, count(10), count(5), partitioned")],
                   [{"k": "rstring", "v": "float64"}])
    b = g.operator("jump", W(), [a.window("tumbling, delta(nosuch, 1.5)")])
    g.sink("out", W(), [b])
    g.consistent_region(s, name="main", period=2)
    return g
'''

REGIONS = '''
from riverbed.graph import Graph, Operator, Source

class S(Source):
    replayable = True
    async def run(self):
        return None

class W(Operator):
    pass

def build(params):
    g = Graph("regions", params)
    s = g.source("src", S())
    a = g.operator("left", W(), [s])
    b = g.operator("right", W(), [s])
    g.sink("both", W(), [a, b.window("tumbling, count(3)")])
    g.consistent_region(s, name="main", period=2)
    return g
'''


PARALLEL = '''
from riverbed.graph import Graph, Operator, Source

class S(Source):
    replayable = True
    async def run(self):
        return None

class W(Operator):
    pass

def build(params):
    g = Graph("fanout", params)
    s = g.source("src", S(), schema={"k": "rstring", "v": "float64"})
    with g.parallel(4, partition_by="k", name="byk"):
        a = g.operator("avg", W(), [s.window("tumbling, count(10), partitioned", partition_by="k")],
                       [{"k": "rstring", "v": "float64"}])
        b = g.operator("scale", W(), [a])
    with g.parallel(2, name="rr"):
        c = g.operator("enrich", W(), [b])
    g.sink("out", W(), [c])
    if params.get("consistent"):  # the parallel regions checkpoint and reset with it
        g.consistent_region(s, name="main", period=2)
    return g
'''


def _script(tmp_path: Path, text: str) -> str:
    path = tmp_path / "graph.py"
    path.write_text(text)
    return str(path)


def draw_live(view: GraphView) -> str:
    return render_svg(lay_out(view, live=True))


def _texts(svg: str) -> list[str]:
    root = ET.fromstring(svg)
    return ["".join(t.itertext()) for t in root.iter(f"{SVG}text")]


@needs_dot
def test_svg_of_sensors_draws_every_operator_its_window_clauses_and_streams() -> None:
    svg = draw(load_view(SENSORS), "svg")
    root = ET.fromstring(svg)  # well-formed XML
    titles = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "title"]
    assert titles == ["sensors", "average", "alerts", "file"]
    texts = _texts(svg)
    assert any("sliding, count(10), count(5), partitioned" in t for t in texts)
    assert any("tumbling, delta(avg, 1.5), partitioned" in t for t in texts)
    streams = [g.get("data-stream") for g in root.iter(f"{SVG}g") if g.get("class") == "stream"]
    assert streams == ["sensors.0", "average.0", "alerts.0"]
    # Laid out left to right, sources first: each box starts right of the one feeding it.
    layout = lay_out(load_view(SENSORS))
    xs = [box.x for box in layout.boxes]
    assert xs == sorted(xs) and len(set(xs)) == 4


def test_dot_and_mermaid_name_every_operator_and_stream(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["graph", SENSORS, "--format", "dot"]) == 0
    dot = capsys.readouterr().out
    assert dot.startswith('digraph "sensors" {')
    for edge in ('"sensors" -> "average"', '"average" -> "alerts"', '"alerts" -> "file"'):
        assert edge in dot
    assert "in0: sliding, count(10), count(5), partitioned" in dot
    assert main(["graph", SENSORS, "--format", "mermaid"]) == 0
    mermaid = capsys.readouterr().out
    assert mermaid.startswith("flowchart LR\n")
    assert "op0 -->|0→0| op1" in mermaid and "op2 -->|0→0| op3" in mermaid
    if shutil.which("dot"):  # the DOT we print is valid for Graphviz itself
        done = subprocess.run(["dot", "-Tsvg"], input=dot, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr


@needs_dot
def test_an_invalid_graph_is_drawn_with_each_error_on_its_operator_and_exits_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "broken.svg"
    assert main(["graph", _script(tmp_path, BROKEN), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "graph 'broken' is invalid (2 errors, marked on the drawing)" in err
    root = ET.fromstring(out.read_text())
    invalid = {g.get("data-name"): "".join(g.itertext()) for g in root.iter(f"{SVG}g")
               if "invalid" in (g.get("class") or "").split()}
    assert set(invalid) == {"avg", "jump"}
    assert "partition-key" in invalid["avg"]
    assert "'nosuch', which is not in the schema" in invalid["jump"]
    assert "partition-key" not in invalid["jump"]
    # The region is drawn with what it would hold: everything downstream of its source.
    labels = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "cluster-label"]
    assert labels == ["consistent region main (periodic, every 2 s)"]
    assert [g.get("data-name") for g in root.iter(f"{SVG}g") if g.get("data-name")] == \
        ["src", "avg", "jump", "out"]
    mermaid = draw(load_view(_script(tmp_path, BROKEN)), "mermaid")
    assert "class op1,op2 invalid" in mermaid
    nodes = mermaid.split("%%")[0]  # the comments after the drawing list the errors again
    assert nodes.count("partition_by") == 1  # each error once, not once per wrapped line


@needs_dot
def test_regions_fan_in_and_window_ports_are_drawn(tmp_path: Path) -> None:
    view = load_view(_script(tmp_path, REGIONS))
    assert view.valid
    assert [r.members for r in view.regions] == [("src", "left", "right", "both")]
    both = view.operator("both")
    assert [p.window for p in both.inputs] == [None, "tumbling, count(3)"]
    svg = draw(view, "svg")
    assert _texts(svg).count("in1: tumbling, count(3)") == 1
    assert "consistent region main" in svg


def test_an_operator_named_like_a_cluster_is_drawn_as_an_operator(tmp_path: Path) -> None:
    """Graphviz names its clusters ``cluster_...``; an operator named ``cluster_health`` was
    taken for one, and the layout failed (`riverbed graph` and ``--console`` exited 2)."""
    view = load_view(_script(tmp_path, REGIONS.replace('"left"', '"cluster_0"')
                             .replace('"right"', '"cluster_health"')))
    svg = draw(view, "svg")
    texts = _texts(svg)
    assert "cluster_0" in texts and "cluster_health" in texts
    assert "consistent region main" in svg


def test_without_dot_the_svg_says_how_to_get_it_and_text_formats_still_work(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no dot on it
    with pytest.raises(LayoutError, match="apt-get install graphviz"):
        lay_out(load_view(SENSORS))
    assert main(["graph", SENSORS]) == 2
    assert "Graphviz's dot is not on PATH" in capsys.readouterr().err
    assert main(["graph", SENSORS, "-f", "mermaid"]) == 0


def test_a_script_that_builds_no_graph_is_an_error_not_a_drawing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["graph", _script(tmp_path, "x = 1\n")]) == 2
    assert "define build(params)" in capsys.readouterr().err
    assert main(["graph", str(tmp_path / "missing.py")]) == 2
    assert "no such graph script" in capsys.readouterr().err


def _inside(inner: ET.Element, outer: ET.Element) -> bool:
    x, y, w, h = (float(inner.get(k, "0")) for k in ("x", "y", "width", "height"))
    ox, oy, ow, oh = (float(outer.get(k, "0")) for k in ("x", "y", "width", "height"))
    return ox <= x and oy <= y and x + w <= ox + ow and y + h <= oy + oh


@needs_dot
def test_parallel_regions_are_drawn_with_their_channels_width_and_key(tmp_path: Path) -> None:
    script = _script(tmp_path, PARALLEL)
    view = load_view(script)
    assert view.valid
    assert [(p.name, p.width, p.partition_by, p.members) for p in view.parallel] == [
        ("byk", 4, "k", ("avg", "scale")), ("rr", 2, None, ("enrich",))]
    assert [view.operator(n).parallel for n in ("src", "avg", "scale", "enrich", "out")] == [
        None, "byk", "byk", "rr", None]
    root = ET.fromstring(draw(view, "svg"))
    regions = {g.get("data-name"): g for g in root.iter(f"{SVG}g") if g.get("class") == "parallel"}
    assert [(g.get("id"), g.get("data-width")) for g in regions.values()] == [("par-0", "4"), ("par-1", "2")]
    labels = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "parallel-label"]
    assert labels == ["parallel region byk (4 channels, by k)",
                      "parallel region rr (2 channels, round-robin)"]
    boxes = {g.get("data-name"): g for g in root.iter(f"{SVG}g") if "operator" in (g.get("class") or "")}
    for name, region in (("avg", "byk"), ("scale", "byk"), ("enrich", "rr")):
        box, frame = boxes[name].find(f"{SVG}rect[@class='box']"), regions[region].find(f"{SVG}rect")
        assert box is not None and frame is not None and _inside(box, frame)
        assert len(boxes[name].findall(f"{SVG}rect[@class='stack']")) == 2  # its channels, stacked
    for name in ("src", "out"):
        assert boxes[name].findall(f"{SVG}rect[@class='stack']") == []
    assert not any(t.get("id", "").startswith("par-") for t in root.iter(f"{SVG}text"))  # static: no rates
    live = ET.fromstring(draw_live(view))
    lines = {t.get("id"): t for t in live.iter(f"{SVG}text") if t.get("class") == "channels"}
    assert set(lines) == {"par-0-channels", "par-1-channels"}
    dot = draw(view, "dot")
    assert 'subgraph cluster_par0 {\n    label="parallel region byk (4 channels, by k)"' in dot
    assert '"avg" [label=' in dot.split("subgraph cluster_par1")[0].split("subgraph cluster_par0")[1]
    mermaid = draw(view, "mermaid")
    assert ('  subgraph parallel1["parallel region rr (2 channels, round-robin)"]\n    op3["enrich'
            in mermaid)


@needs_dot
def test_a_process_group_is_drawn_as_one_not_as_a_region_of_one_channel(tmp_path: Path) -> None:
    script = _script(tmp_path, PARALLEL.replace(
        '    with g.parallel(2, name="rr"):\n        c = g.operator("enrich", W(), [b])',
        '    with g.process("slow"):\n        c = g.operator("enrich", W(), [b])'))
    view = load_view(script)
    assert [(p.name, p.process) for p in view.parallel] == [("byk", False), ("slow", True)]
    root = ET.fromstring(draw(view, "svg"))
    labels = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "parallel-label"]
    assert labels == ["parallel region byk (4 channels, by k)",
                      "process group slow (one worker process)"]
    boxes = {g.get("data-name"): g for g in root.iter(f"{SVG}g") if "operator" in (g.get("class") or "")}
    assert len(boxes["avg"].findall(f"{SVG}rect[@class='stack']")) == 2  # channels
    assert boxes["enrich"].findall(f"{SVG}rect[@class='stack']") == []  # one process, no channels


def test_parallel_regions_are_drawn_inside_the_consistent_region_holding_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "nested.svg"
    assert main(["graph", _script(tmp_path, PARALLEL), "-p", "consistent=true", "-o", str(out)]) == 0
    root = ET.fromstring(out.read_text())
    (region,) = [g.find(f"{SVG}rect") for g in root.iter(f"{SVG}g") if g.get("class") == "region"]
    parallel = [g.find(f"{SVG}rect") for g in root.iter(f"{SVG}g") if g.get("class") == "parallel"]
    assert region is not None and len(parallel) == 2
    assert all(p is not None and _inside(p, region) for p in parallel)
    assert not [g for g in root.iter(f"{SVG}g") if "invalid" in (g.get("class") or "")]
    mermaid = draw(load_view(_script(tmp_path, PARALLEL), ["consistent=true"]), "mermaid")
    assert '  subgraph region0["consistent region main (periodic, every 2 s)"]\n' in mermaid
    assert '\n    subgraph parallel0["parallel region byk (4 channels, by k)"]\n' in mermaid


def test_a_partition_function_is_named_in_the_view() -> None:
    def by_sensor(t: object) -> object:
        return t

    g = Graph("keyed")
    src = g.source("src", _Src())
    with g.parallel(3, partition_by=by_sensor, name="p"):
        mid = g.operator("mid", _Op(), [src])
    g.sink("out", _Op(), [mid])
    (region,) = view_of(g.freeze()).parallel
    assert region.how == "3 channels, by test_a_partition_function_is_named_in_the_view.<locals>.by_sensor()"


class _Src(Source):
    async def run(self) -> None:
        return None


class _Op(Operator):
    pass


def test_graph_declared_reads_back_every_declaration_as_immutable_records() -> None:
    g = Graph("declared", {"width": 2})
    src = g.source("src", _Src(), schema={"k": "rstring", "ts": "int64"}, event_time="ts", lag=0.5)
    with g.parallel(partition_by="k", name="fan"):
        avg = g.operator("avg", _Op(), [src.window("sliding,  count(10), count(5), partitioned",
                                                   partition_by="k")], error_port=True)
    loop = g.operator("loop", _Op(), [avg[0]])
    g.add_input("loop", loop.feedback())
    mon = g.sink("mon", _Op(), [[avg[1], loop]])
    assert mon is None
    g.consistent_region(src, name="main", period=2)
    g.autonomous(loop)

    declared = g.declared()
    assert (declared.name, dict(declared.params)) == ("declared", {"width": 2})
    assert [(op.name, op.kind) for op in declared.operators] == [
        ("src", "source"), ("avg", "operator"), ("loop", "operator"), ("mon", "sink")]
    source = declared.operator("src")
    assert isinstance(source.operator, _Src) and source.inputs == ()
    assert source.event_time is not None and (source.event_time.attribute, source.event_time.resolution,
                                              source.event_time.lag_ns) == ("ts", "ms", 500_000_000)
    avg_op = declared.operator("avg")
    (port,) = avg_op.inputs
    assert port.window == "sliding,  count(10), count(5), partitioned"  # as given, not parsed
    assert (port.partition_by, port.connections, port.feedback) == ("k", (Connection("src", 0),), False)
    assert (len(avg_op.outputs), avg_op.error_port) == (2, 1)
    assert [p.connections for p in declared.operator("loop").inputs] == [
        (Connection("avg", 0),), (Connection("loop", 0, feedback=True),)]
    assert declared.operator("loop").inputs[1].feedback
    assert declared.operator("mon").inputs[0].connections == (Connection("avg", 1), Connection("loop", 0))
    assert declared.operator("mon").outputs == ()
    assert [(r.name, r.start, r.period, r.members) for r in declared.regions] == [
        ("main", ("src",), 2.0, ())]  # members are resolved by freeze, not declared
    assert declared.autonomous == frozenset({"loop"})
    assert [(p.name, p.width, p.partition_by, p.members) for p in declared.parallel] == [
        ("fan", 2, "k", ("avg",))]
    # Immutable, and a snapshot: building on does not change what was read.
    with pytest.raises(dataclasses.FrozenInstanceError):
        avg_op.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        declared.params["width"] = 3  # type: ignore[index]
    g.sink("late", _Op(), [src])
    assert "late" not in [op.name for op in declared.operators]
    assert [op.name for op in g.declared().operators][-1] == "late"


def test_freeze_of_an_invalid_graph_raises_the_validation_error_with_the_declaration() -> None:
    g = Graph("bad")
    src = g.source("src", _Src(), schema={"k": "rstring"})
    g.sink("out", _Op(), [src.window("tumbling, delta(nosuch, 1.5)")])
    with pytest.raises(GraphValidationError) as caught:
        g.freeze()
    failure = caught.value
    assert isinstance(failure, InvalidGraphError)
    assert [e.operator for e in failure.errors] == ["out"]
    assert failure.declared == g.declared()
    assert [op.name for op in failure.declared.operators] == ["src", "out"]
    view = view_of_declared(failure.declared, failure.errors)
    assert view.operator("out").errors and not view.operator("src").errors


def test_drawing_an_invalid_graph_leaves_the_public_graph_class_as_it_was(tmp_path: Path) -> None:
    import riverbed
    import riverbed.console
    import riverbed.graph

    before = riverbed.graph.Graph, riverbed.Graph
    load_view(_script(tmp_path, BROKEN))
    assert (riverbed.graph.Graph, riverbed.Graph) == before
    assert not hasattr(riverbed.console, "draft_graph")


@needs_dot
def test_the_command_line_writes_svg_to_standard_output_by_default() -> None:
    done = subprocess.run([sys.executable, "-m", "riverbed", "graph", SENSORS, "-p", "sensors=3"],
                          capture_output=True, text=True, cwd=ROOT, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("<svg ")
    ET.fromstring(done.stdout)
