"""The dashboard's page: one HTML document with its style and script inline, so that it loads nothing
from anywhere else (it works offline, and its Content-Security-Policy allows nothing else).

The script asks ``/api/state`` every second (a server that restarts is shown again as soon as the
dashboard reaches it: its feed retries every second) and draws the plots as plain SVG with a few
lines of its own. Names from the server are set as text, never as HTML. Errors of the script are
reported to ``/api/report``, where the dashboard logs them.

>>> import re
>>> PAGE.startswith("<!DOCTYPE html>"), re.findall(r"(?:src=|href=|url[(]|fetch[(])[^a-z/]{0,2}(?:https?:)?//", PAGE)
(True, [])
"""
from __future__ import annotations

__all__ = ["PAGE"]

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>dmrpc-gym dashboard</title>
<style>
  :root { --fg: #1d232a; --muted: #5f6b77; --line: #d8dee4; --bg: #f6f8fa; --ok: #1a7f37; --bad: #cf222e;
          --a: #0969da; --b: #bf3989; --c: #8250df; }
  * { box-sizing: border-box; }
  body { margin: 0; font: 14px/1.4 system-ui, sans-serif; color: var(--fg); background: var(--bg); }
  header { padding: 10px 18px; background: #fff; border-bottom: 1px solid var(--line); display: flex;
           gap: 18px; align-items: baseline; flex-wrap: wrap; }
  header h1 { font-size: 17px; margin: 0; }
  main { padding: 14px 18px; display: grid; gap: 14px; grid-template-columns: repeat(auto-fit, minmax(420px, 1fr)); }
  section { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 10px 14px; }
  section.wide { grid-column: 1 / -1; }
  h2 { font-size: 14px; margin: 0 0 8px; color: var(--muted); text-transform: uppercase; letter-spacing: .04em; }
  .ok { color: var(--ok); font-weight: 600; } .bad { color: var(--bad); font-weight: 600; }
  .muted { color: var(--muted); }
  dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 0; }
  dt { color: var(--muted); } dd { margin: 0; font-variant-numeric: tabular-nums; }
  table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
  th, td { padding: 4px 8px; border-bottom: 1px solid var(--line); text-align: right; white-space: nowrap; }
  th:first-child, td:first-child, th.l, td.l { text-align: left; }
  tr.chosen { background: #eef6ff; }
  svg { width: 100%; height: 180px; display: block; }
  svg text { font-size: 10px; fill: var(--muted); }
  .frame img { max-width: 100%; image-rendering: pixelated; border: 1px solid var(--line); display: block; }
  .note { background: #fff8c5; border: 1px solid #d4a72c; padding: 6px 10px; border-radius: 4px; margin: 6px 0; }
  #banner { display: none; background: #ffebe9; border-bottom: 1px solid var(--bad); padding: 8px 18px; }
  button { font: inherit; padding: 2px 10px; }
  input[type=number] { width: 5em; font: inherit; }
</style>
</head>
<body>
<header>
  <h1>dmrpc-gym dashboard</h1>
  <span id="address" class="muted"></span>
  <span id="health"></span>
  <span id="updated" class="muted"></span>
</header>
<div id="banner"></div>
<main>
  <section id="server-panel">
    <h2>Server</h2>
    <dl>
      <dt>software</dt><dd id="software">-</dd>
      <dt>serving</dt><dd id="env">-</dd>
      <dt>uptime</dt><dd id="uptime">-</dd>
      <dt>connections</dt><dd id="connections">-</dd>
      <dt>worlds</dt><dd id="kinds">-</dd>
      <dt>steps/s</dt><dd id="rate">-</dd>
      <dt>steps in all</dt><dd id="steps">-</dd>
      <dt>errors</dt><dd id="errors">-</dd>
    </dl>
  </section>
  <section class="frame">
    <h2>Frame</h2>
    <div>
      <label>world <select id="frame-world"><option value="">(none)</option></select></label>
      <label>frames/s <input id="frame-fps" type="number" min="0.1" max="10" step="0.1" value="1"></label>
      <button id="frame-apply">Show</button>
    </div>
    <div id="frame-note" class="note" style="display:none"></div>
    <img id="frame" alt="the chosen world's frame" style="display:none">
    <div id="frame-at" class="muted"></div>
  </section>
  <section class="wide">
    <h2>Worlds</h2>
    <table>
      <thead><tr><th>world</th><th class="l">kind</th><th>agents</th><th>episodes</th><th>step</th>
        <th>return</th><th>last reward</th><th>steps/s</th><th>step ms</th><th>env ms</th><th>server ms</th>
        <th class="l">frames</th></tr></thead>
      <tbody id="worlds"></tbody>
    </table>
    <div id="no-worlds" class="muted">no worlds</div>
  </section>
  <section><h2>Steps per second</h2><svg id="plot-rate"></svg></section>
  <section><h2>Step time (ms): in all, in the env</h2><svg id="plot-time"></svg></section>
  <section><h2>Episode returns</h2><svg id="plot-returns"></svg></section>
</main>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
function report(message) {
  fetch("/api/report", {method: "POST", headers: {"Content-Type": "application/json"},
                        body: JSON.stringify({errors: [String(message)]})}).catch(() => {});
}
window.addEventListener("error", (e) => report(e.message + " at " + e.filename + ":" + e.lineno));
window.addEventListener("unhandledrejection", (e) => report("unhandled rejection: " + e.reason));

function text(id, value) { $(id).textContent = value; }
function num(value, digits) {
  if (value === null || value === undefined) return "-";
  return Number(value).toLocaleString("en-US", {minimumFractionDigits: digits, maximumFractionDigits: digits});
}
function duration(seconds) {
  seconds = Math.floor(seconds);
  const d = Math.floor(seconds / 86400), h = Math.floor(seconds % 86400 / 3600);
  const m = Math.floor(seconds % 3600 / 60), s = seconds % 60;
  const hms = h + ":" + String(m).padStart(2, "0") + ":" + String(s).padStart(2, "0");
  return d ? d + "d " + hms : hms;
}
function el(tag, attrs, parent) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (parent) parent.appendChild(node);
  return node;
}

// A line plot of series [{points: [[x, y]...], color, label}] in an <svg>, x as seconds ago or an index.
function plot(svg, series, xLabel) {
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const w = svg.clientWidth || 400, h = svg.clientHeight || 180, left = 46, right = 8, top = 8, bottom = 22;
  svg.setAttribute("viewBox", "0 0 " + w + " " + h);
  const all = series.flatMap((s) => s.points.filter((p) => p[1] !== null && isFinite(p[1])));
  if (!all.length) {
    const t = el("text", {x: w / 2, y: h / 2, "text-anchor": "middle"}, svg);
    t.textContent = "no data yet";
    return;
  }
  let x0 = Math.min(...all.map((p) => p[0])), x1 = Math.max(...all.map((p) => p[0]));
  let y0 = Math.min(0, ...all.map((p) => p[1])), y1 = Math.max(...all.map((p) => p[1]));
  if (x1 === x0) x0 = x1 - 1;
  if (y1 === y0) y1 = y0 + 1;
  y1 += (y1 - y0) * 0.05;
  const sx = (x) => left + (x - x0) / (x1 - x0) * (w - left - right);
  const sy = (y) => top + (1 - (y - y0) / (y1 - y0)) * (h - top - bottom);
  el("line", {x1: left, y1: sy(y0), x2: w - right, y2: sy(y0), stroke: "#d8dee4"}, svg);
  el("line", {x1: left, y1: top, x2: left, y2: h - bottom, stroke: "#d8dee4"}, svg);
  for (let i = 0; i <= 3; i++) {
    const y = y0 + (y1 - y0) * i / 3;
    el("line", {x1: left - 3, y1: sy(y), x2: w - right, y2: sy(y), stroke: "#f0f2f4"}, svg);
    const t = el("text", {x: left - 5, y: sy(y) + 3, "text-anchor": "end"}, svg);
    t.textContent = Math.abs(y) >= 100 ? y.toFixed(0) : y.toPrecision(3);
  }
  const label = el("text", {x: w - right, y: h - 6, "text-anchor": "end"}, svg);
  label.textContent = xLabel(x0) + " ... " + xLabel(x1);
  series.forEach((s, k) => {
    const pts = s.points.filter((p) => p[1] !== null && isFinite(p[1]));
    if (pts.length === 1) el("circle", {cx: sx(pts[0][0]), cy: sy(pts[0][1]), r: 2.5, fill: s.color}, svg);
    else el("polyline", {points: pts.map((p) => sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1)).join(" "),
                         fill: "none", stroke: s.color, "stroke-width": 1.5}, svg);
    const key = el("text", {x: left + 6 + k * 90, y: top + 10, fill: s.color}, svg);
    key.textContent = s.label;
    key.setAttribute("style", "fill:" + s.color);
  });
}

let chosen = "", frameAt = null, lastState = null;
function cell(row, value, left) {
  const td = document.createElement("td");
  td.textContent = value;
  if (left) td.className = "l";
  row.appendChild(td);
  return td;
}
function show(state) {
  lastState = state;
  text("address", state.address);
  text("updated", "read " + new Date(state.now * 1000).toLocaleTimeString());
  const banner = $("banner");
  if (!state.connected) {
    banner.style.display = "block";
    banner.textContent = "The server does not answer (since " + new Date(state.since * 1000).toLocaleTimeString()
      + "): " + state.error + ". Trying again every second.";
    $("health").className = "bad";
    text("health", "UNREACHABLE");
  } else {
    banner.style.display = "none";
  }
  const server = state.server;
  if (state.connected && server) {
    const health = server.health;
    $("health").className = health.serving ? "ok" : "bad";
    text("health", health.serving ? "SERVING" : (health.draining ? "DRAINING" : "NOT SERVING") +
         (health.why ? " (" + health.why + ")" : ""));
    text("software", server.server);
    text("env", server.env || "-");
    text("uptime", duration(server.uptime));
    text("connections", num(server.connections, 0) + " (" + num(server.streams, 0) + " streams)");
    const kinds = {};
    for (const w of state.worlds) kinds[w.kind] = (kinds[w.kind] || 0) + 1;
    text("kinds", state.worlds.length + (state.worlds.length ?
         " (" + Object.entries(kinds).map(([k, n]) => k + " " + n).join(", ") + ")" : ""));
    const last = state.history.length ? state.history[state.history.length - 1] : null;
    text("rate", last && last[1] !== null ? num(last[1], 1) : "-");
    text("steps", num(Object.values(server.totals).reduce((a, t) => a + (t.steps || 0), 0), 0));
    const errors = Object.entries(server.errors);
    text("errors", errors.length ? errors.map(([k, n]) => k + " " + n).join(", ") : "none");
  }
  const body = $("worlds");
  while (body.firstChild) body.removeChild(body.firstChild);
  $("no-worlds").style.display = state.worlds.length ? "none" : "block";
  const select = $("frame-world"), options = new Set([...select.options].map((o) => o.value));
  for (const w of state.worlds) {
    const row = document.createElement("tr");
    row.dataset.world = w.name;
    if (w.name === state.watch.world) row.className = "chosen";
    cell(row, w.name); cell(row, w.kind, true); cell(row, num(w.agents, 0)); cell(row, num(w.episodes, 0));
    cell(row, num(w.step, 0)); cell(row, num(w.return, 2)); cell(row, num(w.last_reward, 3));
    cell(row, num(w.steps_per_second, 1)); cell(row, num(w.step_ms, 3)); cell(row, num(w.env_ms, 3));
    cell(row, w.step_ms === null || w.env_ms === null ? "-" : num(w.step_ms - w.env_ms, 3));
    const frames = cell(row, "", true);
    const button = document.createElement("button");
    button.textContent = w.no_frames ? "none: why?" : "show";
    if (w.no_frames) frames.title = w.no_frames;
    button.addEventListener("click", () => { select.value = w.name; watch(); });
    frames.appendChild(button);
    body.appendChild(row);
    if (!options.has(w.name)) {
      const o = document.createElement("option");
      o.value = o.textContent = w.name;
      select.appendChild(o);
    }
  }
  const now = state.now;
  const ago = (x) => Math.round(now - x) + " s ago";
  plot($("plot-rate"), [{points: state.history.map((p) => [p[0], p[1]]), color: "#0969da", label: "steps/s"}], ago);
  plot($("plot-time"), [{points: state.history.map((p) => [p[0], p[2]]), color: "#0969da", label: "in all"},
                        {points: state.history.map((p) => [p[0], p[3]]), color: "#bf3989", label: "in the env"}], ago);
  const returns = state.worlds.flatMap((w) => (w.returns || []).map((r) => [r[0], r[1]]));
  returns.sort((a, b) => a[0] - b[0]);
  plot($("plot-returns"), [{points: returns.map((r, i) => [i + 1, r[1]]), color: "#8250df",
                            label: "return per episode"}], (i) => "episode " + Math.round(i));
  const note = $("frame-note"), img = $("frame");
  const world = state.worlds.find((w) => w.name === state.watch.world);
  const why = world ? world.no_frames : (state.watch.world ? "world " + state.watch.world + " is gone" : null);
  const problem = why || state.frame_error;
  note.style.display = problem ? "block" : "none";
  note.textContent = problem || "";
  if (state.frame && state.frame.world === state.watch.world && state.frame.at !== frameAt) {
    frameAt = state.frame.at;
    img.src = "/api/frame.png?at=" + frameAt;
    img.style.display = "block";
    text("frame-at", state.frame.world + ", rendered " + new Date(frameAt * 1000).toLocaleTimeString());
  } else if (!state.frame || problem) {
    if (!state.frame) { img.style.display = "none"; text("frame-at", ""); frameAt = null; }
  }
}

async function watch() {
  chosen = $("frame-world").value;
  const fps = Number($("frame-fps").value) || 1;
  const answer = await fetch("/api/watch", {method: "POST", headers: {"Content-Type": "application/json"},
                                            body: JSON.stringify({world: chosen, fps: fps})});
  if (!answer.ok) {
    const note = $("frame-note");
    note.style.display = "block";
    note.textContent = "not accepted: " + (await answer.text());
  }
  refresh();
}
$("frame-apply").addEventListener("click", watch);

let busy = false;
async function refresh() {
  if (busy) return;
  busy = true;
  try {
    const answer = await fetch("/api/state", {cache: "no-store"});
    if (!answer.ok) throw new Error("the dashboard answered " + answer.status);
    const state = await answer.json();
    if (!chosen && state.watch.world) { chosen = state.watch.world; $("frame-fps").value = state.watch.fps; }
    show(state);
    if ($("frame-world").value !== chosen && [...$("frame-world").options].some((o) => o.value === chosen))
      $("frame-world").value = chosen;
  } catch (err) {
    const banner = $("banner");
    banner.style.display = "block";
    banner.textContent = "The dashboard itself does not answer (" + err.message + "): is dmrpc-gym dashboard still running?";
  } finally {
    busy = false;
  }
}
function loop() {
  const fps = lastState && lastState.watch.world ? lastState.watch.fps : 1;
  refresh().finally(() => setTimeout(loop, Math.max(100, Math.min(1000, 1000 / fps))));
}
loop();
</script>
</body>
</html>
"""
