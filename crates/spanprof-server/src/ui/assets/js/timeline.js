// The timeline of a selection: its totals per time step (`/api/v1/timeseries`) as bars on a
// canvas with a time axis and a value scale, hover values, and each bar's exemplars (its
// spans with most CPU, marked on the bar; a click lists them as links); a brush: drag across
// it to narrow the time range to what was dragged over.

import * as api from "./api.js";
import { canvasContext, el, remoteNote, replace, themeColour } from "./dom.js";
import * as units from "./units.js";

const HEIGHT = 110;
/** The plot's margins, in CSS pixels: the value scale on the left, the time axis below. */
const LEFT = 62;
const TOP = 8;
const BOTTOM = 20;
/** Exemplar spans asked per bar. */
const EXEMPLARS = 3;
/** Tick steps of the time axis, in ms. */
const TICKS_MS = [1e3, 2e3, 5e3, 10e3, 15e3, 30e3, 60e3, 120e3, 300e3, 600e3, 900e3, 1800e3, 3600e3,
  7200e3, 10800e3, 21600e3, 43200e3, 86400e3];
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
    this.canvas = el("canvas", { class: "timeline", role: "img", tabindex: "0",
      "aria-label": "totals over time; drag across to narrow the time range; arrows pick a bar, Enter lists its spans" });
    this.tooltip = el("div", { class: "tooltip timeline-tip", hidden: true });
    this.caption = el("div", { class: "timeline-caption muted" });
    this.exemplarBox = el("div", { class: "exemplars", hidden: true });
    this.root = el("div", { class: "timeline-wrap" }, this.canvas, this.tooltip, this.caption, this.exemplarBox);
    container.appendChild(this.root);
    this.canvas.timeline = this; // lets the browser test find the domain
    this.points = [];
    this.drag = null;
    this.hovered = -1;
    this.canvas.addEventListener("mousedown", (e) => {
      this.drag = { x0: this.x(e), x1: this.x(e) };
      e.preventDefault();
    });
    this.canvas.addEventListener("mousemove", (e) => !this.drag && this.hover(this.barAt(this.x(e))));
    this.canvas.addEventListener("mouseleave", () => this.hover(-1));
    this.canvas.addEventListener("keydown", (e) => this.onKey(e));
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
      if (b - a < 4) {
        // A click, not a drag: list the clicked bar's spans.
        this.draw();
        this.pin(this.barAt(d.x0));
        return;
      }
      const [t0, t1] = this.domain;
      // Snapped outwards to whole bars (buckets start at the domain's start), so the range
      // keeps every bar the drag touched.
      const step = this.stepMs;
      const from = t0 + Math.floor((this.timeAt(a) - t0) / step) * step;
      const to = Math.max(from + step, t0 + Math.ceil((this.timeAt(b) - t0) / step) * step);
      this.onRange(Math.max(t0, from), Math.min(t1, to));
    });
    new ResizeObserver(() => this.draw()).observe(this.root);
  }

  x(e) {
    const r = this.canvas.getBoundingClientRect();
    return Math.max(LEFT, Math.min(r.width, e.clientX - r.left));
  }

  width() {
    return this.root.clientWidth || 800;
  }

  /** The x of time `ms` on the canvas, in CSS pixels (the test brushes with it). */
  xOf(ms) {
    const [t0, t1] = this.domain;
    return LEFT + ((ms - t0) / (t1 - t0 || 1)) * (this.width() - LEFT);
  }

  timeAt(x) {
    const [t0, t1] = this.domain;
    return t0 + ((x - LEFT) / (this.width() - LEFT)) * (t1 - t0);
  }

  /** The index of the bar under `x`, or -1. */
  barAt(x) {
    if (!this.domain) return -1;
    const t = this.timeAt(x);
    return this.points.findIndex(([at]) => at <= t && t < at + this.stepMs);
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
    const ask = (ms) => api.get("timeseries", { ...selection, from: String(from), step: `${ms}ms`, exemplars: EXEMPLARS });
    let d = await ask(stepMs);
    if (key !== this.key) return;
    // A profile counts whole at its time: steps shorter than its window (a scraped CPU
    // profile's 15 s) would draw each window as one spike with gaps after it.
    // (Not for one long upload among short ones: a window over a quarter of the range is
    // drawn as a spike rather than the whole timeline made of four bars.)
    const windowMs = Math.ceil(Number(d.profile_duration_ns || 0) / 1e9) * 1000;
    if (windowMs > stepMs && windowMs <= (to - from) / 4) {
      stepMs = windowMs;
      d = await ask(stepMs);
      if (key !== this.key) return;
    }
    this.stepMs = stepMs;
    this.domain = [from, to];
    this.unit = d.unit;
    // One series without group_by; several are summed per step, their exemplars merged.
    const sums = new Map();
    for (const s of d.series) {
      for (const p of s.points) {
        const at = sums.get(p.timestamp_ms) || { value: 0, exemplars: [] };
        at.value += p.value;
        at.exemplars.push(...(p.exemplars || []));
        sums.set(p.timestamp_ms, at);
      }
    }
    this.points = [...sums].sort((a, b) => a[0] - b[0]).map(([t, p]) =>
      [t, p.value, p.exemplars.sort((a, b) => b.value - a.value).slice(0, EXEMPLARS)]);
    this.hovered = -1;
    this.pin(-1);
    replace(this.caption, `${units.clock(from)} – ${units.clock(to)}, one bar per ${units.duration(stepMs * 1e6)}`,
      this.points.length ? " · drag across the timeline to narrow the range; click a bar for its costliest spans"
        : " · no samples in this range",
      // Over the remote backend: what the series cannot hold (exemplars of spans), as text.
      d.remote ? [" · ", remoteNote(d.remote, "span")] : null);
    this.draw();
  }

  /** Shows bar `i`'s value by the pointer (none for -1). */
  hover(i) {
    this.hovered = i;
    this.draw();
    if (i < 0) {
      this.tooltip.hidden = true;
      return;
    }
    const [t, v, ex] = this.points[i];
    replace(this.tooltip, el("div", { class: "tt-name" }, `${units.clock(t)} – ${units.timeOfDay(t + this.stepMs)}`),
      el("div", {}, units.value(v, this.unit)),
      ex.length ? el("div", {}, `${ex.length} costliest ${ex.length === 1 ? "span" : "spans"}: click to list`) : null);
    this.tooltip.hidden = false;
    const x = this.xOf(t);
    this.tooltip.style.left = `${Math.max(0, Math.min(x + 8, this.width() - 260))}px`;
    this.tooltip.style.top = `${TOP}px`;
  }

  /** Lists bar `i`'s exemplar spans as links to them (hides the list for -1). */
  pin(i) {
    this.pinned = i;
    if (i < 0 || !this.points[i]) {
      this.exemplarBox.hidden = true;
      replace(this.exemplarBox);
      return;
    }
    const [t, v, ex] = this.points[i];
    const item = (e) => {
      const what = [units.value(e.value, this.unit), " · span ", el("code", {}, e.span_id)];
      return el("li", {}, e.trace_id
        ? el("a", { class: "exemplar", href: `#/trace?${new URLSearchParams({ trace: e.trace_id, span: e.span_id })}` }, what)
        : what);
    };
    replace(this.exemplarBox,
      el("strong", {}, `${units.clock(t)} – ${units.timeOfDay(t + this.stepMs)}: ${units.value(v, this.unit)}`),
      ex.length ? [" · the spans with most of it:", el("ul", {}, ex.map(item))]
        : " · no span is linked to these samples");
    this.exemplarBox.hidden = false;
  }

  onKey(e) {
    if (!this.points.length) return;
    const last = this.points.length - 1;
    const at = this.hovered < 0 ? (this.pinned >= 0 ? this.pinned : -1) : this.hovered;
    if (e.key === "ArrowRight") this.hover(Math.min(last, at + 1));
    else if (e.key === "ArrowLeft") this.hover(Math.max(0, at < 0 ? last : at - 1));
    else if (e.key === "Enter" && at >= 0) this.pin(at);
    else if (e.key === "Escape") {
      this.hover(-1);
      this.pin(-1);
    } else return;
    e.preventDefault();
  }

  /** Time axis ticks: a step that puts labels about 110 px apart. */
  ticks(width) {
    const [t0, t1] = this.domain;
    const want = ((t1 - t0) / Math.max(1, width - LEFT)) * 110;
    const step = TICKS_MS.find((s) => s >= want) || TICKS_MS[TICKS_MS.length - 1];
    // Whole steps of the shown time zone (a 15 min tick at :00, :15, …).
    const offset = units.utc() ? 0 : -new Date(t0).getTimezoneOffset() * 60e3;
    const out = [];
    for (let t = Math.ceil((t0 + offset) / step) * step - offset; t <= t1; t += step) out.push(t);
    return { ticks: out, seconds: step < 60e3 };
  }

  draw() {
    const width = this.width();
    const ctx = canvasContext(this.canvas, width, HEIGHT);
    if (!this.domain) return;
    const fg = themeColour(this.canvas, "--fg", "#1d1d1f");
    const muted = themeColour(this.canvas, "--muted", "#6b6b70");
    const line = themeColour(this.canvas, "--line", "#e3e3e8");
    const [t0, t1] = this.domain;
    const plotH = HEIGHT - TOP - BOTTOM;
    const base = TOP + plotH;
    const max = Math.max(1, ...this.points.map(([, v]) => v));
    ctx.font = "11px system-ui, sans-serif";
    this.labels = { values: [], times: [] }; // what the axes say, for the browser test
    // The value scale: 0, half and the top, in the profile's unit.
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (const f of [0, 0.5, 1]) {
      const y = base - f * plotH;
      ctx.fillStyle = line;
      ctx.fillRect(LEFT, Math.round(y), width - LEFT, 1);
      ctx.fillStyle = muted;
      const label = units.value(max * f, this.unit);
      this.labels.values.push(label);
      ctx.fillText(label, LEFT - 6, y);
    }
    // The time axis.
    const { ticks, seconds } = this.ticks(width);
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    for (const t of ticks) {
      const x = this.xOf(t);
      ctx.fillStyle = line;
      ctx.fillRect(Math.round(x), base, 1, 4);
      ctx.fillStyle = muted;
      const label = units.timeOfDay(t, seconds);
      this.labels.times.push(label);
      // A label that would run past the right edge ends at it instead (not cut).
      const half = ctx.measureText(label).width / 2;
      ctx.fillText(label, Math.min(Math.max(x, LEFT + 20), width - 2 - half), base + 5);
    }
    const barW = Math.max(1, ((this.stepMs / (t1 - t0 || 1)) * (width - LEFT)) - 1);
    this.points.forEach(([t, v, ex], i) => {
      const x = this.xOf(t);
      const h = (v / max) * plotH;
      ctx.fillStyle = i === this.hovered || i === this.pinned ? "hsl(20, 90%, 42%)" : "hsl(20, 80%, 55%)";
      ctx.fillRect(x, base - h, barW, h);
      if (ex.length) {
        // An exemplar mark: a dot on the bar, the spans behind it a click away.
        ctx.fillStyle = fg;
        ctx.beginPath();
        ctx.arc(x + barW / 2, Math.max(TOP + 3, base - h - 4), Math.min(3, Math.max(1.5, barW / 2)), 0, 2 * Math.PI);
        ctx.fill();
      }
    });
    if (this.drag) {
      const [a, b] = [Math.min(this.drag.x0, this.drag.x1), Math.max(this.drag.x0, this.drag.x1)];
      ctx.fillStyle = "rgba(40, 90, 200, 0.2)";
      ctx.fillRect(a, TOP, b - a, plotH);
    }
  }
}
