// The SVG export of a flame graph as it is on screen: the same frames top-down, the same
// colours, zoom, search highlight and view (bottom-up, sandwich), drawn by the FlameGraph's
// own frame walk. Names become text nodes and are escaped by the serializer: never markup.

import { FONT, ROW, palette } from "./flame.js";
import * as units from "./units.js";

const NS = "http://www.w3.org/2000/svg";
const HEAD = 24;

function node(tag, attrs, text) {
  const n = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, String(v));
  if (text !== undefined) n.textContent = text;
  return n;
}

/** The SVG text of `flame` (a FlameGraph with data) at its width on screen; `title` heads it. */
export function flameSvg(flame, title) {
  const width = Math.round(flame.root.clientWidth || 1200);
  const height = flame.height() + HEAD;
  const svg = node("svg", { xmlns: NS, width, height, viewBox: `0 0 ${width} ${height}`,
    "font-family": FONT.replace(/^\S+\s+/, ""), "font-size": 12 });
  // The theme's palette, as on screen: a dark page exports a dark image.
  const pal = palette();
  svg.appendChild(node("rect", { x: 0, y: 0, width, height, fill: pal.background }));
  svg.appendChild(node("text", { x: 4, y: 16, fill: pal.title, "font-weight": 600 }, title));
  const frames = node("g", { class: "frames", transform: `translate(0, ${HEAD})` });
  const charWidth = flame.charWidth || 7.2;
  flame.eachFrame(width, charWidth, (fr) => {
    const n = fr.node;
    const g = node("g", { class: "frame", "data-level": fr.level });
    g.appendChild(node("title", {}, `${n.name}: ${units.value(n.total, flame.unit)} ` +
      `(${units.percent(n.total, flame.total)})`));
    const rect = node("rect", { x: fr.x.toFixed(2), y: fr.y, width: fr.w.toFixed(2), height: ROW - 1, fill: fr.fill });
    if (fr.alpha !== 1) rect.setAttribute("fill-opacity", fr.alpha);
    g.appendChild(rect);
    if (fr.label) {
      g.appendChild(node("text", { x: (fr.x + 3).toFixed(2), y: fr.y + ROW / 2, "dominant-baseline": "central",
        fill: fr.ink }, fr.label));
    }
    frames.appendChild(g);
  }, pal);
  svg.appendChild(frames);
  return `<?xml version="1.0" encoding="UTF-8"?>\n${new XMLSerializer().serializeToString(svg)}\n`;
}

/** Saves `text` as the file `filename` (an SVG image). */
export function saveSvg(text, filename) {
  const url = URL.createObjectURL(new Blob([text], { type: "image/svg+xml" }));
  const a = document.createElement("a");
  a.href = url;
  a.download = filename;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60000);
}
