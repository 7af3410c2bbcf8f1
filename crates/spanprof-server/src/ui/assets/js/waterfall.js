// A trace's waterfall for traces of thousands of spans: subtrees collapse and expand (mouse
// and keyboard), a time ruler, names readable at any depth (the indent stops at MAX_INDENT (8)
// levels, a depth mark says the rest), and only the rows in view are in the DOM.

import { el, replace } from "./dom.js";
import * as units from "./units.js";

/** Height of one row, px (the CSS `.wf-row` height). */
export const ROW_PX = 24;
/** Levels indented; deeper spans keep this indent and show their depth. */
const MAX_INDENT = 8;
const INDENT_PX = 10;
/** Rows drawn beyond the visible ones, above and below, so a scroll does not flash. */
const OVERSCAN = 12;

/** A "nice" ruler step (1, 2 or 5 × 10^k ns) giving at most `ticks` ticks over `whole` ns. */
export function rulerStep(whole, ticks = 6) {
  const raw = Math.max(whole / ticks, 1);
  const pow = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 5, 10]) if (m * pow >= raw) return m * pow;
  return 10 * pow;
}

export class Waterfall {
  /**
   * `onOpen(span)` opens a span (click, Enter); `failure(span)` is its error text or null;
   * `unit` is the unit of the spans' totals.
   */
  constructor(container, { onOpen, failure }) {
    this.onOpen = onOpen;
    this.failure = failure;
    this.collapsed = new Set();
    this.ruler = el("div", { class: "wf-ruler", "aria-hidden": "true" });
    this.spacer = el("div", { class: "wf-spacer", onclick: (e) => this.click(e) });
    this.viewport = el("div", { class: "wf-viewport", tabindex: 0, role: "tree",
      "aria-label": "spans of the trace (arrows move, Enter opens, Left and Right fold)",
      onscroll: () => this.draw(), onkeydown: (e) => this.key(e) }, this.spacer);
    this.root = el("div", { class: "waterfall" }, this.ruler, this.viewport);
    this.root.waterfall = this; // lets the browser checks and bench/ui-perf.sh time it
    container.appendChild(this.root);
    this.rows = new Map();
    /** Rows out of view, to be filled with the next spans that come into it. */
    this.free = [];
    this.selected = null;
    this.active = 0;
  }

  /** Shows `trace` (the trace API's answer); keeps what was folded when it is the same one. */
  setTrace(trace) {
    if (!this.trace || this.trace.trace_id !== trace.trace_id) this.collapsed = new Set();
    this.trace = trace;
    this.whole = Number(trace.duration_ns) || 1;
    const ids = new Set(trace.spans.map((s) => s.span_id));
    this.children = new Map();
    this.roots = [];
    for (const s of trace.spans) {
      // A span whose parent was not received is drawn as a root.
      if (s.parent_span_id && ids.has(s.parent_span_id)) {
        if (!this.children.has(s.parent_span_id)) this.children.set(s.parent_span_id, []);
        this.children.get(s.parent_span_id).push(s);
      } else this.roots.push(s);
    }
    this.byId = new Map(trace.spans.map((s) => [s.span_id, s]));
    // Totals may have changed (a refresh as profiles come in): every row is filled anew.
    this.free.push(...this.rows.values());
    this.rows = new Map();
    this.drawRuler();
    this.flatten();
  }

  /** The visible spans in tree order (each child after its parent, start order). */
  flatten() {
    const out = [];
    const stack = [...this.roots].reverse();
    while (stack.length) {
      const s = stack.pop();
      out.push(s);
      const kids = this.children.get(s.span_id);
      if (kids && !this.collapsed.has(s.span_id)) for (let i = kids.length - 1; i >= 0; i--) stack.push(kids[i]);
    }
    this.visible = out;
    this.index = new Map(out.map((s, i) => [s.span_id, i]));
    this.spacer.style.height = `${out.length * ROW_PX}px`;
    // A short trace's waterfall is only as tall as its rows (style.css): the span's flame
    // graph below it stays in view.
    this.viewport.style.setProperty("--wf-content", `${out.length * ROW_PX}px`);
    this.active = Math.min(this.active, Math.max(out.length - 1, 0));
    this.drawn = null;
    this.draw();
  }

  drawRuler() {
    const step = rulerStep(this.whole);
    const ticks = [];
    for (let t = 0; t <= this.whole + 1; t += step) {
      // A label too near the end would run into the next column: its tick stays unlabelled.
      ticks.push(el("span", { class: "wf-tick", style: { left: `${(100 * t) / this.whole}%` } },
        t === 0 ? "0" : t / this.whole > 0.88 ? "" : units.duration(t)));
    }
    this.tickStep = step;
    replace(this.ruler, el("div", { class: "wf-ruler-label" }, "span"),
      el("div", { class: "wf-ruler-track" }, ticks),
      el("div", { class: "num" }, "duration"), el("div", { class: "num" }, "CPU"));
  }

  /** Draws the rows in view (and a few around). Rows that leave the view are refilled for
   * the spans that come into it, not built anew: a scroll changes text and styles only, and
   * only in the rows that came in. The rest are not written to at all: an inline style set,
   * even to its old value, costs the row a style recalc (bench/ui-perf.sh's waterfall). */
  draw() {
    if (!this.visible) return;
    const top = this.viewport.scrollTop;
    const height = this.viewport.clientHeight || 600;
    const first = Math.max(0, Math.floor(top / ROW_PX) - OVERSCAN);
    const last = Math.min(this.visible.length, Math.ceil((top + height) / ROW_PX) + OVERSCAN);
    const key = `${first}:${last}`;
    if (this.drawn === key) return;
    this.drawn = key;
    for (const [id, row] of this.rows) {
      const i = this.index.get(id);
      if (i === undefined || i < first || i >= last) this.free.push(row);
    }
    const freed = new Set(this.free);
    const keep = new Map();
    for (let i = first; i < last; i++) {
      const s = this.visible[i];
      let row = this.rows.get(s.span_id);
      if (!row || freed.has(row)) {
        row = this.free.pop() || this.newRow();
        freed.delete(row);
        this.fill(row, s);
      }
      // Placed by a transform: moving a row needs no layout of the rows around it.
      if (row.at !== i) {
        row.at = i;
        row.style.transform = `translateY(${i * ROW_PX}px)`;
      }
      const active = i === this.active;
      if (row.isActive !== active) {
        row.isActive = active;
        row.classList.toggle("active", active);
      }
      keep.set(s.span_id, row);
    }
    for (const row of this.free) if (row.parentNode) row.remove();
    for (const row of keep.values()) if (row.parentNode !== this.spacer) this.spacer.appendChild(row);
    this.rows = keep;
    const active = this.visible[this.active];
    const id = active ? `wf-${active.span_id}` : null;
    if (id && this.viewport.getAttribute("aria-activedescendant") !== id) this.viewport.setAttribute("aria-activedescendant", id);
  }

  /** An empty row: `fill` writes a span into it. Clicks are handled on the spacer. */
  newRow() {
    const p = {
      depth: el("span", { class: "wf-depth" }),
      toggle: el("button", { type: "button", class: "wf-toggle", tabindex: -1 }),
      leaf: el("span", { class: "wf-toggle leaf" }),
      mark: el("span", {}),
      service: el("span", { class: "wf-service" }),
      name: el("span", {}),
      folded: el("span", { class: "wf-hidden muted" }),
      bar: el("div", { class: "wf-bar" }),
      dur: el("div", { class: "num wf-dur" }),
      cpu: el("div", { class: "num wf-cpu" }),
    };
    p.label = el("div", { class: "wf-label" }, p.depth, p.toggle, p.leaf, p.mark, p.service, p.name, p.folded);
    const row = el("div", { class: "wf-row", role: "treeitem" }, p.label,
      el("div", { class: "wf-track" }, p.bar), p.dur, p.cpu);
    row.parts = p;
    return row;
  }

  /** Writes span `s` into `row` (made by `newRow`). */
  fill(row, s) {
    const p = row.parts;
    const kids = this.children.get(s.span_id);
    const folded = this.collapsed.has(s.span_id);
    const depth = Number(s.depth) || 0;
    const fail = this.failure(s);
    row.className = `wf-row${s.span_id === this.selected ? " selected" : ""}`;
    row.isActive = false; // the class just written has no "active"
    row.id = `wf-${s.span_id}`;
    row.setAttribute("aria-level", depth + 1);
    if (kids) row.setAttribute("aria-expanded", String(!folded));
    else row.removeAttribute("aria-expanded");
    row.setAttribute("aria-selected", String(s.span_id === this.selected));
    row.dataset.spanId = s.span_id;
    row.dataset.depth = depth;
    row.title = `depth ${depth} · ${s.service} · ${s.name}`;
    p.label.style.paddingLeft = `${Math.min(depth, MAX_INDENT) * INDENT_PX + 4}px`;
    // Past the indent cap, the depth is written instead of drawn.
    p.depth.hidden = depth <= MAX_INDENT;
    p.depth.title = `depth ${depth}`;
    p.depth.textContent = `↳${depth}`;
    p.toggle.hidden = !kids;
    p.leaf.hidden = !!kids;
    if (kids) {
      p.toggle.setAttribute("aria-label", folded ? "expand" : "collapse");
      p.toggle.title = `${folded ? "expand" : "collapse"} ${kids.length} child span${kids.length === 1 ? "" : "s"}`;
      p.toggle.textContent = folded ? "▸" : "▾";
    }
    p.mark.className = `mark ${s.total > 0 ? "on" : ""}`;
    p.mark.title = s.total > 0 ? "has samples" : s.coverage;
    p.mark.textContent = s.total > 0 ? "●" : "○";
    // The service only where it changes (as Jaeger does): deep rows keep room for names.
    p.service.hidden = !this.serviceChanges(s);
    p.service.textContent = `${s.service} `;
    p.name.className = fail ? "wf-name failed" : "wf-name";
    if (fail) p.name.title = fail;
    else p.name.removeAttribute("title");
    p.name.textContent = s.name;
    p.folded.hidden = !folded;
    p.folded.textContent = folded ? ` +${this.descendants(s.span_id)}` : "";
    p.bar.style.left = `${(100 * Number(s.offset_ns)) / this.whole}%`;
    p.bar.style.width = `${Math.max((100 * Number(s.duration_ns)) / this.whole, 0.2)}%`;
    p.dur.textContent = units.duration(s.duration_ns);
    p.cpu.textContent = s.total ? units.value(s.total, this.trace.unit) : "–";
  }

  /** A click on a row opens its span; on its toggle, folds or unfolds its subtree. */
  click(e) {
    const row = e.target.closest(".wf-row");
    const s = row && this.byId && this.byId.get(row.dataset.spanId);
    if (!s) return;
    if (e.target.closest("button.wf-toggle")) {
      this.fold(s.span_id, !this.collapsed.has(s.span_id));
      return;
    }
    this.active = this.index.get(s.span_id) ?? this.active;
    this.onOpen(s);
  }

  /** Whether `s` is a root or runs in another service than its parent. */
  serviceChanges(s) {
    const parent = s.parent_span_id && this.byId.get(s.parent_span_id);
    return !parent || parent.service !== s.service;
  }

  /** How many spans are under `id`. */
  descendants(id) {
    let n = 0;
    const stack = [...(this.children.get(id) || [])];
    while (stack.length) {
      const s = stack.pop();
      n++;
      stack.push(...(this.children.get(s.span_id) || []));
    }
    return n;
  }

  /** Folds (`on`) or unfolds the subtree under span `id`. */
  fold(id, on) {
    if (!this.children.has(id) || this.collapsed.has(id) === on) return;
    if (on) this.collapsed.add(id);
    else this.collapsed.delete(id);
    // Its row (and the rows after it) change: every row is filled anew.
    this.free.push(...this.rows.values());
    this.rows = new Map();
    this.flatten();
  }

  /** Marks span `id` selected, unfolds its ancestors and scrolls it into view. */
  select(id) {
    this.selected = id || null;
    let s = this.byId && this.byId.get(id);
    let unfolded = false;
    while (s && s.parent_span_id && this.byId.has(s.parent_span_id)) {
      if (this.collapsed.delete(s.parent_span_id)) unfolded = true;
      s = this.byId.get(s.parent_span_id);
    }
    if (unfolded) {
      this.free.push(...this.rows.values());
      this.rows = new Map();
      this.flatten();
    }
    for (const [rid, row] of this.rows) {
      row.classList.toggle("selected", rid === id);
      row.setAttribute("aria-selected", String(rid === id));
    }
    const i = this.index && this.index.get(id);
    if (i !== undefined) {
      this.active = i;
      this.reveal(i);
    }
  }

  /** Scrolls row `i` into the viewport. */
  reveal(i) {
    const top = i * ROW_PX;
    const h = this.viewport.clientHeight || 0;
    if (top < this.viewport.scrollTop) this.viewport.scrollTop = top;
    else if (top + ROW_PX > this.viewport.scrollTop + h) this.viewport.scrollTop = top + ROW_PX - h;
    this.drawn = null;
    this.draw();
  }

  key(e) {
    if (!this.visible || !this.visible.length) return;
    const s = this.visible[this.active];
    const move = (i) => { this.active = Math.max(0, Math.min(this.visible.length - 1, i)); this.reveal(this.active); };
    const page = Math.max(1, Math.floor((this.viewport.clientHeight || ROW_PX) / ROW_PX) - 1);
    switch (e.key) {
      case "ArrowDown": move(this.active + 1); break;
      case "ArrowUp": move(this.active - 1); break;
      case "PageDown": move(this.active + page); break;
      case "PageUp": move(this.active - page); break;
      case "Home": move(0); break;
      case "End": move(this.visible.length - 1); break;
      case "Enter": case " ": this.onOpen(s); break;
      case "ArrowRight":
        if (this.collapsed.has(s.span_id)) this.fold(s.span_id, false);
        else if (this.children.has(s.span_id)) move(this.active + 1);
        break;
      case "ArrowLeft":
        if (this.children.has(s.span_id) && !this.collapsed.has(s.span_id)) this.fold(s.span_id, true);
        else if (s.parent_span_id && this.index.has(s.parent_span_id)) move(this.index.get(s.parent_span_id));
        break;
      default: return;
    }
    e.preventDefault();
  }
}
