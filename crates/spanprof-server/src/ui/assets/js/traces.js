// One trace's waterfall whose spans open their own flame graph, and what the Traces search
// (traces_search.js) shares with it.

import * as api from "./api.js";
import { el, howToSend, notice, remoteNote, replace } from "./dom.js";
import { ProfilePanel } from "./profile_panel.js";
import { focusOf, focusSwitch, WindowWatch } from "./span_focus.js";
import { Waterfall } from "./waterfall.js";
import * as units from "./units.js";
import { expected, failure, LAST_SEARCH_KEY, plural, wherePair } from "./search_common.js";

/** Seconds since the span ended (its start and duration in ns, as strings or numbers). */
function endedSecondsAgo(span) {
  const endMs = Number((BigInt(span.start_ns) + BigInt(span.duration_ns)) / 1000000n);
  return (Date.now() - endMs) / 1000;
}

/** The span's own time (outside its child spans, whose samples are theirs), in ns. */
function ownNs(span) {
  return span.self_ns != null ? Number(span.self_ns) : Number(span.duration_ns);
}

/** "The span lasted 320 ms", or, when its children took part of it, "Outside its child
 * spans, the span ran 8 ms of its 320 ms". */
function ranFor(span) {
  return ownNs(span) < Number(span.duration_ns)
    ? `Outside its child spans, the span ran ${units.duration(ownNs(span))} of its ${units.duration(span.duration_ns)}`
    : `The span lasted ${units.duration(span.duration_ns)}`;
}

/** Why a span without samples points to an ancestor's ("samples on an ancestor span"), with a
 * link to it; `trace`: the span's trace as loaded, for the ancestor's name and samples. */
function ancestorLine(span, trace) {
  const ancestor = trace && trace.spans.find((s) => s.span_id === span.sampled_ancestor);
  const name = ancestor ? `"${ancestor.name}"` : `span ${span.sampled_ancestor}`;
  const href = `#/trace?${api.query({ trace: span.trace_id, span: span.sampled_ancestor })}`;
  return el("p", {}, `No sample names this span, but its ancestor ${name}` +
    (ancestor && ancestor.samples ? ` has ${plural(ancestor.samples, "sample")}` : " has samples") +
    `, and no ${span.name} span of ${span.service} has samples of its own: its profiler seems to ` +
    "label only the first span of each request (Pyroscope's OpenTelemetry integration, pyroscope-otel, " +
    `does). What this span ran, if anything, is in the flame graph of ${name}, with that span's own work. `,
  el("a", { href, class: "ancestor-link" }, `Open ${name}`), ".");
}

/** What a span's coverage verdict means, for a span whose flame graph is empty; `profiled`:
 * whether the server holds any profile at all (else nothing will arrive by waiting); `trace`:
 * the span's trace, when loaded. */
export function coverageNotice(span, profiled = true, trace = null) {
  const verdict = span.coverage;
  if (verdict === "samples on an ancestor span") {
    return notice("empty", `No samples in this span: ${verdict}`, ancestorLine(span, trace));
  }
  const period = span.period ? units.duration(span.period) : "the sampling period";
  const lines = {
    "shorter than the sampling period": `${ranFor(span)}, shorter than ` +
      `the sampling period (${period}): a profiler takes one sample per period, so a span this short ` +
      "is usually missed. Look at many such spans together (Explore with the span name).",
    "no CPU used": `${ranFor(span)} (${span.possible_samples != null
      ? `${span.possible_samples.toFixed(1)} sampling periods of ${period}` : "several sampling periods"}) ` +
      "without a CPU sample: most likely it was waiting (I/O, locks, other services), not computing, " +
      "or its process did not get a CPU. Its child spans may show where the time went.",
    "no samples": "This profile type has no sample naming the span.",
    "samples under a label that is no link key": `This span's samples are stored, but they carry its ` +
      `id under the label ${span.unlinked_span_key}, which spanprof does not read as a span id, so ` +
      `they are linked to no span (and each span made a series of its own). Restart spanprof with ` +
      `--span-id-key ${span.unlinked_span_key} (or add the key to processors.link.span_id_keys in ` +
      "the config file): samples received from then on are linked to their spans.",
    "profiles cover too little of the span": "The span fell (mostly) between two profiles: a pulling " +
      "profiler leaves short gaps between its windows, and the profiles cover " +
      (span.covered_ns != null
        ? (Number(span.covered_ns) > 0 ? `only ${units.duration(span.covered_ns)}` : "none") +
          ` of its ${units.duration(ownNs(span))}` +
        (ownNs(span) < Number(span.duration_ns) ? " outside its child spans" : "")
        : "too little of it") +
      ", too little to tell whether it computed or waited. Its neighbours in the trace, or a push " +
      "profiler, tell more.",
    "profile not received yet": `The span ended ${Math.max(0, Math.round(endedSecondsAgo(span)))} s ` +
      "ago, and the profile of the time it ran has not arrived yet: a scraped CPU profile comes at the " +
      "end of its window (15 s by default), a pushing profiler's (a Pyroscope SDK, an OpenTelemetry " +
      "profiler) with its next upload. Reload in a few seconds.",
    "no profile covers the span": !profiled
      ? "No profile is stored at all: spanprof gets the samples from a profiler, which it pulls " +
        "(spanprof serve --scrape name=http://host:6060 for a Go service's /debug/pprof) or which " +
        "pushes to it (a Pyroscope SDK to /ingest, an OpenTelemetry profiler over OTLP)."
      : "No profile was taken while this span ran: the profiler was not running, or its profiles did " +
        "not arrive.",
  };
  return notice("empty", `No samples in this span: ${verdict}`, lines[verdict] || "");
}

/** A note for a span with clearly more samples than the sampling periods it ran (one CPU
 * gives at most one a period, give or take the randomness of sampling): it ran on several
 * CPUs at once, or its profiler gives samples to spans approximately (a thread's span tag
 * is read when the sample is taken). None for other spans. */
function moreSamplesThanPeriods(span) {
  const possible = span.possible_samples;
  if (possible == null || !(span.samples > 1.25 * possible + 2)) return [];
  return [el("p", { class: "muted more-samples" }, `${plural(span.samples, "sample")} in ` +
    `${expected(possible)} sampling periods of its own time: it ran on more than one CPU at once ` +
    "(threads, goroutines), or its profiler tells spans apart only approximately.")];
}

/** OTLP span kinds by number (0, unspecified, is not shown). */
const SPAN_KINDS = ["", "internal", "server", "client", "producer", "consumer"];

/** What the tracer said of `span` beside its timing: its kind, an error status with its
 * message, and its attributes (`http.route`, `db.statement`, … : what the request was, to
 * read beside what its code ran); then, folded, what ran it: its resource's attributes
 * (host, pod, process, version); then what it said happened in it, its events (an
 * exception, a retry). None when it said nothing. */
function spanDetails(span) {
  const facts = [];
  const kind = SPAN_KINDS[span.kind];
  if (kind) facts.push(el("span", { class: "span-kind" }, kind));
  if (failure(span)) facts.push(el("span", { class: "span-error" }, failure(span)));
  const attributes = Object.entries(span.attributes || {});
  const resource = Object.entries(span.resource || {});
  const out = [];
  if (facts.length || attributes.length) {
    out.push(el("div", { class: "span-details" }, ...facts, ...attributes.map(searchable(span, ""))));
  }
  if (resource.length) {
    // The few that tell one instance from another, in the fold's title.
    const telling = RESOURCE_SUMMARY.filter((key) => key in span.resource).map((key) => span.resource[key]);
    out.push(el("details", { class: "span-resource" },
      el("summary", {}, `resource: ${[...telling, `${resource.length} attributes`].join(" · ")}`),
      el("div", { class: "span-details" }, ...resource.map(searchable(span, "resource.")))));
  }
  if ((span.events || []).length) out.push(el("ol", { class: "span-events" }, ...span.events.map((e) => spanEvent(span, e))));
  return out;
}

/** One event of `span`: when in the span (from its start), its name and attributes; an
 * exception's stack trace folded. */
function spanEvent(span, event) {
  const at = Number(BigInt(event.time_ns) - BigInt(span.start_ns));
  const { "exception.stacktrace": stack, ...rest } = event.attributes || {};
  return el("li", { class: "span-event" },
    el("span", { class: "muted" }, `${at < 0 ? "−" : "+"}${units.duration(Math.abs(at))} `),
    el("b", {}, event.name), " ",
    ...Object.entries(rest).map(attribute),
    stack === undefined ? null : el("details", {}, el("summary", {}, "stack trace"), el("pre", {}, stack)));
}

/** Resource attributes that name where a span ran, shown in this order before the resource
 * is unfolded. */
const RESOURCE_SUMMARY = ["host.name", "k8s.pod.name", "container.name", "service.version",
  "deployment.environment", "deployment.environment.name"];

/** An attribute as a chip (`tag` with `attrs`): its key, muted, then its value. */
function chip(tag, attrs, key, value) {
  return el(tag, { class: "span-attr", title: `${key} = ${value}`, ...attrs }, el("span", { class: "muted" }, key, " "), value);
}

function attribute([key, value]) {
  return chip("span", {}, key, value);
}

/** An attribute of `span` (or, with `prefix` "resource.", of its resource) as a link to the
 * search for the spans of its service that have it too: the other requests of that route,
 * the other spans of that host. One the search cannot write (a double quote) stays text. */
function searchable(span, prefix) {
  return ([key, value]) => {
    const pair = wherePair(prefix + key, value);
    if (pair === null) return attribute([key, value]);
    return chip("a", { title: `${key} = ${value} · the spans of ${span.service} with it`,
      href: `#/traces?${api.query({ service: span.service, where: pair })}` }, key, value);
  };
}

/** The way back to the search, with the filters it had (kept by the search view). */
function backToSearch() {
  const href = sessionStorage.getItem(LAST_SEARCH_KEY) || "#/traces";
  return el("a", { href: href.startsWith("#/traces") ? href : "#/traces", class: "back-to-search" },
    "← back to the search");
}

/** The span pane's least and default share, px, of the split (the waterfall's height below
 * 1200 px, its width from there on). */
const SPLIT_MIN_PX = 120;

export class TraceView {
  constructor(container, nav) {
    this.nav = nav;
    this.head = el("div", { class: "trace-head" });
    this.left = el("div", { class: "trace-left" });
    this.spanHead = el("div", { class: "span-head" });
    this.windowsBox = el("div", { class: "span-windows", "aria-live": "polite" });
    this.holds = el("p", { class: "muted focus-holds" });
    this.panelBox = el("div", {});
    this.right = el("div", { class: "trace-right" }, this.spanHead, this.windowsBox, this.holds, this.panelBox);
    this.resizer = el("div", { class: "split-resizer", role: "separator", tabindex: 0,
      "aria-label": "resize the waterfall (arrow keys)", onkeydown: (e) => this.resizeKey(e),
      onpointerdown: (e) => this.resizeStart(e) });
    this.split = el("div", { class: "trace-split" }, this.left, this.resizer, this.right);
    container.append(this.head, this.split);
    this.waterfall = new Waterfall(this.left, { failure,
      onOpen: (s) => this.nav.patch({ span: s.span_id, zoom: "", search: "" }) });
    this.panel = new ProfilePanel(this.panelBox, { onState: (p, push) => this.nav.patch(p, push),
      onData: (data) => replace(this.holds, data.focus ? `Holds ${data.focus.holds}.` : "") });
    this.watch = new WindowWatch(this.windowsBox, (answer) => this.windowsChanged(answer));
    this.panelBox.hidden = true;
    this.split.hidden = true;
    this.traceId = null;
  }

  async update(params) {
    this.params = params;
    // A span's type picker reloads the trace too: its totals are in the type chosen.
    if (params.trace !== this.traceId || (params.type || "") !== this.typeShown) {
      this.traceId = params.trace;
      this.typeShown = params.type || "";
      this.trace = null;
      this.watch.stop();
      this.watched = null;
      replace(this.head, el("p", { class: "muted" }, "Loading the trace…"));
      this.split.hidden = true;
      replace(this.spanHead);
      this.panelBox.hidden = true;
      if (!(await this.load(params))) return;
    }
    if (!this.trace) return;
    this.select(params);
  }

  /** Loads the trace of `params` and draws it; false when it could not (said in the head). */
  async load(params) {
    // Answers to an earlier load (another trace, or type) that come late are dropped.
    const load = {};
    this.loading = load;
    let trace;
    try {
      trace = await api.get(`traces/${encodeURIComponent(params.trace || "")}`, { type: params.type });
    } catch (e) {
      if (this.loading !== load) return false;
      const back = backToSearch();
      replace(this.head, e.status === 404
        ? notice("empty", `Trace ${params.trace} is not stored`,
          "None of its spans are here: they may be older than the retention, or their tracer " +
          "has not sent them to this server (yet).", back)
        : notice("error", "The trace could not be loaded", e.message, back));
      return false;
    }
    if (this.loading !== load) return false;
    // A trace without samples on a server without profiles: say so, not "wait".
    let profiled = true;
    if (!trace.total) {
      try {
        profiled = (await api.get("services")).services.length > 0;
      } catch {
        // Unknown: the notices keep their usual wording.
      }
      if (this.loading !== load) return false;
    }
    this.trace = trace;
    this.profiled = profiled;
    this.drawTrace();
    return true;
  }

  /** A window came (or the state changed): the trace's totals and the flame graph anew. */
  async windowsChanged() {
    if (!this.params || !(await this.load(this.params))) return;
    this.panel.key = null;
    this.select(this.params);
  }

  drawTrace() {
    const t = this.trace;
    replace(this.head, el("h1", {}, "Trace ", el("code", {}, t.trace_id)),
      el("p", { class: "muted" }, `${units.timestamp(t.start_ns)} · ${units.duration(t.duration_ns)} · ` +
        `${plural(t.spans.length, "span")} · ` +
        // Counted types count samples already ("42 samples", "252 goroutines").
        (t.total ? units.headline(t.total, t.profile_type, t.unit) +
          (t.unit === "count" || t.samples == null ? "" : ` in ${plural(t.samples, "sample")}`) : "no samples") +
        (t.unknown_spans_total > 0
          ? ` · ${units.value(t.unknown_spans_total, t.unit)} more in spans of the trace that were not received ` +
            "(in its flame graph, not in this list)"
          : "") +
        (t.truncated ? ` · the first ${plural(t.spans.length, "span")} of ${units.grouped(t.spans_total)}` : "")),
      t.remote ? remoteNote(t.remote) : null,
      backToSearch());
    this.split.hidden = false;
    this.waterfall.setTrace(t);
  }

  /** Fills the span's type picker with the types of its samples; shown when there is a
   * choice (or a type was asked for). A zoom or a search redraws the span's head: the last
   * answer for the same span, focus and trace fills it at once, so the picker's line does
   * not vanish and come back, moving the flame graph under the pointer. */
  async fillTypes(select, label, span, params) {
    const children = focusOf(params) === "children";
    const known = this.types;
    let answer = known && known.trace === this.trace && known.span === span.span_id && known.children === children
      ? known.answer : null;
    if (!answer) {
      try {
        answer = await api.get("profile-types", { span_id: span.span_id,
          include_child_spans: children ? "true" : "" });
      } catch {
        return; // The panel's own request reports what went wrong.
      }
      this.types = { trace: this.trace, span: span.span_id, children, answer };
    }
    const ids = answer.profile_types.map((t) => t.id);
    const chosen = ids.includes(params.type) ? params.type : answer.default;
    replace(select, answer.profile_types.map((t) =>
      el("option", { value: t.id, selected: t.id === chosen }, `${t.name} · ${t.sample_type} (${t.sample_unit})`)));
    label.hidden = ids.length < 2 && !params.type;
  }

  select(params) {
    this.waterfall.select(params.span);
    const span = this.trace.spans.find((s) => s.span_id === params.span);
    if (!span) {
      this.watch.stop();
      this.watched = null;
      this.panelBox.hidden = true;
      replace(this.holds);
      replace(this.windowsBox);
      const hint = el("p", { class: "muted" }, "Click a span (or move to it with the arrow keys and press " +
        "Enter) to open its flame graph (● = has samples).");
      // A span id in the address that is not in this trace (copied short, or of another
      // trace) is said, not dropped.
      replace(this.spanHead, params.span
        ? [notice("empty", `Span ${params.span} is not in this trace`, "Its spans are listed beside it."), hint]
        : hint);
      return;
    }
    document.title = `${span.name} · ${span.service} · Trace ${span.trace_id.slice(0, 8)}… · spanprof`;
    const focus = focusOf(params);
    // The types of the span's own samples (a span has no heap profile), filled once known.
    const types = el("select", { name: "type", "aria-label": "profile type",
      onchange: () => this.nav.patch({ type: types.value, zoom: "", search: "" }) });
    // No leading "·": the controls wrap at 900 px, and a separator would then start a line.
    const typeLabel = el("label", { class: "type-pick" }, "Type ", types);
    typeLabel.hidden = true;
    this.fillTypes(types, typeLabel, span, params);
    replace(this.spanHead, el("h2", {}, span.name, " ", el("span", { class: "muted" },
      `${span.service} · ${units.duration(span.duration_ns)} · ${span.coverage}`)),
    ...spanDetails(span),
    ...moreSamplesThanPeriods(span),
    el("div", { class: "span-controls" },
      focusSwitch(focus, (f) => this.nav.patch({ focus: f === "span" ? "" : f, children: "", zoom: "" })), typeLabel),
    el("p", { class: "span-links" },
      el("a", { class: "compare-link", href: `#/compare?${new URLSearchParams({ mode: "span", service: span.service,
        a: span.span_id, ...(focus === "children" ? { children: "1" } : {}) })}` }, `compare with every ${span.name} span`), " · ",
      el("a", { class: "compare-link", href: `#/compare?${new URLSearchParams({ mode: "slow", service: span.service,
        span_name: span.name })}` }, `slow vs fast ${span.name} spans`)));
    const watched = `${span.span_id}|${params.type || ""}`;
    if (this.watched !== watched) {
      this.watched = watched;
      this.watch.watch(span.span_id, params.type, span.trace_id);
    }
    this.panelBox.hidden = false;
    // Built for the focus shown only: a notice's text node moves when another borrows it.
    const own = () => coverageNotice(span, this.profiled, this.trace);
    const empty = {
      span: own,
      children: () => notice("empty", "No samples in this span or its children", own().lastChild),
      during: () => notice("empty", "No samples of this process while the span ran",
        "No span of its service that ran meanwhile has samples. Try the whole window."),
      window: () => notice("empty", "No profile window covers this span", own().lastChild),
    }[focus]();
    this.panel.show({ service: span.service, type: params.type, span_id: span.span_id,
      focus: focus === "span" ? "" : focus }, params, empty);
  }

  /** Starts dragging the split: the waterfall's width (side by side) or height (stacked). */
  resizeStart(e) {
    e.preventDefault();
    const side = this.sideBySide();
    const start = side ? e.clientX : e.clientY;
    const from = side ? this.left.getBoundingClientRect().width : this.waterfall.viewport.getBoundingClientRect().height;
    const move = (m) => this.resizeTo(from + (side ? m.clientX : m.clientY) - start);
    const up = () => { window.removeEventListener("pointermove", move); window.removeEventListener("pointerup", up); };
    window.addEventListener("pointermove", move);
    window.addEventListener("pointerup", up);
  }

  resizeKey(e) {
    const step = { ArrowUp: -40, ArrowLeft: -40, ArrowDown: 40, ArrowRight: 40 }[e.key];
    if (!step) return;
    e.preventDefault();
    const side = this.sideBySide();
    const now = side ? this.left.getBoundingClientRect().width : this.waterfall.viewport.getBoundingClientRect().height;
    this.resizeTo(now + step);
  }

  sideBySide() {
    return window.matchMedia("(min-width: 1200px)").matches;
  }

  resizeTo(px) {
    const size = Math.max(SPLIT_MIN_PX, Math.round(px));
    if (this.sideBySide()) this.split.style.setProperty("--wf-width", `${size}px`);
    else this.split.style.setProperty("--wf-height", `${size}px`);
    this.waterfall.drawn = null;
    this.waterfall.draw();
  }
}
