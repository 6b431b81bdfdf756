// Building the page from data: text only. Model output, transcripts and tool arguments are
// untrusted, so nothing here ever parses HTML (no innerHTML): every string becomes a text node.
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export const $ = (id) => document.getElementById(id);

// The toolbar every list view has, by its ids: `<view>-reload`, `<view>-more` (the next page),
// and `<view>-open` (the one whose id is typed in `<view>-open-id`).
export function listToolbar(view, { reload, more, open }) {
  $(`${view}-reload`).addEventListener("click", () => reload());
  $(`${view}-more`).addEventListener("click", () => more());
  $(`${view}-open`).addEventListener("click", () => open($(`${view}-open-id`).value.trim()));
}

export function clear(node) {
  node.replaceChildren();
  return node;
}

export function time(ms) {
  return ms ? new Date(ms).toLocaleString() : "";
}

export function status(value) {
  return el("span", { class: `status ${value}`, text: value });
}

// A table of `rows`; with none, one row that says so (`empty`) instead of a bare header.
export function table(node, columns, rows, onPick, empty = "Nothing to show.") {
  clear(node).append(el("tr", {}, columns.map(([title]) => el("th", { text: title }))));
  if (!rows.length) {
    node.append(el("tr", { class: "empty" }, el("td", { colspan: columns.length, class: "hint", text: empty })));
    return;
  }
  appendRows(node, columns, rows, onPick);
}

export function appendRows(node, columns, rows, onPick) {
  if (rows.length) node.querySelector("tr.empty")?.remove();
  for (const row of rows) {
    const cells = columns.map(([, cell]) => {
      const value = cell(row);
      return el("td", {}, value instanceof Node ? value : String(value ?? ""));
    });
    const id = row.run_id ?? row.id ?? row.key_id ?? row.tenant_id;  // for tests and in-place updates
    const tr = el("tr", { class: onPick ? "row" : "", "data-id": id }, cells);
    if (onPick) tr.addEventListener("click", () => {
      node.querySelectorAll("tr.selected").forEach((r) => r.classList.remove("selected"));
      tr.classList.add("selected");
      onPick(row);
    });
    node.append(tr);
  }
}

export function pretty(value) {
  if (typeof value === "string") {
    try { return JSON.stringify(JSON.parse(value), null, 2); } catch (_) { return value; }
  }
  return JSON.stringify(value, null, 2);
}
