// A span's focus switch (what its flame graph holds) and the banner that says how many of
// the profile windows that watched it are in, asking again by itself until all are in or
// no more can come.

import * as api from "./api.js";
import { el, notice, remoteNote, replace } from "./dom.js";
import * as units from "./units.js";

/** The focus modes, as the `focus` parameter names them. */
export const FOCUS = [
  ["span", "this span", "its own samples only"],
  ["children", "with child spans", "its samples and its descendants'"],
  ["during", "process during span", "every span of its service that ran meanwhile: siblings, other requests (contention)"],
  ["window", "whole window", "everything the profile windows around it recorded"],
];

/** The focus in the URL (`focus`, or the older `children=1`), `span` by default. */
export function focusOf(params) {
  if (FOCUS.some(([v]) => v === params.focus)) return params.focus;
  return params.children === "1" ? "children" : "span";
}

/** A group of buttons choosing the focus; `onChoose(mode)`. Tab reaches each button. */
export function focusSwitch(current, onChoose) {
  return el("div", { class: "focus-switch", role: "group", "aria-label": "flame graph focus" },
    el("span", { class: "muted" }, "Focus: "),
    FOCUS.map(([value, label, what]) => el("button", {
      type: "button", class: `focus-${value}${value === current ? " active" : ""}`,
      "aria-pressed": String(value === current), title: what, dataset: { focus: value },
      onclick: () => { if (value !== current) onChoose(value); },
    }, label)));
}

/** Seconds from now to `ns` (a string), at least 0. */
function secondsTo(ns) {
  return Math.max(0, Math.round((Number(BigInt(ns) / 1000000n) - Date.now()) / 1000));
}

/**
 * Watches one span's windows (`/spans/{id}`): shows where they stand in `box` and asks
 * again while more may come; `onChange(answer)` when a window came or the state changed.
 */
export class WindowWatch {
  constructor(box, onChange) {
    this.box = box;
    this.onChange = onChange;
    this.generation = 0;
  }

  /** Watches span `spanId` of trace `traceId` and `type` (stops watching the one before). */
  watch(spanId, type, traceId) {
    const generation = ++this.generation;
    clearTimeout(this.timer);
    this.last = null;
    replace(this.box);
    this.poll(spanId, type, generation, traceId);
  }

  stop() {
    this.generation++;
    clearTimeout(this.timer);
  }

  async poll(spanId, type, generation, traceId) {
    let answer;
    try {
      // The trace lets a remote backend find the span (Tempo looks spans up by trace).
      answer = await api.get(`spans/${encodeURIComponent(spanId)}`, { type, trace_id: traceId });
    } catch (e) {
      if (generation === this.generation) replace(this.box, notice("error", "The span's windows could not be read", e.message));
      return;
    }
    // A newer span was opened, or the view left the page: this answer is not wanted.
    if (generation !== this.generation || !this.box.isConnected) return;
    const w = answer.windows;
    const key = `${w.state}:${w.in}:${w.expected}:${answer.span.total}:${answer.span.coverage}`;
    const changed = this.last !== null && this.last !== key;
    this.last = key;
    this.answer = answer;
    this.show(answer);
    if (changed) this.onChange(answer);
    if (w.more_may_come) {
      this.timer = setTimeout(() => this.poll(spanId, type, generation, traceId), answer.retry_after_ms || 3000);
    }
  }

  show({ windows: w, remote }) {
    const of = w.expected != null ? `${w.in} of ${w.expected} window${w.expected === 1 ? "" : "s"} in` : "";
    if (w.state === "partial") {
      replace(this.box, notice("info", `Partial: ${of}`,
        "The profile of part of this span's time has not arrived yet, so its figures are too small. " +
        (w.expected_by_ns ? `The last window it needs ends in about ${secondsTo(w.expected_by_ns)} s; ` : "") +
        "this view refreshes by itself until it is in."));
    } else if (w.state === "pending") {
      replace(this.box, notice("info", "Profile pending: no window of this span's time is in yet",
        (w.expected_by_ns ? `The window it needs ends in about ${secondsTo(w.expected_by_ns)} s; ` : "") +
        "a scraped window is stored when it ends, a pushing profiler's with its next upload. " +
        "This view refreshes by itself."));
    } else if (w.state === "closed") {
      replace(this.box, notice("empty", w.recorded
        ? `Recorded data: ${of}`
        : `Incomplete: ${of}, and no more will come`,
      w.recorded
        ? "This is the demo's recording: the profile windows after its end were never recorded, " +
          "so nothing more will arrive for this span."
        : "The profiler stopped, or its windows were lost: the figures cover only the part of the span " +
          "that the stored windows watched."));
    } else if (w.state === "complete" && w.in > 0) {
      replace(this.box, el("p", { class: "muted windows-complete" },
        (w.in === 1 ? "The profile window of this span's time is in" : `All ${w.in} profile windows of this span's time are in`) +
        (w.window_ns ? ` (${units.duration(w.window_ns)}${w.in === 1 ? "" : " each"})` : "") + "."));
    } else if (w.state === "unknown" && remote) {
      replace(this.box, remoteNote(remote));
    } else {
      replace(this.box);
    }
    this.box.dataset.state = w.state;
  }
}
