// Sessions: the tenant's sessions a page at a time (the server's cursor), and one session's
// transcript: its turns, each with the user's input, the answer and how the turn ended.
import { api, query } from "./api.js";
import { $, appendRows, clear, el, listToolbar, pretty, status, table, time } from "./dom.js";

const PAGE = 50;
const COLUMNS = [
  ["session", (s) => el("span", { class: "mono", text: s.id })],
  ["agent", (s) => s.agent ?? "(chat)"],
  ["created", (s) => time(s.created_at_ms)],
];
let loaded = [];
let cursor = null;
let ctx = null;

export function init(context) {
  ctx = context;
  listToolbar("sessions", { reload, more, open: openSession });
  $("sessions-filter").addEventListener("input", () => render());
  $("sessions-agent").addEventListener("change", () => reload());
}

export function open() {
  reload();
}

async function reload() {
  loaded = [];
  cursor = null;
  await more();
}

async function more() {
  try {
    const agent = $("sessions-agent").value.trim();
    const page = await api("GET", "/v1/sessions" + query({ limit: PAGE, after: cursor, agent }));
    loaded.push(...page.data);
    cursor = page.next_cursor;
    render();
  } catch (error) {
    ctx.showError(error);
  }
}

function matches(s, needle) {
  return !needle || [s.id, s.agent ?? "", JSON.stringify(s.metadata ?? {})].some((x) => x.toLowerCase().includes(needle));
}

function render() {
  const needle = $("sessions-filter").value.trim().toLowerCase();
  const empty = loaded.length ? "No loaded session matches the filter." : "No sessions yet.";
  table($("sessions-table"), COLUMNS, loaded.filter((s) => matches(s, needle)), (s) => openSession(s.id), empty);
  $("sessions-more").hidden = !cursor;
}

export async function openSession(sessionId) {
  if (!sessionId) return;
  const detail = clear($("session-detail"));
  try {
    const session = await api("GET", `/v1/sessions/${encodeURIComponent(sessionId)}`);
    const messages = await all(`/v1/sessions/${encodeURIComponent(sessionId)}/messages`);
    const events = await api("GET", `/v1/sessions/${encodeURIComponent(sessionId)}/events?limit=200`);
    detail.append(
      el("h2", {}, "Session ", el("span", { class: "mono", text: session.id })),
      el("p", { class: "hint" }, `agent: ${session.agent ?? "(chat)"} · created ${time(session.created_at_ms)}`,
        session.active_turn ? ` · active turn ${session.active_turn}` : ""),
      ...turns(messages, events.data),
    );
  } catch (error) {
    detail.append(el("p", { class: "error", text: error.status === 404 ? `No session ${sessionId}` : error.message }));
  }
}

async function all(path) {
  const rows = [];
  let after = null;
  do {
    const page = await api("GET", path + query({ limit: 200, after }));
    rows.push(...page.data);
    after = page.next_cursor;
  } while (after && rows.length < 2000);
  return rows;
}

// Each turn: its messages (text nodes only: model output is untrusted) and its terminal event.
function turns(messages, events) {
  const ends = new Map();
  for (const e of events) if (/^turn\.(completed|failed|cancelled)$/.test(e.type)) ends.set(e.turn_id, e);
  const order = [];
  const byTurn = new Map();
  for (const m of messages) {
    if (!byTurn.has(m.turn_id)) { byTurn.set(m.turn_id, []); order.push(m.turn_id); }
    byTurn.get(m.turn_id).push(m);
  }
  if (!order.length) return [el("p", { class: "hint", text: "No turns yet." })];
  return order.map((turnId) => {
    const end = ends.get(turnId);
    const outcome = end ? end.type.slice(5) : byTurn.get(turnId).at(-1).status;
    return el("div", { class: "card turn", "data-turn": turnId },
      el("div", { class: "hint" }, el("span", { class: "mono", text: turnId }), " ", status(outcome),
        end?.data?.reason ? ` ${end.data.reason}` : ""),
      byTurn.get(turnId).map((m) => el("div", { class: "msg" },
        el("span", { class: "role", text: m.role }), el("span", { class: "content", text: m.content }),
        m.usage ? el("span", { class: "hint", text: ` ${pretty(m.usage).replace(/\s+/g, " ")}` }) : null)),
    );
  });
}
