// A selection's profile: toolbar (search, reset zoom, views, pprof and SVG download), the
// canvas flame graph (top-down, bottom-up, or a function's callers and callees) and the
// functions table beside it. UI state (search, zoom, sort, show, inverted, fn) lives in the
// URL; the panel only reports changes through `onState`.

import * as api from "./api.js";
import { el, notice, remoteNote, replace } from "./dom.js";
import { FlameGraph } from "./flame.js";
import { flameSvg, saveSvg } from "./flame_svg.js";
import { functionsUnder, invertedTree, toFlame, treeOf } from "./flame_tree.js";
import { FunctionTable } from "./function_table.js";
import { SandwichView } from "./sandwich.js";
import * as units from "./units.js";

/** The view switch: `show` values and their labels ("" is both). */
const SHOWS = [["graph", "Graph"], ["", "Both"], ["table", "Table"]];

/** Frames fetched at most: enough for real profiles, the canvas draws them all. */
const MAX_NODES = 50000;

export class ProfilePanel {
  /** `onState(patch, push)` changes `search`, `zoom` or `sort` in the URL; `onData(answer)`,
   * when given, sees each flame graph answer (what a span's focus holds). */
  constructor(container, { onState, onData }) {
    this.onState = onState;
    this.onData = onData;
    this.search = el("input", { type: "search", class: "flame-search", placeholder: "Search functions…",
      "aria-label": "search functions", oninput: () => this.onState({ search: this.search.value }, false) });
    this.reset = el("button", { type: "button", class: "reset-zoom", onclick: () => this.onState({ zoom: "" }, true) },
      "Reset zoom");
    this.zoomLabel = el("span", { class: "zoom-label" });
    this.matchLabel = el("span", { class: "match-label" });
    this.summary = el("span", { class: "summary" });
    // With a token, a link cannot send it: the file is fetched with it instead.
    const viaFetch = (endpoint, filename) => (e) => {
      if (!api.token()) return;
      e.preventDefault();
      api.download(endpoint, this.selection, filename).catch((err) =>
        replace(this.status, notice("error", err.message)));
    };
    this.download = el("a", { class: "download", download: "profile.pb.gz",
      onclick: viaFetch("pprof", "profile.pb.gz") }, "Download pprof");
    // The image of what is on screen (view, zoom, search), drawn from the canvas's frames.
    this.downloadSvg = el("button", { type: "button", class: "download-svg",
      onclick: () => saveSvg(this.svgText(), "flamegraph.svg") }, "Export SVG");
    this.showSwitch = el("span", { class: "view-switch", role: "group", "aria-label": "show" },
      SHOWS.map(([v, label]) => el("button", { type: "button", dataset: { show: v },
        onclick: () => this.onState({ show: v }, true) }, label)));
    this.invertToggle = el("button", { type: "button", class: "inverted-toggle",
      onclick: () => this.onState({ inverted: this.inverted ? "" : "1", zoom: "", fn: "" }, true) }, "Bottom-up");
    this.sandwichOpen = el("button", { type: "button", class: "sandwich-open",
      onclick: () => this.flame.zoom && this.onState({ fn: this.flame.zoom.name, zoom: "" }, true) },
    "Callers & callees");
    this.status = el("div", { class: "panel-status" });
    this.flameBox = el("div", { class: "flame-box" });
    this.sandwichBox = el("div", { class: "flame-box sandwich-box" });
    this.topBox = el("div", { class: "top-box" });
    this.body = el("div", { class: "panel-body" }, this.flameBox, this.sandwichBox, this.topBox);
    this.root = el("section", { class: "profile-panel" },
      el("div", { class: "toolbar" }, this.search, this.reset, this.zoomLabel, this.matchLabel,
        el("span", { class: "spacer" }), this.summary),
      el("div", { class: "toolbar" }, this.showSwitch, this.invertToggle, this.sandwichOpen,
        el("span", { class: "spacer" }), this.download, this.downloadSvg),
      this.status, this.body);
    container.appendChild(this.root);
    this.flame = new FlameGraph(this.flameBox, {
      onZoom: (z) => this.onState({ zoom: z ? `${z.level}.${z.index}` : "" }, true),
    });
    this.sandwich = new SandwichView(this.sandwichBox, { onClose: () => this.onState({ fn: "" }, true) });
    this.table = new FunctionTable(this.topBox, { onState: (p, push) => this.onState(p, push) });
    // Esc anywhere in the panel (not only on the canvas) resets the zoom.
    this.root.addEventListener("keydown", (e) => {
      if (e.key !== "Escape" || e.defaultPrevented) return;
      if (this.flame.zoom) this.onState({ zoom: "" }, true);
      else if (this.fn) this.onState({ fn: "" }, true);
    });
    this.root.profilePanel = this; // lets the browser test read the export
    this.key = null;
  }

  /** The SVG export of the graph on screen (the callees' in a sandwich). */
  svgText() {
    const fg = this.fn ? this.sandwich.callees : this.flame;
    const what = this.fn ? `callees of ${this.fn}` : this.inverted ? "bottom-up" : "flame graph";
    return flameSvg(fg, `${what} · ${units.headline(this.data.flamegraph.total, this.data.summary.profile_type, this.unit)}`);
  }

  /**
   * Shows `selection` (API selection parameters) with `ui` = `{search, zoom, sort}`;
   * `empty` is the notice to show when the selection has no samples.
   */
  async show(selection, ui, empty) {
    const key = api.query(selection);
    this.selection = selection;
    this.download.href = api.url("pprof", selection);
    if (key !== this.key) {
      this.key = key;
      this.loaded = false;
      this.controls(false);
      replace(this.summary);
      replace(this.table.root);
      replace(this.status, el("p", { class: "muted" }, "Loading the flame graph…"));
      this.body.hidden = true;
      let data;
      try {
        data = await api.get("flamegraph", { ...selection, max_nodes: MAX_NODES });
      } catch (e) {
        if (key !== this.key) return;
        replace(this.status, notice("error", "The flame graph could not be loaded", e.message));
        return;
      }
      if (key !== this.key) return; // a newer selection came meanwhile
      this.data = data;
      if (this.onData) this.onData(data);
      this.unit = data.summary.unit;
      const total = data.flamegraph.total;
      const averaged = data.summary.averaged_over;
      // A snapshot type (heap in use, goroutines) over several profiles is their average.
      replace(this.summary, units.headline(total, data.summary.profile_type, this.unit),
        averaged ? ` · average of ${units.grouped(averaged)} profiles` : "",
        data.summary.remote ? [" · ", remoteNote(data.summary.remote, "span")] : null);
      if (!total) {
        replace(this.status, empty || notice("empty", "No samples in this selection",
          "Widen the time range, or remove filters."));
        return;
      }
      replace(this.status);
      this.controls(true);
      this.body.hidden = false;
      this.flame.setData(data.flamegraph, this.unit);
      // The top-down tree, for the table, the bottom-up view and the sandwich.
      this.tree = treeOf(this.flame);
      this.bottomUp = null;
      this.inverted = false;
      this.loaded = true;
    }
    if (!this.loaded) return;
    this.layout(ui);
    this.apply(ui);
  }

  /** Which graph and table are shown: `show`, `inverted` and `fn` of the URL. */
  layout(ui) {
    const inverted = ui.inverted === "1";
    if (inverted !== this.inverted) {
      this.inverted = inverted;
      if (inverted && !this.bottomUp) this.bottomUp = toFlame(invertedTree(this.tree.root));
      this.flame.setData(inverted ? this.bottomUp : this.data.flamegraph, this.unit);
    }
    const show = ui.show === "graph" || ui.show === "table" ? ui.show : "";
    for (const b of this.showSwitch.children) b.setAttribute("aria-pressed", String(b.dataset.show === show));
    this.invertToggle.setAttribute("aria-pressed", String(inverted));
    this.fn = ui.fn || "";
    this.flameBox.hidden = show === "table" || !!this.fn;
    this.sandwichBox.hidden = show === "table" || !this.fn;
    this.topBox.hidden = show === "graph";
    this.body.classList.toggle("table-only", show === "table");
    this.body.classList.toggle("graph-only", show === "graph");
    if (this.fn && show !== "table") {
      this.sandwichMs = this.sandwich.show(this.tree.root, this.fn, this.unit, this.data.flamegraph.total, ui.search);
    }
  }

  /** Shows the search and zoom controls only while a flame graph is on screen. */
  controls(on) {
    // Downloads too: an error or an empty selection has nothing to download.
    for (const n of [this.search, this.reset, this.zoomLabel, this.matchLabel, this.download,
      this.downloadSvg, this.showSwitch, this.invertToggle, this.sandwichOpen]) n.hidden = !on;
    if (!on) {
      replace(this.zoomLabel);
      replace(this.matchLabel);
    }
  }

  apply(ui) {
    if (this.search.value !== (ui.search || "")) this.search.value = ui.search || "";
    let zoom = null;
    const m = /^(\d+)\.(\d+)$/.exec(ui.zoom || "");
    if (m) zoom = this.flame.setZoom({ level: Number(m[1]), index: Number(m[2]) });
    else this.flame.setZoom(null);
    this.reset.disabled = !zoom;
    this.sandwichOpen.disabled = !zoom || this.inverted;
    replace(this.zoomLabel, zoom ? el("span", {}, "Zoomed into ", el("code", {}, zoom.name)) : "");
    const found = this.flame.setSearch(ui.search || "");
    const total = this.data.flamegraph.total;
    replace(this.matchLabel, ui.search
      ? (found.frames
        ? `${found.frames} ${found.frames === 1 ? "frame matches" : "frames match"}: ${units.percent(found.value, total)} (${units.value(found.value, this.unit)})`
        : "no frame matches")
      : "");
    // The table follows the zoom in the top-down graph (a bottom-up frame is not a subtree).
    const under = zoom && !this.inverted ? this.tree.byLevel[zoom.level][zoom.index] : null;
    this.table.show({ functions: functionsUnder(under || this.tree.root), whole: total, unit: this.unit,
      sort: ui.sort === "total" ? "total" : "self", search: ui.search, under: under ? under.name : null });
  }
}
