"""One span understood, in a real browser (run by crates/spanprof/tests/it/ui_span.rs): on the
demo, a trace's waterfall (time ruler, subtrees folded and unfolded by mouse and by keyboard,
Enter opens a span), the span's flame graph beside it at 1400 px and below a resizable split
at 900 px, the focus switch (kept in the URL), the windows banner, the page title and the back
link; a trace of thousands of spans posted over OTLP stays a short page with names readable
past depth 30; on the live Go program, the span labelled under `custom.span_id` names the key
and the setting to add, and the flame views (ui_flame.py's journey: table search and zoom,
keyboard, SVG export, bottom-up, sandwich, graph-only, table-only) work on its live CPU profile
at 1400 and 900 px. Fails on any console error; saves screenshots."""

import argparse
import json
import sys
import urllib.parse
import urllib.request

from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.keys import Keys

from ui_check import Check, browser, step
from ui_find import hash_params, tab_to
import ui_flame


def parse_args():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--base", required=True, help="the demo server")
    p.add_argument("--trace", required=True, help="a demo trace with child spans")
    p.add_argument("--span", required=True, help="a sampled span of it")
    p.add_argument("--live", required=True, help="the server scraping the Go program")
    p.add_argument("--custom", required=True, help="TRACE/SPAN labelled under custom.span_id")
    p.add_argument("--now", required=True, help="unix seconds")
    for a in ["--chromium", "--chromedriver", "--user-data-dir", "--screens"]:
        p.add_argument(a, required=True)
    return p.parse_args()


def big_trace(base, now, n=5000, chain=40):
    """Posts one trace of `n` spans over OTLP/HTTP JSON: a chain `chain` deep, then the rest
    as children of the chain's spans; returns its id and the deepest span's."""
    trace = "b1" * 16
    end = (int(now) - 5) * 10**9
    start = end - 10 * 10**9
    spans = []
    ids = [f"{i + 1:016x}" for i in range(n)]
    for i, sid in enumerate(ids):
        parent = ids[i - 1] if 0 < i < chain else (ids[i % chain] if i >= chain else "")
        s0 = start + (i % 1000) * 9 * 10**6
        spans.append({"traceId": trace, "spanId": sid, "parentSpanId": parent,
                      "name": f"step-{i} of a deep call chain", "kind": 1,
                      "startTimeUnixNano": str(s0), "endTimeUnixNano": str(s0 + 10**9 - i * 10**5)})
    body = json.dumps({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "deep"}}]},
        "scopeSpans": [{"spans": spans}]}]}).encode()
    req = urllib.request.Request(f"{base}/v1/traces", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 200, r.status
    return trace, ids[chain - 1]


def no_console_errors(c, where):
    bad = [e for e in c.d.get_log("browser") if e["level"] == "SEVERE" and "favicon" not in e["message"]]
    assert not bad, f"{where}: console errors {bad}"


def flame_beside_or_below(c, wide):
    """The flame graph is in view: beside the waterfall (wide) or below it, within the window."""
    r = c.d.execute_script("""
const f = document.querySelector('canvas.flame').getBoundingClientRect();
const w = document.querySelector('.wf-viewport').getBoundingClientRect();
return {f: f.toJSON(), w: w.toJSON(), h: window.innerHeight, page: document.documentElement.scrollHeight};""")
    if wide:
        assert r["f"]["left"] >= r["w"]["right"] - 1, r
    else:
        assert r["f"]["top"] >= r["w"]["bottom"] - 1, r
    assert r["f"]["top"] < r["h"], f"the flame graph starts below the window: {r}"
    return r


def demo_by_mouse_at_1400(c, a):
    d = c.d
    d.set_window_size(1400, 1000)
    d.get(f"{a.base}/#/traces?service=goapp")
    c.wait("the search", lambda: c.css("table:not([aria-busy]) tr.span-row"))
    c.open(a.base, "#/trace?" + urllib.parse.urlencode({"trace": a.trace, "span": a.span}))
    c.wait("the span's flame graph", c.flame_loaded)
    c.wait("the title naming the span", lambda: "Trace" in d.title and d.title.split(" · ")[0] not in ("Trace", ""))
    span_name = d.execute_script("return document.querySelector('.span-head h2').firstChild.textContent;")
    assert d.title.startswith(span_name), (d.title, span_name)
    ticks = [t.text for t in c.css(".wf-tick")]
    assert len(ticks) >= 3 and ticks[0] == "0", ticks
    flame_beside_or_below(c, wide=True)
    c.wait("the windows banner", lambda: c.css(".span-windows[data-state]"))
    c.shot("demo-span-1400")
    # The focus switch: each mode reloads the flame graph and says what it holds.
    for mode, said in [("children", "descendants"), ("during", "ran while span"), ("window", "profile window")]:
        c.css(f".focus-switch button.focus-{mode}")[0].click()
        c.wait(f"focus {mode} in the URL", lambda: hash_params(d).get("focus") == [mode])
        c.wait(f"what focus {mode} holds", lambda: said in " ".join(e.text for e in c.css(".focus-holds")))
        c.wait("the flame graph", c.flame_loaded)
    c.shot("demo-focus-window")
    d.refresh()
    c.wait("the focus kept by a reload", lambda: c.css(".focus-switch button.focus-window.active"))
    # Fold a subtree with its toggle, unfold it again.
    rows = len(c.css(".wf-row"))
    toggles = c.css(".wf-row .wf-toggle[aria-label=collapse]")
    assert toggles, "no span with children in the trace"
    toggles[0].click()
    c.wait("a folded subtree", lambda: len(c.css(".wf-row")) < rows)
    c.css(".wf-row .wf-toggle[aria-label=expand]")[0].click()
    c.wait("the subtree back", lambda: len(c.css(".wf-row")) == rows)
    # The back link keeps the search's filters.
    c.css("a.back-to-search")[0].click()
    c.wait("the search with its filters", lambda: hash_params(d).get("service") == ["goapp"])
    no_console_errors(c, "demo at 1400 px")


def demo_by_keyboard_at_900(c, a):
    d = c.d
    d.set_window_size(900, 1000)
    c.open(a.base, "#/trace?" + urllib.parse.urlencode({"trace": a.trace}))
    c.wait("the waterfall", lambda: c.css(".wf-row"))
    tab_to(c, ".wf-viewport")
    first = c.css(".wf-row")[0].get_attribute("data-span-id")
    ActionChains(d).send_keys(Keys.ENTER).perform()
    c.wait("Enter opened the first span", lambda: hash_params(d).get("span") == [first])
    c.wait("its flame graph or notice", lambda: c.flame_loaded() or c.css(".panel-status .notice"))
    # Left folds the root's subtree, Right unfolds it.
    tab_to(c, ".wf-viewport")
    rows = len(c.css(".wf-row"))
    ActionChains(d).send_keys(Keys.ARROW_LEFT).perform()
    c.wait("Left folded the subtree", lambda: len(c.css(".wf-row")) == 1)
    ActionChains(d).send_keys(Keys.ARROW_RIGHT).perform()
    c.wait("Right unfolded it", lambda: len(c.css(".wf-row")) == rows)
    ActionChains(d).send_keys(Keys.ARROW_DOWN, Keys.ENTER).perform()
    second = c.css(".wf-row")[1].get_attribute("data-span-id")
    c.wait("ArrowDown and Enter opened the next span", lambda: hash_params(d).get("span") == [second])
    # A short trace's waterfall is as tall as its rows: the flame graph is right below it.
    height = c.shown(".wf-viewport")[0].size["height"]
    assert height <= 24 * rows + 4, f"{height} px for {rows} rows"
    tab_to(c, ".focus-switch button.focus-children")
    ActionChains(d).send_keys(Keys.ENTER).perform()
    c.wait("focus by keyboard", lambda: hash_params(d).get("focus") == ["children"])
    doc = d.execute_script("return [document.documentElement.scrollWidth, document.documentElement.clientWidth];")
    assert doc[0] <= doc[1], f"sideways overflow at 900 px: {doc}"
    c.shot("demo-span-900-keyboard")
    no_console_errors(c, "demo at 900 px")


def big_trace_check(c, a):
    d = c.d
    d.set_window_size(1400, 1000)
    trace, deep = big_trace(a.base, a.now)
    c.open(a.base, "#/trace?" + urllib.parse.urlencode({"trace": trace, "span": deep}))
    c.wait("the 5,000-span trace", lambda: "5,000 spans" in c.text())
    drawn = len(c.css(".wf-row"))
    assert drawn < 200, f"{drawn} rows in the DOM for 5,000 spans: not virtualised"
    page = d.execute_script("return document.documentElement.scrollHeight;")
    assert page < 1600, f"a page of {page} px"
    # The deepest chain span (depth 39) is selected, in view, its name readable.
    c.wait("the deep span in view", lambda: c.css(f".wf-row.selected[data-span-id='{deep}']"))
    row = c.css(f".wf-row[data-span-id='{deep}']")[0]
    name = row.find_element("css selector", ".wf-name")
    box = d.execute_script("""
const n = arguments[0].getBoundingClientRect(), l = arguments[0].closest('.wf-label').getBoundingClientRect();
return {left: n.left - l.left, width: l.width, text: arguments[0].textContent};""", name)
    # At least 100 px of the name shows at depth 39 (the indent stops at 8 levels).
    assert box["left"] + 100 <= box["width"], f"the name is pushed out of its column at depth 39: {box}"
    assert "↳39" in row.text, row.text
    # Scrolling draws the rows that come into view.
    d.execute_script("document.querySelector('.wf-viewport').scrollTop = 60000;")
    # (Rows are placed by a transform: their place is read from their box, in one script.)
    c.wait("rows far down", lambda: d.execute_script(
        "const sp = document.querySelector('.wf-spacer').getBoundingClientRect().top;"
        "return [...document.querySelectorAll('.wf-row')].some(r => r.getBoundingClientRect().top - sp >= 59000);"))
    c.shot("big-trace-5000")
    # Stacked at 900 px, the split's resizer moves by keyboard, the flame graph below it.
    d.set_window_size(900, 1000)
    tab_to(c, ".split-resizer")
    before = c.shown(".wf-viewport")[0].size["height"]
    ActionChains(d).send_keys(Keys.ARROW_UP, Keys.ARROW_UP).perform()
    c.wait("a shorter waterfall", lambda: c.shown(".wf-viewport")[0].size["height"] < before)
    no_console_errors(c, "big trace")


def live_custom_key(c, a):
    d = c.d
    d.set_window_size(1400, 1000)
    trace, span = a.custom.split("/")
    c.open(a.live, "#/trace?" + urllib.parse.urlencode({"trace": trace, "span": span}))
    c.wait("the custom-key notice", lambda: "custom.span_id" in c.text())
    assert "processors.link.span_id_keys" in c.text(), c.text()
    c.shot("live-custom-key")
    no_console_errors(c, "live custom key")


def live_flame_views(c, a):
    """The flame graph's journeys (ui_flame.py) on the live Go program's CPU profile."""
    live = argparse.Namespace(base=a.live, screens=a.screens)
    for width in [1400, 900]:
        c.d.set_window_size(width, 1000)
        ui_flame.flame_journey(c, live, width, prefix="live-")
        no_console_errors(c, f"live flame views at {width} px")
        step(f"the flame views on the live Go program at {width} px")


def run(c, a):
    demo_by_mouse_at_1400(c, a)
    demo_by_keyboard_at_900(c, a)
    big_trace_check(c, a)
    live_custom_key(c, a)
    live_flame_views(c, a)


def main():
    a = parse_args()
    driver = browser(a)
    c = Check(driver, a)
    try:
        run(c, a)
    finally:
        driver.quit()
    print("ui_span: all steps passed")


if __name__ == "__main__":
    sys.exit(main())
