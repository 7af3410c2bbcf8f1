"""The span views' part of bench/ui-perf.sh (driven by python/ui_perf.py, same browser):

1. the sandwich (callers and callees) of a function in a >= 10,000-node profile: the time the
   UI's own panel takes to build both trees and draw them (its `sandwichMs`), and to the next
   frame, for the root function (its callees are the whole profile) and for a leaf function
   called from 480 places;
2. the waterfall of one trace of 5,000 spans (sent over OTLP/HTTP JSON): the trace API's
   answer time, the first render (sync JS and to the next frame) and the frame time while the
   waterfall scrolls a row band every animation frame.
"""

import json
import statistics
import time
import urllib.request

from selenium.webdriver.support.ui import WebDriverWait


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def shared_leaf_stacks(rng):
    """24 x 20 x 21 = 10,080 paths ending in 21 leaf functions each called from 480 places:
    the sandwich of one leaf merges 480 caller chains."""
    for i in range(24):
        for j in range(20):
            for k in range(21):
                yield (f"main.main;svc{i}.Handle{i};svc{i}/store{j}.Query{j};codec.Decode{k}",
                       rng.randint(1, 400))


# Opens the sandwich of `fn` anew `renders` times through the panel (as the URL's fn= does):
# sync time as the panel records it, and to the next frame.
SANDWICH = """
const [fn, renders, done] = arguments;
const panel = document.querySelector('section.profile-panel').profilePanel;
(async () => {
  const sync = [], framed = [], recorded = [];
  for (let i = 0; i < renders; i++) {
    await new Promise(r => setTimeout(r, 20));
    panel.sandwich.key = null;  // built anew, not the cached trees
    const t0 = performance.now();
    panel.layout({fn});
    sync.push(performance.now() - t0);
    recorded.push(panel.sandwichMs);
    await new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
    framed.push(performance.now() - t0);
  }
  const levels = (fg) => fg.levels.length;
  let callees = 0;
  for (const l of panel.sandwich.callees.levels) callees += l.length / 4;
  let callers = 0;
  for (const l of panel.sandwich.callers.levels) callers += l.length / 4;
  done({sync, framed, recorded, callers, callees,
        shown: !panel.sandwichBox.hidden && !!panel.sandwich.callees.canvas.offsetParent,
        depth: [levels(panel.sandwich.callers), levels(panel.sandwich.callees)]});
})();
"""


def sandwich(d, base, ingest, wide_stacks, rng, renders, out, log):
    """`wide_stacks`: ui_perf's 10,585-node profile, the one its render figures use."""
    cases = [("bench-sandwich-root", wide_stacks, "main.main"),
             ("bench-sandwich-leaf", shared_leaf_stacks, "codec.Decode3")]
    for service, stacks, fn in cases:
        ingest(base, service, stacks(rng))
        d.get("about:blank")  # a new page: not the last one's panel, changed by the hash only
        d.get(f"{base}/#/explore?service={service}&fn={fn}")
        WebDriverWait(d, 60).until(lambda d: d.execute_script(
            "const s = document.querySelector('section.profile-panel');"
            "return !!(s && s.profilePanel && s.profilePanel.sandwichMs != null);"))
        nodes = d.execute_script(
            "let n = 0; for (const l of document.querySelector('section.profile-panel')"
            ".profilePanel.data.flamegraph.levels) n += l.length / 4; return n;")
        r = d.execute_async_script(SANDWICH, fn, renders)
        assert r["shown"], f"{service}: the sandwich of {fn} is not on screen"
        assert nodes >= 10000, f"{service}: only {nodes} nodes"
        key = "sandwich_root" if fn == "main.main" else "sandwich_leaf"
        out[key] = {
            "profile_nodes": nodes, "function": fn, "callers_nodes": r["callers"],
            "callees_nodes": r["callees"], "renders": renders,
            "panel_ms_median": round(statistics.median(r["recorded"]), 1),
            "sync_ms_median": round(statistics.median(r["sync"]), 1),
            "to_frame_ms_median": round(statistics.median(r["framed"]), 1),
            "to_frame_ms_max": round(max(r["framed"]), 1),
        }
        log(f"sandwich ({fn}): {out[key]}")


TRACE_SPANS = 5000


def send_trace(base, service, rng):
    """One trace of 5,000 spans over one second: a root, 50 request spans under it, each with
    a chain 10 deep, each link with 9 leaf children (the depths and fan-outs of a real
    fan-out trace). Returns its trace id."""
    now = time.time_ns() - 5 * 10**9
    trace_id = f"{rng.getrandbits(128):032x}"
    spans = []
    ids = iter(range(1, 10**7))

    def add(parent, name, start, dur, kind=1):
        sid = f"{next(ids):016x}"
        spans.append({"traceId": trace_id, "spanId": sid, "parentSpanId": parent or "", "name": name,
                      "kind": kind, "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + dur)})
        return sid

    root = add(None, "GET /batch", now, 10**9, 2)
    while len(spans) < TRACE_SPANS:
        r = len(spans)
        start = now + rng.randint(0, 5 * 10**8)
        parent = add(root, f"process item {r}", start, 4 * 10**8, 1)
        for depth in range(10):
            if len(spans) >= TRACE_SPANS:
                break
            start += 10**6
            parent = add(parent, f"step{depth}", start, 3 * 10**8 - depth * 10**7)
            for leaf in range(9):
                if len(spans) >= TRACE_SPANS:
                    break
                add(parent, f"SELECT item_{leaf}", start + leaf * 10**6, 5 * 10**5, 3)
    body = json.dumps({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
        "scopeSpans": [{"spans": spans}]}]}).encode()
    req = urllib.request.Request(f"{base}/v1/traces", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        assert r.status == 200, r.status
    return trace_id


WATERFALL_RENDER = """
const [traceId, renders, done] = arguments;
const wf = document.querySelector('div.waterfall').waterfall;
const t0 = performance.now();
fetch('/api/v1/traces/' + traceId).then(r => r.json()).then(async (trace) => {
  const fetchMs = performance.now() - t0;
  const sync = [], framed = [];
  for (let i = 0; i < renders; i++) {
    await new Promise(r => setTimeout(r, 20));
    wf.trace = null;  // a new trace: every row built anew
    for (const row of wf.rows.values()) row.remove();
    wf.rows = new Map();
    const t1 = performance.now();
    wf.setTrace(trace);
    sync.push(performance.now() - t1);
    await new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
    framed.push(performance.now() - t1);
  }
  done({spans: trace.spans.length, rows: wf.visible.length, inDom: wf.rows.size, fetchMs, sync, framed});
});
"""

WATERFALL_SCROLL = """
const [seconds, done] = arguments;
const wf = document.querySelector('div.waterfall').waterfall;
const vp = wf.viewport;
const frames = [], handler = [], work = [];
let i = 0;
const start = performance.now();
const max = vp.scrollHeight - vp.clientHeight;
// Chromium's long animation frames (>= 50 ms): the ones the page's work made long carry
// their scripts' time and the frame's style/layout time; the rest the machine took.
const loafs = [];
let observer = null;
const keep = (entries) => { for (const e of entries) loafs.push({
  start: e.startTime, duration: e.duration, blocking: e.blockingDuration,
  scripts: e.scripts.reduce((a, s) => a + s.duration, 0),
  layout: e.styleAndLayoutStart ? e.startTime + e.duration - e.styleAndLayoutStart : 0 }); };
try {
  observer = new PerformanceObserver((l) => keep(l.getEntries()));
  observer.observe({ type: 'long-animation-frame' });
} catch (e) { observer = null; /* no LoAF API: the frames' own work still tells */ }
const step = (ts) => {
  frames.push(ts);
  // 7 rows a frame, down and back: each frame brings new rows into the DOM.
  const t0 = performance.now();
  vp.scrollTop = (i * 7 * 24) % Math.max(1, max);
  wf.draw();  // what the scroll event does, timed here
  const t1 = performance.now();
  // The style and layout the frame needs, forced here to time them: the page's own work per
  // frame, whatever else the machine runs (fps also counts frames lost to other processes).
  void wf.viewport.lastElementChild.getBoundingClientRect().top;
  handler.push(t1 - t0);
  work.push(performance.now() - t0);
  i++;
  if (performance.now() - start < seconds * 1000) requestAnimationFrame(step);
  else {
    // Entries arrive after their frame: one more frame before reading them.
    requestAnimationFrame(() => setTimeout(() => {
      if (observer) { keep(observer.takeRecords()); observer.disconnect(); }
      done({frames, handler, work, max, inDom: wf.rows.size, loafs, loafApi: !!observer});
    }, 0));
  }
};
requestAnimationFrame(step);
"""


def lost_frames(h, gaps):
    """Who lost each frame longer than 1.5 vsyncs: the page, when the work it did in the frame
    before (draw, style, layout) took more than half a vsync or a long-animation-frame entry
    over it spent its time in scripts; else the machine (the page was idle, the frame late)."""
    vsync = statistics.median(gaps)
    lost = [i for i, g in enumerate(gaps) if g > 1.5 * vsync]
    ours = []
    for i in lost:
        t0, t1 = h["frames"][i], h["frames"][i + 1]
        busy = [e for e in h["loafs"] if e["start"] < t1 and e["start"] + e["duration"] > t0
                and e["scripts"] + e["layout"] > vsync / 2]
        if h["work"][i] > vsync / 2 or busy:
            ours.append(i)
    return {
        "vsync_ms": round(vsync, 2),
        "lost_frames": len(lost),
        "lost_to_page_work": len(ours),
        "lost_to_machine": len(lost) - len(ours),
        "long_animation_frames": len(h["loafs"]) if h["loafApi"] else None,
        "long_animation_frame_script_ms_max": round(max((e["scripts"] for e in h["loafs"]), default=0), 1),
    }


def waterfall(d, base, rng, renders, seconds, out, log):
    trace_id = send_trace(base, "bench-trace", rng)
    t0 = time.perf_counter()
    d.get(f"{base}/#/trace?trace={trace_id}")
    WebDriverWait(d, 60).until(lambda d: d.execute_script(
        "return document.querySelectorAll('.wf-row').length > 0;"))
    open_ms = (time.perf_counter() - t0) * 1000
    r = d.execute_async_script(WATERFALL_RENDER, trace_id, renders)
    assert r["spans"] == TRACE_SPANS, f"the trace has {r['spans']} spans"
    out["waterfall_render"] = {
        "spans": r["spans"], "rows": r["rows"], "rows_in_dom": r["inDom"], "renders": renders,
        "open_to_first_row_ms": round(open_ms, 1),
        "trace_fetch_ms": round(r["fetchMs"], 1),
        "sync_ms_median": round(statistics.median(r["sync"]), 1),
        "to_frame_ms_median": round(statistics.median(r["framed"]), 1),
        "to_frame_ms_max": round(max(r["framed"]), 1),
    }
    log(f"waterfall render: {out['waterfall_render']}")
    h = d.execute_async_script(WATERFALL_SCROLL, seconds)
    gaps = [b - a for a, b in zip(h["frames"], h["frames"][1:])]
    elapsed = (h["frames"][-1] - h["frames"][0]) / 1000
    out["waterfall_scroll"] = {
        "frames": len(h["frames"]), "fps": round((len(h["frames"]) - 1) / elapsed, 1),
        "frame_ms_p95": round(pct(gaps, 95), 1), "frame_ms_max": round(max(gaps), 1),
        "draw_ms_median": round(statistics.median(h["handler"]), 2),
        "draw_ms_max": round(max(h["handler"]), 2), "scroll_px": h["max"], "rows_in_dom": h["inDom"],
        "frame_work_ms_median": round(statistics.median(h["work"]), 2),
        "frame_work_ms_p95": round(pct(h["work"], 95), 2),
    }
    out["waterfall_scroll"].update(lost_frames(h, gaps))
    log(f"waterfall scroll: {out['waterfall_scroll']}")
