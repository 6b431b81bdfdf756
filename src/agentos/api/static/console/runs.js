// Runs: the tenant's runs by status (GET /v1/runs, a page at a time), and one run's timeline
// from GET /v1/runs/{id}/events (stored, then live) with cancel and terminate.
import { api, query, stream } from "./api.js";
import { $, clear, el, listToolbar, pretty, status, table, appendRows, time } from "./dom.js";

const PAGE = 50;
const COLUMNS = [
  ["run", (r) => el("span", { class: "mono", text: runId(r) })],
  ["agent", (r) => r.agent],
  ["status", (r) => status(r.status)],
  ["updated", (r) => time(r.updated_ms ?? r.created_ms)],
];
let ctx = null;
let cursor = null;
let follow = null;  // the open timeline's stream

export const runId = (r) => r.run_id;

export function init(context) {
  ctx = context;
  listToolbar("runs", { reload, more, open: openRun });
  $("runs-status").addEventListener("change", () => reload());
  $("runs-agent").addEventListener("change", () => reload());
  // A listed run changes status in place; new runs wait for Reload (the page stays where it is).
  ctx.bus.addEventListener("run", (event) => {
    const { run_id: id, type } = event.detail;
    const cell = document.querySelector(`#runs-table tr[data-id="${CSS.escape(id)}"] .status`);
    const after = statusAfter(type);
    if (cell && after) cell.replaceWith(status(after));
  });
}

function statusAfter(type) {
  if (type === "human.requested") return "waiting_human";
  if (type === "run.started" || type === "run.resumed" || type === "human.answered") return "running";
  if (/^run\.(completed|failed|cancelled)$/.test(type)) return type.slice(4);
  return null;
}

export function open() {
  reload();
}

async function reload() {
  cursor = null;
  clear($("runs-table"));
  await more(true);
}

async function more(first = false) {
  const params = { status: $("runs-status").value, agent: $("runs-agent").value.trim(), limit: PAGE, after: cursor };
  try {
    const page = await api("GET", "/v1/runs" + query(params));
    (first ? table : appendRows)($("runs-table"), COLUMNS, page.data, (r) => openRun(runId(r)));
    cursor = page.next_cursor;
    $("runs-more").hidden = !cursor;
  } catch (error) {
    ctx.showError(error);
  }
}

export async function openRun(id) {
  if (!id) return;
  follow?.abort();
  const detail = clear($("run-detail"));
  let run;
  try {
    run = await api("GET", `/v1/runs/${encodeURIComponent(id)}`);
  } catch (error) {
    detail.append(el("p", { class: "error", text: error.status === 404 ? `No run ${id}` : error.message }));
    return;
  }
  const state = el("span", {}, status(run.status));
  const act = (what) => async () => {
    try {
      const after = await api("POST", `/v1/runs/${encodeURIComponent(id)}/${what}`);
      clear(state).append(status(after.status));
    } catch (error) {
      ctx.showError(error);
    }
  };
  const list = el("ul", { class: "timeline", id: "run-timeline" });
  detail.append(
    el("h2", {}, "Run ", el("span", { class: "mono", text: run.run_id }), " ", state),
    el("p", { class: "hint" }, `agent ${run.agent}`, run.session_id ? ` · session ${run.session_id}` : "",
      ` · created ${time(run.created_ms)}`),
    el("div", { class: "toolbar" },
      el("button", { id: "run-cancel", onclick: act("cancel") }, "Cancel"),
      el("button", { id: "run-terminate", class: "danger", onclick: act("terminate") }, "Terminate")),
    run.result ? el("pre", { text: run.result }) : null,
    list,
  );
  follow = new AbortController();
  timeline(id, list, state, follow.signal);
}

async function timeline(id, list, state, signal) {
  let tokens = null;
  try {
    await stream("GET", `/v1/runs/${encodeURIComponent(id)}/events`, {
      signal,
      onEvent(name, data) {
        if (name === "token") {
          tokens ??= list.appendChild(el("li", {}, el("span", { class: "t", text: "model" }), el("span", { class: "text" })));
          tokens.lastChild.textContent += data.delta;
          return;
        }
        tokens = null;
        list.append(item(name, data));
        if (/^run\.(completed|failed|cancelled)$/.test(name)) clear(state).append(status(name.slice(4)));
        else if (name === "human.requested") clear(state).append(status("waiting_human"));
      },
    });
  } catch (error) {
    if (error.name !== "AbortError") list.append(el("li", { class: "error", text: error.message }));
  }
}

function item(name, data) {
  const kind = name.startsWith("tool.") ? "tool" : name.startsWith("human.") ? "human" : name.startsWith("run.") ? "end" : "";
  let body = "";
  if (name === "tool.call") body = `${data.name}(${pretty(data.arguments ?? "")})`;
  else if (name === "tool.result") body = `${data.name}: ${data.content}`;
  else if (name === "human.requested") body = data.question ?? `${data.tool} ${pretty(data.arguments ?? "")}`;
  else if (name === "human.answered") body = pretty(data);
  else if (data.result) body = data.result;
  else if (data.reason) body = data.reason;
  return el("li", { class: kind, "data-event": name }, el("span", { class: "t", text: name }), el("span", { class: "text", text: body }));
}
