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

// The token a server with credentials asks for: kept for this browser tab's session only
// (sessionStorage), sent as `Authorization: Bearer` on every request.
const TOKEN_KEY = "spanprof.token";

/** The token signed in with, or null. */
export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

/** Keeps `value` as the session's token (null forgets it). */
export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

function headers(accept) {
  const h = { Accept: accept };
  const t = token();
  if (t) h.Authorization = `Bearer ${t}`;
  return h;
}

/** Fetches `u`; a 401 tells the app (it asks for a token) before the caller sees the error. */
async function send(u, accept) {
  let response;
  try {
    response = await fetch(u, { headers: headers(accept) });
  } catch (e) {
    throw new ApiError(`cannot reach the server (${e.message})`, 0);
  }
  if (response.status === 401) {
    window.dispatchEvent(new CustomEvent("spanprof:unauthorized"));
    throw new ApiError(token() ? "the server refused the token" : "the server needs a token", 401);
  }
  return response;
}

/** GETs an endpoint; a non-2xx answer throws an ApiError carrying the server's message. */
export async function get(endpoint, params = {}) {
  const u = url(endpoint, params);
  const response = await send(u, "application/json");
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

/**
 * Saves what `endpoint` answers as the file `filename`: fetched with the token (a plain link
 * cannot send one), then handed to the browser as a download.
 */
export async function download(endpoint, params, filename) {
  const response = await send(url(endpoint, params), "*/*");
  if (!response.ok) throw new ApiError(`${endpoint} answered ${response.status}`, response.status);
  const blob = URL.createObjectURL(await response.blob());
  const a = document.createElement("a");
  a.href = blob;
  a.download = filename;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(blob), 60000);
}
