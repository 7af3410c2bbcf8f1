// The timeline of a selection: its totals per time step (`/api/v1/timeseries`) as bars on a
// canvas, with a brush: drag across it to narrow the time range to what was dragged over.

import * as api from "./api.js";
import { canvasContext, el, replace } from "./dom.js";
import * as units from "./units.js";

const HEIGHT = 72;
/** Bars across the range: fine enough to see a spike, few enough to stay readable. */
const BUCKETS = 120;
const UNITS_MS = { ms: 1, s: 1e3, m: 60e3, h: 3600e3, d: 86400e3 };

/**
 * A time parameter as the API reads it (`now`, `now-15m`, unix s/ms/µs/ns, RFC 3339), in ms
 * since the epoch; null when empty or unreadable.
 */
export function resolveTime(s, nowMs) {
  const t = (s || "").trim();
  if (!t) return null;
  if (t === "now") return nowMs;
  const rel = /^now-((?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+)$/.exec(t);
  if (rel) {
    let ms = 0;
    for (const [, n, u] of rel[1].matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h|d)/g)) ms += Number(n) * UNITS_MS[u];
    return nowMs - ms;
  }
  if (/^-?\d+$/.test(t)) {
    const n = Number(t);
    const a = Math.abs(n);
    return a < 1e11 ? n * 1e3 : a < 1e14 ? n : a < 1e17 ? n / 1e3 : n / 1e6;
  }
  const d = Date.parse(t);
  return Number.isNaN(d) ? null : d;
}

/** The time of the first step with samples at `step`, in ms, or null when there is none. */
async function firstPoint(selection, step) {
  const d = await api.get("timeseries", { ...selection, step });
  const first = Math.min(...d.series.flatMap((s) => s.points.map((p) => p.timestamp_ms)));
  return Number.isFinite(first) ? first : null;
}

export class Timeline {
  /** `onRange(fromMs, toMs)` is called when the user drags over a range. */
  constructor(container, { onRange }) {
    this.onRange = onRange;
    this.canvas = el("canvas", { class: "timeline", role: "img",
      "aria-label": "totals over time; drag across to narrow the time range" });
    this.caption = el("div", { class: "timeline-caption muted" });
    this.root = el("div", { class: "timeline-wrap" }, this.canvas, this.caption);
    container.appendChild(this.root);
    this.canvas.timeline = this; // lets the browser test find the domain
    this.points = [];
    this.drag = null;
    this.canvas.addEventListener("mousedown", (e) => {
      this.drag = { x0: this.x(e), x1: this.x(e) };
      e.preventDefault();
    });
    window.addEventListener("mousemove", (e) => {
      if (!this.drag) return;
      this.drag.x1 = this.x(e);
      this.draw();
    });
    window.addEventListener("mouseup", () => {
      const d = this.drag;
      this.drag = null;
      if (!d || !this.domain) return;
      const [a, b] = [Math.min(d.x0, d.x1), Math.max(d.x0, d.x1)];
      if (b - a < 4) return this.draw(); // a click, not a drag
      const w = this.width();
      const [t0, t1] = this.domain;
      // Snapped outwards to whole bars (buckets start at the domain's start), so the range
      // keeps every bar the drag touched.
      const step = this.stepMs;
      const from = t0 + Math.floor(((a / w) * (t1 - t0)) / step) * step;
      const to = Math.max(from + step, t0 + Math.ceil(((b / w) * (t1 - t0)) / step) * step);
      this.onRange(from, to);
    });
    new ResizeObserver(() => this.draw()).observe(this.root);
  }

  x(e) {
    const r = this.canvas.getBoundingClientRect();
    return Math.max(0, Math.min(r.width, e.clientX - r.left));
  }

  width() {
    return this.root.clientWidth || 800;
  }

  /** Loads and draws the timeline of `selection` (API selection parameters). */
  async show(selection) {
    const key = api.query(selection);
    if (key === this.key) return;
    this.key = key;
    const now = Date.now();
    const to = resolveTime(selection.to, now) ?? now;
    let from = resolveTime(selection.from, now);
    if (from === null) {
      // All time: where the data starts, from an hourly pass, refined to 10 s when the data
      // is young (else a minute of data would be one bar at the end of an hour).
      from = (await firstPoint(selection, "1h")) ?? to - 3600e3;
      if (to - from < 6 * 3600e3) from = (await firstPoint({ ...selection, from: String(from) }, "10s")) ?? from;
    }
    if (to <= from) from = to - 60e3;
    let stepMs = Math.max(1000, Math.ceil((to - from) / BUCKETS / 1000) * 1000);
    let d = await api.get("timeseries", { ...selection, step: `${stepMs}ms` });
    if (key !== this.key) return;
    // A profile counts whole at its time: steps shorter than its window (a scraped CPU
    // profile's 15 s) would draw each window as one spike with gaps after it.
    // (Not for one long upload among short ones: a window over a quarter of the range is
    // drawn as a spike rather than the whole timeline made of four bars.)
    const windowMs = Math.ceil(Number(d.profile_duration_ns || 0) / 1e9) * 1000;
    if (windowMs > stepMs && windowMs <= (to - from) / 4) {
      stepMs = windowMs;
      d = await api.get("timeseries", { ...selection, step: `${stepMs}ms` });
      if (key !== this.key) return;
    }
    this.stepMs = stepMs;
    this.domain = [from, to];
    // One series without group_by; several are summed per step.
    const sums = new Map();
    for (const s of d.series) for (const p of s.points) sums.set(p.timestamp_ms, (sums.get(p.timestamp_ms) || 0) + p.value);
    this.points = [...sums].sort((a, b) => a[0] - b[0]);
    const shown = (ms) => units.timestamp(String(Math.round(ms)) + "000000");
    replace(this.caption, `${shown(from)} – ${shown(to)}, one bar per ${units.duration(stepMs * 1e6)}`,
      this.points.length ? " · drag across the timeline to narrow the range" : " · no samples in this range");
    this.draw();
  }

  draw() {
    const width = this.width();
    const ctx = canvasContext(this.canvas, width, HEIGHT);
    if (!this.domain) return;
    const [t0, t1] = this.domain;
    const span = t1 - t0 || 1;
    const max = Math.max(1, ...this.points.map(([, v]) => v));
    const barW = Math.max(1, (this.stepMs / span) * width - 1);
    ctx.fillStyle = "hsl(20, 80%, 55%)";
    for (const [t, v] of this.points) {
      const x = ((t - t0) / span) * width;
      const h = (v / max) * (HEIGHT - 4);
      ctx.fillRect(x, HEIGHT - h, barW, h);
    }
    ctx.fillStyle = "rgba(0, 0, 0, 0.12)";
    ctx.fillRect(0, HEIGHT - 1, width, 1);
    if (this.drag) {
      const [a, b] = [Math.min(this.drag.x0, this.drag.x1), Math.max(this.drag.x0, this.drag.x1)];
      ctx.fillStyle = "rgba(40, 90, 200, 0.2)";
      ctx.fillRect(a, 0, b - a, HEIGHT);
    }
  }
}
