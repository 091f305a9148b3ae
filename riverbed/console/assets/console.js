// riverbed's live console: the drawing from /graph.svg, the samples pushed on /events
// (server-sent events), the last minutes from /api/history. Read-only; nothing fetched
// from anywhere but the job's own server.
"use strict";

const state = {
  graph: null,        // /api/graph: operators, edges, regions, parallel regions
  samples: [],        // newest last, at most `keep`
  checkpoints: [],    // the checkpoint history, oldest first
  keep: 600,
  keepCheckpoints: 200,  // as many as the server keeps (`Sampler(checkpoints=200)`)
  selected: null,     // the operator whose details are shown
  groups: new Map(),  // operator name -> its <g> in the drawing
};

function plotted(sample) {
  const operators = {};
  for (const [name, op] of Object.entries(sample.operators)) {
    operators[name] = { in_rate: op.in_rate, out_rate: op.out_rate, queue: op.queue,
                        waits_rate: op.waits_rate };
  }
  return { t: sample.t, operators };
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  for (const child of children) node.append(child);
  return node;
}

function number(value) {
  if (value === null || value === undefined) return "-";
  const abs = Math.abs(value);
  if (abs >= 1e9) return (value / 1e9).toFixed(2) + "G";
  if (abs >= 1e6) return (value / 1e6).toFixed(2) + "M";
  if (abs >= 1e4) return (value / 1e3).toFixed(1) + "k";
  return Number.isInteger(value) ? String(value) : value.toFixed(1);
}

function rate(value) { return value === null || value === undefined ? "-/s" : number(value) + "/s"; }

function ms(value) { return value === null || value === undefined ? "-" : value.toFixed(1) + " ms"; }

function clock(t) { return new Date(t * 1000).toLocaleTimeString(); }

async function loadDrawing() {
  const [graph, svgText, history] = await Promise.all([
    fetch("/api/graph").then(r => r.json()),
    fetch("/graph.svg").then(r => r.text()),
    fetch("/api/history").then(r => r.json()),
  ]);
  state.graph = graph;
  document.getElementById("job-name").textContent = graph.job;
  document.title = "riverbed " + graph.job;
  const parsed = new DOMParser().parseFromString(svgText, "image/svg+xml").documentElement;
  const holder = document.getElementById("graph");
  holder.replaceChildren(document.importNode(parsed, true));
  graph.operators.forEach((op, i) => {
    const group = document.getElementById("op-" + i);
    if (!group) return;
    state.groups.set(op.name, group);
    group.addEventListener("click", () => select(op.name));
  });
  document.getElementById("parallel-panel").hidden = !(graph.parallel || []).length;
  state.samples = history.samples.slice(-state.keep);
  state.checkpoints = history.checkpoints;
  if (state.samples.length) show(state.samples[state.samples.length - 1]);
  renderCheckpoints();
  document.body.dataset.ready = "true";
}

function fillClass(op) {
  if (!op.capacity) return "fill-low";
  const fill = op.queue / op.capacity;
  return fill > 0.75 ? "fill-high" : fill >= 0.25 ? "fill-mid" : "fill-low";
}

function show(sample) {
  const graph = state.graph;
  let totalIn = 0, errors = 0, late = 0;
  graph.operators.forEach((op, i) => {
    const m = sample.operators[op.name];
    const group = state.groups.get(op.name);
    if (!m || !group) return;
    totalIn += m.in; errors += m.errors; late += m.late;
    const rates = document.getElementById(`op-${i}-rates`);
    if (rates) rates.textContent = `in ${rate(m.in_rate)}  out ${rate(m.out_rate)}`;
    const line = document.getElementById(`op-${i}-state`);
    if (line) {
      const queue = m.capacity ? `${m.queue}/${m.capacity}` : "-";
      line.textContent = `queue ${queue}  wm ${m.watermark}  late ${number(m.late)}  err ${number(m.errors)}`;
    }
    group.classList.remove("fill-low", "fill-mid", "fill-high");
    group.classList.add(fillClass(m));
    group.classList.toggle("waiting", (m.waits_rate || 0) > 0);
    group.classList.toggle("failing", m.errors > 0);
    group.classList.toggle("finished", m.finished);
  });
  graph.edges.forEach((edge, k) => {
    const group = document.getElementById(`edge-${k}`);
    if (!group) return;
    const value = sample.streams[edge.stream];
    const label = document.getElementById(`edge-${k}-label`);
    if (label) label.textContent = rate(value);
    const target = sample.operators[edge.target];
    group.classList.toggle("waiting", !!target && (target.waits_rate || 0) > 0);
    group.classList.toggle("idle", value === 0);
  });
  document.getElementById("updated").textContent = "updated " + clock(sample.t);
  document.getElementById("totals").textContent =
    `${number(totalIn)} tuples in` + (late ? ` · ${number(late)} late` : "") +
    (errors ? ` · ${number(errors)} errors` : "") +
    (sample.restarts ? ` · ${sample.restarts} process restarts` : "");
  renderRegions(sample.regions);
  renderChannels(sample.channels || []);
  if (state.selected) renderDetails();
}

const CHANNELS_SHOWN = 8;  // as riverbed/console/_layout.py leaves room for under a region's label

function channelState(c) { return c.finished ? "finished" : c.alive ? "running" : "ended"; }

function renderChannels(channels) {
  (state.graph.parallel || []).forEach((region, j) => {
    const line = document.getElementById(`par-${j}-channels`);
    if (!line) return;
    const mine = channels.filter(c => c.region === region.name);
    const shown = mine.slice(0, CHANNELS_SHOWN).map(c => `ch${c.channel} ${rate(c.in_rate)}`);
    if (mine.length > CHANNELS_SHOWN) shown.push(`+${mine.length - CHANNELS_SHOWN} more`);
    line.textContent = shown.join(" \u00b7 ");
  });
  const body = document.querySelector("#channels tbody");
  body.replaceChildren(...channels.map(c => {
    const tr = el("tr", { class: channelState(c) }, ...[
      `${c.region}[${c.channel}]`, c.pid === null ? "-" : "pid " + c.pid, channelState(c), number(c.in),
      rate(c.in_rate), number(c.out), rate(c.out_rate), `${c.in_flight}/${c.capacity}`,
      `${number(c.waits)} (${rate(c.waits_rate)})`].map(v => el("td", {}, String(v))));
    return tr;
  }));
}

function renderRegions(regions) {
  const body = document.querySelector("#regions tbody");
  body.replaceChildren(...regions.map(r => el("tr", {},
    el("td", {}, r.name || "job"), el("td", {}, r.state),
    el("td", {}, r.last_committed === null ? "-" : String(r.last_committed)),
    el("td", {}, String(r.checkpoints)), el("td", {}, ms(r.drain_ms)), el("td", {}, ms(r.checkpoint_ms)),
    el("td", {}, String(r.resets)), el("td", {}, ms(r.last_recovery_ms)))));
  if (!regions.length) {
    body.replaceChildren(el("tr", {}, el("td", { colspan: "8" }, "no checkpoints: the job runs without --checkpoint-dir")));
  }
}

function renderCheckpoints() {
  const list = document.getElementById("checkpoints");
  list.replaceChildren(...state.checkpoints.slice().reverse().map(c => c.kind === "reset"
    ? el("li", { class: "reset" }, `${clock(c.t)}  ${c.region}: reset (${c.count}), recovered in ${ms(c.recovery_ms)}`)
    : el("li", {}, `${clock(c.t)}  ${c.region}: checkpoint ${c.id}` + (c.count > 1 ? ` (+${c.count - 1} more)` : "") +
      `, drain ${ms(c.drain_ms)}, save ${ms(c.save_ms)}`)));
}

function select(name) {
  if (state.selected) state.groups.get(state.selected)?.classList.remove("selected");
  state.selected = name;
  state.groups.get(name)?.classList.add("selected");
  renderDetails();
}

function row(...cells) { return el("tr", {}, ...cells.map(c => el("td", {}, String(c)))); }

function renderDetails() {
  const name = state.selected;
  const op = state.graph.operators.find(o => o.name === name);
  const last = state.samples[state.samples.length - 1];
  const m = last ? last.operators[name] : null;
  const panel = document.getElementById("details");
  const parts = [el("h2", {}, name), el("p", {}, `${op.type} · ${op.kind}` +
    (op.region ? ` · region ${op.region}` : "") + (op.event_time ? ` · event time ${op.event_time}` : ""))];
  const par = op.parallel ? (state.graph.parallel || []).find(p => p.name === op.parallel) : null;
  if (par) {
    parts.push(el("p", {}, `runs in parallel region ${par.name}: ${par.width} channel` +
      (par.width === 1 ? "" : "s") + (par.partition_by ? `, by ${par.partition_by}` : ", round-robin") +
      " (each channel's rates below the drawing)"));
  }
  if (op.inputs.length) {
    const head = el("tr", {}, ...["input", "window", "tuples", "rate", "late", "errors", "puncts"].map(h => el("th", {}, h)));
    parts.push(el("table", {}, head, ...op.inputs.map((p, i) => {
      const s = m ? m.inputs[i] : null;
      return row("in" + i, p.window || "-", s ? number(s.processed) : "-", s ? rate(s.rate) : "-",
        s ? s.late : "-", s ? s.errors : "-", s ? s.window_puncts : "-");
    })));
  }
  if (m && m.outputs.length) {
    const head = el("tr", {}, ...["output", "tuples", "rate", "puncts", "watermarks"].map(h => el("th", {}, h)));
    parts.push(el("table", {}, head, ...m.outputs.map((p, i) =>
      row("out" + i + (op.error_port === i ? " (errors)" : ""), number(p.submitted), rate(p.rate),
        p.window_puncts, p.watermarks))));
  }
  if (m) {
    parts.push(el("table", {},
      row("queue", `${m.queue} of ${m.capacity || "-"} batches (most ${m.high_water})`),
      row("backpressure waits", `${number(m.waits)} (${rate(m.waits_rate)})`),
      row("watermark", m.watermark),
      ...Object.entries(m.counters).map(([k, v]) => row(k, number(v)))));
  }
  const rates = el("canvas", { id: "plot-rates", width: "400", height: "120" });
  const queue = el("canvas", { id: "plot-queue", width: "400", height: "120" });
  parts.push(el("p", {}, "tuples in and out a second, last minutes"), rates,
    el("p", {}, "queue fill (batches) and backpressure waits a second"), queue);
  panel.replaceChildren(...parts);
  const series = state.samples.map(s => s.operators[name]).filter(Boolean);
  plot(rates, [
    { color: "#2680c2", values: series.map(s => s.in_rate) },
    { color: "#0b6e4f", values: series.map(s => s.out_rate) }]);
  plot(queue, [
    { color: "#cb6e17", values: series.map(s => s.queue) },
    { color: "#e12d39", values: series.map(s => s.waits_rate) }]);
}

function plot(canvas, lines) {
  const ctx = canvas.getContext("2d");
  const w = canvas.width, h = canvas.height, pad = 4, top = 14;
  ctx.clearRect(0, 0, w, h);
  let max = 0, count = 0;
  for (const line of lines) for (const v of line.values) { if (v !== null) max = Math.max(max, v); count = Math.max(count, line.values.length); }
  ctx.fillStyle = "#52606d";
  ctx.font = "10px monospace";
  ctx.fillText("max " + number(max), pad, 10);
  if (count < 2) return;
  const scale = max > 0 ? (h - top - pad) / max : 0;
  for (const line of lines) {
    ctx.strokeStyle = line.color;
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    let started = false;
    line.values.forEach((v, i) => {
      if (v === null) return;
      const x = pad + (w - 2 * pad) * i / (count - 1), y = h - pad - v * scale;
      if (started) ctx.lineTo(x, y); else { ctx.moveTo(x, y); started = true; }
    });
    ctx.stroke();
  }
}

function connect() {
  const status = document.getElementById("status");
  const events = new EventSource("/events");
  events.addEventListener("open", () => { status.textContent = "live"; status.className = "status live"; });
  events.addEventListener("sample", message => {
    const sample = JSON.parse(message.data);
    const newest = state.samples[state.samples.length - 1];
    // A (re)connected stream starts with the newest sample, which /api/history may already
    // have given: taking it twice would list its checkpoints twice.
    if (newest && sample.t <= newest.t) return;
    // The page keeps whole only the newest sample; the others hold what the plots read
    // (the server keeps its history the same way).
    if (newest) state.samples[state.samples.length - 1] = plotted(newest);
    state.samples.push(sample);
    if (state.samples.length > state.keep) state.samples.shift();
    if (sample.checkpoints.length) {
      state.checkpoints.push(...sample.checkpoints);
      // A page left open for a day would list every checkpoint, rebuilt at each new one.
      state.checkpoints.splice(0, state.checkpoints.length - state.keepCheckpoints);
      renderCheckpoints();
    }
    show(sample);
    document.body.dataset.samples = String(Number(document.body.dataset.samples || 0) + 1);
  });
  events.addEventListener("error", () => {
    status.textContent = "job ended or unreachable: retrying";
    status.className = "status ended";
  });
}

loadDrawing().then(connect).catch(error => {
  document.getElementById("graph").textContent = "the console could not load: " + error;
});
