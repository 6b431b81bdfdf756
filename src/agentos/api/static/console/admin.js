// Keys and tenants (admin keys only): the /v1/admin API. A new key is shown once, here, and
// never stored by the console.
import { api, query } from "./api.js";
import { $, clear, el, status, table, appendRows, time } from "./dom.js";

let ctx = null;

function pager(path, tableId, moreId, columns, actions) {
  let cursor = null;
  const load = async (first) => {
    try {
      const page = await api("GET", path + query({ limit: 100, after: first ? null : cursor }));
      if (first) table($(tableId), columns, page.data, actions, "None yet.");
      else appendRows($(tableId), columns, page.data, actions);
      cursor = page.next_cursor;
      $(moreId).hidden = !cursor;
    } catch (error) {
      ctx.showError(error);
    }
  };
  $(moreId).addEventListener("click", () => load(false));
  return () => load(true);
}

const split = (text) => text.split(/[\s,]+/).filter(Boolean);

export const keys = {
  reload: null,
  init(context) {
    ctx = context;
    if (!context.who.admin) return;
    const revoke = (k) => k.status === "active"
      ? el("button", { class: "danger", onclick: async (e) => { e.stopPropagation(); await api("POST", `/v1/admin/keys/${encodeURIComponent(k.key_id)}/revoke`).catch(ctx.showError); keys.reload(); } }, "Revoke")
      : "";
    keys.reload = pager("/v1/admin/keys", "keys-table", "keys-more", [
      ["key", (k) => el("span", { class: "mono", text: k.key_id })], ["tenant", (k) => k.tenant_id], ["name", (k) => k.name],
      ["scopes", (k) => k.scopes.join(" ")], ["status", (k) => status(k.status)], ["created", (k) => time(k.created_ms)],
      ["", revoke],
    ]);
    $("key-form").addEventListener("submit", async (event) => {
      event.preventDefault();
      const body = { tenant_id: $("key-tenant").value.trim(), name: $("key-name").value.trim() };
      if ($("key-scopes").value.trim()) body.scopes = split($("key-scopes").value);
      try {
        const made = await api("POST", "/v1/admin/keys", body);
        const shown = clear($("key-made"));
        shown.append("New key (shown once; copy it now): ", el("span", { class: "mono", text: made.key }));
        shown.hidden = false;
        keys.reload();
      } catch (error) {
        ctx.showError(error);
      }
    });
  },
  open() {
    $("key-made").hidden = true;
    keys.reload?.();
  },
};

// A disabled tenant's keys are refused from their next request (docs/security.md).
const toggle = (t) => async (event) => {
  event.stopPropagation();
  try {
    await api("PATCH", `/v1/admin/tenants/${encodeURIComponent(t.tenant_id)}`, { disabled: !t.disabled });
  } catch (error) {
    ctx.showError(error);
  }
  tenants.reload();
};

export const tenants = {
  reload: null,
  init(context) {
    if (!context.who.admin) return;
    tenants.reload = pager("/v1/admin/tenants", "tenants-table", "tenants-more", [
      ["tenant", (t) => el("span", { class: "mono", text: t.tenant_id })], ["name", (t) => t.name],
      ["status", (t) => status(t.disabled ? "disabled" : "active")],
      ["limits", (t) => Object.entries(t.limit_overrides ?? {}).map(([k, v]) => `${k}=${v}`).join(" ") || "defaults"],
      ["created", (t) => time(t.created_ms)],
      ["", (t) => el("button", { class: t.disabled ? "" : "danger", onclick: toggle(t) }, t.disabled ? "Enable" : "Disable")],
    ]);
    $("tenant-form").addEventListener("submit", async (event) => {
      event.preventDefault();
      try {
        await api("POST", "/v1/admin/tenants", { tenant_id: $("tenant-id").value.trim(), name: $("tenant-name").value.trim() });
        tenants.reload();
      } catch (error) {
        ctx.showError(error);
      }
    });
  },
  open() {
    tenants.reload?.();
  },
};
