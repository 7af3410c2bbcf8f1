// The JSON API under /api/v1/ (see crates/spanprof-server/src/api/query.rs).

export class ApiError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

/** A query string from an object, leaving out empty values; arrays repeat the key. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null || v === "" || v === false) continue;
    for (const one of Array.isArray(v) ? v : [v]) q.append(k, String(one));
  }
  return q.toString();
}

export function url(endpoint, params = {}) {
  const q = query(params);
  return `/api/v1/${endpoint}${q ? `?${q}` : ""}`;
}

/** GETs an endpoint; a non-2xx answer throws an ApiError carrying the server's message. */
export async function get(endpoint, params = {}) {
  const u = url(endpoint, params);
  let response;
  try {
    response = await fetch(u, { headers: { Accept: "application/json" } });
  } catch (e) {
    throw new ApiError(`cannot reach the server (${e.message})`, 0);
  }
  const text = await response.text();
  let body = null;
  try {
    body = JSON.parse(text);
  } catch {
    /* not JSON: reported below */
  }
  if (!response.ok) {
    const why = body && body.error ? body.error : text.slice(0, 300) || response.statusText;
    throw new ApiError(`${u} answered ${response.status}: ${why}`, response.status);
  }
  if (body === null) throw new ApiError(`${u} answered something that is not JSON`, response.status);
  return body;
}

/** The selection parameters the flame graph, top, pprof and diff endpoints share. */
export const SELECTION_KEYS = ["service", "type", "from", "to", "query", "span_id", "trace_id",
  "include_child_spans", "span_name", "min_duration", "max_duration"];

export function selection(params) {
  const out = {};
  for (const k of SELECTION_KEYS) if (params[k]) out[k] = params[k];
  return out;
}
