// The router: the view and its state live in the URL's hash (`#/trace?trace=…&span=…`), so
// a view can be shared and reloaded, and back/forward walk through it.

import * as api from "./api.js";
import * as units from "./units.js";
import { el, notice, replace } from "./dom.js";
import { TracesView } from "./traces_search.js";

// The landing page's view (the Traces search) comes with this module; each other view's
// module is loaded when the view is first shown, so the first page does not wait for the
// flame graph's, the trace's or Compare's code. They are loaded once the first view is
// drawn, so the next view opens at once.
const VIEWS = {
  traces: async () => TracesView,
  trace: () => import("./traces.js").then((m) => m.TraceView),
  explore: () => import("./explore.js").then((m) => m.ExploreView),
  compare: () => import("./compare.js").then((m) => m.CompareView),
};

const TITLES = { traces: "Traces", trace: "Trace", explore: "Explore", compare: "Compare" };

function parse() {
  const hash = location.hash.replace(/^#\/?/, "");
  const [name, q = ""] = hash.split("?", 2);
  const params = {};
  for (const [k, v] of new URLSearchParams(q)) params[k] = v;
  return { name: VIEWS[name] ? name : "traces", params };
}

function hashOf(name, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") q.set(k, v);
  const s = q.toString();
  return `#/${name}${s ? `?${s}` : ""}`;
}

let current = null;

const nav = {
  /** Opens `name` with `params`; `push` adds a history entry (else replaces this one). */
  go(name, params, push = true) {
    const h = hashOf(name, params);
    if (h !== location.hash) history[push ? "pushState" : "replaceState"](null, "", h);
    render();
  },
  /** Changes some parameters of the current view. */
  patch(patch, push = true) {
    const { name, params } = parse();
    nav.go(name, { ...params, ...patch }, push);
  },
};

/** Renders counted: a render that waited for its view's module gives way to a later one. */
let renders = 0;

async function render() {
  const { name, params } = parse();
  const ticket = ++renders;
  for (const a of document.querySelectorAll("header nav a")) {
    a.classList.toggle("active", a.dataset.view === name || (name === "trace" && a.dataset.view === "traces"));
  }
  if (!current || current.name !== name) {
    const root = document.getElementById("view");
    let View;
    try {
      View = await VIEWS[name]();
    } catch (e) {
      if (ticket === renders) {
        replace(root, notice("error", "The view could not be loaded", e.message));
        rendered();
      }
      return;
    }
    if (ticket !== renders) return;
    const container = el("div", { class: `view view-${name}` });
    replace(root, container);
    current = { name, view: new View(container, nav) };
  }
  // The view's name in the title (tabs, history); a view may name more of what it shows.
  document.title = `${TITLES[name]}${name === "trace" && params.trace ? ` ${params.trace.slice(0, 8)}…` : ""} · spanprof`;
  current.view.update(params);
  rendered();
}

/**
 * Marks the hash the current view has been given. A navigation that changes only the hash
 * returns before `hashchange` runs, so a reader (the browser tests) waits for this mark before
 * reading the page. From here the Traces list and the trace view show "Searching…" or
 * "Loading…"; Explore and Compare keep their last graph until the new answer replaces it.
 */
function rendered() {
  document.documentElement.dataset.rendered = location.hash;
}

/**
 * The sign-in form, shown when the server answers 401: the token is kept for this tab's
 * session only, and checked against the server before the view comes back.
 */
function signIn() {
  const root = document.getElementById("view");
  if (root.querySelector(".sign-in")) return;
  current = null;
  const input = el("input", { type: "password", name: "token", autocomplete: "current-password",
    "aria-label": "token", placeholder: "Token", required: true });
  const status = el("div", { class: "sign-in-status" });
  if (api.token()) status.appendChild(notice("error", "The server refused the token."));
  api.setToken(null);
  const form = el("form", { class: "sign-in", onsubmit: async (e) => {
    e.preventDefault();
    api.setToken(input.value.trim());
    try {
      await api.get("status");
    } catch (err) {
      if (err.status === 401) api.setToken(null);
      replace(status, notice("error", err.status === 401 ? "The server refused the token." : err.message));
      input.select();
      return;
    }
    signedIn();
    render();
  } },
  el("h1", {}, "Sign in"),
  el("p", {}, "This spanprof needs a token with the read scope. It is kept for this browser " +
    "tab only, until you close it or sign out."),
  el("label", {}, "Token ", input), el("button", { type: "submit" }, "Sign in"), status);
  replace(root, form);
  document.title = "Sign in · spanprof";
  input.focus();
}

/** The header's sign-out button, while a token is kept. */
function signedIn() {
  const nav = document.querySelector("header nav");
  if (!api.token() || nav.querySelector(".sign-out")) return;
  nav.appendChild(el("button", { type: "button", class: "sign-out", onclick: () => {
    api.setToken(null);
    location.reload();
  } }, "Sign out"));
}

/** The header's time zone switch: the browser's (default) or UTC; views redraw their times. */
function zoneSwitch() {
  const box = el("input", { type: "checkbox", class: "utc-toggle", checked: units.utc(),
    onchange: () => {
      units.setUtc(box.checked);
      current = null;
      render();
    } });
  document.querySelector("header.top").appendChild(el("label", { class: "utc-switch",
    title: "show times in UTC instead of this browser's time zone" }, box, " UTC"));
}

window.addEventListener("spanprof:unauthorized", signIn);
// A link, the back button or a typed hash fire both events (popstate, then hashchange):
// the view renders once per hash, not once per event (a second render drew its answer
// again, replacing what the first had drawn).
const renderChanged = () => {
  if (document.documentElement.dataset.rendered !== location.hash) render();
};
window.addEventListener("popstate", renderChanged);
window.addEventListener("hashchange", renderChanged);
signedIn();
zoneSwitch();
render().then(() => {
  // The other views' modules, while the reader looks at the first one.
  const rest = () => Object.values(VIEWS).forEach((load) => load().catch(() => {}));
  if (window.requestIdleCallback) requestIdleCallback(rest, { timeout: 3000 });
  else setTimeout(rest, 1000);
});
