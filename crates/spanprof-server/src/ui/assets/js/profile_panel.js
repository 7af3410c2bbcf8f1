// A selection's profile: toolbar (search, reset zoom, pprof and SVG download), the canvas flame
// graph and the top-functions table beside it. UI state (search, zoom, sort) lives in the
// URL; the panel only reports changes through `onState`.

import * as api from "./api.js";
import { el, notice, replace } from "./dom.js";
import { FlameGraph } from "./flame.js";
import * as units from "./units.js";

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
    this.downloadSvg = el("a", { class: "download download-svg", download: "flamegraph.svg",
      onclick: viaFetch("svg", "flamegraph.svg") }, "SVG");
    this.status = el("div", { class: "panel-status" });
    this.flameBox = el("div", { class: "flame-box" });
    this.topBox = el("div", { class: "top-box" });
    this.body = el("div", { class: "panel-body" }, this.flameBox, this.topBox);
    this.root = el("section", { class: "profile-panel" },
      el("div", { class: "toolbar" }, this.search, this.reset, this.zoomLabel, this.matchLabel,
        el("span", { class: "spacer" }), this.summary, this.download, this.downloadSvg),
      this.status, this.body);
    container.appendChild(this.root);
    this.flame = new FlameGraph(this.flameBox, {
      onZoom: (z) => this.onState({ zoom: z ? `${z.level}.${z.index}` : "" }, true),
    });
    this.key = null;
    this.topKey = null;
  }

  /**
   * Shows `selection` (API selection parameters) with `ui` = `{search, zoom, sort}`;
   * `empty` is the notice to show when the selection has no samples.
   */
  async show(selection, ui, empty) {
    const key = api.query(selection);
    this.selection = selection;
    this.download.href = api.url("pprof", selection);
    this.downloadSvg.href = api.url("svg", selection);
    if (key !== this.key) {
      this.key = key;
      this.topKey = null;
      this.loaded = false;
      this.controls(false);
      replace(this.summary);
      replace(this.topBox);
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
        averaged ? ` · average of ${averaged.toLocaleString("en-US")} profiles` : "");
      if (!total) {
        replace(this.status, empty || notice("empty", "No samples in this selection",
          "Widen the time range, or remove filters."));
        return;
      }
      replace(this.status);
      this.controls(true);
      this.body.hidden = false;
      this.flame.setData(data.flamegraph, this.unit);
      this.loaded = true;
    }
    if (!this.loaded) return;
    this.apply(ui);
    const sort = ui.sort === "total" ? "total" : "self";
    const topKey = `${key}&${sort}`;
    if (topKey !== this.topKey) {
      this.topKey = topKey;
      this.loadTop(selection, sort, topKey);
    }
  }

  /** Shows the search and zoom controls only while a flame graph is on screen. */
  controls(on) {
    // Downloads too: an error or an empty selection has nothing to download.
    for (const n of [this.search, this.reset, this.zoomLabel, this.matchLabel, this.download,
      this.downloadSvg]) n.hidden = !on;
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
    replace(this.zoomLabel, zoom ? el("span", {}, "Zoomed into ", el("code", {}, zoom.name)) : "");
    const found = this.flame.setSearch(ui.search || "");
    const total = this.data.flamegraph.total;
    replace(this.matchLabel, ui.search
      ? (found.frames
        ? `${found.frames} ${found.frames === 1 ? "frame matches" : "frames match"}: ${units.percent(found.value, total)} (${units.value(found.value, this.unit)})`
        : "no frame matches")
      : "");
  }

  async loadTop(selection, sort, topKey) {
    let top;
    try {
      top = await api.get("top", { ...selection, order: sort, limit: 100 });
    } catch (e) {
      if (topKey === this.topKey) replace(this.topBox, notice("error", "Top functions failed", e.message));
      return;
    }
    if (topKey !== this.topKey) return;
    const head = (col, label) => el("th", { class: "num" },
      el("button", { type: "button", class: `sort ${sort === col ? "active" : ""}`,
        onclick: () => this.onState({ sort: col }, true) }, label, sort === col ? " ▼" : ""));
    const cell = (v) => el("td", { class: "num" }, units.value(v, this.unit), " ",
      el("span", { class: "pct" }, units.percent(v, top.total)));
    const rows = top.functions.map((f) => el("tr", { title: f.name,
      onclick: () => this.onState({ search: f.name }, true) },
    el("td", { class: "fn" }, f.name), cell(f.self), cell(f.total)));
    replace(this.topBox, el("table", { class: "top" },
      el("thead", {}, el("tr", {}, el("th", {}, "Function"), head("self", "Self"), head("total", "Total"))),
      el("tbody", {}, rows)));
  }
}
