"""The flame graph, Explore and Compare journeys of the web UI, in headless Debian chromium
(Selenium), on `spanprof serve --demo`; run by crates/spanprof/tests/ui.rs.

Flame graph: the table follows the search and the zoom and shows whole names; the canvas is
reached by Tab and walked by the arrows, Enter zooms, Esc resets; the SVG export has the
canvas's frames top-down in its colours (and the pixels agree); bottom-up puts the most self
time on top; the callers/callees (sandwich) view of a function; graph-only and table-only.
Explore: the timeline's axis and value scale, a hover value, an exemplar opening its span, a
brush written in the browser's time zone (the browser runs in Asia/Kolkata, +05:30) and in
UTC on the header's switch. Compare: the span name and span pickers, one name per side in
legend, tooltip and table, the diff table's sort and search. At 1400 and 900 px, then in
the dark theme (emulated `prefers-color-scheme: dark`); any console error fails.
"""

import argparse
import colorsys
import os
import re
import sys
import urllib.parse
import xml.etree.ElementTree as ET

from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.select import Select

import ui_check

# The browser's time zone: not UTC, and with a half-hour offset no default could fake.
ZONE = "Asia/Kolkata"
OFFSET = "+05:30"
SVG_NS = "{http://www.w3.org/2000/svg}"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--base", required=True, help="http://host:port of `spanprof serve --demo`")
    p.add_argument("--chromium", required=True)
    p.add_argument("--chromedriver", required=True)
    p.add_argument("--user-data-dir", required=True)
    p.add_argument("--screens", required=True)
    return p.parse_args()


def step(msg):
    print(f"ui_flame: {msg}", flush=True)


def hash_params(d):
    q = urllib.parse.urlsplit(d.current_url).fragment.partition("?")[2]
    return {k: v[0] for k, v in urllib.parse.parse_qs(q).items()}


def no_console_errors(c, where):
    bad = c.severe_logs()
    assert not bad, f"{where}: console errors {bad}"


# The frames the canvas draws, as the SVG export must have them: level, name, fill.
CANVAS_FRAMES = """
const fg = document.querySelector('canvas.flame').flameGraph;
const out = [];
fg.eachFrame(fg.root.clientWidth, fg.charWidth, (f) => out.push([f.level, f.node.name, f.fill, f.x, f.w]));
return out;
"""

# Names in the subtree of the zoomed frame (the zoom itself included), from the drawn levels.
ZOOM_NAMES = """
const fg = document.querySelector('canvas.flame').flameGraph;
const z = fg.zoom; const names = new Set();
for (let l = z.level; l < fg.levels.length; l++)
  for (let k = 0; k < fg.count(l); k++) { const n = fg.node(l, k);
    if (n.x >= z.x && n.x + n.total <= z.x + z.total && n.total > 0) names.add(n.name); }
return [...names];
"""

# A zoomed canvas's height against its subtree's depth, the deepest level found by scanning
# every frame inside the zoomed one (not the graph's own search).
ZOOM_HEIGHT = """
const fg = document.querySelector(arguments[0]).flameGraph;
const z = fg.zoom; let deepest = z.level;
for (let l = z.level; l < fg.levels.length; l++)
  for (let k = 0; k < fg.count(l); k++) { const n = fg.node(l, k);
    if (n.total > 0 && n.x >= z.x && n.x + n.total <= z.x + z.total) deepest = l; }
return {css: fg.canvas.getBoundingClientRect().height, want: (deepest + 1) * 18 + 2, full: fg.levels.length * 18 + 2};
"""


def zoomed_height(c, selector, what):
    """A zoomed graph is as tall as the zoomed subtree: no empty rows below it."""
    h = c.d.execute_script(ZOOM_HEIGHT, selector)
    assert abs(h["css"] - h["want"]) < 1, f"{what}: the zoomed canvas is {h}"
    return h


# Whether the keyboard's selected frame has a frame under it (ArrowDown goes there).
HAS_CALLEE = """
const fg = document.querySelector('canvas.flame').flameGraph;
const s = fg.selected, n = fg.node(s.level, s.index), l = s.level + 1;
if (l >= fg.levels.length) return false;
const k = fg.first(l, n.x);
const c = k < fg.count(l) ? fg.node(l, k) : null;
return !!(c && c.x < n.x + n.total);
"""


def table_names(c):
    return c.d.execute_script(
        "return [...document.querySelectorAll('.top-box table.top tbody tr')].map(r => r.dataset.fn);")


def hsl_rgb(fill):
    h, s, l = [float(x) for x in re.findall(r"[\d.]+", fill)]
    return [round(v * 255) for v in colorsys.hls_to_rgb(h / 360, l / 100, s / 100)]


def flame_journey(c, args, width, prefix=""):
    """The flame views' journey on `args.base` (the demo, or with `prefix` "live-" the server
    scraping the live Go program, ui_span.py); screenshots named `{prefix}…-{width}`."""
    d = c.d
    shot = lambda name: c.shot(f"{prefix}{name}")
    c.open(args.base, "#/explore?service=goapp")
    c.wait("explore's flame graph", c.flame_loaded)
    c.wait("the functions table", lambda: len(table_names(c)) > 3)
    assert d.title.startswith("Explore goapp"), d.title
    everything = table_names(c)
    # Whole names: no cell cut, each row's tooltip the full name.
    cut = d.execute_script(
        "return [...document.querySelectorAll('.top-box td.fn')].filter(td => td.scrollWidth > td.clientWidth + 1)"
        ".map(td => td.textContent);")
    assert not cut, f"cut names: {cut[:5]}"
    titles = d.execute_script("return [...document.querySelectorAll('.top-box tbody tr')].map(r => r.title);")
    assert titles == everything, (titles[:3], everything[:3])
    assert d.execute_script("return document.documentElement.scrollWidth <= document.documentElement.clientWidth"), \
        "the page overflows sideways"
    shot(f"flame-{width}")

    # The table follows the search.
    box = c.shown(".flame-search")[0]
    box.send_keys("prime")
    c.wait("the table narrowed to the search", lambda: table_names(c) and all(
        "prime" in n.lower() for n in table_names(c)) and len(table_names(c)) < len(everything))
    assert "matching “prime”" in c.shown(".top-box .table-caption")[0].text
    shot(f"table-search-{width}")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.BACK_SPACE)
    c.wait("the search cleared", lambda: "search" not in hash_params(d) and len(table_names(c)) == len(everything))

    # The table follows the zoom: exactly the functions under the zoomed frame.
    c.click_frame("main.countPrimes")
    c.wait("the zoom", lambda: "main.countPrimes" in c.zoom_label())
    c.wait("the table under the zoom", lambda: "under main.countPrimes" in c.shown(".top-box .table-caption")[0].text)
    under = set(d.execute_script(ZOOM_NAMES))
    assert set(table_names(c)) == under, (sorted(table_names(c)), sorted(under))
    assert len(under) < len(everything)
    zoomed_height(c, ".flame-box canvas.flame", "top-down zoom on main.countPrimes")
    shot(f"table-zoom-{width}")

    # Keyboard: Esc resets the zoom; Tab reaches the canvas; arrows walk, Enter zooms.
    ActionChains(d).send_keys(Keys.ESCAPE).perform()
    c.wait("Esc resets the zoom", lambda: "zoom" not in hash_params(d) and c.zoom_label() == "")
    c.shown(".flame-search")[0].click()
    for _ in range(20):
        if d.execute_script("return document.activeElement.matches('canvas.flame')"):
            break
        ActionChains(d).send_keys(Keys.TAB).perform()
    assert d.execute_script("return document.activeElement.matches('canvas.flame')"), "Tab never reached the canvas"
    sel = lambda: d.execute_script("return document.querySelector('canvas.flame').flameGraph.selected;")
    assert sel() == {"level": 0, "index": 0}, sel()
    ActionChains(d).send_keys(Keys.ARROW_DOWN).perform()
    assert sel()["level"] == 1, sel()
    # A live profile's first frame on level 1 may have no callee: Right walks to one that has.
    count1 = d.execute_script("return document.querySelector('canvas.flame').flameGraph.count(1);")
    for _ in range(count1):
        if d.execute_script(HAS_CALLEE):
            break
        ActionChains(d).send_keys(Keys.ARROW_RIGHT).perform()
    assert d.execute_script(HAS_CALLEE), sel()
    ActionChains(d).send_keys(Keys.ARROW_DOWN).perform()
    assert sel()["level"] == 2, sel()
    count2 = d.execute_script("return document.querySelector('canvas.flame').flameGraph.count(2);")
    at = sel()["index"]
    if at + 1 < count2:
        ActionChains(d).send_keys(Keys.ARROW_RIGHT).perform()
        assert sel() == {"level": 2, "index": at + 1}, sel()
        ActionChains(d).send_keys(Keys.ARROW_LEFT).perform()
    ActionChains(d).send_keys(Keys.ARROW_UP).perform()
    assert sel()["level"] == 1, sel()
    ActionChains(d).send_keys(Keys.ARROW_DOWN).perform()
    assert not c.shown("canvas.flame + .tooltip[hidden]"), "the selected frame's tooltip shows"
    ActionChains(d).send_keys(Keys.ENTER).perform()
    c.wait("Enter zooms", lambda: hash_params(d).get("zoom", "").startswith("2."))
    shot(f"keyboard-zoom-{width}")
    ActionChains(d).send_keys(Keys.ESCAPE).perform()
    c.wait("Esc resets", lambda: "zoom" not in hash_params(d) and d.execute_script(
        "return document.querySelector('canvas.flame').flameGraph.zoom === null;"))

    # The SVG export: the canvas's frames, top-down, in its colours.
    drawn = d.execute_script(CANVAS_FRAMES)
    svg = ET.fromstring(d.execute_script(
        "return document.querySelector('.profile-panel').profilePanel.svgText();").split("\n", 1)[1])
    frames = svg.findall(f".//{SVG_NS}g[@class='frame']")
    assert len(frames) == len(drawn) > 10, (len(frames), len(drawn))
    for g, (level, name, fill, x, _w) in zip(frames, drawn):
        rect = g.find(f"{SVG_NS}rect")
        title = g.find(f"{SVG_NS}title").text
        assert int(g.get("data-level")) == level and title.startswith(f"{name}: "), (title, name, level)
        assert rect.get("fill") == fill, (rect.get("fill"), fill)
        assert float(rect.get("y")) == level * 18, "root on top, rows downwards"
    # And the canvas's pixels are those colours: the root frame and a level-2 frame (the
    # canvas blurred first: the keyboard's selection ring is drawn only while it has focus).
    d.execute_script("document.activeElement.blur();")
    for level, name, fill, x, w in [drawn[0], next(f for f in drawn if f[0] == 2 and f[4] > 4)]:
        px = d.execute_script(
            "const c = document.querySelector('canvas.flame'); const r = devicePixelRatio;"
            "return [...c.getContext('2d').getImageData(Math.round((arguments[0] + 1) * r), Math.round((arguments[1] * 18 + 2) * r), 1, 1).data];",
            x, level)
        want = hsl_rgb(fill)
        assert all(abs(a - b) <= 3 for a, b in zip(px[:3], want)), (name, px, want, fill)
    d.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": args.screens})
    target = os.path.join(args.screens, "flamegraph.svg")
    if os.path.exists(target):
        os.remove(target)
    c.shown("button.download-svg")[0].click()
    c.wait("the downloaded SVG", lambda: os.path.exists(target) and os.path.getsize(target) > 1000)
    saved = ET.parse(target).getroot()
    assert len(saved.findall(f".//{SVG_NS}g[@class='frame']")) == len(frames)
    step(f"the SVG export has the canvas's {len(frames)} frames top-down in its colours")

    # Bottom-up: the function with most self time is the widest frame under the root.
    top_self = d.execute_script(
        "return [...document.querySelectorAll('.top-box tbody tr')][0].dataset.fn;")
    assert c.css(".top-box th button.sort.active")[0].text.startswith("Self")
    c.shown(".inverted-toggle")[0].click()
    # The URL first, then the canvas redrawn bottom-up (the view may fetch before it draws).
    c.wait("inverted=1", lambda: hash_params(d).get("inverted") == "1" and d.execute_script(
        "return document.querySelector('.profile-panel').profilePanel.inverted === true;"))
    widest = d.execute_script(
        "const fg = document.querySelector('canvas.flame').flameGraph; let b = null;"
        "for (let k = 0; k < fg.count(1); k++) { const n = fg.node(1, k); if (!b || n.total > b.total) b = n; }"
        "return b.name;")
    assert widest == top_self, (widest, top_self)
    assert c.shown(".inverted-toggle")[0].get_attribute("aria-pressed") == "true"
    shot(f"bottom-up-{width}")
    # Zoomed bottom-up onto that function: the canvas shrinks to the callers below it.
    c.click_frame(widest)
    c.wait("the bottom-up zoom", lambda: widest in c.zoom_label())
    h = zoomed_height(c, ".flame-box canvas.flame", f"bottom-up zoom on {widest}")
    step(f"zoomed canvases are as tall as their subtree (bottom-up {h['css']:.0f} of {h['full']} px)")
    shot(f"bottom-up-zoom-{width}")
    c.shown(".inverted-toggle")[0].click()
    c.wait("inverted off", lambda: "inverted" not in hash_params(d))

    # The sandwich of main.countPrimes from its table row: callers and callees, same total.
    # Found and clicked in one go: the table is redrawn as the URL settles.
    d.execute_script("[...document.querySelectorAll('.top-box tbody tr')].find(r => r.dataset.fn === "
                     "'main.countPrimes').querySelector('button.sandwich-btn').click();")
    c.wait("fn= in the URL", lambda: hash_params(d).get("fn") == "main.countPrimes")
    c.wait("the sandwich", lambda: c.shown("canvas.flame.callers") and c.shown("canvas.flame.callees"))
    got = d.execute_script("""
const a = document.querySelector('canvas.callers').flameGraph, b = document.querySelector('canvas.callees').flameGraph;
const top = document.querySelector('.flame-box canvas.flame').flameGraph;
// The callers of countPrimes in the top-down graph: the frames right above it.
const parents = new Set();
for (let l = 1; l < top.levels.length; l++) for (let k = 0; k < top.count(l); k++) {
  const n = top.node(l, k); if (n.name !== 'main.countPrimes') continue;
  for (let j = 0; j < top.count(l - 1); j++) { const p = top.node(l - 1, j);
    if (p.x <= n.x && n.x < p.x + p.total && p.name !== 'main.countPrimes') parents.add(p.name); } }
const level1 = []; for (let k = 0; k < a.count(1); k++) level1.push(a.node(1, k).name);
return {callers: a.node(0, 0).name, callees: b.node(0, 0).name, at: a.total, bt: b.total, level1, parents: [...parents]};
""")
    assert got["callers"] == got["callees"] == "main.countPrimes", got
    assert got["at"] == got["bt"] > 0, got
    assert sorted(got["level1"]) == sorted(got["parents"]), got
    assert "Callers and callees of main.countPrimes" in c.shown(".sandwich-title")[0].text
    assert d.execute_script("return document.querySelector('.profile-panel').profilePanel.sandwichMs") >= 0
    shot(f"sandwich-{width}")
    c.shown(".sandwich-close")[0].click()
    c.wait("the sandwich closed", lambda: "fn" not in hash_params(d) and c.shown(".flame-box canvas.flame"))

    # Graph only, table only, both.
    c.shown(".view-switch button[data-show=graph]")[0].click()
    c.wait("graph only", lambda: not c.shown(".top-box") and c.shown(".flame-box canvas.flame"))
    shot(f"graph-only-{width}")
    c.shown(".view-switch button[data-show=table]")[0].click()
    c.wait("table only", lambda: c.shown(".top-box") and not c.shown("canvas.flame"))
    full = d.execute_script("return document.querySelector('.top-box').getBoundingClientRect().width "
                            "/ document.querySelector('.panel-body').getBoundingClientRect().width;")
    assert full > 0.95, f"the table-only table takes {full:.0%} of the width"
    shot(f"table-only-{width}")
    c.shown(".view-switch button[data-show='']")[0].click()
    c.wait("both", lambda: c.shown(".top-box") and c.shown(".flame-box canvas.flame"))
    no_console_errors(c, f"flame graph at {width} px")


def explore_journey(c, args, width):
    d = c.d
    c.open(args.base, "#/explore?service=goapp")
    bars = lambda: d.execute_script(
        "const t = document.querySelector('canvas.timeline'); return t && t.timeline.domain && t.timeline.labels "
        "? t.timeline.points.length : 0;")
    c.wait("the timeline", lambda: bars() > 0)
    labels = d.execute_script("return document.querySelector('canvas.timeline').timeline.labels;")
    assert len(labels["times"]) >= 2 and all(re.fullmatch(r"\d\d:\d\d(:\d\d)?", t) for t in labels["times"]), labels
    assert labels["values"][0] == "0" and re.search(r"\d (ms|s|min)$", labels["values"][-1]), labels
    timeline = c.shown("canvas.timeline")[0]
    # The tallest bar, in pixels from the canvas centre (where move_to_element lands).
    peak = d.execute_script(
        "const t = document.querySelector('canvas.timeline').timeline;"
        "const i = t.points.reduce((b, p, j) => (p[1] > t.points[b][1] ? j : b), 0);"
        "const w = t.canvas.getBoundingClientRect().width;"
        "return [i, t.xOf(t.points[i][0] + t.stepMs / 2) - w / 2];")
    i, dx = peak
    ActionChains(d).move_to_element_with_offset(timeline, int(dx), 0).perform()
    c.wait("the hover value", lambda: c.shown(".timeline-tip"))
    tip = c.shown(".timeline-tip")[0].text
    assert re.search(r"\d (ms|s|min)", tip), tip
    c.shot(f"explore-hover-{width}")
    ActionChains(d).move_to_element_with_offset(timeline, int(dx), 0).click().perform()
    c.wait("the bar's exemplars", lambda: c.shown(".exemplars a.exemplar"))
    link = c.shown(".exemplars a.exemplar")[0]
    span = link.find_element("css selector", "code").text
    c.shot(f"explore-exemplars-{width}")
    link.click()
    c.wait("the exemplar's span", lambda: "#/trace?" in d.current_url and hash_params(d).get("span") == span
           and c.css(".wf-row.selected"))
    d.back()
    c.wait("explore again", lambda: bars() > 0)
    timeline = c.shown("canvas.timeline")[0]
    ActionChains(d).move_to_element_with_offset(timeline, int(dx) - 20, 0).click_and_hold() \
        .move_by_offset(40, 0).release().perform()
    c.wait("the brushed range", lambda: "from" in hash_params(d))
    p = hash_params(d)
    for k in ["from", "to"]:
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+05:30", p[k]), p
        c.wait(f"the {k} box in local time", lambda: c.css(f"input[name={k}]")[0].get_attribute("value") == p[k])
    c.wait("the narrowed flame graph", c.flame_loaded)
    caption = c.shown(".timeline-caption")[0].text
    assert "UTC" not in caption and p["from"][11:19] in caption, (caption, p)
    c.shot(f"explore-brushed-{width}")
    # UTC on the header's switch.
    c.shown(".utc-toggle")[0].click()
    c.wait("the caption in UTC", lambda: c.shown(".timeline-caption") and " UTC" in c.shown(".timeline-caption")[0].text)
    c.wait("the timeline again", lambda: bars() > 0)
    timeline = c.shown("canvas.timeline")[0]
    ActionChains(d).move_to_element_with_offset(timeline, -40, 0).click_and_hold() \
        .move_by_offset(60, 0).release().perform()
    c.wait("a UTC range", lambda: hash_params(d).get("from", "").endswith("Z"))
    c.shown(".utc-toggle")[0].click()
    c.wait("local again", lambda: c.shown(".timeline-caption") and " UTC" not in c.shown(".timeline-caption")[0].text)
    no_console_errors(c, f"explore at {width} px")


def compare_journey(c, args, width):
    d = c.d
    q = urllib.parse.urlencode({"mode": "slow", "service": "goapp", "span_name": "GET /cpu-heavy"})
    c.open(args.base, f"#/compare?{q}")
    c.wait("the diff", lambda: c.flame_loaded() and c.shown(".diff-table tbody tr"))
    left, right = "fast spans (below p50)", "slow spans (above p90)"
    legend = c.shown(".legend")[0].text
    assert left in legend and right in legend, legend
    heads = [h.text for h in c.css(".diff-table th")]
    assert heads[1].startswith(f"{left} %") and heads[2].startswith(f"{right} %"), heads
    assert "Compare slow spans" in d.title, d.title
    # The tooltip names the sides the same way.
    pos = d.execute_script("return document.querySelector('canvas.flame').flameGraph.frameCenter('main.countPrimes');")
    canvas = c.shown("canvas.flame")[0]
    rect = d.execute_script("return arguments[0].getBoundingClientRect().toJSON();", canvas)
    ActionChains(d).move_to_element_with_offset(canvas, int(pos["x"] - rect["left"] - rect["width"] / 2),
                                                int(pos["y"] - rect["top"] - rect["height"] / 2)).perform()
    c.wait("the diff tooltip", lambda: c.shown(".flame-wrap .tooltip"))
    tip = c.shown(".flame-wrap .tooltip")[0].text
    assert f"{left}:" in tip and f"{right}:" in tip and "before" not in tip, tip
    # Sorted by the size of the change, then by the left share both ways.
    rows = lambda: d.execute_script(
        "return [...document.querySelectorAll('.diff-table tbody tr')].map(r => [r.dataset.fn,"
        " ...[...r.querySelectorAll('td.num')].map(td => parseFloat(td.textContent.replace('−', '-')))]);")
    changes = [abs(r[3]) for r in rows()]
    assert changes == sorted(changes, reverse=True), changes[:10]
    c.shown(".diff-table button[data-col=left]")[0].click()
    c.wait("sorted by the left share", lambda: c.css(".diff-table th[aria-sort=descending] button[data-col=left]"))
    lefts = [r[1] for r in rows()]
    assert lefts == sorted(lefts, reverse=True), lefts[:10]
    c.shown(".diff-table button[data-col=left]")[0].click()
    c.wait("ascending", lambda: c.css(".diff-table th[aria-sort=ascending] button[data-col=left]"))
    lefts = [r[1] for r in rows()]
    assert lefts == sorted(lefts), lefts[:10]
    c.shown(".diff-search")[0].send_keys("count")
    c.wait("the diff table searched", lambda: rows() and all("count" in r[0].lower() for r in rows()))
    assert d.execute_script("return document.querySelector('canvas.flame').flameGraph.matches !== null")
    assert d.execute_script("return document.documentElement.scrollWidth <= document.documentElement.clientWidth"), \
        "the page overflows sideways"
    c.shot(f"compare-slow-{width}")

    # Pickers: a span name offered as typed, then two of its spans from lists.
    c.open(args.base, "#/compare?mode=spans&service=goapp")
    c.wait("the span name box", lambda: c.shown("input[name=span_name]"))
    box = c.shown("input[name=span_name]")[0]
    box.send_keys("cpu-he")
    c.wait("the offered names", lambda: "GET /cpu-heavy" in d.execute_script(
        "return [...document.querySelectorAll('#compare-span-names option')].map(o => o.value);"))
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys("GET /cpu-heavy", Keys.TAB)
    c.wait("the span lists", lambda: len(c.css("select[name=a] option")) > 2 and len(c.css("select[name=b] option")) > 2)
    Select(c.shown("select[name=a]")[0]).select_by_index(1)
    c.wait("a= in the URL", lambda: hash_params(d).get("a"))
    c.wait("the right list again", lambda: len(c.css("select[name=b] option")) > 2)
    Select(c.shown("select[name=b]")[0]).select_by_index(2)
    c.wait("the two spans' diff", lambda: hash_params(d).get("b") and c.flame_loaded()
           and c.shown(".diff-table tbody tr"))
    p = hash_params(d)
    legend = c.shown(".legend")[0].text
    assert f"span {p['a'][:8]}…" in legend and f"span {p['b'][:8]}…" in legend, legend
    c.shot(f"compare-pickers-{width}")
    no_console_errors(c, f"compare at {width} px")


def run(c, args):
    d = c.d
    for width in [1400, 900]:
        d.set_window_size(width, 1000)
        flame_journey(c, args, width)
        explore_journey(c, args, width)
        compare_journey(c, args, width)
        step(f"flame graph, explore and compare at {width} px")
    d.set_window_size(1400, 1000)
    d.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    c.open(args.base, "#/explore?service=goapp")
    c.wait("explore in the dark", c.flame_loaded)
    bg = d.execute_script("return getComputedStyle(document.body).backgroundColor;")
    rgb = [int(x) for x in re.findall(r"\d+", bg)[:3]]
    assert sum(rgb) < 120, f"the dark theme's background is {bg}"
    table_bg = d.execute_script("return getComputedStyle(document.querySelector('table.top')).backgroundColor;")
    assert sum(int(x) for x in re.findall(r"\d+", table_bg)[:3]) < 200, table_bg
    c.shot("dark-explore")
    c.open(args.base, "#/compare?" + urllib.parse.urlencode({"mode": "slow", "service": "goapp",
                                                             "span_name": "GET /cpu-heavy"}))
    c.wait("compare in the dark", lambda: c.flame_loaded() and c.shown(".diff-table tbody tr"))
    # The diff's frames are dark with light labels on the dark page (as pale frames with dark
    # labels are on the light one): every frame's fill, and the canvas's pixels of the root
    # (unchanged: neutral) and of the widest changed frame.
    d.execute_script("document.activeElement.blur();")
    drawn = d.execute_script(
        "const fg = document.querySelector('canvas.flame').flameGraph; const out = [];"
        "fg.eachFrame(fg.root.clientWidth, fg.charWidth, (f) => out.push([f.level, f.node.name, f.fill, f.x, f.w, f.ink]));"
        "return out;")
    for level, name, fill, _x, _w, ink in drawn:
        light = float(re.findall(r"[\d.]+", fill)[2])
        assert light <= 45, f"{name}: {fill} is a pale frame on the dark page"
        assert sum(int(ink[i:i + 2], 16) for i in (1, 3, 5)) > 600, f"{name}: label ink {ink}"
    changed = max((f for f in drawn if f[2] != drawn[0][2]), key=lambda f: f[4])
    for level, name, fill, x, _w, _ink in [drawn[0], changed]:
        px = d.execute_script(
            "const c = document.querySelector('canvas.flame'); const r = devicePixelRatio;"
            "return [...c.getContext('2d').getImageData(Math.round((arguments[0] + 1) * r), Math.round((arguments[1] * 18 + 2) * r), 1, 1).data];",
            x, level)
        want = hsl_rgb(fill)
        assert all(abs(a - b) <= 3 for a, b in zip(px[:3], want)), (name, px, want, fill)
    step(f"dark compare: {len(drawn)} frames dark with light labels ({drawn[0][2]}, {changed[1]} {changed[2]})")
    c.shot("dark-compare")
    no_console_errors(c, "the dark theme")


def main():
    # The browser reads its time zone from TZ at start.
    os.environ["TZ"] = ZONE
    ui_check.drive(parse_args(), run, step)


if __name__ == "__main__":
    sys.exit(main())
