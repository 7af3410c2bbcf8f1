// The router: the view and its state live in the URL's hash (`#/trace?trace=…&span=…`), so
// a view can be shared and reloaded, and back/forward walk through it.

import { el, replace } from "./dom.js";
import { TraceView } from "./traces.js";
import { TracesView } from "./traces_search.js";
import { ExploreView } from "./explore.js";
import { CompareView } from "./compare.js";

const VIEWS = { traces: TracesView, trace: TraceView, explore: ExploreView, compare: CompareView };

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

function render() {
  const { name, params } = parse();
  for (const a of document.querySelectorAll("header nav a")) {
    a.classList.toggle("active", a.dataset.view === name || (name === "trace" && a.dataset.view === "traces"));
  }
  if (!current || current.name !== name) {
    const root = document.getElementById("view");
    const container = el("div", { class: `view view-${name}` });
    replace(root, container);
    current = { name, view: new VIEWS[name](container, nav) };
  }
  // The view's name in the title (tabs, history); a view may name more of what it shows.
  document.title = `${TITLES[name]}${name === "trace" && params.trace ? ` ${params.trace.slice(0, 8)}…` : ""} · spanprof`;
  current.view.update(params);
}

window.addEventListener("popstate", render);
window.addEventListener("hashchange", render);
render();
