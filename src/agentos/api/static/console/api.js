// Calls to this server's API: the key from sessionStorage goes into the Authorization header,
// never into a URL, a cookie or a log. `stream` reads Server-Sent Events over fetch (the
// browser's EventSource cannot send that header).
const KEY = "agentos.console.key";

export const getKey = () => sessionStorage.getItem(KEY);
export const setKey = (key) => sessionStorage.setItem(KEY, key);
export const clearKey = () => sessionStorage.removeItem(KEY);

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function headers(extra) {
  const h = { ...extra };
  const key = getKey();
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

async function failure(response) {
  let code = "http_" + response.status, message = response.statusText;
  try {
    const body = await response.json();
    code = body.error.code;
    message = body.error.message;
  } catch (_) { /* not our JSON error body */ }
  return new ApiError(response.status, code, message);
}

export async function api(method, path, body) {
  const init = { method, headers: headers(body === undefined ? {} : { "Content-Type": "application/json" }) };
  if (body !== undefined) init.body = JSON.stringify(body);
  const response = await fetch(path, init);
  if (!response.ok) throw await failure(response);
  if (response.status === 204) return null;
  return response.json();
}

export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") q.set(k, v);
  const text = q.toString();
  return text ? "?" + text : "";
}

// Calls onEvent(name, data, id) for each event until the stream ends or `signal` aborts.
export async function stream(method, path, { body, signal, onEvent, headers: extra } = {}) {
  const init = { method, signal, headers: headers({ Accept: "text/event-stream", ...extra }) };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (!response.ok) throw await failure(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      dispatch(block, onEvent);
    }
  }
}

function dispatch(block, onEvent) {
  let name = "message", id = null;
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "event") name = value;
    else if (field === "data") data.push(value);
    else if (field === "id") id = value;
  }
  if (data.length) onEvent(name, JSON.parse(data.join("\n")), id);
}
