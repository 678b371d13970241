"""The dashboard page: one HTML document with an inline script, no external resources."""

from __future__ import annotations

DASHBOARD_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1d2330;background:#f6f7f9}
h1{font-size:1.3em;margin:0 0 .2em}
#summary{margin:.3em 0 1em;color:#4a5264}
#summary b{color:#1d2330}
#status.error{color:#b3261e;font-weight:bold}
table{border-collapse:collapse;background:#fff;box-shadow:0 1px 3px #0002}
th,td{padding:.35em .7em;border-bottom:1px solid #e3e6ea;text-align:right;white-space:nowrap}
th{background:#eef0f4;font-weight:600;font-size:.85em}
th.group{text-align:center;border-left:1px solid #d5d9e0}
td.name,th.name{text-align:left;font-weight:600}
td.sep,th.sep{border-left:1px solid #d5d9e0}
.bar{display:inline-block;width:90px;height:.7em;background:#e3e6ea;margin-right:.5em;
vertical-align:middle;border-radius:2px;overflow:hidden}
.fill{display:block;height:100%;background:#3a7bd5}
.fill.full{background:#d9822b}
.hist{display:inline-flex;align-items:flex-end;height:1.6em;gap:1px;vertical-align:middle;
margin-right:.5em}
.hist span{display:inline-block;width:7px;background:#7a8599;min-height:1px}
.zero{color:#9aa1ad}
.quiescing td.name:after{content:" (quiescing)";font-weight:normal;color:#9aa1ad}
#shadow_banner{margin:0 0 1em;padding:.6em .9em;border:2px solid #7b4aa8;border-radius:4px;
background:#f3ecfa;color:#3b2157;max-width:70em}
#shadow_banner[hidden]{display:none}
tr.shadow td{background:#faf6fd}
td.shadow-mode{color:#7b4aa8;font-weight:600}
tr.flows>td{padding:0 .7em .6em 2.2em;text-align:left;background:#fbfbfc}
table.flows{box-shadow:none;font-size:.85em;margin-top:.2em}
table.flows th,table.flows td{padding:.15em .6em}
table.flows td.text{text-align:left;max-width:28em;overflow:hidden;text-overflow:ellipsis}
#adaptive{margin:0 0 1em;padding:.5em .9em;background:#fff;box-shadow:0 1px 3px #0002;
max-width:70em;display:flex;align-items:center;gap:1em;flex-wrap:wrap}
#adaptive[hidden]{display:none}
#adaptive_spark polyline{fill:none;stroke-width:1.5;stroke-linejoin:round}
#adaptive_spark_applied{stroke:#3a7bd5}
#adaptive_spark_learned{stroke:#d9822b;stroke-dasharray:3 2}
#adaptive_ratio_spark polyline{fill:none;stroke:#b8336a;stroke-width:1.5}
#adaptive_ratio_one{stroke:#999;stroke-dasharray:2 3}
td[data-label]:before{content:attr(data-label) " ";font-size:.75em;font-style:italic;
color:#7b4aa8}
"""

DASHBOARD_SCRIPT = """
"use strict";
const feedUrl = location.pathname + "?format=json";
const params = new URLSearchParams(location.search);
// 250 ms to one minute: browsers keep timer delays in 32 bits, and a larger one (or Infinity)
// fires at once, every time.
const interval = Math.min(60000, Math.max(250, Number(params.get("interval")) || 1000));
const reasons = ["queue-full", "concurrency-limit", "time-out"];

function cell(row, field, text, cls) {
  const td = document.createElement("td");
  td.dataset.field = field;
  td.textContent = String(text);
  if (cls) td.className = cls;
  if (text === 0) td.classList.add("zero");
  row.appendChild(td);
  return td;
}

// Shadow mode: the level's numbers are its requests' virtual twins, what enforcing would do.
function would(td, label, title) {
  td.dataset.label = label;
  td.title = title;
}

function shadowBanner(feed) {
  const names = feed.priority_levels.filter(level => level.shadow).map(level => level.name);
  document.getElementById("shadow_levels").textContent = names.join(", ");
  document.getElementById("shadow_banner").hidden = names.length === 0;
}

// The adaptive server limit over the last polls, kept here: the feed is one instant.
const sparkLength = 120;
const limitHistory = [];

function sparkline() {
  const top = Math.max(1, ...limitHistory.map(([learned, applied]) => Math.max(learned, applied)));
  const step = 240 / (sparkLength - 1);
  const offset = sparkLength - limitHistory.length;  // the newest sample on the right
  ["adaptive_spark_learned", "adaptive_spark_applied"].forEach((id, which) => {
    const points = limitHistory.map((sample, i) => ((offset + i) * step).toFixed(1) + "," +
      (46 - 44 * sample[which] / top).toFixed(1));
    document.getElementById(id).setAttribute("points", points.join(" "));
  });
  document.getElementById("adaptive_spark").dataset.samples = String(limitHistory.length);
  // The latency ratio (a level's mean over its baseline) of each poll since the first
  // update, against the healthy 1.0 (dotted); the scale's top is at least 2.
  const ratios = limitHistory.map((sample, i) => [offset + i, sample[2]])
    .filter(([, ratio]) => ratio !== null);
  const ratioTop = Math.max(2, ...ratios.map(([, ratio]) => ratio));
  const y = ratio => (46 - 44 * ratio / ratioTop).toFixed(1);
  document.getElementById("adaptive_ratio_line").setAttribute("points", ratios
    .map(([x, ratio]) => (x * step).toFixed(1) + "," + y(ratio)).join(" "));
  const one = document.getElementById("adaptive_ratio_one");
  one.setAttribute("y1", y(1));
  one.setAttribute("y2", y(1));
  document.getElementById("adaptive_ratio_spark").dataset.samples = String(ratios.length);
}

function adaptivePanel(feed) {
  const adaptive = feed.adaptive;
  document.getElementById("adaptive").hidden = !adaptive;
  if (!adaptive) {
    limitHistory.length = 0;
    return;
  }
  limitHistory.push([adaptive.limit, adaptive.applied_limit,
    adaptive.updates ? adaptive.last_ratio : null]);
  if (limitHistory.length > sparkLength) limitHistory.shift();
  const text = (id, value) => { document.getElementById(id).textContent = value; };
  text("adaptive_algorithm", adaptive.algorithm);
  text("adaptive_limit", adaptive.limit.toFixed(1));
  text("adaptive_applied", adaptive.applied_limit);
  text("adaptive_bounds", adaptive.min_limit + "\u2013" + adaptive.max_limit);
  text("adaptive_ratio", adaptive.updates ? adaptive.last_ratio.toFixed(2) : "\u2013");
  text("adaptive_updates", adaptive.updates);
  text("adaptive_probes", adaptive.probes + (adaptive.probing ? " (probing now)" : ""));
  text("adaptive_baselines", Object.entries(adaptive.baselines)
    .map(([level, seconds]) => level + " " + (1000 * seconds).toFixed(1) + " ms")
    .join(", ") || "none yet");
  sparkline();
}

function seatsCell(row, level) {
  const td = cell(row, "seats", "", "sep");
  const bar = document.createElement("span");
  bar.className = "bar";
  const fill = document.createElement("span");
  const exempt = level.type === "Exempt";  // never limited: no bar
  const limit = level.current_limit;
  const used = level.executing_seats;
  fill.className = used >= limit ? "fill full" : "fill";
  fill.style.width = (limit > 0 && !exempt ? Math.min(100, 100 * used / limit) : 0) + "%";
  bar.appendChild(fill);
  td.appendChild(bar);
  const text = document.createElement("span");
  text.dataset.field = "seats_text";
  text.textContent = used + " / " + (exempt ? "\u221e" : limit);
  td.appendChild(text);
}

function queuesCell(row, level) {
  const td = cell(row, "queue_lengths", "", "");
  if (!level.queues) {
    td.textContent = "no queues";
    td.classList.add("zero");
    return;
  }
  const hist = document.createElement("span");
  hist.className = "hist";
  const most = Math.max(1, ...level.queue_lengths.map(b => b.queues));
  for (const bucket of level.queue_lengths) {
    const bar = document.createElement("span");
    bar.style.height = (bucket.queues ? 15 + 85 * bucket.queues / most : 0) + "%";
    bar.title = "length " + bucket.label + ": " + bucket.queues + " queues";
    hist.appendChild(bar);
  }
  td.appendChild(hist);
  const text = document.createElement("span");
  text.dataset.field = "queues_text";
  text.textContent = level.active_queues + "/" + level.queues + " active, longest " +
    level.longest_queue;
  td.appendChild(text);
}

// Who is flooding: the level's top flows by seats in use, waiting requests and rejections
// over the last minute, in a small table under the level's row.
const flowColumns = [["flow_schema", "flow schema"], ["distinguisher", "distinguisher"],
  ["seats_in_use", "seats in use"], ["waiting_requests", "waiting"],
  ["rejections", "rejected (last minute)"]];

function flowsRow(level) {
  const row = document.createElement("tr");
  row.className = "flows";
  row.dataset.flowsOf = level.name;
  const holder = document.createElement("td");
  holder.colSpan = 16;
  const table = document.createElement("table");
  table.className = "flows";
  const head = document.createElement("tr");
  const caption = document.createElement("th");
  caption.textContent = "top flows";
  caption.className = "name";
  head.appendChild(caption);
  for (const [, title] of flowColumns) {
    const th = document.createElement("th");
    th.textContent = title;
    head.appendChild(th);
  }
  table.appendChild(head);
  for (const flow of level.top_flows) {
    const tr = document.createElement("tr");
    tr.dataset.flow = level.name;
    cell(tr, "rank", "", "");
    for (const [field] of flowColumns) {
      // textContent only: a distinguisher is client-chosen text.
      const text = field === "flow_schema" || field === "distinguisher";
      const td = cell(tr, field, flow[field], text ? "text" : "");
      if (field === "distinguisher") {
        td.title = flow[field];
        if (flow[field] === "") td.textContent = "\u2014";
      }
      if (level.shadow && (field === "rejections" || field === "waiting_requests")) {
        would(td, field === "rejections" ? "would reject" : "would wait",
          "shadow mode: what enforcing would do");
      }
    }
    table.appendChild(tr);
  }
  holder.appendChild(table);
  row.appendChild(holder);
  return row;
}

function render(feed) {
  const body = document.getElementById("levels");
  const rows = [];
  for (const level of feed.priority_levels) {
    const row = document.createElement("tr");
    row.dataset.level = level.name;
    if (level.quiescing) row.classList.add("quiescing");
    if (level.shadow) row.classList.add("shadow");
    cell(row, "name", level.name, "name");
    cell(row, "type", level.type === "Exempt" ? "Exempt" : level.limit_response, "");
    cell(row, "mode", level.shadow ? "Shadow" : "Enforce", level.shadow ? "shadow-mode" : "");
    cell(row, "nominal_limit", level.nominal_limit, "sep");
    cell(row, "lower_limit", level.lower_limit);
    cell(row, "upper_limit", level.upper_limit);
    cell(row, "current_limit", level.current_limit);
    seatsCell(row, level);
    cell(row, "executing_requests", level.executing_requests);
    const waiting = cell(row, "waiting_requests", level.waiting_requests);
    queuesCell(row, level);
    const rejected = reasons.map((reason, i) => cell(row, "rejected_" + reason,
      level.rejected[reason] || 0, i === 0 ? "sep" : ""));
    const cancelled = cell(row, "cancelled", level.cancelled);
    if (level.shadow) {
      would(waiting, "would wait", "shadow mode: nothing waits; enforcing would hold these");
      for (const td of rejected) {
        would(td, "would reject", "shadow mode: nothing is rejected; enforcing would have " +
          "rejected these");
      }
      would(cancelled, "dropped", "shadow mode: twins dropped from their queues by the " +
        "max_shadow_twins cap");
    }
    cell(row, "dispatched", level.dispatched, "sep");
    rows.push(row);
    if (level.top_flows && level.top_flows.length) rows.push(flowsRow(level));
  }
  body.replaceChildren(...rows);
  shadowBanner(feed);
  adaptivePanel(feed);
  document.getElementById("server_limit").textContent = feed.server_concurrency_limit;
  document.getElementById("total_seats").textContent = feed.executing_seats;
  document.getElementById("total_waiting").textContent = feed.waiting_requests;
  document.getElementById("fair_fraction").textContent = feed.fair_fraction.toFixed(3);
}

function setStatus(text, isError) {
  const status = document.getElementById("status");
  status.textContent = text;
  status.className = isError ? "error" : "";
}

async function refresh() {
  try {
    // A poll that hangs is given up, or the next one would never come.
    const response = await fetch(feedUrl, {
      cache: "no-store",
      credentials: "same-origin",
      signal: AbortSignal.timeout(Math.max(10000, interval)),
    });
    if (!response.ok) throw new Error("HTTP " + response.status);
    render(await response.json());
    setStatus("updated " + new Date().toLocaleTimeString(), false);
  } catch (error) {
    setStatus("feed unavailable: " + error.message, true);
  }
  // The next poll after this one ended: a slow server never has two polls of one page.
  setTimeout(refresh, interval);
}

refresh();
"""

DASHBOARD_HTML = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>API Priority and Fairness</title>
<style>{DASHBOARD_STYLE}</style>
</head>
<body>
<h1>API Priority and Fairness</h1>
<div id="summary">Server limit <b id="server_limit">–</b> seats ·
executing <b id="total_seats">–</b> seats ·
waiting <b id="total_waiting">–</b> requests ·
fair fraction <b id="fair_fraction">–</b> ·
<span id="status">loading…</span></div>
<div id="shadow_banner" role="status" hidden><b>Shadow mode</b> at
<b id="shadow_levels"></b>: nothing there is being held or rejected, every request runs at
once. The numbers of these levels (mode Shadow), and the totals above, are what enforcing
would do: requests that would wait, would be rejected.</div>
<div id="adaptive" hidden><span><b>Adaptive server limit</b>
(<span id="adaptive_algorithm"></span>): learned <b id="adaptive_limit">–</b> ·
applied <b id="adaptive_applied">–</b> seats (bounds <span id="adaptive_bounds"></span>) ·
latency ratio <b id="adaptive_ratio">–</b> · updates <b id="adaptive_updates">–</b> ·
probes <b id="adaptive_probes">–</b><br>
baselines: <span id="adaptive_baselines"></span></span>
<svg id="adaptive_spark" viewBox="0 0 240 48" width="240" height="48" role="img"
aria-label="applied (solid) and learned (dashed) server limit over the last polls">
<polyline id="adaptive_spark_learned" points=""></polyline>
<polyline id="adaptive_spark_applied" points=""></polyline></svg>
<svg id="adaptive_ratio_spark" viewBox="0 0 240 48" width="240" height="48" role="img"
aria-label="latency ratio over the last polls; dotted: 1.0, latency at its baseline">
<line id="adaptive_ratio_one" x1="0" x2="240" y1="24" y2="24"></line>
<polyline id="adaptive_ratio_line" points=""></polyline></svg></div>
<table>
<thead>
<tr><th colspan="3"></th><th class="group" colspan="4">limits (seats)</th>
<th class="group" colspan="4">now</th><th class="group" colspan="4">rejected and cancelled</th>
<th class="group"></th></tr>
<tr><th class="name">priority level</th><th>type</th><th>mode</th>
<th class="sep">nominal</th><th>lower</th><th>upper</th><th>current</th>
<th class="sep">seats in use</th><th>executing</th><th>waiting</th><th>queue lengths</th>
<th class="sep">queue-full</th><th>concurrency-limit</th><th>time-out</th><th>cancelled</th>
<th class="sep">dispatched</th></tr>
</thead>
<tbody id="levels"></tbody>
</table>
<script>{DASHBOARD_SCRIPT}</script>
</body>
</html>
"""
