// Inbox: every run of the tenant waiting for a human, live. A question is answered with text;
// an approval shows the tool, its exact arguments and their hash, and approving sends that hash
// back (the server refuses an approval of other arguments).
// Cards keep their place: oldest run first (its created_ms), so a run that asks again after an
// answer stays where it was, and what was typed into another card is kept (cards are reused).
import { api, query } from "./api.js";
import { $, clear, el, pretty } from "./dom.js";
import { runId } from "./runs.js";

let ctx = null;
const waiting = new Map();  // run_id -> {run_id, agent, created_ms, request}
const known = new Map();  // run_id -> {agent, created_ms}: kept after an answer, for the next ask
const cards = new Map();  // operation_id -> its card, while shown

export function init(context) {
  ctx = context;
  ctx.bus.addEventListener("run", (event) => {
    const { run_id: id, type, data } = event.detail;
    if (type === "human.requested") {
      waiting.set(id, { run_id: id, ...known.get(id), request: data });
      if (!known.has(id)) learn(id);  // a run started after the list was read
    } else if (type === "human.answered" || /^run\.(completed|failed|cancelled)$/.test(type)) {
      waiting.delete(id);
      if (type !== "human.answered") known.delete(id);
    } else return;
    render();
  });
  ctx.bus.addEventListener("resync", () => load());
  load();
}

export function open() {
  load();
}

async function load() {
  try {
    const found = new Map();
    let after = null;
    do {
      const page = await api("GET", "/v1/runs" + query({ status: "waiting_human", limit: 200, after }));
      for (const r of page.data) found.set(runId(r), r);
      after = page.next_cursor;
    } while (after && found.size < 1000);
    waiting.clear();
    for (const [id, r] of found) {
      known.set(id, { agent: r.agent, created_ms: r.created_ms });
      if (r.pending) waiting.set(id, { run_id: id, agent: r.agent, created_ms: r.created_ms, request: r.pending });
    }
  } catch (error) {
    ctx.showError(error);
  }
  render();
}

// The agent and creation time of a run heard of only from the stream.
async function learn(id) {
  try {
    const run = await api("GET", `/v1/runs/${encodeURIComponent(id)}`);
    known.set(id, { agent: run.agent, created_ms: run.created_ms });
    const item = waiting.get(id);
    if (item) {
      Object.assign(item, known.get(id));
      cards.delete(item.request.operation_id);  // drawn again, with its agent
      render();
    }
  } catch (_) { /* gone already: its end arrives on the stream */ }
}

const order = (a, b) => (a.created_ms ?? Infinity) - (b.created_ms ?? Infinity) || (a.run_id < b.run_id ? -1 : 1);

function render() {
  const list = $("inbox-list");
  $("inbox-count").textContent = waiting.size ? String(waiting.size) : "";
  const items = [...waiting.values()].sort(order);
  const shown = new Set(items.map((item) => item.request.operation_id));
  for (const key of cards.keys()) if (!shown.has(key)) cards.delete(key);
  const nodes = items.map((item) => {
    const key = item.request.operation_id;
    if (!cards.has(key)) cards.set(key, card(item));
    return cards.get(key);
  });
  if (!nodes.length) nodes.push(el("p", { class: "hint", text: "Nothing waits for a human." }));
  clear(list).append(...nodes);
}

function card({ run_id: id, agent, request }) {
  const note = el("input", { placeholder: request.kind === "question" ? "answer" : "note (optional)", class: "answer" });
  const error = el("span", { class: "error" });
  const send = (body) => async () => {
    try {
      await api("POST", `/v1/runs/${encodeURIComponent(id)}/answer`, { operation_id: request.operation_id, ...body });
      // The run's next request may have arrived on the stream before this answer's reply.
      if (waiting.get(id)?.request.operation_id === request.operation_id) waiting.delete(id);
      render();
    } catch (e) {
      error.textContent = `${e.code}: ${e.message}`;
    }
  };
  const actions = el("div", { class: "actions" });
  if (request.kind === "approval") {
    actions.append(note,
      el("button", { class: "primary approve", onclick: () => send({ approve: true, args_hash: request.args_hash, answer: note.value })() }, "Approve"),
      el("button", { class: "danger deny", onclick: () => send({ approve: false, args_hash: request.args_hash, answer: note.value })() }, "Deny"));
  } else if (request.kind === "uncertain") {
    actions.append(el("button", { onclick: send({ answer: "retry" }) }, "Retry"), el("button", { onclick: send({ answer: "skip" }) }, "Skip"));
  } else {
    actions.append(note, el("button", { class: "primary", onclick: () => send({ answer: note.value })() }, "Answer"));
  }
  actions.append(error);
  return el("div", { class: "card inbox-item", "data-run": id },
    el("div", { class: "hint" }, el("span", { class: "mono", text: id }), agent ? ` · ${agent}` : "", ` · ${request.kind}`),
    request.question ? el("p", { class: "question", text: request.question }) : null,
    request.tool ? el("div", {}, "tool ", el("b", { text: request.tool })) : null,
    request.arguments !== undefined ? el("pre", { class: "arguments", text: pretty(request.arguments) }) : null,
    request.args_hash ? el("div", { class: "hint" }, "args_hash ", el("span", { class: "mono hash", text: request.args_hash })) : null,
    actions);
}
