// Live: the numbers of GET /metrics, one point a second from the tab's stream, as charts.
// Histograms arrive cumulative; each point is the quantile of what was observed since the last.
import { $, clear, el } from "./dom.js";

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

function chart(id, title, series) {
  const box = el("div", { class: "chart", id: `chart-${id}`, "data-points": 0, "data-values": 0 }, el("h3", { text: title }));
  $("live-charts").append(box);
  const data = [[], ...series.map(() => [])];
  const plot = new uPlot({
    width: 420, height: 170,
    scales: { x: { time: true } },
    series: [{}, ...series.map(([label], i) => ({ label, stroke: COLORS[i], width: 1.5, spanGaps: false }))],
    axes: [{}, { size: 50 }],
    legend: { live: false },
  }, data, box);
  return { box, plot, data, series };
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
  previous = m;
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
