// A run's waterfall: one bar per step (model calls, tool calls, sandbox commands, human waits,
// child runs) from start to end, built from the run's events alone (GET /v1/runs/{id}/events:
// every journaled event carries `at_ms`), so no tracing backend is needed. A step still going
// (a call under way, a human not yet answered) is open-ended: its bar runs to now.
import { clear, el } from "./dom.js";

const ENDS = { "run.completed": "completed", "run.failed": "failed", "run.cancelled": "cancelled" };

export function duration(ms) {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
  const s = Math.round(ms / 1000);
  return s < 3600 ? `${Math.floor(s / 60)} m ${s % 60} s` : `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} m`;
}

// `node`: where to draw; `run`: the run's view (created_ms); `onOpenRun(id)`: a child's bar opens it.
export function waterfall(node, run, onOpenRun) {
  const steps = [];  // {key, kind, label, start, end (null: open), status, child?}
  const byKey = new Map();
  let ended = null;  // the run's end: {at, status}
  let frame = 0;
  const start = run.created_ms;

  const step = (key, fields) => {
    let s = byKey.get(key);
    if (!s) {
      s = { key, end: null, status: "running", ...fields };
      byKey.set(key, s);
      steps.push(s);
    }
    return s;
  };
  const close = (s, at, status) => {
    if (s && s.end === null) {
      s.end = Math.max(at, s.start);
      s.status = status;
    }
  };

  function add(name, data) {
    const at = data.at_ms;
    if (at === undefined) return;  // tokens: live only, no time
    const op = data.operation_id;
    if (name === "model.started") {
      const s = step(`model ${op} ${data.attempt ?? 1}`, { kind: "model", label: "model call", start: at });
      if ((data.attempt ?? 1) > 1) s.label = `model call (attempt ${data.attempt})`;
    } else if (name === "model.completed") {
      const open = steps.findLast((s) => s.kind === "model" && s.key.startsWith(`model ${op} `));
      const s = open ?? step(`model ${op} 1`, { kind: "model", label: "model call", start: at - (data.duration_ms ?? 0) });
      const calls = (data.tool_calls ?? []).map((c) => c.name);
      const tokens = data.usage ? ` · ${data.usage.prompt_tokens}+${data.usage.completion_tokens} tokens` : "";
      s.label += calls.length ? ` → ${calls.join(", ")}${tokens}` : `${tokens}`;
      close(s, at, "completed");
    } else if (name === "tool.call") {
      const sandbox = data.name === "run_command";
      step(`tool ${op}`, { kind: sandbox ? "sandbox" : "tool", label: toolLabel(data), start: at });
    } else if (name === "tool.result") {
      const s = byKey.get(`tool ${op}`) ?? step(`tool ${op}`, { kind: "tool", label: data.name, start: at });
      const exit = s.kind === "sandbox" ? exitOf(data.content) : null;
      if (exit) s.label += ` · ${exit}`;
      close(s, at, /^error:/.test(data.content ?? "") || (exit && exit !== "exit 0") ? "failed" : "completed");
      close(byKey.get(`child ${op}`), at, "completed");
    } else if (name === "tool.uncertain") {
      close(byKey.get(`tool ${op}`), at, "uncertain");
    } else if (name === "run.child_started") {
      // A child's id is `<parent run id>.<seq>` (docs/agents.md): the parent's `delegate` step.
      const seq = data.child_run_id.slice(data.child_run_id.lastIndexOf(".") + 1);
      const s = step(`child ${run.run_id}:${seq}`, { kind: "child", label: `child run ${data.child_run_id} (${data.agent})`, start: at });
      s.child = data.child_run_id;
    } else if (name === "human.requested") {
      const what = data.kind === "question" ? `question: ${data.question ?? ""}` : `${data.kind} ${data.tool ?? ""}`;
      step(`human ${op}`, { kind: "human", label: `human ${what}`, start: at, status: "waiting" });
    } else if (name === "human.answered") {
      close(byKey.get(`human ${op}`), at, "completed");
    } else if (name === "run.resumed") {
      // After a restart, a call that was under way died with its node (it is made again).
      for (const s of steps) if (s.kind !== "human" && s.kind !== "child") close(s, at, "interrupted");
    } else if (ENDS[name]) {
      ended = { at, status: ENDS[name] };
      clearInterval(timer);
      for (const s of steps) close(s, at, ENDS[name] === "completed" ? "completed" : ENDS[name]);
    } else {
      return;
    }
    schedule();
  }

  function schedule() {
    if (!frame) frame = requestAnimationFrame(() => { frame = 0; draw(); });
  }

  function draw() {
    const now = Math.max(Date.now(), ...steps.map((s) => s.end ?? s.start));
    const end = ended ? ended.at : now;
    const span = Math.max(end - start, 1);
    const pct = (ms) => `${(100 * Math.min(Math.max(ms - start, 0), span)) / span}%`;
    const rows = [row({ kind: "run", label: `run (${run.agent})`, start, end: ended?.at ?? null, status: ended?.status ?? "running" })];
    for (const s of steps) rows.push(row(s));
    clear(node).append(
      el("div", { class: "wf-axis" }, el("span", {}, ""),
        el("span", { class: "wf-scale" }, ...[0, 0.25, 0.5, 0.75, 1].map((f) => {
          const tick = el("span", { class: "wf-tick", text: duration(f * span) });
          tick.style.left = `${100 * f}%`;
          return tick;
        }))),
      ...rows);

    function row(s) {
      const stop = s.end ?? end;
      const bar = el("span", { class: `wf-bar ${s.kind} ${s.status}${s.end === null ? " open" : ""}` });
      bar.style.left = pct(s.start);
      bar.style.width = `calc(${pct(stop)} - ${pct(s.start)})`;
      const took = s.end === null ? `${s.status}…` : duration(s.end - s.start);
      const label = el("span", { class: "wf-label", title: s.label, text: s.label });
      const line = el("div", {
        class: `wf-row ${s.kind} ${s.status}`,
        "data-kind": s.kind,
        "data-status": s.status,
        "data-open": String(s.end === null),
        "data-start-ms": s.start,
        "data-end-ms": s.end ?? "",
      }, label, el("span", { class: "wf-track" }, bar), el("span", { class: "wf-took", text: took }));
      if (s.child) {
        line.classList.add("link");
        line.dataset.child = s.child;
        line.addEventListener("click", () => onOpenRun(s.child));
      }
      return line;
    }
  }

  // Open steps grow with the clock until the run ends (or the view is closed: `stop`).
  const timer = setInterval(() => { if (!ended) schedule(); }, 1000);
  schedule();
  return { add, stop: () => clearInterval(timer) };
}

function toolLabel(data) {
  if (data.name === "run_command") {
    try {
      const command = JSON.parse(data.arguments).command;
      return `sandbox: ${Array.isArray(command) ? command.join(" ") : command}`;
    } catch (_) { /* the arguments as sent */ }
  }
  return `${data.name}`;
}

// A sandbox command's result (`{"exit_code", "timed_out", ...}`): "exit N", "timed out", or null.
function exitOf(content) {
  try {
    const result = JSON.parse(content);
    return result.timed_out ? "timed out" : typeof result.exit_code === "number" ? `exit ${result.exit_code}` : null;
  } catch (_) {
    return null;
  }
}
