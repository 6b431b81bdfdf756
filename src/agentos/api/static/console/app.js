// The console's shell: sign in, the views, and the one event stream of this tab.
import { api, clearKey, getKey, setKey, stream } from "./api.js";
import { $ } from "./dom.js";
import * as live from "./live.js";
import * as sessions from "./sessions.js";
import * as runs from "./runs.js";
import * as inbox from "./inbox.js";
import * as playground from "./playground.js";
import * as usage from "./usage.js";
import * as schedules from "./schedules.js";
import * as admin from "./admin.js";

// Every view gets this: who signed in, and `bus`, where the stream's events arrive
// ("metrics", "run", "resync") as DOM events whose `detail` is the data.
const bus = new EventTarget();
const views = { live, sessions, runs, inbox, playground, usage, schedules, keys: admin.keys, tenants: admin.tenants };
let current = null;
let streamAbort = null;

export function showError(error) {
  const bar = $("error-bar");
  bar.textContent = error ? (error.code ? `${error.code}: ${error.message}` : String(error.message || error)) : "";
  bar.hidden = !error;
}

function show(name) {
  if (!views[name] || (!window.agentosWho.admin && (name === "keys" || name === "tenants"))) name = "live";
  showError(null);
  for (const button of document.querySelectorAll("#nav button")) {
    button.classList.toggle("active", button.dataset.view === name);
  }
  for (const section of document.querySelectorAll(".view")) section.hidden = section.id !== `view-${name}`;
  if (current !== name) {
    current = name;
    history.replaceState(null, "", "#" + name);  // the view only: never the key
    views[name].open?.();
  }
}

async function signIn(key) {
  setKey(key);
  let who;
  try {
    who = await api("GET", "/v1/console/me");
  } catch (error) {
    clearKey();
    throw error;
  }
  window.agentosWho = who;
  document.body.classList.toggle("admin", who.admin);
  $("who").textContent = `${who.tenant_id} · ${who.key_id ?? "open"}${who.admin ? " · admin" : ""}`;
  $("signin").hidden = true;
  $("shell").hidden = false;
  const context = { who, bus, showError };
  for (const view of Object.values(views)) view.init?.(context);
  document.addEventListener("visibilitychange", onVisibility);
  if (!document.hidden) follow();
  show(location.hash.slice(1) || "live");
}

// One stream per tab, reopened when it ends (the server ends it every server.console_stream_s).
async function follow() {
  streamAbort = new AbortController();
  const { signal } = streamAbort;
  let delay = 500;
  while (!signal.aborted) {
    try {
      await stream("GET", "/v1/console/stream", {
        signal,
        onEvent(name, data) {
          delay = 500;
          setState(true);
          bus.dispatchEvent(new CustomEvent(name, { detail: data }));
        },
      });
    } catch (error) {
      if (signal.aborted) return;
      if (error.status === 401) return signOut("The key was refused: sign in again.");
    }
    setState(false);
    await new Promise((resolve) => setTimeout(resolve, delay));
    delay = Math.min(delay * 2, 10000);
  }
}

// A browser has six connections per origin for all its tabs, and each console tab's stream holds
// one: a hidden tab lets its go, and reopens it (reloading what it shows) when it is shown again.
function onVisibility() {
  if (document.hidden) {
    streamAbort?.abort();
    streamAbort = null;
    setState(false);
  } else if (!streamAbort) {
    follow();
    bus.dispatchEvent(new CustomEvent("resync", { detail: {} }));
  }
}

function setState(up) {
  const state = $("stream-state");
  state.textContent = up ? "● live" : "○ reconnecting";
  state.classList.toggle("live", up);
}

function signOut(message) {
  clearKey();
  streamAbort?.abort();
  if (message) sessionStorage.setItem("agentos.console.message", message);
  location.hash = "";
  location.reload();
}

function start() {
  $("signin-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const key = $("signin-key").value.trim();
    $("signin-key").value = "";
    try {
      await signIn(key);
    } catch (error) {
      $("signin-error").textContent = error.status === 401 ? "That key was refused." : `${error.message}`;
    }
  });
  $("signout").addEventListener("click", () => signOut());
  for (const button of document.querySelectorAll("#nav button")) {
    button.addEventListener("click", () => show(button.dataset.view));
  }
  const message = sessionStorage.getItem("agentos.console.message");
  sessionStorage.removeItem("agentos.console.message");
  $("signin-error").textContent = message || "";
  const key = getKey();
  // No key: an open loopback server (no keys configured) still answers /v1/console/me.
  signIn(key || "").catch(() => {
    $("shell").hidden = true;
    $("signin").hidden = false;
    $("signin-key").focus();
  });
}

start();
