// Building DOM nodes without HTML strings: every piece of data (function names, file names,
// labels, span names) comes from profiled programs and is untrusted, so it only ever becomes
// a text node or a property, never markup.

import * as api from "./api.js";

/** `el("a", {href: "#", class: "x", onclick: f}, "text", child)` */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "class") node.className = v;
    else if (k === "dataset") Object.assign(node.dataset, v);
    // Through CSSOM: the page's CSP forbids style attributes.
    else if (k === "style") Object.assign(node.style, v);
    else if (k in node && typeof v !== "string") node[k] = v;
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(node, c);
    else if (c instanceof Node) node.appendChild(c);
    else node.appendChild(document.createTextNode(String(c)));
  }
}

/**
 * Sizes `canvas` to `width` × `height` CSS pixels at the screen's pixel density and returns
 * its 2D context, cleared, drawing in CSS pixels.
 */
export function canvasContext(canvas, width, height) {
  const dpr = window.devicePixelRatio || 1;
  canvas.width = Math.round(width * dpr);
  canvas.height = Math.round(height * dpr);
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, width, height);
  return ctx;
}

/** A colour of the page's theme (a CSS variable), for drawing on a canvas. */
export function themeColour(node, name, fallback) {
  return getComputedStyle(node).getPropertyValue(name).trim() || fallback;
}

/** Replaces the children of `node`. */
export function replace(node, ...children) {
  node.replaceChildren();
  append(node, children);
  return node;
}

/** A message box: `kind` is "empty", "error" or "info". */
export function notice(kind, title, ...body) {
  return el("div", { class: `notice ${kind}`, role: kind === "error" ? "alert" : "status" },
    el("strong", {}, title), ...body.map((b) => (b instanceof Node ? b : el("p", {}, b))));
}

/** How to get data in, for the empty states, with the ports this server listens on. */
export function howToSend() {
  const otlp = el("p", {}, "or point an OpenTelemetry exporter (profiles and traces) at this " +
    "server's OTLP endpoints, or a Pyroscope SDK at its /ingest.");
  api.get("status").then((s) => replace(otlp, otlpAdvice(s.listeners))).catch(() => {});
  return el("div", { class: "howto" },
    el("p", {}, "Send some: scrape a Go service's pprof endpoints,"),
    el("pre", {}, "spanprof serve --scrape name=http://host:6060"),
    otlp,
    el("p", {}, "Or look around first with a recorded Go service:"),
    el("pre", {}, "spanprof serve --demo"));
}

/** Where OTLP goes on this server: its OTLP/HTTP port (else the main one) and gRPC port. */
function otlpAdvice(listeners) {
  const port = (addr) => `:${addr.slice(addr.lastIndexOf(":") + 1)}`;
  const http = listeners.otlp_http
    ? `OTLP/HTTP on ${port(listeners.otlp_http)}`
    : `OTLP/HTTP on ${port(listeners.http)} (this port: /v1development/profiles, /v1/traces)`;
  const grpc = listeners.otlp_grpc ? `gRPC on ${port(listeners.otlp_grpc)}` : "OTLP gRPC is off";
  return `or point an OpenTelemetry exporter (profiles and traces) at ${http} (${grpc}), ` +
    "or a Pyroscope SDK at this server's /ingest.";
}

/**
 * What an answer from the remote backend (Pyroscope + Tempo) cannot hold (`remote.not_available`),
 * as text: the backend's words are never read as markup.
 */
export function remoteNote(remote, tag = "p") {
  const missing = Array.isArray(remote.not_available) ? remote.not_available.map(String) : [];
  return el(tag, { class: "muted remote-note" },
    `Answered from the ${String(remote.backend || "remote backend")}; not available there: ${missing.join("; ")}.`);
}
