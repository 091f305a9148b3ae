"""The console and the drawings in a real headless browser: Debian's Chromium driven by Playwright.

``scripts/test.sh`` installs Chromium (``scripts/install_console_deps.sh``); Playwright's own
browser download is never used. Without a Chromium these tests skip, as the MQTT tests do
without mosquitto.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from riverbed.console import draw, load_view

ROOT = Path(__file__).resolve().parent.parent
SENSOR_NAMES = ["sensors", "average", "alerts", "file"]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = pytest.mark.skipif(CHROMIUM is None,
                                reason="no Chromium (scripts/install_console_deps.sh installs it)")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()


REGION_SENSORS = """
import runpy
sensors = runpy.run_path({path!r})

def build(params):
    g = sensors["build"](params)
    g.consistent_region("sensors", name="main", period=0.5)
    return g
"""


PARALLEL_SENSORS = """
import runpy
sensors = runpy.run_path({path!r})

def build(params):
    g = sensors["build"](params)
    g.parallel(2, partition_by="sensor", name="byk").add("average")
    return g
"""


def _start(script: str, tmp_path: Path, *extra: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``riverbed run SCRIPT --console 127.0.0.1:0`` and the console's URL, read from its log;
    stopped with SIGTERM (and waited for) after the test."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "riverbed", "run", script, "-p", "sensors=50", "-p", "rate=20",
         "-p", "seconds=600", "-p", f"out={tmp_path / 'alerts.jsonl'}", "--no-status", "--log-format", "json",
         "--console", "127.0.0.1:0", *extra],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    url = None
    for line in proc.stderr:
        if line.startswith("{") and json.loads(line).get("event") == "console":
            url = json.loads(line)["url"]
            break
    try:
        assert url is not None, f"no console line in the job's log (exit {proc.poll()})"
        yield proc, url
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)


@pytest.fixture
def job(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    yield from _start("examples/sensors.py", tmp_path)


@pytest.fixture
def region_job(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    script = tmp_path / "region_sensors.py"
    script.write_text(REGION_SENSORS.format(path=str(ROOT / "examples" / "sensors.py")))
    yield from _start(str(script), tmp_path, "--checkpoint-dir", str(tmp_path / "ckpt"))


@pytest.fixture
def parallel_job(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    script = tmp_path / "parallel_sensors.py"
    script.write_text(PARALLEL_SENSORS.format(path=str(ROOT / "examples" / "sensors.py")))
    yield from _start(str(script), tmp_path)


def _samples_seen(page: Any, count: int) -> None:
    # A function, not a string: the page's Content-Security-Policy forbids evaluating strings.
    page.wait_for_function("(n) => Number(document.body.dataset.samples || 0) >= n", arg=count,
                           timeout=30_000)


def test_the_page_shows_every_operator_and_its_rates_change_while_the_job_runs(
        browser: Any, job: tuple[subprocess.Popen[str], str], tmp_path: Path) -> None:
    proc, url = job
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(url)
    page.wait_for_selector("body[data-ready=true]", timeout=30_000)
    assert page.eval_on_selector_all("#graph svg text.title", "els => els.map(e => e.textContent)") == \
        SENSOR_NAMES
    assert "sliding, count(10), count(5), partitioned" in page.inner_text("#graph")
    rates, streams, totals = [], [], []
    for count in range(1, 6):  # five pushed samples, one a second
        _samples_seen(page, count)
        rates.append(page.text_content("#op-1-rates"))  # average: in and out
        streams.append(page.text_content("#edge-0-label"))  # sensors -> average
        totals.append(page.text_content("#totals"))
    assert page.text_content("#status") == "live"
    assert len(set(rates)) >= 2, rates  # the numbers move
    assert all(re.fullmatch(r"in [\d.]+k?/s  out [\d.]+k?/s", r) for r in rates[1:]), rates
    assert float(re.findall(r"[\d.]+", streams[-1])[0]) > 0, streams
    counted = [float(t.split()[0].rstrip("k")) * (1000 if t.split()[0].endswith("k") else 1) for t in totals]
    assert counted == sorted(counted) and counted[-1] > counted[0], totals
    # A click on an operator: its ports, window, counters, and plots of the last minutes.
    page.click("#op-1")
    assert page.text_content("#details h2") == "average"
    details = page.inner_text("#details")
    assert "sliding, count(10), count(5), partitioned" in details and "backpressure waits" in details
    _samples_seen(page, 7)
    inked = page.evaluate("""() => {
        const c = document.getElementById('plot-rates');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n; }""")
    assert inked > 200  # the lines were drawn, not just the label
    page.screenshot(path=str(tmp_path / "console.png"), full_page=True)
    page.close()
    assert proc.poll() is None  # the job kept running under the page


def test_the_page_shows_the_region_and_its_checkpoint_history_each_checkpoint_once(
        browser: Any, region_job: tuple[subprocess.Popen[str], str]) -> None:
    _, url = region_job
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(url)
    page.wait_for_selector("body[data-ready=true]", timeout=30_000)
    label = page.text_content("#graph svg text.cluster-label")
    assert label == "consistent region main (periodic, every 0.5 s)"
    _samples_seen(page, 3)
    cells = page.eval_on_selector_all("#regions tbody td", "els => els.map(e => e.textContent)")
    # A periodic region is processing or, for the moment a checkpoint takes, draining.
    assert cells[0] == "main" and cells[1] in ("processing", "draining") and int(cells[2]) > 0, cells
    history = page.eval_on_selector_all("#checkpoints li", "els => els.map(e => e.textContent)")
    ids = [int(m.group(1)) for m in (re.search(r"checkpoint (\d+)", h) for h in history) if m]
    assert len(ids) >= 2 and ids == sorted(set(ids), reverse=True), history  # newest first, once each
    page.close()


def test_the_page_shows_each_channel_of_a_parallel_region_and_its_rates(
        browser: Any, parallel_job: tuple[subprocess.Popen[str], str]) -> None:
    _, url = parallel_job
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(url)
    page.wait_for_selector("body[data-ready=true]", timeout=30_000)
    label = page.text_content("#graph svg text.parallel-label")
    assert label == "parallel region byk (2 channels, by sensor)"
    assert page.is_visible("#parallel-panel")
    lines, rows = [], []
    for count in range(2, 5):
        _samples_seen(page, count)
        lines.append(page.text_content("#par-0-channels"))
        rows.append(page.eval_on_selector_all("#channels tbody tr",
                                              "trs => trs.map(tr => [...tr.cells].map(c => c.textContent))"))
    assert all(re.fullmatch(r"ch0 [\d.]+k?/s · ch1 [\d.]+k?/s", line or "") for line in lines), lines
    assert [[r[0], r[2]] for r in rows[-1]] == [["byk[0]", "running"], ["byk[1]", "running"]], rows
    assert all(r[1].startswith("pid ") for r in rows[-1])
    assert any(float(r[4].rstrip("/sk")) > 0 for r in rows[-1]), rows  # tuples flow into the channels
    page.click("#op-1")
    assert "runs in parallel region byk: 2 channels, by sensor" in page.inner_text("#details")
    page.close()


_RENDER = """async (svg) => {
    const img = new Image();
    img.src = 'data:image/svg+xml;base64,' + svg;
    await img.decode();
    const canvas = document.createElement('canvas');
    canvas.width = img.naturalWidth; canvas.height = img.naturalHeight;
    const ctx = canvas.getContext('2d');
    ctx.drawImage(img, 0, 0);
    const d = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
    let ink = 0, red = 0; const colours = new Set();
    for (let i = 0; i < d.length; i += 4) {
        if (d[i] < 235 || d[i + 1] < 235 || d[i + 2] < 235) ink++;
        if (d[i] > 150 && d[i + 1] < 90 && d[i + 2] < 90) red++;
        colours.add((d[i] >> 4) << 8 | (d[i + 1] >> 4) << 4 | (d[i + 2] >> 4));
    }
    return {width: canvas.width, height: canvas.height, ink: ink / (d.length / 4), red,
            colours: colours.size, png: canvas.toDataURL('image/png').length};
}"""


def _render(browser: Any, svg: str, png: Path) -> dict[str, Any]:
    page = browser.new_page()
    page.set_content("<body style='margin:0;background:#fff'>" + svg + "</body>")
    page.locator("svg").screenshot(path=str(png))
    stats: dict[str, Any] = page.evaluate(_RENDER, base64.b64encode(svg.encode()).decode())
    page.close()
    return stats


def test_screenshot_of_riverbed_graph_has_the_drawing(browser: Any, tmp_path: Path) -> None:
    out = tmp_path / "sensors.svg"
    done = subprocess.run([sys.executable, "-m", "riverbed", "graph", "examples/sensors.py", "-o", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    stats = _render(browser, out.read_text(), tmp_path / "sensors.png")
    assert stats["width"] > 600 and stats["height"] > 60
    assert 0.02 < stats["ink"] < 0.5, stats  # boxes, text and arrows: neither blank nor a blot
    assert stats["colours"] >= 6, stats
    assert stats["red"] == 0, stats  # a valid graph: nothing marked in red
    assert (tmp_path / "sensors.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_screenshot_of_an_invalid_graph_shows_its_errors_in_red(browser: Any, tmp_path: Path) -> None:
    script = tmp_path / "broken.py"
    script.write_text(
        "from riverbed.graph import Graph, Operator, Source\n"
        "class S(Source):\n    async def run(self):\n        return None\n"
        "class W(Operator):\n    pass\n"
        "graph = Graph('broken')\ns = graph.source('src', S())\n"
        "graph.sink('out', W(), [s.window('sliding, count(10), count(5), partitioned')])\n")
    stats = _render(browser, draw(load_view(script), "svg"), tmp_path / "broken.png")
    assert stats["red"] > 500, stats  # the outlined operator and the error text


def test_the_page_keeps_as_many_checkpoints_as_the_server(browser: Any) -> None:
    # A page left open listed every checkpoint it was ever pushed (and rebuilt the whole list at
    # each new one); it keeps the server's 200. A job's metrics with one more checkpoint at each
    # sample, sampled every 20 ms.
    from riverbed.console import serve_console
    from riverbed.graph import Graph
    from riverbed.runtime import Job, VirtualClock
    from riverbed.testing import ListSink, ListSource

    g = Graph("many")
    g.sink("k", ListSink(), [g.source("s", ListSource([{"v": 1}]))])
    job = Job(g, clock=VirtualClock())  # (not run: Playwright's loop holds this thread)
    base = job.snapshot_metrics().as_dict()

    class Committing:
        name = "many"
        taken = 0

        def snapshot_metrics(self) -> Any:
            self.taken += 1
            sample = dict(base, regions=[{
                "name": "main", "state": "processing", "checkpoints": self.taken,
                "last_committed": self.taken, "drain_ms": 1.0, "checkpoint_ms": 1.0, "resets": 0,
                "last_recovery_ms": 0.0}])
            return type("Metrics", (), {"as_dict": lambda _self: sample})()

    server = serve_console(Committing(), job.graph, "127.0.0.1:0", interval=0.02)
    try:
        page = browser.new_page()
        page.goto(server.url)
        page.wait_for_selector("body[data-ready=true]", timeout=30_000)
        _samples_seen(page, 300)
        listed = page.eval_on_selector_all("#checkpoints li", "els => els.length")
        kept = server.sampler.checkpoints.maxlen
        assert kept is not None and 0 < listed <= kept, (listed, kept)
        page.close()
    finally:
        server.close()
