// Playground: pick an agent (or plain chat), open a session, and send turns. The turn's own
// stream (POST .../turns, SSE) shows tokens as they come and the run's tool calls as they happen.
import { api, stream } from "./api.js";
import { $, clear, el, pretty } from "./dom.js";

let ctx = null;
let sessionId = null;
let abort = null;

export function init(context) {
  ctx = context;
  $("play-new").addEventListener("click", () => newSession());
  $("play-agent").addEventListener("change", () => newSession());
  // Stop cancels the turn on the server (it ends with turn.cancelled); closing the stream alone
  // would leave an agent's run going.
  $("play-stop").addEventListener("click", () => {
    if (abort && sessionId) api("DELETE", `/v1/sessions/${encodeURIComponent(sessionId)}/turn`).catch(ctx.showError);
  });
  $("play-form").addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  $("play-input").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      send();
    }
  });
}

export async function open() {
  const select = $("play-agent");
  const chosen = select.value;
  try {
    const agents = await api("GET", "/v1/agents?limit=200");
    clear(select).append(el("option", { value: "", text: "(plain chat)" }),
      ...agents.data.map((a) => el("option", { value: a.name, text: a.name })));
    select.value = chosen;
  } catch (error) {
    ctx.showError(error);
  }
}

async function newSession() {
  const agent = $("play-agent").value;
  const session = await api("POST", "/v1/sessions", agent ? { agent } : {});
  sessionId = session.id;
  $("play-session").textContent = session.id;
  clear($("play-log"));
  return session.id;
}

function line(cls, text) {
  const node = el("div", { class: cls, text });
  $("play-log").append(node);
  $("play-log").scrollTop = $("play-log").scrollHeight;
  return node;
}

async function send() {
  const input = $("play-input").value.trim();
  if (!input || abort) return;
  $("play-input").value = "";
  try {
    const session = sessionId ?? (await newSession());
    line("user", input);
    let answer = null;
    abort = new AbortController();
    $("play-send").disabled = true;
    await stream("POST", `/v1/sessions/${encodeURIComponent(session)}/turns`, {
      body: { input }, signal: abort.signal,
      onEvent(name, data) {
        if (name === "token") {
          answer ??= line("assistant", "");
          answer.textContent += data.delta;  // text, never HTML
          $("play-log").scrollTop = $("play-log").scrollHeight;
        } else {
          if (name === "tool.call" || name === "tool.result" || name === "human.requested") answer = null;
          show(name, data);
        }
      },
    });
  } catch (error) {
    if (error.name !== "AbortError") line("event error", `${error.code ?? "error"}: ${error.message}`);
  } finally {
    abort = null;
    $("play-send").disabled = false;
  }
}

function show(name, data) {
  if (name === "tool.call") line("tool", `→ ${data.name}(${pretty(data.arguments ?? "")})`);
  else if (name === "tool.result") line("tool", `← ${data.name}: ${data.content}`);
  else if (name === "human.requested") {
    line("event", `waiting for a human (${data.kind}): ${data.question ?? data.tool ?? ""} — answer it in the Inbox`);
  } else if (name.startsWith("turn.")) {
    const detail = data.reason ? ` (${data.reason})` : "";
    line("event", `${name}${detail}`);
  }
}
