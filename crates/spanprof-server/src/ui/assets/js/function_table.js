// The functions table beside a flame graph: self and total per function of what the graph
// shows (under the zoomed frame only, when zoomed), narrowed by the same search, names whole
// (wrapped, and in a tooltip). Built from the graph's own tree: no second request.

import { el, replace } from "./dom.js";
import * as units from "./units.js";

/** Rows drawn at most: a search narrows the rest. */
const MAX_ROWS = 300;

export class FunctionTable {
  /**
   * `onState(patch, push)` changes the URL: `sort`, `search` (a row picked) or `fn` (the
   * callers and callees of a row's function).
   */
  constructor(container, { onState }) {
    this.onState = onState;
    this.root = el("div", { class: "function-table" });
    container.appendChild(this.root);
  }

  /**
   * Shows `functions` (`[{name, self, total}]`) in `unit`, shares of `whole`; `sort` is
   * "self" or "total", `search` narrows by name, `under` names the zoomed frame (or null).
   */
  show({ functions, whole, unit, sort, search, under }) {
    const needle = (search || "").toLowerCase();
    const rows = functions.filter((f) => !needle || f.name.toLowerCase().includes(needle));
    rows.sort((a, b) => b[sort] - a[sort] || (a.name < b.name ? -1 : 1));
    const head = (col, label) => el("th", { class: "num" },
      el("button", { type: "button", class: `sort ${sort === col ? "active" : ""}`,
        "aria-pressed": String(sort === col), onclick: () => this.onState({ sort: col }, true) },
      label, sort === col ? " ▼" : ""));
    const cell = (v) => el("td", { class: "num" }, units.value(v, unit), " ",
      el("span", { class: "pct" }, units.percent(v, whole)));
    const body = rows.slice(0, MAX_ROWS).map((f) => el("tr", { title: f.name, tabindex: "0",
      dataset: { fn: f.name },
      onclick: () => this.onState({ search: f.name }, true),
      onkeydown: (e) => {
        if (e.key === "Enter" && e.target === e.currentTarget) this.onState({ search: f.name }, true);
      } },
    el("td", { class: "fn" }, f.name),
    el("td", { class: "act" },
      el("button", { type: "button", class: "sandwich-btn", title: `callers and callees of ${f.name}`,
        "aria-label": `callers and callees of ${f.name}`,
        onclick: (e) => {
          e.stopPropagation();
          this.onState({ fn: f.name, zoom: "" }, true);
        } }, "⇅")),
    cell(f.self), cell(f.total)));
    const what = [`${units.grouped(rows.length)} ${rows.length === 1 ? "function" : "functions"}`];
    if (under) what.push(" under ", el("code", {}, under));
    if (needle) what.push(` matching “${search}”`);
    if (rows.length > MAX_ROWS) what.push(` · the first ${MAX_ROWS} shown`);
    replace(this.root, el("p", { class: "table-caption muted" }, what),
      el("table", { class: "top" },
        el("thead", {}, el("tr", {}, el("th", {}, "Function"), el("th", { "aria-label": "callers and callees" }),
          head("self", "Self"), head("total", "Total"))),
        el("tbody", {}, body)));
  }
}
