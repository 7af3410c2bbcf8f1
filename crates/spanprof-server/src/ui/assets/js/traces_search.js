// The Traces page: search spans (service, name as a whole, a substring or a regex, with names
// offered as they are typed; duration, kind, attributes, time range), see them as a
// duration-over-time chart, and list them, or their traces, counted, sorted and paged. Every
// filter, the sort and the page live in the URL, so reload and the back link keep them.

import * as api from "./api.js";
import { el, howToSend, notice, replace } from "./dom.js";
import { SpanChart } from "./span_chart.js";
import { DEFAULT_PAGE, listQuery, searchFilters } from "./boot.js";
import { expected, failure, LAST_SEARCH_KEY, plural, servicePicker, timeRange, totalHeading } from "./search_common.js";
import * as units from "./units.js";

const PAGE_SIZES = [25, 50, 100, 500];
/** Sorts offered beside the headers ("most CPU" is the costly-spans view). */
const SORTS = [["duration:desc", "longest first"], ["cpu:desc", "most CPU (costly spans)"],
  ["start:desc", "newest first"], ["start:asc", "oldest first"], ["name:asc", "name A–Z"]];

/** "Traces", or what the search narrows to, for the page title. */
function titleOf(params) {
  const what = params.group === "trace" ? "Traces" : "Spans";
  const parts = [params.service, params.name && `"${params.name}"`].filter(Boolean);
  return `${what}${parts.length ? ` of ${parts.join(" ")}` : ""} · spanprof`;
}

export class TracesView {
  constructor(container, nav) {
    this.nav = nav;
    this.service = el("select", { name: "service", "aria-label": "service" });
    this.form = el("form", { class: "filters" });
    this.modes = el("div", { class: "modes", role: "group", "aria-label": "list spans or traces" });
    this.chart = new SpanChart({
      // The boxes say the range in the shown time zone, whole seconds rounded outwards (so
      // every brushed span stays in), as Explore's brush does: not UTC with milliseconds.
      onBrush: (fromMs, toMs) => this.nav.patch({ from: units.isoTime(Math.floor(fromMs / 1000) * 1000),
        to: units.isoTime(Math.ceil(toMs / 1000) * 1000), offset: "" }),
      onOpen: (i) => {
        const d = this.chart.data;
        this.nav.go("trace", { trace: d.trace_id[i], span: d.span_id[i] });
      },
    });
    this.chartBox = el("div", { class: "chart-slot" }, this.chart.node);
    this.summary = el("div", { class: "toolbar result-bar" });
    this.results = el("div", { class: "results" });
    this.names = el("datalist", { id: "span-name-options" });
    container.append(el("h1", {}, "Traces"), this.form, this.names, this.modes, this.chartBox, this.summary,
      this.results);
    this.pointsKey = null;
    // The chart follows the page's width (a scroll bar that came with the rows, a resize).
    let resized = 0;
    window.addEventListener("resize", () => {
      clearTimeout(resized);
      resized = setTimeout(() => this.fitChart(), 100);
    });
  }

  fitChart() {
    // Without points yet there is nothing to fit (and no layout to force before the rows show).
    if (this.chart.data && this.chartBox.isConnected && !this.chartBox.hidden) this.chart.fit(this.chartBox.clientWidth);
  }

  async update(params) {
    document.title = titleOf(params);
    sessionStorage.setItem(LAST_SEARCH_KEY, location.hash);
    this.drawForm(params);
    const byTrace = params.group === "trace";
    replace(this.modes, ...[["span", "Spans"], ["trace", "Traces"]].map(([g, label]) => {
      const on = (params.group || "span") === g;
      return el("button", { type: "button", class: `mode ${on ? "active" : ""}`, "aria-pressed": String(on),
        onclick: () => this.nav.patch({ group: g === "span" ? "" : g, offset: "" }) }, label);
    }));
    replace(this.results, el("p", { class: "muted" }, "Searching…"));
    // Only the latest search draws: an earlier one answered late is dropped.
    const search = {};
    this.search = search;
    const f = searchFilters(params);
    const pointsKey = JSON.stringify(f);
    let services;
    let page;
    // Marks the page load's steps for bench/ui-perf.sh (the Performance timeline).
    performance.mark("spanprof:search-start");
    try {
      [services, page] = await Promise.all([servicePicker(this.service, params.service, true),
        api.get("spans", listQuery(params))]);
    } catch (e) {
      if (this.search !== search) return;
      replace(this.summary);
      replace(this.results, notice("error", "The search failed", e.message));
      return;
    }
    if (this.search !== search) return;
    // The chart only when the filters changed (not for another page or sort), and after the
    // list: its points take longer than a page of rows, and would delay the first row.
    if (pointsKey !== this.pointsKey) {
      this.loadPoints(f, pointsKey).catch((e) => {
        this.pointsKey = null;
        replace(this.chart.caption, `The chart could not be loaded: ${e.message}`);
      });
    }
    const rows = byTrace ? page.traces : page.spans;
    if (!page.count) {
      replace(this.summary);
      replace(this.results, page.hint
        ? notice("empty", "No span matches", page.hint + ".")
        : services.length
        ? notice("empty", "No span matches", "Remove a filter or widen the time range" +
          (params.name && !params.match ? ` (the name matches whole: "${params.name}" must be a span's entire ` +
            "name; choose \"contains\" to find it inside names)" : "") + ". Spans arrive over OTLP traces.")
        : notice("empty", "No data yet", howToSend()));
      return;
    }
    performance.mark("spanprof:search-answered");
    this.drawSummary(page, params, rows.length);
    const rowOf = byTrace ? (t) => this.traceRow(t, page.unit) : (s) => this.spanRow(s);
    // The first screenful first (rows are ~25 px; the form and chart take the top): the rest
    // are built after that paint, in one fragment, so the first row waits for no other.
    const first = Math.min(rows.length, Math.max(8, Math.ceil(window.innerHeight / 25)));
    const body = el("tbody", {}, rows.slice(0, first).map(rowOf));
    const table = byTrace ? this.traceTable(page, body) : this.spanTable(page, body);
    replace(this.results, el("div", { class: "table-box" }, table));
    performance.mark("spanprof:rows-drawn");
    if (first < rows.length) {
      table.setAttribute("aria-busy", "true"); // tests and screen readers wait for the rest
      requestAnimationFrame(() => setTimeout(() => {
        if (!table.isConnected) return; // another search replaced it
        const rest = document.createDocumentFragment();
        for (const r of rows.slice(first)) rest.appendChild(rowOf(r));
        body.appendChild(rest);
        table.removeAttribute("aria-busy");
        performance.mark("spanprof:rows-all-drawn");
        this.fitChart();
      }, 0));
    } else {
      this.fitChart();
    }
  }

  async loadPoints(f, key) {
    this.pointsKey = key;
    const d = await api.get("span-points", f);
    if (key !== this.pointsKey) return; // another search's points came meanwhile
    this.chartBox.hidden = !d.shown;
    if (d.shown) this.chart.render(d, this.chartBox.clientWidth || this.results.clientWidth || 800);
  }

  drawForm(params) {
    const range = timeRange(params);
    const name = el("input", { name: "name", value: params.name || "", list: "span-name-options",
      placeholder: "span name, e.g. GET /users", "aria-label": "span name", size: 24, autocomplete: "off" });
    const match = el("select", { name: "match", "aria-label": "how the name matches",
      title: "exact: the whole name; contains: a part of it (case ignored); regex: a match anywhere in it" },
    ...[["", "exact"], ["contains", "contains"], ["regex", "regex"]].map(([v, label]) =>
      el("option", { value: v, selected: (params.match || "") === v }, label)));
    let typed = 0;
    name.addEventListener("input", () => {
      // Names from the store for what is typed, a moment after the last key.
      clearTimeout(typed);
      typed = setTimeout(() => this.suggest(name.value, this.service.value, range.read()), 150);
    });
    name.addEventListener("focus", () => this.suggest(name.value, this.service.value, range.read()), { once: true });
    const minDuration = el("input", { name: "min_duration", value: params.min_duration || "",
      placeholder: "min duration: 100ms", "aria-label": "minimum duration", size: 18 });
    const where = el("input", { name: "where", value: params.where || "",
      placeholder: "attributes: http.route=/cart", "aria-label": "attributes", size: 28,
      title: "key=value pairs, separated by spaces, that the span's attributes hold " +
        "(key=\"a value with spaces\"); resource.key=value: its resource's (the host, pod or " +
        "version that ran it); key!=value, key=~regex (whole value) and key!~regex for spans " +
        "that have the key with another value; key>=number (and >, <, <=) for a value that is " +
        "such a number, e.g. http.response.status_code>=500" });
    const kind = el("select", { name: "kind", "aria-label": "span kind",
      title: "the span's kind: server, the requests the service answered; client, the calls it made" },
    ...["", "server", "client", "internal", "producer", "consumer"].map((k) =>
      el("option", { value: k, selected: (params.kind || "") === k }, k || "any kind")));
    const failed = el("input", { type: "checkbox", name: "status", class: "errors-only",
      checked: params.status === "error" });
    replace(this.form, el("label", {}, "Service ", this.service), name, match, minDuration, kind, where,
      ...range.nodes, el("label", { class: "switch" }, failed, " errors only"),
      el("button", { type: "submit" }, "Search"));
    this.form.onsubmit = (e) => {
      e.preventDefault();
      // A new search starts at its first page, in the list and order chosen.
      this.nav.go("traces", { service: this.service.value, name: name.value.trim(), match: match.value,
        min_duration: minDuration.value.trim(), kind: kind.value, where: where.value.trim(),
        status: failed.checked ? "error" : "", ...range.read(), group: params.group, sort: params.sort,
        limit: params.limit });
    };
  }

  async suggest(text, service, range) {
    try {
      const { names } = await api.get("span-names", { q: text, service, ...range, limit: 20 });
      replace(this.names, names.map((n) => el("option", { value: n })));
    } catch {
      // Suggestions are a help: the search itself reports what is wrong.
    }
  }

  drawSummary(page, params, shown) {
    const what = params.group === "trace" ? "trace" : "span";
    const count = `${plural(page.count, what)}${page.more ? " or more" : ""} match`;
    const first = page.offset + 1;
    const last = page.offset + shown;
    const go = (offset) => this.nav.patch({ offset: offset ? String(offset) : "" });
    const sortBy = el("select", { "aria-label": "sort", class: "sort-by",
      onchange: () => this.nav.patch({ sort: sortBy.value === "duration:desc" ? "" : sortBy.value, offset: "" }) },
    SORTS.map(([v, label]) => el("option", { value: v, selected: `${page.sort}:${page.order}` === v }, label)));
    const size = el("select", { "aria-label": "rows per page",
      onchange: () => this.nav.patch({ limit: size.value === String(DEFAULT_PAGE) ? "" : size.value, offset: "" }) },
    PAGE_SIZES.map((n) => el("option", { value: n, selected: n === page.limit }, `${n} a page`)));
    replace(this.summary, el("strong", { class: "match-count" }, count),
      el("span", { class: "muted page-range" }, `showing ${units.grouped(first)}–${units.grouped(last)}`),
      el("span", { class: "spacer" }), el("label", {}, "Sort ", sortBy), size,
      el("button", { type: "button", class: "page-prev", disabled: page.offset === 0,
        onclick: () => go(Math.max(0, page.offset - page.limit)) }, "← previous"),
      el("button", { type: "button", class: "page-next", disabled: last >= page.count,
        onclick: () => go(page.offset + page.limit) }, "next →"));
  }

  /** A header that sorts by `key` (a button, so the keyboard reaches it), or plain text. */
  heading(label, key, page, cls = "") {
    if (!key) return el("th", { class: cls }, label);
    const active = page.sort === key;
    const next = active && page.order === "desc" ? "asc" : active ? "desc" : key === "name" ? "asc" : "desc";
    return el("th", { class: cls, "aria-sort": active ? (page.order === "desc" ? "descending" : "ascending") : "none" },
      el("button", { type: "button", class: `sort ${active ? "active" : ""}`, dataset: { sort: key },
        title: `sort by ${label.toLowerCase()}`,
        onclick: () => this.nav.patch({ sort: `${key}:${next}`, offset: "" }) },
      label, active ? (page.order === "desc" ? " ↓" : " ↑") : ""));
  }

  /** The span list's table around `body` (its rows' tbody). */
  spanTable(page, body) {
    const spans = page.spans;
    return el("table", { class: "spans" },
      el("thead", {}, el("tr", {}, this.heading("Duration", "duration", page, "num"), this.heading("Service", null, page),
        this.heading("Span", "name", page), this.heading("Start", "start", page),
        this.heading(totalHeading(spans), "cpu", page, "num"), this.heading("Samples / periods", null, page, "num"),
        this.heading("Coverage", null, page))),
      body);
  }

  spanRow(s) {
    const href = `#/trace?${api.query({ trace: s.trace_id, span: s.span_id })}`;
    return el("tr", { class: `span-row ${s.total > 0 ? "sampled" : ""}`, dataset: { spanId: s.span_id },
      onclick: () => this.nav.go("trace", { trace: s.trace_id, span: s.span_id }) },
    el("td", { class: "num" }, units.duration(s.duration_ns)),
    el("td", { class: "wrap" }, s.service),
    el("td", { class: "wrap name" }, el("a", { href, onclick: (e) => e.stopPropagation() }, s.name),
      failure(s) ? el("span", { class: "failed-mark", title: s.status_message || "" }, " error") : null),
    el("td", { class: "muted" }, units.timestamp(s.start_ns)),
    el("td", { class: "num", title: s.profile_type || "" }, s.total ? units.value(s.total, s.unit) : "–"),
    el("td", { class: "num", title: "samples taken / sampling periods the span ran outside its child spans: " +
      "the most one thread busy all the time would get (give or take one: sampling is random). " +
      "Fewer is no loss: the span waited, or shared its CPU" },
      `${s.samples}${s.possible_samples != null ? ` / ${expected(s.possible_samples)}` : ""}`),
    el("td", { class: `wrap coverage ${s.coverage === "sampled" ? "ok" : ""}` }, s.coverage));
  }

  /** The trace list's table around `body` (its rows' tbody). */
  traceTable(page, body) {
    return el("table", { class: "spans traces" },
      el("thead", {}, el("tr", {}, this.heading("Root span", "name", page), this.heading("Services", null, page),
        this.heading("Spans", null, page, "num"), this.heading("Start", "start", page),
        this.heading("Duration", "duration", page, "num"), this.heading("CPU", "cpu", page, "num"))),
      body);
  }

  traceRow(t, unit) {
    const href = `#/trace?${api.query({ trace: t.trace_id })}`;
    return el("tr", { class: "span-row trace-row", dataset: { traceId: t.trace_id },
      onclick: () => this.nav.go("trace", { trace: t.trace_id }) },
    el("td", { class: "wrap name" }, el("a", { href, onclick: (e) => e.stopPropagation() },
      t.root_name != null ? `${t.root_service}: ${t.root_name}` : `trace ${t.trace_id.slice(0, 8)}…`)),
    el("td", { class: "wrap" }, t.services.join(", ")),
    el("td", { class: "num", title: `${t.matched} of them match the search` }, `${t.matched} / ${t.spans}`),
    el("td", { class: "muted" }, units.timestamp(t.start_ns)),
    el("td", { class: "num" }, units.duration(t.duration_ns)),
    el("td", { class: "num" }, t.cpu ? units.value(t.cpu, unit) : "–"));
  }
}
