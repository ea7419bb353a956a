// The troupe dashboard: polls the head's /api/ every 2 s and draws with SVG.
// No libraries: the head serves this file itself (clusters often have no
// internet). Charts keep at most MAX_POINTS per worker and metric.
"use strict";

// troupe_worker_step_end's standard figures (README "Metrics").
// unit: how the y labels read ("bytes": KiB/MiB/GiB, "ms", "ratio": %).
const CHARTS = [
  { name: "loss", title: "loss" },
  { name: "val_loss", title: "validation loss" },
  { name: "tokens_per_s", title: "tokens/s" },
  { name: "mfu", title: "MFU", unit: "ratio" },
  { name: "gpu_mem_in_use_bytes", title: "GPU memory in use", unit: "bytes", memory: true },
  { name: "step_ms", title: "step time", unit: "ms" },
];
const MAX_POINTS = 2000;
const COLORS = ["#1565c0", "#c62828", "#2e7d32", "#6a1b9a", "#ef6c00", "#00838f", "#4e342e", "#ad1457"];
const SVGNS = "http://www.w3.org/2000/svg";

let selected = null;     // job id shown in detail
let series = {};         // name -> "worker#attempt" -> [[step, value], ...]
let nextId = 0;          // metric points read so far (the API's next_id)
let health = {};         // worker -> "stalled" | "straggler" for the selected job
let memWarn = {};        // worker -> its memory warning (Job.health.memory entry) for the selected job

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}

async function get(path) {
  const r = await fetch(path, { credentials: "same-origin" });
  if (r.status === 401) { location.href = "/login"; throw new Error("401"); }
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return r.json();
}

const GB = 1e9;

// gpuFigures: the node's live GPU figures from its agent's heartbeats (NVML,
// or simulated with --fake-gpus), as three cells: utilisation (mean, and a
// bar per GPU whose height is its utilisation), memory used / total (and
// percent), the hottest GPU. "–" where the node is not live or sent none.
function gpuFigures(n, live) {
  const read = live ? n.gpus.filter(g => g.stats) : [];
  const source = n.stats ? n.stats.gpu_source : "no figures yet";
  if (read.length === 0) {
    return [el("td", { class: "gpu-util", title: source }, "–"), el("td", { class: "gpu-mem" }, "–"),
            el("td", { class: "gpu-temp" }, "–")];
  }
  let util = 0, used = 0, total = 0, hot = 0;
  const bars = el("span", { class: "gpu-bars" });
  for (const g of read) {
    const s = g.stats;
    util += s.utilization_pct;
    used += s.memory_used_bytes;
    total += s.memory_total_bytes;
    hot = Math.max(hot, s.temperature_c);
    const bar = el("span", {
      class: "gpu-bar" + (s.temperature_c >= 85 ? " hot" : ""), "data-gpu": g.index, "data-util": s.utilization_pct,
      "data-mem-used": s.memory_used_bytes, "data-mem-total": s.memory_total_bytes, "data-temp": s.temperature_c,
      "data-power-mw": s.power_mw,
      title: "GPU " + g.index + ": " + s.utilization_pct + " % · " + (s.memory_used_bytes / GB).toFixed(1) + " / " +
        (s.memory_total_bytes / GB).toFixed(1) + " GB · " + s.temperature_c + " °C · " + Math.round(s.power_mw / 1000) + " W",
    });
    const fill = el("span", { class: "fill" });
    fill.style.height = Math.min(100, s.utilization_pct) + "%"; // CSSOM: allowed under the page's CSP
    bar.append(fill);
    bars.append(bar);
  }
  const mean = Math.round(util / read.length);
  const pct = total > 0 ? Math.round(100 * used / total) : 0;
  const u = el("td", { class: "gpu-util", "data-util": mean, title: source }, mean + " % ");
  u.append(bars);
  return [u,
          el("td", { class: "gpu-mem", "data-used": used, "data-total": total },
             (used / GB).toFixed(1) + " / " + (total / GB).toFixed(0) + " GB (" + pct + " %)"),
          el("td", { class: "gpu-temp" + (hot >= 85 ? " warn" : ""), "data-temp": hot }, hot + " °C")];
}

function renderCluster(c) {
  document.getElementById("head-info").textContent =
    "troupe-head " + c.head.version + " · RPC " + c.head.rpc + (c.head.store_failing ? " · STORE FAILING" : "");
  const tb = document.querySelector("#nodes tbody");
  tb.replaceChildren();
  let total = 0, used = 0;
  for (const n of c.nodes) {
    const tr = el("tr", { "data-node": n.name, "data-state": n.state });
    tr.append(el("td", {}, n.name + " (" + n.id + ")"));
    tr.append(el("td", { class: n.state }, n.state + (n.draining ? " draining" : "") + (n.reason ? " – " + n.reason : "")));
    const live = n.state === "ALIVE" || n.state === "SUSPECT";
    if (live) { total += n.gpus_total; used += n.gpus_total - n.gpus_free; }
    tr.append(el("td", { class: "gpus" }, live ? (n.gpus_total - n.gpus_free) + " / " + n.gpus_total : "–"));
    // CPU slots (troupe-node --cpus) are what CPU-only workers (gpu: 0) take
    tr.append(el("td", { class: "cpus" }, live ? (+(n.cpus - n.cpus_free).toFixed(3)) + " / " + n.cpus : "–"));
    const models = {};
    for (const g of n.gpus) {
      const k = g.model + " " + Math.round(g.memory_bytes / 1e9) + " GB" + (g.simulated ? " (simulated)" : "");
      models[k] = (models[k] || 0) + 1;
    }
    tr.append(el("td", {}, Object.keys(models).map(k => models[k] + "× " + k).join(", ")));
    tr.append(...gpuFigures(n, live));
    tr.append(el("td", {}, Object.keys(n.labels).map(k => k + "=" + n.labels[k]).join(" ")));
    tb.append(tr);
  }
  const j = c.jobs;
  document.getElementById("totals").textContent =
    c.nodes.length + " nodes · GPUs " + used + " used of " + total + " · jobs " + j.running + " running, " +
    j.pending + " pending, " + j.succeeded + " succeeded, " + j.failed + " failed, " + j.stopped + " stopped";
}

// healthText: the head's judgement (Job.health) in a few words.
function healthText(job) {
  const h = job.health;
  if (!h || !h.state || h.state === "NONE") return job.state === "RUNNING" ? "not judged yet" : "";
  let t = h.state;
  if (h.stragglers && h.stragglers.length) t += ", " + h.stragglers.length + " straggler" + (h.stragglers.length > 1 ? "s" : "");
  if (h.memory && h.memory.length) t += ", memory warning";
  if (h.ended) t += " (as it ended)"; // the last judgement while it ran, kept by the head
  return t;
}

function healthClass(text) {
  return text.startsWith("STALLED") ? "STALLED" : text.indexOf("straggler") >= 0 || text.indexOf("memory") >= 0 ? "warn" :
    text.startsWith("OK") ? "ok" : "muted";
}

function placement(job) {
  const byNode = {};
  for (const w of job.workers) {
    if (!w.node) continue;
    (byNode[w.node] = byNode[w.node] || []).push(w.group + "-" + w.rank + (w.gpus.length ? "[" + w.gpus.join(",") + "]" : ""));
  }
  return Object.keys(byNode).map(n => n + ": " + byNode[n].join(" ")).join("; ");
}

function renderJobs(list) {
  const tb = document.querySelector("#jobs tbody");
  tb.replaceChildren();
  for (const j of list.jobs) {
    const tr = el("tr", { class: "job" + (j.id === selected ? " sel" : ""), "data-job": j.id, "data-state": j.state });
    tr.append(el("td", {}, String(j.id)));
    tr.append(el("td", {}, j.name));
    tr.append(el("td", { class: j.state }, j.state + (j.reason ? " – " + j.reason : "")));
    const ht = healthText(j);
    tr.append(el("td", { class: healthClass(ht), "data-health": (j.health && j.health.state) || "NONE" }, ht));
    tr.append(el("td", {}, j.groups.map(g => g.name + " " +
      (g.members !== undefined && g.members !== g.workers ? g.members + "/" + g.workers : g.workers) + "×" +
      (g.gpus_per_worker ? g.gpus_per_worker + " GPU" : "CPU-only")).join(", ")));
    tr.append(el("td", {}, placement(j)));
    tr.addEventListener("click", () => select(j.id));
    tb.append(tr);
  }
  if (selected === null) {
    const run = list.jobs.find(j => j.state === "RUNNING") || list.jobs[0];
    const want = parseInt(location.hash.replace("#job=", ""), 10);
    if (want) select(want); else if (run) select(run.id);
  }
  const sel = list.jobs.find(x => x.id === selected);
  if (sel) renderHealth(sel);
}

// memText: a memory warning in words ("grows 64 KiB/step, near the GPU's capacity").
function memText(m) {
  const parts = [];
  if (m.memory_growing) parts.push("grows " + label(m.memory_slope, "bytes") + "/step");
  if (m.memory_near) parts.push("near the GPU's capacity" + (m.memory_total ? " (" + label(m.memory_total, "bytes") + ")" : ""));
  return parts.join(", ");
}

// renderMembership: an elastic group's changes (SHRUNK, GREW), latest last.
function renderMembership(job) {
  const p = document.getElementById("job-membership");
  const m = job.membership || [];
  p.hidden = m.length === 0;
  p.textContent = m.slice(-5).map(c => c.text).join(" · ");
  p.setAttribute("data-changes", String(m.length));
}

// renderHealth: the judgement above the charts, and the marks the charts
// draw from it. An ended job keeps its last judgement (health.ended): what
// was wrong when it ended stays marked.
function renderHealth(job) {
  renderMembership(job);
  health = {};
  memWarn = {};
  const h = job.health || {};
  const parts = [];
  for (const s of h.stalled || []) {
    health[s.worker] = "stalled";
    parts.push("STALLED: rank " + s.rank + " (" + s.worker + " on " + s.node + ") last step " + s.last_step +
      " at " + new Date(s.since_ms).toLocaleTimeString());
  }
  for (const s of h.stragglers || []) {
    if (!health[s.worker]) health[s.worker] = "straggler";
    parts.push("straggler: rank " + s.rank + " (" + s.worker + " on " + s.node + ") " +
      (typeof s.ratio === "number" ? s.ratio.toFixed(2) + "× its group's median step time" : ""));
  }
  for (const m of h.memory || []) {
    memWarn[m.worker] = m;
    parts.push("memory: " + m.worker + " " + memText(m));
  }
  const p = document.getElementById("job-health");
  p.textContent = parts.length ? (h.ended ? "as the job ended: " : "") + parts.join(" · ") :
    "health: " + (healthText(job) || "–");
  p.className = parts.length ? (h.stalled && h.stalled.length ? "bad" : "warn") : "muted";
  p.setAttribute("data-state", h.state || "NONE");
}

function select(id) {
  if (id !== selected) {
    selected = id;
    series = {};
    nextId = 0;
    location.hash = "job=" + id;
  }
  document.getElementById("job-detail").hidden = false;
  document.getElementById("job-title").textContent = String(id);
}

async function pollMetrics() {
  if (selected === null) return;
  const names = CHARTS.map(c => c.name).join(",");
  let more = true, rounds = 0;
  while (more && rounds++ < 10) {
    const q = nextId ? "after=" + nextId : "last=" + (MAX_POINTS * 4);
    const r = await get("/api/jobs/" + selected + "/metrics?name=" + names + "&limit=20000&" + q);
    for (const p of r.points) {
      // one line per attempt: a restarted worker starts again from step 0
      const byW = (series[p.name] = series[p.name] || {});
      const key = p.worker + "#" + (p.attempt || 0);
      const arr = (byW[key] = byW[key] || []);
      arr.push([p.step, typeof p.value === "number" ? p.value : NaN]);
      if (arr.length > MAX_POINTS) arr.splice(0, arr.length - MAX_POINTS);
    }
    nextId = r.next_id || nextId;
    more = r.more;
    let n = 0;
    for (const s of r.streams) n += s.stored;
    document.getElementById("job-points").textContent =
      n + " points stored; dropped by workers: " + r.streams.map(s => s.worker + " " + s.dropped).join(", ");
  }
  drawCharts();
}

function drawCharts() {
  const box = document.getElementById("charts");
  const any = CHARTS.some(c => Object.keys(series[c.name] || {}).length > 0);
  box.replaceChildren();
  for (const c of CHARTS) box.append(chart(c, series[c.name] || {}, any));
}

// label: a value as its unit reads (1.5 GiB, 12 ms, 41 %).
function label(v, unit) {
  const num = x => Math.abs(x) >= 1e4 ? x.toExponential(2) : String(+x.toPrecision(4));
  if (unit === "bytes") {
    const k = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (Math.abs(v) >= 1024 && i < k.length - 1) { v /= 1024; i++; }
    return (+v.toPrecision(3)) + " " + k[i];
  }
  if (unit === "ratio") return (+(v * 100).toPrecision(3)) + " %";
  if (unit === "ms") return v >= 10000 ? (+(v / 1000).toPrecision(3)) + " s" : num(v) + " ms";
  return num(v);
}

// yRange: the scale the lines are drawn on. One outlier (a 25 s step among
// 50 ms ones) would flatten every other point, so with enough points the
// scale ends at the 2nd and 98th percentiles and what lies beyond is drawn on
// the edge and named under the chart.
function yRange(values) {
  const v = values.slice().sort((a, b) => a - b);
  const lo = v[0], hi = v[v.length - 1];
  if (v.length < 20) return [lo, hi, false];
  const p = q => v[Math.min(v.length - 1, Math.floor(q * (v.length - 1)))];
  const a = p(0.02), b = p(0.98), span = (b - a) || Math.abs(b) || 1;
  const clip = (hi - b) > 2 * span || (a - lo) > 2 * span;
  return clip ? [a - 0.05 * span, b + 0.05 * span, true] : [lo, hi, false];
}

function chart(c, byWorker, anyChart) {
  const W = 420, H = 200, L = 56, B = 20;
  const fig = el("figure", { id: "chart-" + c.name });
  fig.append(el("figcaption", {}, c.title));
  const svg = document.createElementNS(SVGNS, "svg");
  svg.setAttribute("width", W);
  svg.setAttribute("height", H);
  svg.setAttribute("data-metric", c.name);
  let x0 = Infinity, x1 = -Infinity, total = 0;
  const keys = Object.keys(byWorker).sort();
  const values = [];
  for (const k of keys) for (const [x, y] of byWorker[k]) {
    if (!isFinite(y)) continue;
    x0 = Math.min(x0, x); x1 = Math.max(x1, x); values.push(y);
  }
  let [y0, y1, clipped] = values.length ? yRange(values) : [0, 1, false];
  const ymax = values.length ? Math.max(...values) : 0, ymin = values.length ? Math.min(...values) : 0;
  if (x1 === x0) x1 = x0 + 1;
  if (y1 === y0) { y1 = y0 + 1; }
  const clampY = y => Math.min(y1, Math.max(y0, y));
  const sx = x => L + (x - x0) / (x1 - x0) * (W - L - 8), sy = y => H - B - (clampY(y) - y0) / (y1 - y0) * (H - B - 8);
  const axis = document.createElementNS(SVGNS, "path");
  axis.setAttribute("d", "M" + L + " 4 V" + (H - B) + " H" + (W - 4));
  axis.setAttribute("stroke", "#999");
  axis.setAttribute("fill", "none");
  svg.append(axis);
  const legend = el("div", { class: "legend" });
  const workers = [...new Set(keys.map(k => k.split("#")[0]))];
  const attempts = w => keys.filter(k => k.split("#")[0] === w).length;
  const latest = w => Math.max(...keys.filter(k => k.split("#")[0] === w).map(k => +k.split("#")[1]));
  keys.forEach(key => {
    const [w, attempt] = key.split("#");
    const i = workers.indexOf(w), older = +attempt < latest(w);
    const pts = byWorker[key].filter(p => isFinite(p[1]));
    total += pts.length;
    const mem = c.memory && memWarn[w] && !older; // a memory warning, marked on the memory chart
    const line = document.createElementNS(SVGNS, "polyline");
    line.setAttribute("class", "series" + (health[w] ? " " + health[w] : "") + (mem ? " memory" : ""));
    line.setAttribute("data-worker", w);
    line.setAttribute("data-attempt", attempt);
    line.setAttribute("data-n", pts.length);
    line.setAttribute("fill", "none");
    line.setAttribute("stroke", COLORS[i % COLORS.length]);
    line.setAttribute("stroke-width", (health[w] || mem) && !older ? 3 : 1.5);
    if (older) line.setAttribute("stroke-opacity", "0.4"); // an earlier attempt, faded
    if (health[w] === "stalled" && !older) line.setAttribute("stroke-dasharray", "4 3");
    line.setAttribute("points", pts.map(p => sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1)).join(" "));
    svg.append(line);
    if (mem && pts.length) { // a ring on the latest point, with the warning as its tooltip
      const last = pts[pts.length - 1];
      const ring = document.createElementNS(SVGNS, "circle");
      ring.setAttribute("class", "memory-mark");
      ring.setAttribute("data-worker", w);
      ring.setAttribute("cx", sx(last[0]).toFixed(1));
      ring.setAttribute("cy", sy(last[1]).toFixed(1));
      ring.setAttribute("r", 6);
      ring.setAttribute("fill", "none");
      ring.setAttribute("stroke", "#e65100");
      ring.setAttribute("stroke-width", 2);
      const tip = document.createElementNS(SVGNS, "title");
      tip.textContent = "memory warning: " + w + " " + memText(memWarn[w]);
      ring.append(tip);
      svg.append(ring);
    }
    if (older) return; // one legend entry per worker
    const more = attempts(w) > 1 ? " (attempt " + attempt + "; earlier ones faded)" : "";
    const marks = [health[w], mem ? "memory: " + memText(memWarn[w]) : ""].filter(Boolean);
    const sp = el("span", { class: [health[w] || "", mem ? "memory" : ""].join(" ").trim() },
                  "■ " + w + more + (marks.length ? " (" + marks.join("; ") + ")" : ""));
    sp.style.color = COLORS[i % COLORS.length];
    legend.append(sp);
  });
  if (total > 0) {
    for (const [v, y] of [[y1, 12], [(y0 + y1) / 2, (H - B + 12) / 2], [y0, H - B]]) {
      const t = document.createElementNS(SVGNS, "text");
      t.setAttribute("x", 2); t.setAttribute("y", y);
      t.setAttribute("class", "ylabel");
      t.textContent = label(v, c.unit);
      svg.append(t);
    }
    if (clipped) {
      const t = document.createElementNS(SVGNS, "text");
      t.setAttribute("x", L + 4); t.setAttribute("y", H - 4);
      t.setAttribute("class", "clipped");
      t.textContent = "off the scale: " + label(ymin, c.unit) + "–" + label(ymax, c.unit);
      svg.append(t);
    }
    const t = document.createElementNS(SVGNS, "text");
    t.setAttribute("x", W - 80); t.setAttribute("y", H - 4);
    t.textContent = "step " + x0 + "–" + x1;
    svg.append(t);
  } else {
    const t = document.createElementNS(SVGNS, "text");
    t.setAttribute("x", L + 10); t.setAttribute("y", H / 2);
    // other charts have points: this job's workers do not report this one
    // (MFU and GPU memory on a CPU, val_loss without validation)
    t.textContent = anyChart ? "not reported by this job's workers" : "no points yet";
    svg.append(t);
  }
  svg.setAttribute("data-points", total);
  fig.append(svg, legend);
  return fig;
}

async function tick() {
  const st = document.getElementById("status");
  try {
    renderCluster(await get("/api/cluster"));
    renderJobs(await get("/api/jobs"));
    await pollMetrics();
    st.textContent = "updated " + new Date().toLocaleTimeString();
    st.className = "muted";
  } catch (e) {
    st.textContent = "update failed: " + e.message + " (retrying)";
    st.className = "bad";
  }
  setTimeout(tick, 2000);
}

tick();
