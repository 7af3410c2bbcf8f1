// Numbers as people read them: CPU in ms/s, memory in KB/MB, counts with separators.

const NS_UNITS = [[3600e9, "h"], [60e9, "min"], [1e9, "s"], [1e6, "ms"], [1e3, "µs"], [1, "ns"]];
const BYTE_UNITS = [[2 ** 40, "TB"], [2 ** 30, "GB"], [2 ** 20, "MB"], [2 ** 10, "KB"], [1, "B"]];

function scaled(v, table) {
  // Nothing is nothing in every unit ("0", not "0 ns" beside "1.2 s" in a column).
  if (v === 0) return "0";
  const abs = Math.abs(v);
  for (const [size, name] of table) {
    if (abs >= size) return `${trim(v / size)} ${name}`;
  }
  return `${trim(v)} ${table[table.length - 1][1]}`;
}

/**
 * `x` with its whole part's digits grouped by three ("12,345.6"; at most 3 decimals), as
 * en-US writes it, without Intl: the first Intl call loads the locale's data, about 20 ms of
 * the page's first load.
 */
export function grouped(x) {
  x = Number(x);
  if (!Number.isFinite(x)) return String(x);
  const [whole, frac] = String(Number.isInteger(x) ? x : Number(x.toFixed(3))).split(".");
  const sign = whole.startsWith("-") ? "-" : "";
  const digits = whole.slice(sign.length).replace(/\B(?=(\d{3})+$)/g, ",");
  return `${sign}${digits}${frac ? `.${frac}` : ""}`;
}

function trim(x) {
  const a = Math.abs(x);
  const digits = a >= 100 ? 0 : a >= 10 ? 1 : 2;
  return grouped(Number(x.toFixed(digits)));
}

/** A duration given in nanoseconds. */
export function duration(ns) {
  return scaled(Number(ns), NS_UNITS);
}

/** A value in a profile type's unit (`summary.unit`). */
export function value(v, unit) {
  v = Number(v);
  switch (unit) {
    case "nanoseconds": return duration(v);
    case "microseconds": return duration(v * 1e3);
    case "milliseconds": return duration(v * 1e6);
    case "seconds": return duration(v * 1e9);
    case "bytes": return scaled(v, BYTE_UNITS);
    case "count": case "samples": case null: case undefined: case "":
      return grouped(v);
    default: return `${grouped(v)} ${unit}`;
  }
}

/**
 * A selection's total as a heading says it, by what its profile type measures (the id
 * `name:sample_type:sample_unit:period_type:period_unit`): "1.2 s of CPU time",
 * "6.3 GB allocated", "12 MB in use", "1.9 min of lock wait", "252 goroutines".
 */
export function headline(total, profileType, unit) {
  const [name, sampleType] = String(profileType || "").split(":");
  const v = value(total, unit);
  if (!Number(total)) return "No samples";
  switch (sampleType) {
    case "cpu": return `${v} of CPU time`;
    case "wall": return `${v} of wall-clock time`;
    case "samples": return `${v} samples`;
    case "alloc_space": return `${v} allocated`;
    case "alloc_objects": return `${v} objects allocated`;
    case "inuse_space": return `${v} in use`;
    case "inuse_objects": return `${v} objects in use`;
    case "goroutine": case "goroutines": return `${v} goroutine${Number(total) === 1 ? "" : "s"}`;
    case "contentions": return `${v} ${name === "block" ? "blocking events" : "contentions"}`;
    case "delay": return name === "block" ? `${v} blocked` : `${v} of lock wait`;
    default: break;
  }
  if (unit === "nanoseconds") return `${v} of time`;
  if (unit === "bytes") return `${v} of memory`;
  return unit && unit !== "count" ? v : `${v} ${sampleType || "samples"}`;
}

export function percent(part, whole) {
  if (!whole) return "0%";
  const p = (100 * part) / whole;
  return `${p >= 10 ? p.toFixed(1) : p.toFixed(2)}%`;
}

// Times read in the browser's time zone, or in UTC when the header's switch says so (kept
// in localStorage: the choice is the reader's, not a view's).
const UTC_KEY = "spanprof.utc";

/** Whether times are shown in UTC (else in the browser's time zone). */
export function utc() {
  return localStorage.getItem(UTC_KEY) === "1";
}

export function setUtc(on) {
  if (on) localStorage.setItem(UTC_KEY, "1");
  else localStorage.removeItem(UTC_KEY);
}

const pad = (n, w = 2) => String(n).padStart(w, "0");

function parts(ms) {
  const d = new Date(ms);
  return utc()
    ? [d.getUTCFullYear(), d.getUTCMonth() + 1, d.getUTCDate(), d.getUTCHours(), d.getUTCMinutes(), d.getUTCSeconds()]
    : [d.getFullYear(), d.getMonth() + 1, d.getDate(), d.getHours(), d.getMinutes(), d.getSeconds()];
}

/** A time in ms since the epoch as "2026-05-01 14:03:05" (" UTC" after it in UTC). */
export function clock(ms) {
  const [y, mo, d, h, mi, s] = parts(ms);
  return `${y}-${pad(mo)}-${pad(d)} ${pad(h)}:${pad(mi)}:${pad(s)}${utc() ? " UTC" : ""}`;
}

/** A time of day for an axis: "14:03:05", or "14:03" when `seconds` is false. */
export function timeOfDay(ms, seconds = true) {
  const [, , , h, mi, s] = parts(ms);
  return seconds ? `${pad(h)}:${pad(mi)}:${pad(s)}` : `${pad(h)}:${pad(mi)}`;
}

/**
 * A time in ms as RFC 3339 in the shown time zone, whole seconds: "2026-05-01T14:03:05+02:00"
 * (or "…Z"), which the API reads and a person can too.
 */
export function isoTime(ms) {
  const [y, mo, d, h, mi, s] = parts(ms);
  let zone = "Z";
  if (!utc()) {
    const off = -new Date(ms).getTimezoneOffset();
    zone = off === 0 ? "Z" : `${off < 0 ? "-" : "+"}${pad(Math.floor(Math.abs(off) / 60))}:${pad(Math.abs(off) % 60)}`;
  }
  return `${y}-${pad(mo)}-${pad(d)}T${pad(h)}:${pad(mi)}:${pad(s)}${zone}`;
}

/** A time given as ns since the epoch in a string (too big for a JS number). */
export function timestamp(nsString) {
  return clock(Number(BigInt(nsString) / 1000000n));
}
