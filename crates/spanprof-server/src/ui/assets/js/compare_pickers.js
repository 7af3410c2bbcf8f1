// Compare's pickers: span names offered from the store as they are typed (`/span-names`),
// and spans chosen from a list of that name's spans, costliest first (`/spans?sort=cpu`),
// instead of ids typed by hand.

import * as api from "./api.js";
import { el, replace } from "./dom.js";
import * as units from "./units.js";

const LIST_ID = "compare-span-names";
/** Spans a picker lists: the costliest of the name. */
const SPANS = 100;

/** The page's one list of offered span names (an input points at it by id). */
function nameList() {
  let list = document.getElementById(LIST_ID);
  if (!list) {
    list = el("datalist", { id: LIST_ID });
    document.body.appendChild(list);
  }
  return list;
}

/** A span name input offering the names of `service`'s spans that contain what is typed. */
export function spanNameInput(service, value, placeholder, size) {
  const list = nameList();
  const input = el("input", { name: "span_name", value, placeholder, size, list: LIST_ID,
    autocomplete: "off", "aria-label": "span name" });
  let asked = null;
  const offer = async () => {
    const q = input.value.trim();
    const key = `${service}\n${q}`;
    if (key === asked) return;
    asked = key;
    let names;
    try {
      ({ names } = await api.get("span-names", { service, q, limit: 20 }));
    } catch {
      return; // the input still takes a typed name
    }
    if (asked !== key) return;
    replace(list, names.map((n) => el("option", { value: n })));
  };
  input.addEventListener("input", offer);
  input.addEventListener("focus", offer);
  return input;
}

/**
 * A select named `name` (`a`, `b`) of the spans called `spanName` in `service`, costliest
 * first, `value` chosen (kept as an option when it is not among them); `onPick()` on change.
 */
export function spanPicker(name, label, service, spanName, value, onPick) {
  const select = el("select", { name, "aria-label": label, class: "span-picker", onchange: onPick });
  const given = value ? el("option", { value, selected: true }, `span ${value}`) : null;
  replace(select, el("option", { value: "" }, spanName ? "Loading spans…" : "pick a span name first"), given);
  if (!spanName) return select;
  api.get("spans", { service, name: spanName, sort: "cpu", limit: SPANS }).then((d) => {
    const options = d.spans.map((s) => el("option", { value: s.span_id, selected: s.span_id === value },
      `${units.duration(s.duration_ns)} · ${s.total ? `${units.value(s.total, s.unit)} CPU` : s.coverage} · ` +
      `${units.clock(Number(BigInt(s.start_ns) / 1000000n))} · ${s.span_id.slice(0, 8)}`));
    const listed = d.spans.some((s) => s.span_id === value);
    replace(select, el("option", { value: "" }, `${units.grouped(d.count)} ${spanName} spans: pick one`),
      listed ? null : given, options);
  }).catch((e) => replace(select, el("option", { value: "" }, `spans could not be listed: ${e.message}`), given));
  return select;
}
