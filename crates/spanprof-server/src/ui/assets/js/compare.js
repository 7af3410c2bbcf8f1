// Compare: two selections as one diff flame graph (red = a larger share on the right side,
// green = a smaller one). Four ways to choose the sides, each with only the inputs it needs:
//   slow   slow spans vs fast spans of one span name (above / below a duration percentile)
//   span   one span vs every span of its name
//   spans  one span vs another
//   ranges one time range vs another
// Everything lives in the URL (mode, service, type, span_name, slow, fast, a, b, children,
// left.from, left.to, right.from, right.to, zoom), so a comparison can be shared.

import * as api from "./api.js";
import { spanNameInput, spanPicker } from "./compare_pickers.js";
import { DiffTable } from "./diff_table.js";
import { el, notice, replace } from "./dom.js";
import { FlameGraph } from "./flame.js";
import * as units from "./units.js";
import { servicePicker } from "./search_common.js";

const MODES = [
  ["slow", "slow vs fast spans of a span name"],
  ["span", "one span vs every span of its name"],
  ["spans", "one span vs another span"],
  ["ranges", "one time range vs another"],
];
const SLOW = "90";
const FAST = "50";

/** The inputs a mode shows: [param, label, placeholder, size]. */
function inputsOf(mode) {
  switch (mode) {
    case "slow":
      return [["span_name", "span name", "GET /users/{id}", 20], ["slow", "slow above p", SLOW, 3],
        ["fast", "fast below p", FAST, 3]];
    case "span":
      return [["span_name", "span name", "GET /users/{id}", 20], ["a", "span", "", 0]];
    case "spans":
      return [["span_name", "span name", "GET /users/{id}", 20], ["a", "left span", "", 0],
        ["b", "right span", "", 0]];
    default:
      return [["left.from", "left from", "now-2h", 12], ["left.to", "to", "now-1h", 12],
        ["right.from", "right from", "now-1h", 12], ["right.to", "to", "now", 12]];
  }
}

/** The /api/v1/diff query and the names of both sides, or a reason it is incomplete. */
function request(mode, p) {
  const q = { service: p.service };
  if (p.type) q.type = p.type;
  if (p.children && mode !== "ranges") q.include_child_spans = "true";
  switch (mode) {
    case "slow": {
      if (!p.span_name) return { missing: "Give the span name whose slow and fast spans to compare." };
      const slow = p.slow || SLOW;
      const fast = p.fast || FAST;
      Object.assign(q, { span_name: p.span_name, "left.below_percentile": fast, "right.above_percentile": slow });
      return { q, left: `fast spans (below p${fast})`, right: `slow spans (above p${slow})` };
    }
    case "span":
      if (!p.a) return { missing: "Pick a span name, then a span: it is compared with every span of its name." };
      Object.assign(q, { span_id: p.a, baseline: "span_name" });
      return { q, left: "every span of its name", right: `span ${p.a.slice(0, 8)}…` };
    case "spans":
      if (!p.a || !p.b) return { missing: "Pick a span name, then a span for each side." };
      Object.assign(q, { "left.span_id": p.a, "right.span_id": p.b });
      return { q, left: `span ${p.a.slice(0, 8)}…`, right: `span ${p.b.slice(0, 8)}…` };
    default:
      if (!p["left.from"] || !p["right.from"]) {
        return { missing: "Give a time range for each side, e.g. left: now-2h … now-1h, right: now-1h … now." };
      }
      for (const k of ["left.from", "left.to", "right.from", "right.to"]) if (p[k]) q[k] = p[k];
      return { q, left: "the left range", right: "the right range" };
  }
}

export class CompareView {
  constructor(container, nav) {
    this.nav = nav;
    this.service = el("select", { name: "service", "aria-label": "service" });
    this.form = el("form", { class: "filters" });
    this.status = el("div", {});
    this.legend = el("p", { class: "legend" });
    this.flameBox = el("div", { class: "flame-box" });
    this.tableBox = el("div", { class: "diff-box" });
    container.append(el("h1", {}, "Compare"), this.form, this.status, this.legend, this.flameBox, this.tableBox);
    this.flame = new FlameGraph(this.flameBox, { onZoom: (z) => this.nav.patch({ zoom: z ? `${z.level}.${z.index}` : "" }),
      label: "diff flame graph" });
    this.table = new DiffTable(this.tableBox, { onState: (p, push) => this.nav.patch(p, push) });
    // Esc resets the zoom from anywhere in the view, as in the other flame graphs.
    container.addEventListener("keydown", (e) => {
      if (e.key === "Escape" && !e.defaultPrevented && this.flame.zoom) this.nav.patch({ zoom: "" });
    });
    this.key = null;
  }

  /** Hides the graph and the table (nothing to compare). */
  blank() {
    replace(this.legend);
    this.flameBox.hidden = true;
    this.tableBox.hidden = true;
  }

  async update(params) {
    this.params = params;
    const mode = MODES.some(([m]) => m === params.mode) ? params.mode : "slow";
    this.renderForm(mode, params);
    try {
      await servicePicker(this.service, params.service, true);
    } catch (e) {
      replace(this.status, notice("error", "The services could not be listed", e.message));
      return;
    }
    const r = request(mode, { ...params, service: this.service.value });
    if (r.missing) {
      this.key = null;
      replace(this.status, notice("info", "Choose what to compare", r.missing));
      this.blank();
      return;
    }
    const key = api.query(r.q);
    if (key !== this.key) {
      this.key = key;
      this.ready = false;
      replace(this.status, el("p", { class: "muted" }, "Loading the diff…"));
      let d;
      try {
        d = await api.get("diff", r.q);
      } catch (e) {
        if (key === this.key) replace(this.status, notice("error", "The diff could not be loaded", e.message));
        this.blank();
        return;
      }
      if (key !== this.key) return;
      this.unit = d.right.unit || d.left.unit;
      const { leftTicks, rightTicks } = d.flamegraph;
      if (!leftTicks || !rightTicks) {
        // "Slow spans … have", "Span ab12… has", "The left range has".
        const side = (name) => `${cap(name)} ${/\bspans\b/.test(name) ? "have" : "has"} no`;
        const empty = !leftTicks && !rightTicks ? "Neither side has" : side(!leftTicks ? r.left : r.right);
        const hint = mode === "ranges" ? "widen the time ranges, or choose others."
          : mode === "slow" ? "choose a span name with more spans, or other percentiles."
            : "choose spans with samples (the trace view shows which have).";
        replace(this.status, notice("empty", `${empty} samples`, `A diff needs samples on both sides: ${hint}`));
        // Nothing to compare: no one-sided diff drawn beside the notice.
        this.blank();
        return;
      }
      replace(this.status);
      // One name per side everywhere: legend, tooltip and table headings.
      this.sides = { left: r.left, right: r.right };
      replace(this.legend, "left: ", el("strong", { class: "side-left" }, r.left), " ", units.value(leftTicks, this.unit),
        " · right: ", el("strong", { class: "side-right" }, r.right), " ", units.value(rightTicks, this.unit), " · ",
        // A swatch stays on the line of its words when the legend wraps (900 px).
        el("span", { class: "legend-key" }, el("span", { class: "swatch more" }), ` larger share in ${r.right}`), " ",
        el("span", { class: "legend-key" }, el("span", { class: "swatch less" }), ` smaller share in ${r.right}`));
      this.flameBox.hidden = false;
      this.tableBox.hidden = false;
      this.flame.setSides(this.sides);
      this.flame.setData(d.flamegraph, this.unit, true);
      this.table.setData(this.flame);
      this.ready = true;
    }
    // An update while the diff still loads: the load draws it when done.
    if (!this.ready) return;
    // The latest URL's state (a newer update may have come while the diff loaded).
    const ui = this.params;
    const m = /^(\d+)\.(\d+)$/.exec(ui.zoom || "");
    this.flame.setZoom(m ? { level: Number(m[1]), index: Number(m[2]) } : null);
    this.flame.setSearch(ui.dsearch || "");
    this.table.show({ sides: this.sides, sort: ui.dsort, order: ui.dorder, search: ui.dsearch });
    document.title = `Compare ${this.sides.right} with ${this.sides.left} · spanprof`;
  }

  renderForm(mode, params) {
    const modeSelect = el("select", { name: "mode", "aria-label": "what to compare" },
      MODES.map(([v, l]) => el("option", { value: v, selected: v === mode }, l)));
    const service = params.service || this.service.value;
    // Span names offered as typed; spans picked from a list of that name's, costliest first.
    const inputs = inputsOf(mode).map(([name, label, placeholder, size]) => [label,
      name === "span_name" ? spanNameInput(service, params[name] || "", placeholder, size)
        : name === "a" || name === "b" ? spanPicker(name, label, service, params.span_name || "", params[name] || "",
          () => this.nav.go("compare", collect()))
          : el("input", { name, value: params[name] || "", placeholder, "aria-label": label, size })]);
    const fields = inputs.map(([, input]) => input);
    // A new span name lists its spans in the pickers.
    const named = fields.find((f) => f.name === "span_name");
    if (named && mode !== "slow") named.addEventListener("change", () => this.nav.go("compare", collect()));
    const type = el("input", { name: "type", value: params.type || "", placeholder: "default: CPU",
      "aria-label": "profile type", size: 12 });
    const children = mode === "ranges" ? null
      : el("input", { type: "checkbox", name: "children", checked: params.children === "1" });
    const collect = () => {
      const next = { mode: modeSelect.value, service: this.service.value, type: type.value.trim() };
      // Inputs shared by the old and the new mode are kept when the mode changes.
      for (const f of fields) next[f.name] = f.value.trim();
      if (children?.checked) next.children = "1";
      return next;
    };
    modeSelect.onchange = () => this.nav.go("compare", collect());
    replace(this.form, el("label", {}, "Service ", this.service), el("label", {}, "Compare ", modeSelect),
      ...inputs.map(([label, input]) => el("label", {}, `${label} `, input)), el("label", {}, "type ", type), children && el("label", { class: "check" }, children, " include child spans"),
      el("button", { type: "submit" }, "Compare"));
    this.form.onsubmit = (e) => {
      e.preventDefault();
      this.nav.go("compare", collect());
    };
  }
}

function cap(s) {
  return s.charAt(0).toUpperCase() + s.slice(1);
}
