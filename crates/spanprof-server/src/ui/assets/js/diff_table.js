// Compare's diff table: per function its share of each side and the change, sortable by any
// column and narrowed by a search that also highlights the diff flame graph.

import { el, replace } from "./dom.js";
import { functionsUnder, treeOf } from "./flame_tree.js";
import * as units from "./units.js";

const MAX_ROWS = 300;

/** Columns: key, heading (sides named by `sides`), how a row sorts. */
function columns(sides) {
  return [
    ["name", "Function", (f) => f.name],
    ["left", `${sides.left} %`, (f) => f.leftShare],
    ["right", `${sides.right} %`, (f) => f.rightShare],
    ["change", "Change, points", (f) => f.change],
  ];
}

export class DiffTable {
  /** `onState(patch, push)` keeps `dsort`, `dorder` and `dsearch` in the URL. */
  constructor(container, { onState }) {
    this.onState = onState;
    this.search = el("input", { type: "search", class: "diff-search", placeholder: "Search functions…",
      "aria-label": "search functions in the diff",
      oninput: () => this.onState({ dsearch: this.search.value }, false) });
    this.caption = el("span", { class: "muted diff-caption" });
    this.tableBox = el("div", { class: "table-box" });
    this.root = el("section", { class: "diff-table" }, el("div", { class: "toolbar" }, this.search, this.caption),
      this.tableBox);
    container.appendChild(this.root);
  }

  /** Reads a diff FlameGraph's frames into per-function shares (once per diff). */
  setData(flame) {
    const { root } = treeOf(flame);
    const lt = flame.leftTicks || 1;
    const rt = flame.rightTicks || 1;
    this.rows = functionsUnder(root).map((f) => {
      const leftShare = (100 * f.left) / lt;
      const rightShare = (100 * f.right) / rt;
      return { name: f.name, left: f.left, right: f.right, leftShare, rightShare, change: rightShare - leftShare };
    });
  }

  /** Draws the table with `sides` names, sorted by `sort` (`order` asc|desc), narrowed by `search`. */
  show({ sides, sort, order, search }) {
    const cols = columns(sides);
    const col = cols.find(([k]) => k === sort) || cols[3];
    const desc = order ? order !== "asc" : col[0] !== "name";
    if (this.search.value !== (search || "")) this.search.value = search || "";
    const needle = (search || "").toLowerCase();
    const rows = this.rows.filter((f) => !needle || f.name.toLowerCase().includes(needle));
    const key = col[2];
    // By size of the change either way: the largest moves first, grown or shrunk.
    const value = col[0] === "change" ? (f) => Math.abs(f.change) : key;
    rows.sort((a, b) => {
      const x = value(a);
      const y = value(b);
      const c = x < y ? -1 : x > y ? 1 : 0;
      return (desc ? -c : c) || (a.name < b.name ? -1 : 1);
    });
    const head = ([k, label]) => {
      const active = k === col[0];
      return el("th", { class: k === "name" ? "" : "num", "aria-sort": active ? (desc ? "descending" : "ascending") : "none" },
        el("button", { type: "button", class: `sort ${active ? "active" : ""}`, dataset: { col: k },
          onclick: () => this.onState({ dsort: k, dorder: active ? (desc ? "asc" : "desc") : "" }, true) },
        label, active ? (desc ? " ▼" : " ▲") : ""));
    };
    const pct = (v) => `${v >= 10 ? v.toFixed(1) : v.toFixed(2)}%`;
    const body = rows.slice(0, MAX_ROWS).map((f) => el("tr", { title: f.name, dataset: { fn: f.name } },
      el("td", { class: "fn" }, f.name), el("td", { class: "num" }, pct(f.leftShare)),
      el("td", { class: "num" }, pct(f.rightShare)),
      el("td", { class: `num change ${f.change > 0.005 ? "more" : f.change < -0.005 ? "less" : ""}` },
        // Points, not percent: 29.6% → 42.9% is +13.3 points (a 45% growth would mislead).
        `${f.change > 0 ? "+" : f.change < 0 ? "−" : ""}${pct(Math.abs(f.change)).slice(0, -1)}`)));
    replace(this.caption, `${units.grouped(rows.length)} functions`, needle ? ` matching “${search}”` : "",
      rows.length > MAX_ROWS ? ` · the first ${MAX_ROWS} shown` : "",
      ` · a share is of its side's total (${units.percent(1, 1)}); change = ${sides.right} − ${sides.left}, in points`);
    replace(this.tableBox, el("table", { class: "top diff" }, el("thead", {}, el("tr", {}, cols.map(head))),
      el("tbody", {}, body)));
  }
}
