// The duration-over-time chart of a span search, as Jaeger's and Tempo's: each span a point
// (start time across, duration up, on a log scale), coloured by its CPU coverage (its own
// sampled CPU over its duration); hover names the nearest, a drag brushes a time range, a
// click opens the span. Canvas: 100,000 points are one path per colour, not 100,000 nodes.

import { canvasContext, el, themeColour } from "./dom.js";
import * as units from "./units.js";

/** Steps of the time axis, in ms: tenths of a second up to a day. */
const TICK_STEPS_MS = [100, 200, 500, 1e3, 2e3, 5e3, 10e3, 15e3, 30e3, 60e3, 120e3, 300e3, 600e3, 900e3,
  1800e3, 3600e3, 7200e3, 10800e3, 21600e3, 43200e3, 86400e3];

const HEIGHT = 190;
const PAD = { left: 56, right: 12, top: 10, bottom: 22 };
/** Coverage buckets, each drawn as one path: blue (waited) to red (computed all along). */
const BUCKETS = 8;
const COLOURS = Array.from({ length: BUCKETS + 1 }, (_, i) =>
  i === BUCKETS ? "#9ca3af" : `hsl(${Math.round(220 - (220 * i) / (BUCKETS - 1))}, 75%, 50%)`);
/** Each colour as one opaque pixel of an ImageData (RGBA bytes, little-endian). */
const PIXELS = COLOURS.map((css) => {
  const probe = document.createElement("canvas").getContext("2d");
  probe.fillStyle = css;
  probe.fillRect(0, 0, 1, 1);
  return new Uint32Array(probe.getImageData(0, 0, 1, 1).data.buffer)[0];
});
/** Grid cells (px) for the nearest-point lookup on hover. */
const CELL = 8;

/** The coverage bucket of a span: 0..BUCKETS-1, or BUCKETS when its CPU is not in ns. */
function bucket(cpu, durationNs, cpuInNs) {
  if (!cpuInNs) return BUCKETS;
  const f = durationNs > 0 ? cpu / durationNs : 0;
  return Math.min(BUCKETS - 1, Math.max(0, Math.floor(f * BUCKETS)));
}

export class SpanChart {
  /**
   * `onBrush(fromMs, toMs)` when a range is dragged; `onOpen(i)` when point i is clicked.
   */
  constructor({ onBrush, onOpen }) {
    this.onBrush = onBrush;
    this.onOpen = onOpen;
    this.canvas = el("canvas", { class: "span-chart", tabindex: 0,
      "aria-label": "duration over time of the matching spans: drag to choose a time range, click a point to open its span" });
    this.tip = el("div", { class: "tooltip", hidden: true });
    this.caption = el("div", { class: "span-chart-caption muted" });
    this.node = el("div", { class: "span-chart-box" }, el("div", { class: "flame-wrap" }, this.canvas, this.tip),
      this.caption);
    this.data = null;
    // For tests and benches, as the flame graph's canvas has `flameGraph`.
    this.canvas.spanChart = this;
    this.canvas.addEventListener("mousemove", (e) => this.move(e));
    this.canvas.addEventListener("mouseleave", () => { this.tip.hidden = true; this.hoverAt = null; this.redrawOverlay(); });
    this.canvas.addEventListener("mousedown", (e) => { this.dragFrom = this.xy(e).x; this.dragTo = null; });
    window.addEventListener("mouseup", (e) => this.up(e));
    this.canvas.addEventListener("keydown", (e) => this.key(e));
  }

  /** Keys on the focused chart: ←/→ walk the points in start order (Home, End: the first,
   * the last), Enter opens the one shown, Esc hides it. */
  key(e) {
    const n = this.data ? this.data.span_id.length : 0;
    if (!n) return;
    const at = this.hoverAt;
    const next = { ArrowRight: at == null ? 0 : Math.min(n - 1, at + 1),
      ArrowLeft: at == null ? n - 1 : Math.max(0, at - 1), Home: 0, End: n - 1 }[e.key];
    if (next !== undefined) {
      e.preventDefault();
      this.hoverAt = next;
      this.redrawOverlay();
      this.showTip(next, this.px[next], this.py[next]);
    } else if (e.key === "Enter" && at != null) {
      e.preventDefault();
      this.onOpen(at);
    } else if (e.key === "Escape") {
      this.hoverAt = null;
      this.tip.hidden = true;
      this.redrawOverlay();
    }
  }

  /** Draws `d` (the /span-points answer) `width` CSS px wide; returns the ms it took. */
  render(d, width) {
    const t0 = performance.now();
    this.data = d;
    this.width = Math.max(200, Math.floor(width));
    const n = d.start_ms.length;
    let t1 = Infinity;
    let t2 = -Infinity;
    let dMin = Infinity;
    let dMax = 0;
    for (let i = 0; i < n; i++) {
      const t = d.start_ms[i];
      if (t < t1) t1 = t;
      if (t > t2) t2 = t;
      const v = Math.max(1, d.duration_ns[i]);
      if (v < dMin) dMin = v;
      if (v > dMax) dMax = v;
    }
    // One span, or spans at one moment or of one duration: a second and a decade around them.
    if (t2 - t1 < 1000) {
      const mid = (t1 + t2) / 2;
      t1 = mid - 500;
      t2 = mid + 500;
    }
    if (!(dMax > dMin * 1.5)) {
      dMin /= Math.sqrt(10);
      dMax *= Math.sqrt(10);
    }
    this.scale = { t1, t2, l1: Math.log10(dMin), l2: Math.log10(dMax) };
    const plotW = this.width - PAD.left - PAD.right;
    const plotH = HEIGHT - PAD.top - PAD.bottom;
    this.px = new Float32Array(n);
    this.py = new Float32Array(n);
    const cpuInNs = d.unit === "nanoseconds";
    this.colour = new Uint8Array(n);
    for (let i = 0; i < n; i++) {
      this.px[i] = PAD.left + ((d.start_ms[i] - t1) / (t2 - t1)) * plotW;
      this.py[i] = PAD.top + plotH - ((Math.log10(Math.max(1, d.duration_ns[i])) - this.scale.l1) /
        (this.scale.l2 - this.scale.l1)) * plotH;
      this.colour[i] = bucket(d.cpu[i], d.duration_ns[i], cpuInNs);
    }
    this.buildGrid();
    this.drawBase();
    this.caption.replaceChildren(`${units.grouped(n)} span${n === 1 ? "" : "s"}` +
      (d.count > n ? ` (the ${units.grouped(n)} longest of ${units.grouped(d.count)})` : "") +
      (cpuInNs ? " · colour: CPU over duration, blue waited, red computed all along" : " · no CPU samples: grey"));
    return performance.now() - t0;
  }

  /** Draws the same points again when the box is `width` px wide now. */
  fit(width) {
    if (this.data && Math.abs(Math.floor(width) - this.width) > 1) this.render(this.data, width);
  }

  /** Points by grid cell, so a hover looks at a few cells, not every point. */
  buildGrid() {
    const cols = Math.ceil(this.width / CELL) + 1;
    const rows = Math.ceil(HEIGHT / CELL) + 1;
    const counts = new Uint32Array(cols * rows + 1);
    const cellOf = (i) => Math.floor(this.py[i] / CELL) * cols + Math.floor(this.px[i] / CELL);
    const n = this.px.length;
    for (let i = 0; i < n; i++) counts[cellOf(i) + 1]++;
    for (let c = 1; c < counts.length; c++) counts[c] += counts[c - 1];
    const order = new Uint32Array(n);
    const fill = counts.slice(0, -1);
    for (let i = 0; i < n; i++) order[fill[cellOf(i)]++] = i;
    this.grid = { cols, rows, starts: counts, order };
  }

  drawBase() {
    const ctx = canvasContext(this.canvas, this.width, HEIGHT);
    const { t1, t2, l1, l2 } = this.scale;
    const plotW = this.width - PAD.left - PAD.right;
    const plotH = HEIGHT - PAD.top - PAD.bottom;
    // The page's theme (light, or dark as the system asks).
    ctx.fillStyle = themeColour(this.canvas, "--panel", "#fff");
    ctx.fillRect(0, 0, this.width, HEIGHT);
    ctx.strokeStyle = themeColour(this.canvas, "--line", "#e5e7eb");
    ctx.fillStyle = themeColour(this.canvas, "--muted", "#6b6b70");
    ctx.font = "11px system-ui, sans-serif";
    // Duration ticks at powers of ten.
    ctx.textAlign = "right";
    // Under two decades shown, 2× and 5× ticks too.
    const steps = Math.floor(l2) - Math.ceil(l1) < 2 ? [1, 2, 5] : [1];
    for (let p = Math.floor(l1); p <= Math.ceil(l2); p++) {
      for (const m of steps) {
        const l = p + Math.log10(m);
        if (l < l1 || l > l2) continue;
        const y = PAD.top + plotH - ((l - l1) / (l2 - l1)) * plotH;
        ctx.beginPath(); ctx.moveTo(PAD.left, y); ctx.lineTo(this.width - PAD.right, y); ctx.stroke();
        ctx.fillText(units.duration(m * 10 ** p), PAD.left - 4, y + 4);
      }
    }
    // Time ticks, 24-hour, in the browser's time zone or UTC (the header's switch), as the
    // table's times: at whole steps of that zone (:00, :05, … not the range split evenly,
    // which wrote 16:59:45.4), about 110 px apart; a label that would cross the plot's
    // ends is left out, so that none is cut.
    const want = ((t2 - t1) / Math.max(1, plotW)) * 110;
    const step = TICK_STEPS_MS.find((v) => v >= want) || TICK_STEPS_MS[TICK_STEPS_MS.length - 1];
    const offset = units.utc() ? 0 : -new Date(t1).getTimezoneOffset() * 60e3;
    ctx.textAlign = "center";
    for (let t = Math.ceil((t1 + offset) / step) * step - offset; t <= t2; t += step) {
      const x = PAD.left + ((t - t1) / (t2 - t1 || 1)) * plotW;
      let label = units.timeOfDay(t, step < 60e3);
      if (step < 1e3) label += `.${Math.floor((((t % 1000) + 1000) % 1000) / 100)}`;
      const half = ctx.measureText(label).width / 2;
      if (x - half < 0 || x + half > this.width) continue;
      ctx.fillText(label, x, HEIGHT - 6);
    }
    this.drawPoints(ctx);
    // A copy to draw the brush and hover over (drawImage: no readback of pixels).
    this.base = this.base || document.createElement("canvas");
    this.base.width = this.canvas.width;
    this.base.height = this.canvas.height;
    this.base.getContext("2d").drawImage(this.canvas, 0, 0);
  }

  /** The points, as pixels written straight into an image (100,000 canvas rects took
   * 300 ms to fill), costlier colours drawn last so that they stay on top. */
  drawPoints(ctx) {
    const w = this.canvas.width;
    const h = this.canvas.height;
    const dpr = w / this.width;
    const n = this.px.length;
    const img = new ImageData(w, h);
    const buf = new Uint32Array(img.data.buffer);
    const r = Math.max(1, Math.round((n > 20000 ? 1.5 : 2.5) * dpr));
    // Counting sort by colour.
    const starts = new Uint32Array(BUCKETS + 2);
    for (let i = 0; i < n; i++) starts[this.colour[i] + 1]++;
    for (let c = 1; c < starts.length; c++) starts[c] += starts[c - 1];
    const order = new Uint32Array(n);
    for (let i = 0; i < n; i++) order[starts[this.colour[i]]++] = i;
    // Grey (no CPU known) first, then blue to red.
    const drawOrder = [BUCKETS, ...Array.from({ length: BUCKETS }, (_, c) => c)];
    const first = new Uint32Array(BUCKETS + 2);
    for (let i = 0; i < n; i++) first[this.colour[i] + 1]++;
    for (let c = 1; c < first.length; c++) first[c] += first[c - 1];
    for (const c of drawOrder) {
      const px = PIXELS[c];
      for (let k = first[c]; k < first[c + 1]; k++) {
        const i = order[k];
        const cx = Math.round(this.px[i] * dpr);
        const cy = Math.round(this.py[i] * dpr);
        const x0 = Math.max(0, cx - r);
        const x1 = Math.min(w, cx + r);
        for (let y = Math.max(0, cy - r); y < Math.min(h, cy + r); y++) {
          buf.fill(px, y * w + x0, y * w + x1);
        }
      }
    }
    const layer = document.createElement("canvas");
    layer.width = w;
    layer.height = h;
    layer.getContext("2d").putImageData(img, 0, 0);
    ctx.save();
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.drawImage(layer, 0, 0);
    ctx.restore();
  }

  /** The base image, then the brush or the hovered point. */
  redrawOverlay() {
    if (!this.base) return;
    const ctx = this.canvas.getContext("2d");
    const dpr = this.canvas.width / this.width;
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.drawImage(this.base, 0, 0);
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    if (this.dragFrom != null && this.dragTo != null) {
      const [a, b] = [this.dragFrom, this.dragTo].sort((x, y) => x - y);
      ctx.fillStyle = "rgba(194, 65, 12, 0.15)";
      ctx.fillRect(a, PAD.top, b - a, HEIGHT - PAD.top - PAD.bottom);
    }
    if (this.hoverAt != null) {
      const i = this.hoverAt;
      ctx.strokeStyle = "#111";
      ctx.lineWidth = 2;
      ctx.beginPath();
      ctx.arc(this.px[i], this.py[i], 5, 0, 2 * Math.PI);
      ctx.stroke();
    }
  }

  xy(e) {
    const r = this.canvas.getBoundingClientRect();
    return { x: e.clientX - r.left, y: e.clientY - r.top };
  }

  /** The point nearest (x, y) within 8 px, or null. */
  nearest(x, y) {
    if (!this.grid) return null;
    const { cols, rows, starts, order } = this.grid;
    const cx = Math.floor(x / CELL);
    const cy = Math.floor(y / CELL);
    let best = null;
    let bestD = 64;
    for (let gy = Math.max(0, cy - 1); gy <= Math.min(rows - 1, cy + 1); gy++) {
      for (let gx = Math.max(0, cx - 1); gx <= Math.min(cols - 1, cx + 1); gx++) {
        const cell = gy * cols + gx;
        for (let k = starts[cell]; k < starts[cell + 1]; k++) {
          const i = order[k];
          const d = (this.px[i] - x) ** 2 + (this.py[i] - y) ** 2;
          if (d < bestD) { bestD = d; best = i; }
        }
      }
    }
    return best;
  }

  move(e) {
    const { x, y } = this.xy(e);
    if (this.dragFrom != null && e.buttons & 1) {
      this.dragTo = x;
      this.tip.hidden = true;
      this.redrawOverlay();
      return;
    }
    const i = this.nearest(x, y);
    this.hoverAt = i;
    this.redrawOverlay();
    if (i == null) { this.tip.hidden = true; return; }
    this.showTip(i, x, y);
  }

  /** The tooltip of point `i`, beside (x, y) in the canvas. */
  showTip(i, x, y) {
    const d = this.data;
    const cpu = d.unit === "nanoseconds" ? `${units.duration(d.cpu[i])} CPU (${units.percent(d.cpu[i], d.duration_ns[i])})`
      : d.cpu[i] ? units.value(d.cpu[i], d.unit) : "no samples";
    this.tip.replaceChildren(el("div", { class: "tt-name" }, d.names[d.name[i]]),
      el("div", {}, `${d.names[d.service[i]]} · ${units.duration(d.duration_ns[i])} · ${cpu}`),
      el("div", {}, units.clock(d.start_ms[i])));
    this.tip.hidden = false;
    this.tip.style.left = `${Math.min(x + 12, this.width - 260)}px`;
    this.tip.style.top = `${y + 12}px`;
  }

  up(e) {
    if (this.dragFrom == null) return;
    const from = this.dragFrom;
    const to = this.dragTo;
    this.dragFrom = null;
    this.dragTo = null;
    if (to != null && Math.abs(to - from) >= 4) {
      this.redrawOverlay();
      const plotW = this.width - PAD.left - PAD.right;
      const { t1, t2 } = this.scale;
      const ms = (x) => t1 + ((Math.min(Math.max(x, PAD.left), this.width - PAD.right) - PAD.left) / plotW) * (t2 - t1);
      const [a, b] = [ms(from), ms(to)].sort((p, q) => p - q);
      this.onBrush(Math.floor(a), Math.ceil(b));
      return;
    }
    if (e.target !== this.canvas) return;
    const { x, y } = this.xy(e);
    const i = this.nearest(x, y);
    if (i != null) this.onOpen(i);
  }
}
