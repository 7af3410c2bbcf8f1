// What the Traces search and a trace's view share: the service and time-range pickers, the
// search's attribute pairs, and how spans' counts, totals and failures are written. Kept
// apart from traces.js so the search (the landing page) loads without the trace view.

import * as api from "./api.js";
import { SEARCH_SERVICES } from "./boot.js";
import { el, replace } from "./dom.js";
import * as units from "./units.js";

const CUSTOM = "custom";

const RANGES = [["", "all time"], ["now-15m", "last 15 minutes"], ["now-1h", "last hour"],
  ["now-6h", "last 6 hours"], ["now-24h", "last 24 hours"], ["now-7d", "last 7 days"]];

/** A time-range picker: presets, or any `from`/`to` the API reads (RFC 3339, unix, now-1h). */
export function timeRange(params) {
  // Each box as wide as its value (a brushed range's RFC 3339 times were cut at 22 chars).
  const from = el("input", { name: "from", value: params.from || "", placeholder: "from: now-1h, RFC 3339",
    "aria-label": "from", size: Math.max(22, (params.from || "").length) });
  const to = el("input", { name: "to", value: params.to || "", placeholder: "to: now", "aria-label": "to",
    size: Math.max(12, (params.to || "").length) });
  // A range that is none of the presets shows as "custom", not as the first preset.
  const isPreset = !params.to && RANGES.some(([v]) => v === (params.from || ""));
  const options = isPreset ? RANGES : [...RANGES, [CUSTOM, "custom range"]];
  const preset = el("select", { "aria-label": "time range",
    onchange: () => { if (preset.value !== CUSTOM) { from.value = preset.value; to.value = ""; } } },
  options.map(([v, label]) => el("option", {
    value: v, selected: v === CUSTOM ? !isPreset : isPreset && (params.from || "") === v,
  }, label)));
  return { nodes: [preset, from, to], read: () => ({ from: from.value.trim(), to: to.value.trim() }) };
}

/**
 * A service picker filled from `/services` (with `spans`, also the services that only sent
 * spans, or sent them under another name); resolves to the list (empty: no data yet).
 */
export async function servicePicker(select, chosen, spans = false) {
  // The search's own request, which boot.js may have started as the page opened.
  const { services } = await (spans ? api.get(...SEARCH_SERVICES) : api.get("services"));
  replace(select, el("option", { value: "" }, "all services"),
    services.map((s) => el("option", { value: s, selected: s === chosen }, s)));
  if (chosen && !services.includes(chosen)) select.appendChild(el("option", { value: chosen, selected: true }, chosen));
  return services;
}

/** `1 span`, `3 spans`. */
export function plural(n, word) {
  return `${units.grouped(Number(n))} ${word}${Number(n) === 1 ? "" : "s"}`;
}

/** `key=value` as `wherePairs` reads it back: the value in double quotes when it has spaces
 * or is empty; null when it cannot be written (a double quote in the value, a space in the
 * key). */
export function wherePair(key, value) {
  if (value.includes('"') || /\s/.test(key)) return null;
  return `${key}=${/\s/.test(value) || value === "" ? `"${value}"` : value}`;
}

/** The heading of the spans' own totals: what their type measures (each span's total is in
 * the type of its own samples; a service without CPU profiles has wall-clock time or counts). */
export function totalHeading(spans) {
  const kinds = new Set(spans.map((s) => String(s.profile_type || "").split(":")[1]).filter(Boolean));
  if (kinds.size !== 1) return "Total";
  const [kind] = kinds;
  return { cpu: "CPU", wall: "Wall time", samples: "CPU samples" }[kind] || kind;
}

/** "error: its message" (or "error") for a span whose status is an error; null for others. */
export function failure(span) {
  if (span.status_code !== 2) return null;
  return span.status_message ? `error: ${span.status_message}` : "error";
}

/** Sampling periods a span lasted, as shown: one decimal under 10 (2.3, not 2 beside 3). */
export function expected(periods) {
  return periods < 10 ? String(Number(periods.toFixed(1))) : String(Math.round(periods));
}

/** Where the search view keeps its URL (its hash), for the trace view's way back. */
export const LAST_SEARCH_KEY = "spanprof.traces.search";
