// Live: the numbers of GET /metrics, one point a second from the tab's stream, as charts.
// Histograms arrive cumulative; each point is the quantile of what was observed since the last.
import { $, clear, el, table } from "./dom.js";

const POINTS = 120;  // two minutes
const COLORS = ["#2f6fdf", "#e07a00", "#23864a", "#9b59b6"];
const v = (name) => (m) => m.server?.values[name] ?? null;
const u = (name) => (m) => m.tenant[name];

// [id, title, [[series label, value of a metrics event (and the previous one)]...]]
const SERVER = [
  ["turns", "In-flight turns and processes", [["in-flight turns", v("in_flight_turns")], ["turn tasks", v("active_processes")]]],
  ["permits", "Provider permits", [["in use", v("provider_permits_in_use")], ["waiting", v("provider_permit_waiters")]]],
  ["rejected", "Admission rejections / s", [["rejected", rate("admission_rejected")]]],
  ["ttft", "Time to first token (ms)", [["p50", quantile("ttft_ms", 0.5)], ["p95", quantile("ttft_ms", 0.95)]]],
  ["duration", "Turn duration (ms)", [["p50", quantile("turn_duration_ms", 0.5)], ["p95", quantile("turn_duration_ms", 0.95)]]],
  ["queues", "Writer queues (rows)", [["messages", v("message_store_queue")], ["events", v("event_db_queue")], ["access log", v("access_log_queue")]]],
  ["lag", "Event-loop lag (ms)", [["p95", quantile("event_loop_lag_ms", 0.95)], ["max", quantile("event_loop_lag_ms", 1)]]],
];
const TENANT = [
  ["tenant", "This tenant now", [["turns in flight", u("turns_in_flight")], ["active runs", u("active_runs")], ["permits held", u("permits_held")], ["waiting for a permit", u("waiting_for_permit")]]],
];

function rate(name) {
  return (m, prev) => {
    if (!prev?.server || !m.server) return null;
    const seconds = (m.t_ms - prev.t_ms) / 1000;
    return seconds > 0 ? (m.server.values[name] - prev.server.values[name]) / seconds : null;
  };
}

function quantile(name, q) {
  return (m, prev) => {
    const now = m.server?.histograms[name], before = prev?.server?.histograms[name];
    if (!now || !before) return null;
    const total = now.count - before.count;
    if (total <= 0) return null;
    const rank = q * total;
    let lower = 0, below = 0;
    for (let i = 0; i < now.le.length; i++) {
      const cumulative = now.counts[i] - before.counts[i];
      if (cumulative >= rank) {
        const inside = cumulative - below;
        return inside > 0 ? lower + (now.le[i] - lower) * ((rank - below) / inside) : now.le[i];
      }
      lower = now.le[i];
      below = cumulative;
    }
    return lower;  // above the last bound
  };
}

let charts = [];
let previous = null;

export function init(ctx) {
  const defs = ctx.who.admin ? [...SERVER, ...TENANT] : TENANT;
  clear($("live-charts"));
  charts = defs.map(([id, title, series]) => chart(id, title, series));
  $("live-note").textContent = ctx.who.admin
    ? "Server-wide numbers (every tenant), one point a second, the last two minutes."
    : "Your tenant's numbers; the server-wide charts need an admin key.";
  ctx.bus.addEventListener("metrics", (event) => update(event.detail));
}

// Axis labels: short (12k, 1.5M), so they fit the axis; the y axis is as wide as its longest.
const FONT = "12px system-ui, sans-serif";
const measure = document.createElement("canvas").getContext("2d");
measure.font = FONT;

function short(value) {
  if (value === null || value === undefined) return "";
  const size = Math.abs(value);
  if (size >= 1e6) return `${+(value / 1e6).toFixed(1)}M`;
  if (size >= 1e4) return `${+(value / 1e3).toFixed(1)}k`;
  return `${+value.toFixed(size >= 100 ? 0 : size >= 1 ? 1 : 2)}`;
}

const clock = (t) => new Date(t * 1000).toLocaleTimeString([], { hour12: false, hour: "2-digit", minute: "2-digit", second: "2-digit" });

function chart(id, title, series) {
  const box = el("div", { class: "chart", id: `chart-${id}`, "data-points": 0, "data-values": 0 }, el("h3", { text: title }));
  $("live-charts").append(box);
  const data = [[], ...series.map(() => [])];
  const plot = lineChart(box, series.map(([label]) => label), data);
  return { box, plot, data, series };
}

// A chart of a time column and a series per label, in `box` (a `.chart`), as wide as the box.
export function lineChart(box, labels, data) {
  const plot = new uPlot({
    width: 400, height: 170,  // then the box's inner width (below): never wider, so nothing is clipped
    scales: {
      // The whole window, however few points: one sample is a dot at its time, not nothing.
      x: { time: true, range: (u) => timeWindow(u.data[0]) },
      y: { range: (u, min, max) => (min === null ? [0, 1] : [Math.min(0, min), max > min ? max * 1.1 : max + 1]) },
    },
    // Points are drawn where a sample stands alone (a null on each side: no line to draw).
    series: [{}, ...labels.map((label, i) => ({
      label, stroke: COLORS[i], width: 1.5, spanGaps: false,
      points: { show: (u, si, i0, i1) => lonely(u.data[si], i0, i1), size: 7, fill: COLORS[i] },
    }))],
    axes: [
      { font: FONT, space: 70, values: (u, ticks) => ticks.map(clock) },
      { font: FONT, values: (u, ticks) => ticks.map(short), size: yAxisSize },
    ],
    legend: { live: false },
  }, data, box);
  box.uplot = plot;  // for the browser tests: its axes' labels and positions
  // The box's width is known once its view is shown, and changes with the window.
  new ResizeObserver(() => {
    const width = box.clientWidth - 14;  // inside the box's padding (6 + 6) and border (1 + 1)
    if (width > 0 && width !== plot.width) plot.setSize({ width, height: 170 });
  }).observe(box);
  return plot;
}

// From the first sample to the last, and at least the last POINTS seconds (uPlot's own range
// for a single point is a day wide, and for two a second, in sub-second ticks).
function timeWindow(times) {
  const last = times.length ? times[times.length - 1] : Date.now() / 1000;
  return [Math.min(times.length ? times[0] : last, last - POINTS), last];
}

// Show points when some value in view has no neighbour to draw a line to.
function lonely(values, i0, i1) {
  for (let i = i0; i <= i1; i++) {
    if (values[i] !== null && values[i] !== undefined && (values[i - 1] ?? null) === null && (values[i + 1] ?? null) === null) return true;
  }
  return false;
}

function yAxisSize(u, values) {
  const widest = Math.max(0, ...(values ?? []).map((text) => measure.measureText(text).width));
  return Math.ceil(widest) + 18;  // the ticks (10) and a gap
}

function update(m) {
  for (const c of charts) {
    c.data[0].push(m.t_ms / 1000);
    c.series.forEach(([, value], i) => c.data[i + 1].push(value(m, previous)));
    if (c.data[0].length > POINTS) c.data.forEach((column) => column.shift());
    c.plot.setData(c.data);
    c.box.dataset.points = String(c.data[0].length);
    c.box.dataset.values = String(c.data[1].filter((x) => x !== null).length);  // points with a first series' value
  }
  tiles(m);
  if (m.server) providers(m.server.targets || {});
  previous = m;
}

// The router's targets (docs/providers.md, "Metrics"): calls, failures, fallbacks, breaker.
const BREAKER = ["closed", "open", "half-open"];
const TARGET_COLUMNS = [
  ["target", (t) => el("span", { class: "mono", text: t.name })],
  ["calls", (t) => String(t.requests ?? 0)],
  ["failures", (t) => String(t.failures ?? 0)],
  ["fell back", (t) => String(t.fallbacks ?? 0)],
  ["breaker", (t) => el("span", { class: `status ${t.breaker_state ? "failed" : "completed"}`, text: BREAKER[t.breaker_state ?? 0] })],
];

function providers(targets) {
  const rows = Object.entries(targets).map(([name, values]) => ({ name, ...values }));
  table($("live-providers"), TARGET_COLUMNS, rows, null, "No provider called yet.");
}

function tiles(m) {
  const items = [["turns in flight", m.tenant.turns_in_flight], ["active runs", m.tenant.active_runs],
    ["permits held", m.tenant.permits_held]];
  if (m.server) {
    items.push(["server in-flight turns", m.server.values.in_flight_turns],
      ["server permits in use", m.server.values.provider_permits_in_use],
      ["admission rejections", m.server.values.admission_rejected]);
  }
  clear($("live-tenant")).append(...items.map(([label, value]) => el("div", { class: "stat" }, el("b", { text: value }), label)));
}
