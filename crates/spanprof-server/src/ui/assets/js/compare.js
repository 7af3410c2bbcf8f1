// Compare: the diff flame graph of two selections (red = more on the right/after, green =
// less). The left side is either given (left.* parameters) or derived by `baseline`.

import * as api from "./api.js";
import { el, notice, replace } from "./dom.js";
import { FlameGraph } from "./flame.js";
import * as units from "./units.js";
import { servicePicker } from "./traces.js";

const BASELINES = [["", "left and right time ranges below"], ["fast", "slow spans vs fast spans of the span name"],
  ["span_name", "the span(s) vs every span of the name"], ["service", "the selection vs the whole service"]];

export class CompareView {
  constructor(container, nav) {
    this.nav = nav;
    this.service = el("select", { name: "service", "aria-label": "service" });
    this.form = el("form", { class: "filters" });
    this.status = el("div", {});
    this.legend = el("p", { class: "legend" });
    this.flameBox = el("div", { class: "flame-box" });
    container.append(el("h1", {}, "Compare"), this.form, this.status, this.legend, this.flameBox);
    this.flame = new FlameGraph(this.flameBox, { onZoom: (z) => this.nav.patch({ zoom: z ? `${z.level}.${z.index}` : "" }) });
    this.key = null;
  }

  async update(params) {
    const input = (name, placeholder, size = 14) => el("input", { name, value: params[name] || "", placeholder,
      "aria-label": placeholder, size });
    const fields = [input("type", "type (default CPU)"), input("span_name", "span name", 18),
      input("left.from", "before: from"), input("left.to", "before: to"),
      input("right.from", "after: from"), input("right.to", "after: to")];
    const baseline = el("select", { name: "baseline", "aria-label": "baseline" },
      BASELINES.map(([v, l]) => el("option", { value: v, selected: (params.baseline || "") === v }, l)));
    replace(this.form, el("label", {}, "Service ", this.service), el("label", {}, "Compare ", baseline), ...fields,
      el("button", { type: "submit" }, "Compare"));
    this.form.onsubmit = (e) => {
      e.preventDefault();
      const next = { service: this.service.value, baseline: baseline.value };
      for (const f of fields) next[f.name] = f.value.trim();
      this.nav.go("compare", next);
    };
    try {
      await servicePicker(this.service, params.service);
    } catch (e) {
      replace(this.status, notice("error", "The services could not be listed", e.message));
      return;
    }
    const q = {};
    for (const k of ["service", "type", "span_name", "baseline", "left.from", "left.to", "right.from", "right.to"]) {
      if (params[k]) q[k] = params[k];
    }
    if (!params["left.from"] && !params.baseline) {
      replace(this.status, notice("info", "Choose what to compare",
        "Give a time range for each side (before: now-2h … now-1h, after: now-1h), or pick a baseline " +
        "such as slow against fast spans of a span name."));
      this.flameBox.hidden = true;
      return;
    }
    const key = api.query(q);
    if (key !== this.key) {
      this.key = key;
      replace(this.status, el("p", { class: "muted" }, "Loading the diff…"));
      let d;
      try {
        d = await api.get("diff", q);
      } catch (e) {
        if (key === this.key) replace(this.status, notice("error", "The diff could not be loaded", e.message));
        this.flameBox.hidden = true;
        return;
      }
      if (key !== this.key) return;
      this.unit = d.right.unit || d.left.unit;
      replace(this.status);
      replace(this.legend, el("span", { class: "swatch more" }), " more in the after side  ",
        el("span", { class: "swatch less" }), " less  · before: ",
        units.value(d.flamegraph.leftTicks, this.unit), ", after: ", units.value(d.flamegraph.rightTicks, this.unit));
      this.flameBox.hidden = false;
      this.flame.setData(d.flamegraph, this.unit, true);
    }
    const m = /^(\d+)\.(\d+)$/.exec(params.zoom || "");
    this.flame.setZoom(m ? { level: Number(m[1]), index: Number(m[2]) } : null);
  }
}
