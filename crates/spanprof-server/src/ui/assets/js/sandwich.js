// The callers and callees of one function (a "sandwich", as Pyroscope calls it): what calls
// it, bottom-up with the function on top, and what it calls, its frames merged, each a
// flame graph of its own that zooms by itself.

import { el, replace } from "./dom.js";
import { FlameGraph } from "./flame.js";
import { callersTree, calleesTree, toFlame } from "./flame_tree.js";
import * as units from "./units.js";

export class SandwichView {
  /** `onClose()` leaves the view (back to the whole flame graph). */
  constructor(container, { onClose }) {
    this.title = el("h3", { class: "sandwich-title" });
    this.close = el("button", { type: "button", class: "sandwich-close", onclick: onClose }, "✕ Whole flame graph");
    this.callersHead = el("h4", {}, "Callers");
    this.calleesHead = el("h4", {}, "Callees");
    const callersBox = el("div", { class: "sandwich-callers" });
    const calleesBox = el("div", { class: "sandwich-callees" });
    this.root = el("div", { class: "sandwich" }, el("div", { class: "sandwich-bar" }, this.title, this.close),
      this.callersHead, callersBox, this.calleesHead, calleesBox);
    container.appendChild(this.root);
    const zoomer = (get) => (z) => get().setZoom(z);
    this.callers = new FlameGraph(callersBox, { onZoom: zoomer(() => this.callers), label: "callers" });
    this.callees = new FlameGraph(calleesBox, { onZoom: zoomer(() => this.callees), label: "callees" });
    this.callers.canvas.classList.add("callers");
    this.callees.canvas.classList.add("callees");
    this.key = null;
  }

  /**
   * Shows `fn`'s callers and callees in `root` (a tree from `treeOf`, of `whole` in `unit`);
   * returns how long building and drawing took, in ms.
   */
  show(root, fn, unit, whole, search) {
    const t0 = performance.now();
    if (this.key !== root || this.fn !== fn) {
      this.key = root;
      this.fn = fn;
      const callers = toFlame(callersTree(root, fn));
      const callees = toFlame(calleesTree(root, fn));
      replace(this.title, "Callers and callees of ", el("code", {}, fn), " · ",
        units.value(callees.total, unit), ` (${units.percent(callees.total, whole)})`);
      replace(this.callersHead, "Callers ", el("span", { class: "muted" }, `(${fn} on top, what calls it below)`));
      replace(this.calleesHead, "Callees ", el("span", { class: "muted" }, `(${fn} on top, what it calls below)`));
      this.callers.setData(callers, unit);
      this.callees.setData(callees, unit);
    }
    this.callers.setSearch(search || "");
    this.callees.setSearch(search || "");
    return performance.now() - t0;
  }
}
