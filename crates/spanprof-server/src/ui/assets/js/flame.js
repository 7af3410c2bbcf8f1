// The canvas flame graph. It draws Pyroscope's flat layout (`{names, levels, total}`, x
// offsets delta-encoded per level) straight from typed arrays: no DOM node per frame, so
// tens of thousands of frames stay fluid. Names are drawn with fillText: never markup.

import { canvasContext, el } from "./dom.js";
import * as units from "./units.js";

const ROW = 18;
const FONT = "12px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace";

/** Undoes the per-level delta encoding of the x columns (`xCols`, each `step` apart). */
function decode(levels, step, xCols) {
  return levels.map((level) => {
    const a = Float64Array.from(level);
    for (const c of xCols) {
      let prev = 0;
      for (let i = c; i < a.length; i += step) {
        a[i] += prev;
        prev = a[i] + a[i + 1];
      }
    }
    return a;
  });
}

/** The package of a frame, so that one package keeps one colour across views. */
export function packageOf(name) {
  let s = name;
  const paren = s.indexOf("(");
  if (paren > 0) s = s.slice(0, paren);
  const colons = s.lastIndexOf("::");
  if (colons > 0) return s.slice(0, colons);
  const slash = s.lastIndexOf("/");
  const dot = s.indexOf(".", slash + 1);
  if (dot > 0) return s.slice(0, dot);
  const colon = s.indexOf(":");
  if (colon > 0) return s.slice(0, colon);
  return s;
}

function hash(s) {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 16777619);
  }
  return h >>> 0;
}

/** A frame's colour by its package: warm hues like the classic flame graph. */
export function packageColour(name) {
  const h = hash(packageOf(name));
  const hue = 5 + (h % 50);
  const light = 55 + ((h >>> 8) % 15);
  return `hsl(${hue}, 80%, ${light}%)`;
}

/**
 * The flame graph's colours in the page's theme. Light: pale frames, dark ink. Dark: the
 * neutral and diff frames turn dark with light ink (a pale grey graph glared on the dark page);
 * package colours stay warm and bright with dark ink in both, as the classic flame graph.
 * `more(t)`/`less(t)`: a diff frame whose share grew/shrank by `t` (0..1 of its larger share).
 */
const PALETTES = {
  light: {
    background: "#ffffff",
    title: "#111",
    ink: "#111",
    paleInk: "#111",
    same: "hsl(0, 0%, 82%)",
    more: (t) => `hsl(0, 85%, ${85 - 40 * t}%)`,
    less: (t) => `hsl(130, 60%, ${85 - 40 * t}%)`,
    match: "hsl(290, 70%, 60%)",
    unmatched: "hsl(0, 0%, 86%)",
    ring: "hsl(220, 90%, 40%)",
  },
  dark: {
    background: "#1f1f25",
    title: "#e6e6ea",
    ink: "#111",
    paleInk: "#ececf0",
    same: "hsl(240, 6%, 30%)",
    more: (t) => `hsl(0, 62%, ${30 + 14 * t}%)`,
    less: (t) => `hsl(135, 50%, ${22 + 10 * t}%)`,
    match: "hsl(290, 70%, 60%)",
    unmatched: "hsl(240, 5%, 26%)",
    ring: "hsl(210, 100%, 72%)",
  },
};

/** The palette of the page's theme: light, or dark when the system asks for it. */
export function palette() {
  return window.matchMedia("(prefers-color-scheme: dark)").matches ? PALETTES.dark : PALETTES.light;
}

/**
 * A diff frame's colour in palette `p`: red for a larger share on the right, green for a
 * smaller one, the neutral grey under a 2 % change; `{fill, ink}` (the label's colour).
 */
export function diffColour(p, leftShare, rightShare) {
  const d = rightShare - leftShare;
  const scale = Math.max(leftShare, rightShare) || 1;
  const t = Math.min(1, Math.abs(d) / scale);
  if (t < 0.02) return { fill: p.same, ink: p.paleInk };
  return { fill: d > 0 ? p.more(t) : p.less(t), ink: p.paleInk };
}

export const ANCESTOR_ALPHA = 0.55;
export { ROW, FONT };

export class FlameGraph {
  /**
   * `onZoom(zoom)` is called with `{level, index}` (or null on reset) when the user clicks,
   * presses Enter on a frame or Esc. `sides` names a diff's sides in its tooltip
   * (`{left, right}`); `label` is the canvas's accessible name.
   */
  constructor(container, { onZoom, sides, label }) {
    this.onZoom = onZoom;
    this.sides = sides || { left: "left", right: "right" };
    this.label = label || "flame graph";
    // Focusable: arrows walk the frames, Enter zooms, Esc resets the zoom.
    this.canvas = el("canvas", { class: "flame", tabindex: "0", role: "img",
      "aria-label": `${this.label}: arrows move between frames, Enter zooms, Esc resets` });
    this.tooltip = el("div", { class: "tooltip", hidden: true });
    this.root = el("div", { class: "flame-wrap" }, this.canvas, this.tooltip);
    container.appendChild(this.root);
    this.canvas.flameGraph = this; // lets the browser test find frames on the canvas
    this.zoom = null;
    this.matches = null;
    this.canvas.addEventListener("mousemove", (e) => this.hover(e));
    this.canvas.addEventListener("mouseleave", () => (this.tooltip.hidden = true));
    this.canvas.addEventListener("click", (e) => this.click(e));
    this.canvas.addEventListener("keydown", (e) => this.key(e));
    this.canvas.addEventListener("focus", () => {
      // Focus by a click (not :focus-visible) rings nothing: the pointer shows where it is,
      // and a root's tooltip would stay over the graph after the click zoomed elsewhere.
      if (!this.levels || !this.canvas.matches(":focus-visible")) return;
      const z = this.zoom;
      this.select(this.selected || (z ? { level: z.level, index: z.index } : { level: 0, index: 0 }));
    });
    this.canvas.addEventListener("blur", () => {
      this.tooltip.hidden = true;
      if (this.selected) this.draw(); // without the ring
    });
    this.selected = null;
    this.resize = new ResizeObserver(() => this.draw());
    this.resize.observe(this.root);
  }

  /** `fg` is the API's `flamegraph` object; `diff` when it comes from `/diff`. */
  setData(fg, unit, diff = false) {
    this.unit = unit;
    this.diff = diff;
    this.names = fg.names;
    this.total = fg.total;
    this.step = diff ? 7 : 4;
    this.levels = decode(fg.levels, this.step, diff ? [0, 3] : [0]);
    if (diff) {
      this.leftTicks = fg.leftTicks;
      this.rightTicks = fg.rightTicks;
    }
    this.zoom = null;
    this.matches = null;
    this.selected = null;
    this.depth = this.levels.length;
    this.draw();
  }

  /** Names the sides of a diff in the tooltip: `{left, right}`. */
  setSides(sides) {
    this.sides = sides;
  }

  node(level, index) {
    const a = this.levels[level];
    const i = index * this.step;
    if (!a || i >= a.length) return null;
    if (this.diff) {
      return { level, index, x: a[i] + a[i + 3], total: a[i + 1] + a[i + 4], self: a[i + 2] + a[i + 5],
        name: this.names[a[i + 6]], left: a[i + 1], right: a[i + 4], leftSelf: a[i + 2], rightSelf: a[i + 5] };
    }
    return { level, index, x: a[i], total: a[i + 1], self: a[i + 2], name: this.names[a[i + 3]] };
  }

  count(level) {
    return this.levels[level].length / this.step;
  }

  /** Zooms to `{level, index}` (null: the whole graph); returns the frame or null. */
  setZoom(zoom) {
    const n = zoom ? this.node(zoom.level, zoom.index) : null;
    this.zoom = n && n.total > 0 ? n : null;
    this.depth = this.shownDepth();
    this.draw();
    return this.zoom;
  }

  /** Highlights frames whose name contains `text` (case-insensitive); returns their share. */
  setSearch(text) {
    this.matches = null;
    let result = { frames: 0, value: 0 };
    if (text && this.levels) {
      const needle = text.toLowerCase();
      const names = new Set();
      this.names.forEach((n, i) => n.toLowerCase().includes(needle) && names.add(i));
      this.matches = names;
      const spans = [];
      const nameCol = this.diff ? 6 : 3;
      for (let l = 0; l < this.levels.length; l++) {
        for (let k = 0; k < this.count(l); k++) {
          if (names.has(this.levels[l][k * this.step + nameCol])) {
            const n = this.node(l, k);
            spans.push([n.x, n.x + n.total]);
          }
        }
      }
      // Nested matches (recursion, or a match under a match) count once.
      spans.sort((a, b) => a[0] - b[0]);
      let end = -1;
      for (const [s, e] of spans) {
        if (s >= end) result.value += e - s;
        else if (e > end) result.value += e - end;
        end = Math.max(end, e);
      }
      result.frames = spans.length;
    }
    this.draw();
    return result;
  }

  view() {
    const z = this.zoom;
    return z ? { start: z.x, width: z.total, level: z.level } : { start: 0, width: this.total, level: 0 };
  }

  /**
   * The rows shown: all of them, or, zoomed, down to the zoomed frame's deepest descendant
   * (frames below its level that overlap it are its descendants: a level's frames are disjoint).
   */
  shownDepth() {
    const z = this.zoom;
    if (!z) return this.levels.length;
    let l = z.level + 1;
    for (; l < this.levels.length; l++) {
      const k = this.first(l, z.x);
      if (k >= this.count(l) || this.node(l, k).x >= z.x + z.total) break;
    }
    return l;
  }

  /** The height the graph takes, in CSS pixels: a zoomed graph is as tall as its subtree. */
  height() {
    return this.depth * ROW + 2;
  }

  /**
   * Calls `f({level, x, y, w, fill, ink, alpha, label, node})` for every frame drawn at
   * `width` CSS pixels, top row first, in palette `pal` (the theme's by default): the canvas
   * and the SVG export draw the same frames this way. `ink` is the label's colour.
   */
  eachFrame(width, charWidth, f, pal = palette()) {
    const v = this.view();
    const scale = width / v.width;
    const nameCol = this.diff ? 6 : 3;
    for (let l = 0; l < this.depth; l++) {
      const a = this.levels[l];
      const y = l * ROW;
      for (let k = this.first(l, v.start); k < this.count(l); k++) {
        const n = this.node(l, k);
        if (n.x >= v.start + v.width) break;
        let x0;
        let w;
        if (l < v.level) {
          // Ancestors of the zoomed frame span the whole width.
          if (!(n.x <= v.start && n.x + n.total >= v.start + v.width)) continue;
          x0 = 0;
          w = width;
        } else {
          x0 = (n.x - v.start) * scale;
          w = n.total * scale;
          if (w < 0.4) continue;
        }
        const matched = this.matches && this.matches.has(a[k * this.step + nameCol]);
        let fill;
        let ink = pal.ink;
        if (this.matches && matched) fill = pal.match;
        else if (this.matches) [fill, ink] = [pal.unmatched, pal.paleInk];
        else if (this.diff) ({ fill, ink } = diffColour(pal, n.left / (this.leftTicks || 1), n.right / (this.rightTicks || 1)));
        else fill = packageColour(n.name);
        let label = null;
        if (w > charWidth * 3 + 6) {
          const room = Math.floor((w - 6) / charWidth);
          label = n.name.length > room ? `${n.name.slice(0, Math.max(room - 1, 1))}…` : n.name;
        }
        f({ level: l, x: x0, y, w: Math.max(w - 0.5, 0.4), fill, ink, alpha: l < v.level ? ANCESTOR_ALPHA : 1, label, node: n });
      }
    }
  }

  draw() {
    if (!this.levels) return;
    const width = this.root.clientWidth || 800;
    const ctx = canvasContext(this.canvas, width, this.height());
    ctx.font = FONT;
    ctx.textBaseline = "middle";
    const charWidth = ctx.measureText("m").width;
    this.charWidth = charWidth;
    // The keyboard's selection is ringed while the canvas has the keyboard.
    const sel = document.activeElement === this.canvas ? this.selected : null;
    let selRect = null;
    this.eachFrame(width, charWidth, (fr) => {
      ctx.globalAlpha = fr.alpha;
      ctx.fillStyle = fr.fill;
      ctx.fillRect(fr.x, fr.y, fr.w, ROW - 1);
      if (fr.label) {
        ctx.fillStyle = fr.ink;
        ctx.fillText(fr.label, fr.x + 3, fr.y + ROW / 2);
      }
      if (sel && sel.level === fr.level && sel.index === fr.node.index) selRect = fr;
    });
    ctx.globalAlpha = 1;
    if (selRect) {
      // The keyboard's frame: a ring of the theme's (dark blue on the light one's pale
      // frames, light blue on the dark one's dark frames).
      ctx.lineWidth = 2;
      ctx.strokeStyle = palette().ring;
      ctx.strokeRect(selRect.x + 1, selRect.y + 1, Math.max(selRect.w - 2, 1), ROW - 3);
    }
  }

  /** Index of the first frame of level `l` that ends after `start` (frames are in x order). */
  first(l, start) {
    let lo = 0;
    let hi = this.count(l);
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      const n = this.node(l, mid);
      if (n.x + n.total <= start) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** The frame under a mouse event, or null. */
  at(e) {
    if (!this.levels) return null;
    const rect = this.canvas.getBoundingClientRect();
    const l = Math.floor((e.clientY - rect.top) / ROW);
    if (l < 0 || l >= this.depth) return null;
    const v = this.view();
    const width = rect.width;
    const value = v.start + ((e.clientX - rect.left) / width) * v.width;
    if (l < v.level) {
      for (let k = 0; k < this.count(l); k++) {
        const n = this.node(l, k);
        if (n.x <= v.start && n.x + n.total >= v.start + v.width) return n;
      }
      return null;
    }
    const k = this.first(l, value);
    const n = k < this.count(l) ? this.node(l, k) : null;
    return n && n.x <= value && value < n.x + n.total ? n : null;
  }

  hover(e) {
    const n = this.at(e);
    if (!n) {
      this.tooltip.hidden = true;
      return;
    }
    const rect = this.root.getBoundingClientRect();
    this.tip(n, e.clientX - rect.left, e.clientY - rect.top);
  }

  /** The tooltip of frame `n` near (`x`, `y`), in pixels from the graph's corner. */
  tip(n, x, y) {
    const lines = [el("div", { class: "tt-name" }, n.name)];
    const v = (x) => units.value(x, this.unit);
    if (this.diff) {
      lines.push(el("div", {}, `${this.sides.left}: ${v(n.left)} (${units.percent(n.left, this.leftTicks)}), self ${v(n.leftSelf)}`));
      lines.push(el("div", {}, `${this.sides.right}: ${v(n.right)} (${units.percent(n.right, this.rightTicks)}), self ${v(n.rightSelf)}`));
    } else {
      lines.push(el("div", {}, `total: ${v(n.total)} (${units.percent(n.total, this.total)})`));
      lines.push(el("div", {}, `self: ${v(n.self)} (${units.percent(n.self, this.total)})`));
      if (this.zoom) lines.push(el("div", {}, `of the zoomed frame: ${units.percent(n.total, this.zoom.total)}`));
    }
    this.tooltip.replaceChildren(...lines);
    this.tooltip.hidden = false;
    const width = this.root.clientWidth;
    this.tooltip.style.left = `${Math.max(0, Math.min(x + 12, width - 320))}px`;
    this.tooltip.style.top = `${y + 14}px`;
  }

  /** Selects frame `{level, index}` for the keyboard: ringed, its tooltip shown. */
  select(s) {
    const n = this.node(s.level, s.index);
    if (!n) return;
    this.selected = { level: s.level, index: s.index };
    this.draw();
    const v = this.view();
    const width = this.root.clientWidth || 800;
    const x = s.level < v.level ? width / 2
      : ((Math.max(n.x, v.start) + Math.min(n.x + n.total, v.start + v.width)) / 2 - v.start) * (width / v.width);
    this.tip(n, Math.max(0, x - 12), s.level * ROW + ROW / 2);
    this.canvas.setAttribute("aria-label", `${this.label}: ${n.name}, ${units.value(n.total, this.unit)} ` +
      `(${units.percent(n.total, this.total)}); arrows move, Enter zooms, Esc resets`);
  }

  key(e) {
    if (!this.levels) return;
    const s = this.selected || { level: 0, index: 0 };
    const n = this.node(s.level, s.index);
    let next = null;
    switch (e.key) {
      case "ArrowUp":
        if (s.level > 0) next = { level: s.level - 1, index: this.first(s.level - 1, n.x) };
        break;
      case "ArrowDown": {
        const l = s.level + 1;
        if (l < this.depth) {
          const k = this.first(l, n.x);
          const c = k < this.count(l) ? this.node(l, k) : null;
          if (c && c.x < n.x + n.total) next = { level: l, index: k };
        }
        break;
      }
      case "ArrowLeft":
        if (s.index > 0) next = { level: s.level, index: s.index - 1 };
        break;
      case "ArrowRight":
        if (s.index + 1 < this.count(s.level)) next = { level: s.level, index: s.index + 1 };
        break;
      case "Enter":
        this.onZoom(s.level === 0 ? null : { level: s.level, index: s.index });
        e.preventDefault();
        return;
      case "Escape":
        if (!this.zoom) return;
        this.onZoom(null);
        e.preventDefault();
        return;
      default:
        return;
    }
    e.preventDefault();
    if (next) this.select(next);
  }

  click(e) {
    const n = this.at(e);
    if (!n) return;
    const zoom = n.level === 0 ? null : { level: n.level, index: n.index };
    this.onZoom(zoom);
  }

  /** Centre of the widest visible frame called `name`, in viewport pixels (for tests). */
  frameCenter(name) {
    const v = this.view();
    const rect = this.canvas.getBoundingClientRect();
    const scale = rect.width / v.width;
    let best = null;
    for (let l = v.level; l < this.levels.length; l++) {
      for (let k = 0; k < this.count(l); k++) {
        const n = this.node(l, k);
        if (n.name === name && (!best || n.total > best.total)) best = n;
      }
    }
    if (!best) return null;
    const x0 = Math.max(best.x, v.start);
    const x1 = Math.min(best.x + best.total, v.start + v.width);
    return { x: rect.left + ((x0 + x1) / 2 - v.start) * scale, y: rect.top + best.level * ROW + ROW / 2 };
  }
}
