"""Measures the web UI in headless Debian chromium with the browser's Performance API.

Run by bench/ui-perf.sh against a `spanprof serve --demo` it has just started (cold):

1. page load: navigation timing of `/` (response, DOMContentLoaded, load) and the moment the
   traces list shows its first row, in ms since navigation start;
2. flame graph render: two profiles of >= 10,000 nodes (ingested here as folded stacks):
   "wide" (4 levels, most frames under a pixel) and "deep" (200 levels, every frame drawn
   and labelled), drawn by the UI's own FlameGraph (`setData`: decode the levels + draw the
   canvas), N times each; the synchronous JS time and the time until the next frame;
3. hover: a mousemove every animation frame across each graph for a few seconds (the
   tooltip follows); frames per second and the longest frame;
4. the Traces page's duration chart with 100,000 spans (sent here over OTLP/HTTP JSON): the
   /span-points answer's time, the chart's render (sync JS and to the next frame), and a
   hover across it every animation frame, as for the flame graphs;
5. a sandwich view of a 10,000-node profile, and 6. the waterfall of a 5,000-span trace
   (python/ui_perf_views.py); the waterfall is measured right after the page load, as in a
   --page-load-only (peer) run, so that both scroll the same trace in the same state.

Prints one JSON object with every figure (and the targets) on stdout.
"""

import argparse
import json
import random
import statistics
import sys
import time
import urllib.parse
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.ui import WebDriverWait

import ui_perf_views


def parse_args():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--base", required=True, help="http://host:port of a fresh spanprof serve --demo")
    p.add_argument("--chromium", default="/usr/bin/chromium")
    p.add_argument("--chromedriver", default="/usr/bin/chromedriver")
    p.add_argument("--user-data-dir", required=True)
    p.add_argument("--renders", type=int, default=30, help="flame graph renders to time")
    p.add_argument("--hover-seconds", type=float, default=3.0)
    p.add_argument("--page-load-only", action="store_true",
                   help="measure the page load and the waterfall only (the peer's run in bench/ui-perf.sh --peer)")
    return p.parse_args()


def log(msg):
    print(f"ui_perf: {msg}", file=sys.stderr, flush=True)


def wide_stacks(rng):
    """1 + 24 + 24*20 + 24*20*21 = 10,585 frames in 4 levels: most are narrower than a pixel."""
    for i in range(24):
        for j in range(20):
            for k in range(21):
                yield (f"main.main;svc{i}.Handle{i};svc{i}/store{j}.Query{j};"
                       f"svc{i}/store{j}/codec.Decode{k}", rng.randint(1, 400))


def deep_stacks(rng):
    """50 chains of 200 distinct frames (10,001 with the root): every frame is ~30 px wide
    and labelled, 200 rows deep, the worst case for drawing."""
    for i in range(50):
        yield (";".join(f"pkg{i}/layer{d}.Call{d}" for d in range(200)), rng.randint(100, 400))


def ingest(base, service, stacks):
    body = ("\n".join(f"{stack} {v}" for stack, v in stacks) + "\n").encode()
    now = int(time.time())
    q = urllib.parse.urlencode({"name": f"{service}.cpu", "from": now - 10, "until": now,
                                "format": "folded", "sampleRate": 100})
    req = urllib.request.Request(f"{base}/ingest?{q}", data=body, method="POST",
                                 headers={"Content-Type": "text/plain"})
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 200, r.status


SHAPES = {"wide": wide_stacks, "deep": deep_stacks}


def browser(args):
    opts = webdriver.ChromeOptions()
    opts.binary_location = args.chromium
    for flag in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 f"--user-data-dir={args.user_data_dir}", "--window-size=1500,1000"]:
        opts.add_argument(flag)
    return webdriver.Chrome(options=opts, service=Service(executable_path=args.chromedriver))


# Resolves with performance.now() once `selector` matches a displayed element.
WAIT_FOR = """
const [selector, done] = arguments;
const check = () => {
  const e = document.querySelector(selector);
  if (e && e.offsetParent) done(performance.now());
  else requestAnimationFrame(check);
};
check();
"""

# The page's own marks (traces_search.js): the search sent, answered, and its rows in the
# DOM, however late the driver asks (its round trips after the load event are not the page's).
SEARCH_MARKS = """
const done = arguments[0];
const check = () => {
  const marks = {};
  for (const m of performance.getEntriesByType('mark')) if (!(m.name in marks)) marks[m.name] = m.startTime;
  if ('spanprof:rows-drawn' in marks) done(marks);
  else requestAnimationFrame(check);
};
check();
"""

# Every long task of the page, [start ms, duration ms].
LONG_TASKS = """
window.__longTasks = [];
try {
  new PerformanceObserver((l) => { for (const e of l.getEntries())
    window.__longTasks.push([Math.round(e.startTime), Math.round(e.duration)]); })
    .observe({type: 'longtask', buffered: true});
} catch (e) { /* no long task API: none reported */ }
"""

RENDER = """
const [service, renders, done] = arguments;
const fg = document.querySelector('canvas.flame').flameGraph;
fetch('/api/v1/flamegraph?max_nodes=50000&service=' + encodeURIComponent(service)).then(r => r.json()).then(async (d) => {
  let nodes = 0;
  for (const l of d.flamegraph.levels) nodes += l.length / 4;
  const sync = [], framed = [];
  for (let i = 0; i < renders; i++) {
    await new Promise(r => setTimeout(r, 20));
    const t0 = performance.now();
    fg.setData(d.flamegraph, d.unit || 'nanoseconds');
    sync.push(performance.now() - t0);
    // The frame that shows it: the next animation frame, then the task after it.
    await new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
    framed.push(performance.now() - t0);
  }
  done({nodes, levels: d.flamegraph.levels.length, sync, framed});
});
"""

HOVER = """
const [seconds, done] = arguments;
const fg = document.querySelector('canvas.flame').flameGraph;
const rect = fg.canvas.getBoundingClientRect();
const frames = [];
const handler = [];
let i = 0;
const start = performance.now();
const step = (ts) => {
  frames.push(ts);
  // Walk every row across the deepest levels, where the 10,000 small frames are.
  const x = rect.left + ((i * 37) % Math.max(1, Math.floor(rect.width)));
  const y = rect.top + Math.min(rect.height - 2, 9 + 18 * (1 + (i % (fg.levels.length - 1))));
  const t0 = performance.now();
  fg.canvas.dispatchEvent(new MouseEvent('mousemove', {clientX: x, clientY: y, bubbles: true}));
  handler.push(performance.now() - t0);
  i++;
  if (performance.now() - start < seconds * 1000) requestAnimationFrame(step);
  else done({frames, handler, tooltipShown: !fg.tooltip.hidden});
};
requestAnimationFrame(step);
"""


CHART_SPANS = 100_000


def send_spans(base, service, n, rng):
    """`n` spans of one service over the last 10 minutes, 2 to 5 s long at most, in batches."""
    now = time.time_ns()
    for first in range(0, n, 10_000):
        spans = []
        for i in range(first, min(n, first + 10_000)):
            start = now - rng.randint(1, 600) * 10**9 - rng.randint(0, 10**9)
            dur = int(10 ** rng.uniform(5, 9.7))
            spans.append({"traceId": f"{i + 1:032x}", "spanId": f"{i + 1:016x}", "name": f"GET /r{i % 40}",
                          "kind": 2, "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + dur)})
        body = json.dumps({"resourceSpans": [{
            "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
            "scopeSpans": [{"spans": spans}]}]}).encode()
        req = urllib.request.Request(f"{base}/v1/traces", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            assert r.status == 200, r.status


CHART_RENDER = """
const [renders, done] = arguments;
const ch = document.querySelector('canvas.span-chart').spanChart;
const q = new URLSearchParams(location.hash.split('?')[1]).get('service');
const t0 = performance.now();
fetch('/api/v1/span-points?service=' + encodeURIComponent(q)).then(r => r.json()).then(async (d) => {
  const fetchMs = performance.now() - t0;
  const sync = [], framed = [];
  for (let i = 0; i < renders; i++) {
    await new Promise(r => setTimeout(r, 20));
    const t1 = performance.now();
    ch.render(d, ch.width);
    sync.push(performance.now() - t1);
    await new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
    framed.push(performance.now() - t1);
  }
  done({points: d.shown, fetchMs, sync, framed});
});
"""

CHART_HOVER = """
const [seconds, done] = arguments;
const ch = document.querySelector('canvas.span-chart').spanChart;
const rect = ch.canvas.getBoundingClientRect();
const frames = [], handler = [];
let i = 0, shown = 0;
const start = performance.now();
const step = (ts) => {
  frames.push(ts);
  const x = rect.left + 56 + ((i * 13) % Math.max(1, Math.floor(rect.width - 70)));
  const y = rect.top + 12 + ((i * 7) % Math.max(1, Math.floor(rect.height - 36)));
  const t0 = performance.now();
  ch.canvas.dispatchEvent(new MouseEvent('mousemove', {clientX: x, clientY: y, bubbles: true}));
  handler.push(performance.now() - t0);
  if (!ch.tip.hidden) shown++;
  i++;
  if (performance.now() - start < seconds * 1000) requestAnimationFrame(step);
  else done({frames, handler, shown});
};
requestAnimationFrame(step);
"""


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main():
    args = parse_args()
    d = browser(args)
    d.set_script_timeout(120)
    out = {"targets": {"flame_render_ms": 100, "hover_fps": 60, "page_load_ms": 300,
                       "chart_render_ms": 100, "chart_hover_fps": 60, "sandwich_ms": 50}}
    try:
        measure(d, args, out)
    finally:
        d.quit()
    print(json.dumps(out, indent=1))


def measure(d, args, out):
    """Fills `out` with the figures (only the page load's with --page-load-only)."""
    # 1. Page load, on the server's first page request. The browser itself is warmed up
    # first (its first page pays for starting a renderer process, which is not the
    # page's cost): the server is cold, the browser is not.
    d.get("data:text/html,<title>warm-up</title>")
    # Long tasks (>= 50 ms of main thread) from the page's first moment: observed before
    # the page's own scripts run (CDP adds the observer to every new document).
    d.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": LONG_TASKS})
    d.get(f"{args.base}/#/traces")
    marks = d.execute_async_script(SEARCH_MARKS)
    first_row = d.execute_async_script(WAIT_FOR, "tr.span-row")
    nav = d.execute_script("return performance.getEntriesByType('navigation')[0].toJSON();")
    out["page_load"] = {
        "response_end_ms": round(nav["responseEnd"], 1),
        "dom_content_loaded_ms": round(nav["domContentLoadedEventEnd"], 1),
        "load_event_ms": round(nav["loadEventEnd"], 1),
        # The search's requests sent, answered, its rows in the DOM (the page's marks).
        "search_start_ms": round(marks["spanprof:search-start"], 1),
        "search_answered_ms": round(marks["spanprof:search-answered"], 1),
        "first_trace_row_ms": round(marks["spanprof:rows-drawn"], 1),
        "first_row_seen_by_driver_ms": round(first_row, 1),
    }
    log(f"page load: {out['page_load']}")

    resources = d.execute_script(
        "return performance.getEntriesByType('resource').map(e => "
        "[e.name.replace(location.origin, ''), Math.round(e.startTime), Math.round(e.responseStart), Math.round(e.responseEnd)]);")
    log(f"resources (path, start ms, first byte ms, end ms): {resources}")
    spans = [r for r in resources if r[0].startswith("/api/v1/spans?")]
    modules = [r for r in resources if r[0].startswith("/ui/")]
    out["page_load"].update({
        "html_response_start_ms": round(nav["responseStart"], 1),
        "modules_fetched": len(modules),
        "last_module_end_ms": max((r[3] for r in modules), default=0),
        # The list request: sent, its answer's first byte (the server's time), its end.
        "spans_request_start_ms": spans[0][1] if spans else None,
        "spans_server_ms": spans[0][2] - spans[0][1] if spans else None,
        "spans_request_end_ms": spans[0][3] if spans else None,
        "long_tasks": d.execute_script("return window.__longTasks || [];"),
    })
    log(f"page load: {out['page_load']}")
    # The waterfall of a 5,000-span trace (python/ui_perf_views.py) next, in both this build's
    # and the peer's run (bench/ui-perf.sh --peer), on the same trace in the same state: a
    # fresh page after the page load. (After the rest, this build's scrolling met a browser
    # holding 100,000 chart spans that the peer's never did.)
    ui_perf_views.waterfall(d, args.base, random.Random(7), min(args.renders, 10), args.hover_seconds, out, log)
    if args.page_load_only:
        return out

    # 2. and 3. per shape: render a 10,000-node flame graph, then hover over it.
    rng = random.Random(7)
    for shape, stacks in SHAPES.items():
        service = f"bench-{shape}"
        ingest(args.base, service, stacks(rng))
        d.get(f"{args.base}/#/explore?service={service}")
        WebDriverWait(d, 60).until(lambda d: d.execute_script(
            "const c = document.querySelector('canvas.flame');"
            "return !!(c && c.flameGraph && c.flameGraph.levels && c.offsetParent);"))
        r = d.execute_async_script(RENDER, service, args.renders)
        assert r["nodes"] >= 10000, f"{shape}: only {r['nodes']} nodes drawn"
        out[f"flame_render_{shape}"] = {
            "nodes": r["nodes"], "levels": r["levels"], "renders": args.renders,
            "sync_ms_median": round(statistics.median(r["sync"]), 1),
            "sync_ms_p95": round(pct(r["sync"], 95), 1),
            "to_frame_ms_median": round(statistics.median(r["framed"]), 1),
            "to_frame_ms_max": round(max(r["framed"]), 1),
        }
        log(f"flame render ({shape}): {out[f'flame_render_{shape}']}")

        h = d.execute_async_script(HOVER, args.hover_seconds)
        gaps = [b - a for a, b in zip(h["frames"], h["frames"][1:])]
        elapsed = (h["frames"][-1] - h["frames"][0]) / 1000
        out[f"hover_{shape}"] = {
            "frames": len(h["frames"]),
            "fps": round((len(h["frames"]) - 1) / elapsed, 1),
            "frame_ms_p95": round(pct(gaps, 95), 1),
            "frame_ms_max": round(max(gaps), 1),
            "handler_ms_median": round(statistics.median(h["handler"]), 2),
            "handler_ms_max": round(max(h["handler"]), 2),
            "tooltip_shown": h["tooltipShown"],
        }
        log(f"hover ({shape}): {out[f'hover_{shape}']}")

    # 4. The duration chart of 100,000 spans.
    send_spans(args.base, "bench-spans", CHART_SPANS, rng)
    d.get(f"{args.base}/#/traces?service=bench-spans")
    WebDriverWait(d, 120).until(lambda d: d.execute_script(
        "const c = document.querySelector('canvas.span-chart');"
        "return !!(c && c.spanChart && c.spanChart.px && c.spanChart.px.length >= 100000);"))
    r = d.execute_async_script(CHART_RENDER, min(args.renders, 10))
    out["chart_render"] = {
        "points": r["points"], "renders": len(r["sync"]),
        "span_points_fetch_ms": round(r["fetchMs"], 1),
        "sync_ms_median": round(statistics.median(r["sync"]), 1),
        "to_frame_ms_median": round(statistics.median(r["framed"]), 1),
        "to_frame_ms_max": round(max(r["framed"]), 1),
    }
    log(f"chart render: {out['chart_render']}")
    h = d.execute_async_script(CHART_HOVER, args.hover_seconds)
    gaps = [b - a for a, b in zip(h["frames"], h["frames"][1:])]
    elapsed = (h["frames"][-1] - h["frames"][0]) / 1000
    out["chart_hover"] = {
        "frames": len(h["frames"]), "fps": round((len(h["frames"]) - 1) / elapsed, 1),
        "frame_ms_p95": round(pct(gaps, 95), 1), "frame_ms_max": round(max(gaps), 1),
        "handler_ms_median": round(statistics.median(h["handler"]), 2),
        "handler_ms_max": round(max(h["handler"]), 2), "tooltip_frames": h["shown"],
    }
    log(f"chart hover: {out['chart_hover']}")

    # 5. (python/ui_perf_views.py): the sandwich of a 10,000-node profile.
    ui_perf_views.sandwich(d, args.base, ingest, wide_stacks, rng, args.renders, out, log)
    return out


if __name__ == "__main__":
    main()
