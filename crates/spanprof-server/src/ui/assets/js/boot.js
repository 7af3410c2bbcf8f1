// The page's first requests, started the moment this small module (it imports nothing)
// arrives, while the views' modules are still on their way: on the Traces search (the landing
// page), its list of spans and the service picker's list. The request URLs and the token are
// made here, so the views (through api.js) ask for exactly these URLs and take the answers.

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

export function headers(accept) {
  const h = { Accept: accept };
  const t = token();
  if (t) h.Authorization = `Bearer ${t}`;
  return h;
}

/** The search's `where` text (`http.route=/cart resource.host.name=web-1`, a value with
 * spaces in double quotes: `span.name="GET /x"`; also `!=`, `=~`, `!~`, and `>=`, `<=`, `>`,
 * `<` to a number) as the spans API's
 * repeatable `attribute` and `resource` parameters; the API refuses a pair without one. */
export function wherePairs(where) {
  const attribute = [];
  const resource = [];
  const pairs = /(\S+?)(!=|!~|=~|>=|<=|=|>|<)(?:"([^"]*)"|(\S*))|(\S+)/g;
  for (const [, key, op, quoted, bare, alone] of String(where || "").matchAll(pairs)) {
    const pair = alone !== undefined ? alone : key + op + (quoted !== undefined ? quoted : bare);
    if (pair.startsWith("resource.")) resource.push(pair.slice("resource.".length));
    else attribute.push(pair);
  }
  return { attribute, resource };
}

/** Rows a page of the Traces search lists unless the URL says otherwise. */
export const DEFAULT_PAGE = 50;

/** The Traces search's filters in the URL's `params`, as the search endpoints take them. */
export function searchFilters(params) {
  return { service: params.service, name: params.name, name_match: params.name ? params.match || "" : "",
    min_duration: params.min_duration, status: params.status, kind: params.kind, ...wherePairs(params.where),
    from: params.from, to: params.to };
}

/** The Traces search's `/spans` parameters: its filters, sort, page and grouping. */
export function listQuery(params) {
  const [sort, order] = (params.sort || "duration:desc").split(":");
  return { ...searchFilters(params), sort, order, offset: Number(params.offset) || 0,
    limit: Number(params.limit) || DEFAULT_PAGE, group: params.group === "trace" ? "trace" : "" };
}

/** The service picker's request on the Traces search. */
export const SEARCH_SERVICES = ["services", { spans: true }];

const started = new Map();

/** The answer (a fetch promise) to a GET of `u` this module started, once; else null. */
export function prefetched(u) {
  const answer = started.get(u);
  started.delete(u);
  return answer || null;
}

/** Starts the Traces search's two requests when the page opens on it (its view is "" or
 * "traces", as app.js routes). */
function start() {
  const [name, q = ""] = location.hash.replace(/^#\/?/, "").split("?", 2);
  if (name !== "" && name !== "traces") return;
  const params = {};
  for (const [k, v] of new URLSearchParams(q)) params[k] = v;
  for (const u of [url(...SEARCH_SERVICES), url("spans", listQuery(params))]) {
    const answer = fetch(u, { headers: headers("application/json") });
    // Whoever takes it sees a failure; one nobody takes is no console error.
    answer.catch(() => {});
    started.set(u, answer);
  }
}

start();
