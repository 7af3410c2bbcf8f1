// Explore: pick a service, a profile type, a time range and labels; see the selection's
// totals over time (drag across them to narrow the range) and its flame graph, and download
// it as pprof or SVG.

import * as api from "./api.js";
import { el, howToSend, notice, replace } from "./dom.js";
import { ProfilePanel } from "./profile_panel.js";
import { Timeline } from "./timeline.js";
import * as units from "./units.js";
import { servicePicker, timeRange } from "./search_common.js";

export class ExploreView {
  constructor(container, nav) {
    this.nav = nav;
    this.service = el("select", { name: "service", "aria-label": "service" });
    this.type = el("select", { name: "type", "aria-label": "profile type" });
    this.form = el("form", { class: "filters" });
    this.status = el("div", {});
    this.panelBox = el("div", {});
    this.timelineBox = el("div", { class: "timeline-box" });
    container.append(el("h1", {}, "Explore"), this.form, this.status, this.timelineBox, this.panelBox);
    this.timeline = new Timeline(this.timelineBox, {
      // Readable times in the boxes (RFC 3339 in the shown time zone), which the API reads.
      onRange: (from, to) => this.nav.patch({ from: units.isoTime(from), to: units.isoTime(to), zoom: "" }),
    });
    this.panel = new ProfilePanel(this.panelBox, { onState: (p, push) => this.nav.patch(p, push) });
    this.panelBox.hidden = true;
  }

  async update(params) {
    const range = timeRange(params);
    const labels = el("input", { name: "query", value: params.query || "", size: 28,
      // A placeholder the box shows whole at both widths; the title has the longer example.
      placeholder: 'labels: {region="eu"}', title: 'a label selector, e.g. {region="eu", pod=~"api-.*"}',
      "aria-label": "label filter" });
    const spanName = el("input", { name: "span_name", value: params.span_name || "", size: 18,
      placeholder: "span name (optional)", "aria-label": "span name" });
    replace(this.form, el("label", {}, "Service ", this.service), el("label", {}, "Type ", this.type),
      ...range.nodes, labels, spanName, el("button", { type: "submit" }, "Show"));
    const read = () => ({ service: this.service.value, type: this.type.value, query: labels.value.trim(),
      span_name: spanName.value.trim(), ...range.read() });
    this.form.onsubmit = (e) => {
      e.preventDefault();
      this.nav.go("explore", { ...read(), sort: params.sort });
    };
    this.service.onchange = () => this.nav.go("explore", { ...read(), type: "" });
    // A change of the flame graph's own state (zoom, search, view) keeps the pickers: no
    // round trip before the graph follows it.
    const pickersKey = api.query({ service: params.service, type: params.type });
    let services = pickersKey === this.pickersKey ? this.services : null;
    if (!services) {
      try {
        services = await servicePicker(this.service, params.service);
        const { profile_types: types, default: byDefault } = await api.get("profile-types", { service: params.service });
        // What a selection without a type shows: CPU time, else what the service has instead.
        const fallback = types.find((t) => t.id === byDefault);
        replace(this.type, el("option", { value: "" },
          fallback ? `${fallback.name} · ${fallback.sample_type} (default)` : "CPU (default)"),
          types.map((t) => el("option", { value: t.id, selected: t.id === params.type }, `${t.name} · ${t.sample_type} (${t.sample_unit})`)));
        this.pickersKey = pickersKey;
        this.services = services;
      } catch (e) {
        this.pickersKey = null;
        replace(this.status, notice("error", "The pickers could not be filled", e.message));
        return;
      }
    }
    if (!services.length) {
      this.panelBox.hidden = true;
      this.timelineBox.hidden = true;
      replace(this.status, notice("empty", "No data yet", howToSend()));
      return;
    }
    replace(this.status);
    this.panelBox.hidden = false;
    this.timelineBox.hidden = false;
    const sel = api.selection(params);
    document.title = `Explore ${params.service || this.service.value} · spanprof`;
    // A refused selection (400) is explained once, under the flame graph's heading.
    // 501: the remote backend cannot answer this series (an average of spans); said as a
    // note in the chart's place, not as a failure.
    this.timeline.show(sel).catch((e) => replace(this.timeline.caption, e.status === 400
      ? "No timeline for this selection (see below)."
      : e.status === 501
        ? el("span", { class: "muted remote-note" }, `No timeline: ${e.message}`)
        : `The timeline could not be loaded: ${e.message}`));
    this.panel.show(sel, params);
  }
}
