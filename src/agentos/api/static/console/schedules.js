// Schedules: the tenant's schedules (GET /v1/schedules), each with when it fires next and how
// its last fire went (GET /v1/schedules/{id}: its newest fires). Read-only; the API changes them.
import { api, query } from "./api.js";
import { $, el, status, table, time } from "./dom.js";

const PAGE = 100;
let ctx = null;

const mono = (text) => el("span", { class: "mono", text });
const when = (s) => (s.cron ? `${s.cron} (${s.time_zone})` : `every ${s.every_s} s`);
const lastFire = (s) => s.last_fires.find((f) => f.status !== "pending") ?? null;
// The newest fire that started a run: the last fire may be one skipped behind it (overlap).
const lastRun = (s) => s.last_fires.find((f) => f.run_id)?.run_id ?? "-";
const COLUMNS = [
  ["schedule", (s) => mono(s.schedule_id)],
  ["agent", (s) => s.agent],
  ["when", (s) => mono(when(s))],
  ["state", (s) => status(s.paused ? "paused" : "active")],
  ["next fire", (s) => (s.paused ? "-" : time(s.next_fire_ms))],
  ["last fire", (s) => (lastFire(s) ? time(lastFire(s).slot_ms) : "-")],
  ["last outcome", (s) => (lastFire(s) ? status(lastFire(s).reason ?? lastFire(s).status) : "-")],
  ["last run", (s) => mono(lastRun(s))],
];

async function load() {
  try {
    const page = await api("GET", "/v1/schedules" + query({ limit: PAGE }));
    const shown = await Promise.all(page.data.map((s) => api("GET", `/v1/schedules/${s.schedule_id}`)));
    table($("schedules-table"), COLUMNS, shown);
    $("schedules-note").textContent = shown.length
      ? (page.next_cursor ? `the first ${PAGE} schedules` : `${shown.length} schedules`)
      : "No schedules: POST /v1/schedules creates one (docs/schedules.md).";
  } catch (error) {
    ctx.showError(error);
  }
}

export function init(context) {
  ctx = context;
  $("schedules-reload").addEventListener("click", load);
}

export function open() {
  load();
}
