// The page: it asks its own back end for a browser token (the back end holds the tenant key and
// knows who is signed in), then talks to Agent OS directly over a WebSocket. A WebSocket cannot
// set an Authorization header, so the token travels as a subprotocol, beside "agentos.v1" (the
// one the server answers with): never in the URL, so never in an access log or a Referer.
"use strict";

const status = (text) => { document.getElementById("status").textContent = text; };
const output = document.getElementById("output");

async function browserToken() {
  const response = await fetch("/api/browser-token", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: "{}",
  });
  if (!response.ok) throw new Error(`the back end answered ${response.status}`);
  return response.json();
}

function streamTurn(grant, input) {
  const socket = new WebSocket(grant.ws_url, ["agentos.v1", `agentos.bearer.${grant.token}`]);
  socket.onopen = () => {
    status("streaming");
    socket.send(JSON.stringify({ type: "turn", input }));
  };
  socket.onmessage = (message) => {
    const frame = JSON.parse(message.data);
    if (frame.type === "token") output.textContent += frame.data.delta;
    if (frame.type === "error") status(`error: ${frame.error.code}`);
    if (["turn.completed", "turn.failed", "turn.cancelled"].includes(frame.type)) {
      status(frame.type.slice("turn.".length));
      socket.close();
    }
  };
  socket.onerror = () => status("error: the socket failed");
}

document.getElementById("ask").addEventListener("submit", async (event) => {
  event.preventDefault();
  output.textContent = "";
  status("asking for a token");
  try {
    const grant = await browserToken();
    document.getElementById("who").textContent = `Signed in as ${grant.user}.`;
    streamTurn(grant, document.getElementById("input").value);
  } catch (error) {
    status(`error: ${error.message}`);
  }
});
