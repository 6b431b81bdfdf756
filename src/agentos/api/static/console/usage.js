// Cost: the usage ledger's totals (GET /v1/usage) by model, target or day, with their cost. A
// tenant's key sees its tenant; an admin's sees every tenant's (grouped by tenant if asked).
// A cost is "-" where a call's target had no price: the server never guesses one.
import { api, query } from "./api.js";
import { $, el, table } from "./dom.js";

let ctx = null;
const SUMS = [
  ["calls", "calls"], ["prompt", "prompt_tokens"], ["completion", "completion_tokens"],
  ["cache read", "cache_read_tokens"], ["cache write", "cache_write_tokens"],
];

const money = (cost) => (cost === null ? "-" : cost.toFixed(4));
const number = (value) => el("span", { class: "num", text: String(value) });

async function load() {
  const groups = $("usage-group").value;
  const params = { group_by: groups, from: $("usage-from").value || null, to: $("usage-to").value || null };
  try {
    const report = await api("GET", "/v1/usage" + query(params));
    const columns = report.group_by.map((name) => [name, (t) => el("span", { class: "mono", text: t[name] || "-" })]);
    for (const [title, field] of SUMS) columns.push([title, (t) => number(t[field])]);
    columns.push(["cost", (t) => number(money(t.cost))], ["unpriced", (t) => number(t.unpriced_calls)]);
    table($("usage-table"), columns, report.data, null, "No model calls in this range.");
    const total = report.data.reduce((sum, t) => sum + (t.cost ?? 0), 0);
    const unpriced = report.data.reduce((sum, t) => sum + t.unpriced_calls, 0);
    const whose = report.tenant === null ? "every tenant" : report.tenant;
    $("usage-note").textContent = `${whose}: ${money(total)} priced` +
      (unpriced ? `, and ${unpriced} calls to targets without a price (tokens only)` : "") +
      (report.truncated ? "; truncated: narrow the range" : "");
  } catch (error) {
    ctx.showError(error);
  }
}

export function init(context) {
  ctx = context;
  if (context.who.admin) $("usage-group").append(el("option", { value: "tenant,model" }, "tenant, model"));
  $("usage-reload").addEventListener("click", load);
  $("usage-group").addEventListener("change", load);
}

export function open() {
  load();
}
