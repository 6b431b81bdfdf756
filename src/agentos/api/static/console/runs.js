// Runs: the tenant's runs by status (GET /v1/runs, a page at a time), and one run's waterfall
// and timeline from GET /v1/runs/{id}/events (stored, then live) with cancel and terminate, and
// a link to its trace in the operator's backend when the server has one (`trace_url`). Each
// finished step of the timeline has a Fork button (POST /v1/runs/{id}/fork at that step) that
// opens the new run; a fork's view links back to the run it was forked from.
import { api, query, stream } from "./api.js";
import { $, clear, el, listToolbar, pretty, status, table, appendRows, time } from "./dom.js";
import { waterfall } from "./waterfall.js";

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
let steps = null;  // the open run's waterfall
const FINISHED = new Set(["completed", "failed", "cancelled"]);

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
  if (["run.started", "run.forked", "run.resumed", "human.answered"].includes(type)) return "running";
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
    const pick = (r) => openRun(runId(r));
    if (first) table($("runs-table"), COLUMNS, page.data, pick, "No runs match.");
    else appendRows($("runs-table"), COLUMNS, page.data, pick);
    cursor = page.next_cursor;
    $("runs-more").hidden = !cursor;
  } catch (error) {
    ctx.showError(error);
  }
}

export async function openRun(id) {
  if (!id) return;
  follow?.abort();
  steps?.stop();
  steps = null;
  const detail = clear($("run-detail"));
  let run;
  try {
    run = await api("GET", `/v1/runs/${encodeURIComponent(id)}`);
  } catch (error) {
    detail.append(el("p", { class: "error", text: error.status === 404 ? `No run ${id}` : error.message }));
    return;
  }
  const buttons = [];
  const state = el("span", {}, status(run.status));
  // A finished run cannot be cancelled or terminated: its buttons are off.
  const setStatus = (value) => {
    clear(state).append(status(value));
    for (const button of buttons) button.disabled = FINISHED.has(value);
  };
  const act = (what) => async () => {
    try {
      const after = await api("POST", `/v1/runs/${encodeURIComponent(id)}/${what}`);
      setStatus(after.status);
    } catch (error) {
      ctx.showError(error);
    }
  };
  buttons.push(el("button", { id: "run-cancel", onclick: act("cancel") }, "Cancel"),
    el("button", { id: "run-terminate", class: "danger", onclick: act("terminate") }, "Terminate"));
  const trace = run.trace_url
    ? el("a", { id: "run-trace", href: run.trace_url, target: "_blank", rel: "noopener noreferrer" }, "Open trace")
    : null;
  const origin = run.forked_from
    ? el("button", { id: "run-origin", class: "link", onclick: () => openRun(run.forked_from.run_id) },
      `forked from ${run.forked_from.run_id} at step ${run.forked_from.at_seq}`)
    : null;
  const chart = el("div", { class: "waterfall", id: "run-waterfall" });
  const list = el("ul", { class: "timeline", id: "run-timeline" });
  detail.append(
    el("h2", {}, "Run ", el("span", { class: "mono", text: run.run_id }), " ", state),
    el("p", { class: "hint" }, `agent ${run.agent}`, run.session_id ? ` · session ${run.session_id}` : "",
      run.parent_run_id ? ` · child of ${run.parent_run_id}` : "", ` · created ${time(run.created_ms)}`,
      ...(origin ? [" · ", origin] : [])),
    el("div", { class: "toolbar" }, ...buttons, trace),
    ...(run.result ? [el("pre", { text: run.result })] : []),
    chart,
    list,
  );
  setStatus(run.status);
  steps = waterfall(chart, run, openRun);
  follow = new AbortController();
  timeline(id, list, setStatus, steps, follow.signal);
}

async function timeline(id, list, setStatus, steps, signal) {
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
        list.append(item(name, data, forkButton(id, name, data)));
        steps.add(name, data);
        const after = statusAfter(name);
        if (after) setStatus(after);
      },
    });
  } catch (error) {
    if (error.name !== "AbortError") list.append(el("li", { class: "error", text: error.message }));
  }
}

// The events that close a journal step, and that step's seq: a fork can start right after it.
const STEP_ENDS = new Set(["model.completed", "tool.result", "human.answered", "run.steered"]);

function stepSeq(id, name, data) {
  if (!STEP_ENDS.has(name)) return null;
  if (name === "run.steered") return data.seq ?? null;
  const prefix = `${id}:`;
  const op = data.operation_id ?? "";
  return op.startsWith(prefix) ? Number(op.slice(prefix.length)) : null;
}

function forkButton(id, name, data) {
  const seq = stepSeq(id, name, data);
  if (!Number.isInteger(seq)) return null;
  const fork = async () => {
    try {
      const made = await api("POST", `/v1/runs/${encodeURIComponent(id)}/fork`, { at_seq: seq });
      await openRun(made.run_id);
    } catch (error) {
      ctx.showError(error);
    }
  };
  return el("button", { class: "fork", "data-seq": String(seq), title: `A new run from step ${seq}`, onclick: fork }, "Fork");
}

function item(name, data, fork) {
  const kind = name.startsWith("tool.") ? "tool" : name.startsWith("human.") ? "human" : name.startsWith("run.") ? "end" : "";
  let body = "";
  if (name === "tool.call") body = `${data.name}(${pretty(data.arguments ?? "")})`;
  else if (name === "tool.result") body = `${data.name}: ${data.content}`;
  else if (name === "human.requested") body = data.question ?? `${data.tool} ${pretty(data.arguments ?? "")}`;
  else if (name === "human.answered") body = pretty(data);
  else if (data.result) body = data.result;
  else if (data.reason) body = data.reason;
  return el("li", { class: kind, "data-event": name }, el("span", { class: "t", text: name }),
    el("span", { class: "text", text: body }), ...(fork ? [fork] : []));
}
