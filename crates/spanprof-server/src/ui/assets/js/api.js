// The JSON API under /api/v1/ (see crates/spanprof-server/src/api/query.rs).

import { headers, prefetched, token, url } from "./boot.js";

export class ApiError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

export { query, setToken, token, url } from "./boot.js";

/** Fetches `u`; a 401 tells the app (it asks for a token) before the caller sees the error. */
async function send(u, accept) {
  let response;
  try {
    // The Traces search's first requests may be on their way already (boot.js).
    response = await ((accept === "application/json" && prefetched(u)) || fetch(u, { headers: headers(accept) }));
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
