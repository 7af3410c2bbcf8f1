"""The Traces page's "find the costly span" journey, for ui_check.py: the match count, sort by
a header (most CPU), paging, the duration chart (hover, click, brush), the span/trace toggle,
name suggestions and substring matching, filters kept by reload and by the trace's back link,
the page title; at 1400 px by mouse and at 900 px by keyboard (sorting, paging, the chart's
points walked with the arrow keys and opened with Enter, a regex, the trace list), without
horizontal overflow and without placeholders cut short."""

import json
import re
import urllib.parse
import urllib.request

from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.select import Select


def api(base, path, **params):
    with urllib.request.urlopen(f"{base}/api/v1/{path}?{urllib.parse.urlencode(params)}", timeout=30) as r:
        return json.load(r)


def hash_params(d):
    return urllib.parse.parse_qs(urllib.parse.urlsplit(d.current_url).fragment.partition("?")[2])


def row_ids(c, attr="data-span-id"):
    return [r.get_attribute(attr) for r in c.css("table:not([aria-busy]) tr.span-row")]


# Whether anything sticks out sideways: the page, the table's box, and every filter whose
# placeholder is wider than its box (measured with the box's own font).
FITS_JS = """
const out = [];
const doc = document.documentElement;
if (doc.scrollWidth > doc.clientWidth) out.push(`page ${doc.scrollWidth} > ${doc.clientWidth}`);
for (const b of document.querySelectorAll('.table-box'))
  if (b.scrollWidth > b.clientWidth + 1) out.push(`table ${b.scrollWidth} > ${b.clientWidth}`);
const ctx = document.createElement('canvas').getContext('2d');
for (const i of document.querySelectorAll('form.filters input[placeholder]')) {
  const s = getComputedStyle(i);
  ctx.font = `${s.fontSize} ${s.fontFamily}`;
  const room = i.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight);
  const need = ctx.measureText(i.placeholder).width;
  if (need > room + 1) out.push(`placeholder "${i.placeholder}" needs ${need.toFixed(0)} px of ${room.toFixed(0)}`);
}
const r = document.querySelector('canvas.span-chart');
if (r && r.getBoundingClientRect().right > doc.clientWidth) out.push('chart wider than the page');
return out;
"""


def assert_fits(c, where):
    problems = c.d.execute_script(FITS_JS)
    assert not problems, f"{where}: {problems}"


def chart_point(c, i):
    """Viewport position of chart point i, and its span and trace ids."""
    return c.d.execute_script("""
const canvas = document.querySelector('canvas.span-chart');
const ch = canvas.spanChart, r = canvas.getBoundingClientRect();
return { x: r.left + ch.px[arguments[0]], y: r.top + ch.py[arguments[0]],
  left: r.left, top: r.top, width: r.width, height: r.height,
  span: ch.data.span_id[arguments[0]], trace: ch.data.trace_id[arguments[0]],
  name: ch.data.names[ch.data.name[arguments[0]]], n: ch.data.span_id.length };""", i)


def move_to(c, x, y):
    """Moves the mouse to viewport (x, y), from the chart's centre."""
    canvas = c.css("canvas.span-chart")[0]
    rect = c.d.execute_script("return arguments[0].getBoundingClientRect().toJSON();", canvas)
    dx = x - (rect["left"] + rect["width"] / 2)
    dy = y - (rect["top"] + rect["height"] / 2)
    return ActionChains(c.d).move_to_element_with_offset(canvas, int(dx), int(dy))


def tab_to(c, selector, limit=120):
    """Presses Tab until the focused element matches `selector`."""
    for _ in range(limit):
        if c.d.execute_script("return document.activeElement.matches(arguments[0]);", selector):
            return
        ActionChains(c.d).send_keys(Keys.TAB).perform()
    raise AssertionError(f"Tab never reached {selector}")


def by_mouse_at_1400(c, base, step):
    d = c.d
    d.set_window_size(1400, 1000)
    total = api(base, "spans", service="goapp", limit=1)["count"]
    c.open(base, "#/traces?service=goapp")
    c.wait("the match count", lambda: c.shown(".match-count"))
    assert c.shown(".match-count")[0].text == f"{total:,} spans match", c.shown(".match-count")[0].text
    c.wait("the duration chart", lambda: c.d.execute_script(
        "const c = document.querySelector('canvas.span-chart'); return !!(c && c.spanChart && c.spanChart.px);"))
    assert d.title == "Spans of goapp · spanprof", d.title
    assert_fits(c, "1400 px, spans")
    c.shot("find-1400-spans")
    # Most CPU first, by its header: the costliest span the API names tops the list.
    costly = api(base, "spans", service="goapp", sort="cpu", limit=1)["spans"][0]
    c.css("th button[data-sort=cpu]")[0].click()
    c.wait("sort=cpu:desc in the URL", lambda: hash_params(d).get("sort") == ["cpu:desc"])
    c.wait("the costliest span first", lambda: row_ids(c)[:1] == [costly["span_id"]])
    assert c.css("th[aria-sort=descending] button[data-sort=cpu]"), "the CPU header is not marked as sorted"
    c.shot("find-1400-most-cpu")
    # The next page, and back to the search from a span opened there: filters, sort and page kept.
    c.css("button.page-next")[0].click()
    c.wait("offset=50", lambda: hash_params(d).get("offset") == ["50"])
    c.wait("rows 51-100", lambda: "showing 51–100" in c.shown(".page-range")[0].text)
    second = api(base, "spans", service="goapp", sort="cpu", offset=50, limit=50)["spans"]
    c.wait("the second page's spans", lambda: row_ids(c) == [s["span_id"] for s in second])
    search_url = d.current_url
    # Hover a point: its name and CPU; click it: its span opens.
    c.wait("the chart after paging", lambda: chart_point(c, 0)["n"] > 0)
    p = chart_point(c, chart_point(c, 0)["n"] // 2)
    move_to(c, p["x"], p["y"]).perform()
    c.wait("the point's tooltip", lambda: c.shown(".span-chart-box .tooltip"))
    tip = c.shown(".span-chart-box .tooltip")[0].text
    assert "CPU" in tip or "no samples" in tip, tip
    move_to(c, p["x"], p["y"]).click().perform()
    c.wait("the clicked span's trace", lambda: "#/trace?" in d.current_url)
    opened = hash_params(d)
    assert opened.get("span") and opened.get("trace"), d.current_url
    step(f"the chart opened span {opened['span'][0]}")
    c.wait("the back link", lambda: c.shown("a.back-to-search"))
    c.shown("a.back-to-search")[0].click()
    c.wait("the search as it was", lambda: d.current_url == search_url)
    c.wait("its rows again", lambda: row_ids(c) == [s["span_id"] for s in second])
    # Brush a time range: from/to in the URL, fewer spans counted.
    c.wait("the chart", lambda: chart_point(c, 0)["n"] > 0)
    box = chart_point(c, 0)
    y = box["top"] + box["height"] / 2
    move_to(c, box["left"] + box["width"] * 0.3, y).click_and_hold() \
        .move_by_offset(int(box["width"] * 0.1), 0).move_by_offset(int(box["width"] * 0.1), 0).release().perform()
    c.wait("from and to in the URL", lambda: hash_params(d).get("from") and hash_params(d).get("to"))
    f, t = hash_params(d)["from"][0], hash_params(d)["to"][0]
    # RFC 3339 in the browser's time zone (or Z), whole seconds: readable, and the API reads it.
    for v in (f, t):
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d)", v), \
            f"the brush wrote {v}, not a readable time"
    assert d.execute_script("return [...document.querySelectorAll('input[name=from], input[name=to]')]"
                            ".every(e => !e.offsetParent || e.scrollWidth <= e.clientWidth);"), "a time box cuts its value"
    brushed = api(base, "spans", service="goapp", limit=1, **{"from": f, "to": t})["count"]
    assert 0 < brushed < total, (brushed, total)
    c.wait("the brushed count", lambda: c.shown(".match-count")
           and c.shown(".match-count")[0].text == f"{brushed:,} spans match")
    c.shot("find-1400-brushed")
    # Traces: grouped by root, most CPU first.
    c.open(base, "#/traces?service=goapp&sort=cpu:desc")
    c.wait("the toggle", lambda: c.shown("button.mode"))
    [b for b in c.shown("button.mode") if b.text == "Traces"][0].click()
    c.wait("group=trace", lambda: hash_params(d).get("group") == ["trace"])
    traces = api(base, "spans", service="goapp", group="trace", sort="cpu", limit=50)
    c.wait("the trace rows", lambda: row_ids(c, "data-trace-id") == [t["trace_id"] for t in traces["traces"]])
    assert c.shown(".match-count")[0].text == f"{traces['count']:,} traces match"
    assert d.title == "Traces of goapp · spanprof", d.title
    assert_fits(c, "1400 px, traces")
    c.shot("find-1400-traces")
    # A name typed: names offered from the store; a part of the name finds them.
    c.open(base, "#/traces?service=goapp")
    c.wait("the name box", lambda: c.css("input[name=name]"))
    c.css("input[name=name]")[0].send_keys("cpu-h")
    c.wait("names offered", lambda: "GET /cpu-heavy" in [o.get_attribute("value")
                                                         for o in c.css("datalist#span-name-options option")])
    Select(c.css("select[name=match]")[0]).select_by_value("contains")
    c.css("form.filters button[type=submit]")[0].click()
    c.wait("name and match in the URL", lambda: hash_params(d).get("match") == ["contains"]
           and hash_params(d).get("name") == ["cpu-h"])
    want = api(base, "spans", service="goapp", name="cpu-h", name_match="contains", limit=1)["count"]
    assert want > 0
    c.wait("the spans containing it", lambda: c.shown(".match-count")
           and c.shown(".match-count")[0].text == f"{want:,} spans match")
    # Reload: the same search.
    d.refresh()
    c.wait("the search after reload", lambda: c.shown(".match-count")
           and c.shown(".match-count")[0].text == f"{want:,} spans match")
    assert c.css("input[name=name]")[0].get_attribute("value") == "cpu-h"
    assert Select(c.css("select[name=match]")[0]).first_selected_option.get_attribute("value") == "contains"
    assert d.title == 'Spans of goapp "cpu-h" · spanprof', d.title
    c.shot("find-1400-contains")


def by_keyboard_at_900(c, base, step):
    d = c.d
    d.set_window_size(900, 1000)
    c.open(base, "#/traces?service=goapp")
    c.wait("the rows", lambda: c.css("table:not([aria-busy]) tr.span-row"))
    c.wait("the duration chart", lambda: c.d.execute_script(
        "const c = document.querySelector('canvas.span-chart'); return !!(c && c.spanChart && c.spanChart.px);"))
    assert_fits(c, "900 px, spans")
    c.shot("find-900-spans")
    # Sort by start (oldest first after a second press), by keyboard.
    d.execute_script("document.activeElement.blur(); window.scrollTo(0, 0);")
    tab_to(c, "th button[data-sort=start]")
    ActionChains(d).send_keys(Keys.ENTER).perform()
    c.wait("sort=start:desc", lambda: hash_params(d).get("sort") == ["start:desc"])
    tab_to(c, "th button[data-sort=start]")
    ActionChains(d).send_keys(Keys.ENTER).perform()
    c.wait("sort=start:asc", lambda: hash_params(d).get("sort") == ["start:asc"])
    oldest = api(base, "spans", service="goapp", sort="start", order="asc", limit=50)["spans"]
    c.wait("the oldest first", lambda: row_ids(c) == [s["span_id"] for s in oldest])
    # The chart's points, by keyboard: → walks them in start order, Enter opens one.
    tab_to(c, "canvas.span-chart")
    ActionChains(d).send_keys(Keys.ARROW_RIGHT, Keys.ARROW_RIGHT, Keys.ARROW_RIGHT).perform()
    c.wait("the third point's tooltip", lambda: c.shown(".span-chart-box .tooltip"))
    third = chart_point(c, 2)
    assert third["name"] in c.shown(".span-chart-box .tooltip")[0].text
    ActionChains(d).send_keys(Keys.ENTER).perform()
    c.wait("its span opened", lambda: hash_params(d).get("span") == [third["span"]])
    d.back()
    c.wait("the search again", lambda: hash_params(d).get("sort") == ["start:asc"] and c.css("table:not([aria-busy]) tr.span-row"))
    d.execute_script("document.activeElement.blur(); window.scrollTo(0, 0);")
    # The next page, by keyboard.
    tab_to(c, "button.page-next")
    ActionChains(d).send_keys(Keys.ENTER).perform()
    c.wait("offset=50", lambda: hash_params(d).get("offset") == ["50"])
    # A regex typed in, and Enter searches; the trace list by keyboard too.
    tab_to(c, "input[name=name]")
    ActionChains(d).send_keys("^GET /cpu-(heavy|light)$").perform()
    tab_to(c, "select[name=match]")
    ActionChains(d).send_keys("r").perform()  # the "regex" option
    tab_to(c, "input[name=name]")
    ActionChains(d).send_keys(Keys.ENTER).perform()
    c.wait("match=regex", lambda: hash_params(d).get("match") == ["regex"])
    want = api(base, "spans", service="goapp", name="^GET /cpu-(heavy|light)$", name_match="regex", limit=1)["count"]
    assert want > 0
    c.wait("the regex's count", lambda: c.shown(".match-count")
           and c.shown(".match-count")[0].text == f"{want:,} spans match")
    assert_fits(c, "900 px, regex")
    c.shot("find-900-regex")
    tab_to(c, "button.mode:not(.active)")
    ActionChains(d).send_keys(Keys.ENTER).perform()
    c.wait("group=trace", lambda: hash_params(d).get("group") == ["trace"])
    c.wait("trace rows", lambda: c.css("table:not([aria-busy]) tr.trace-row"))
    assert_fits(c, "900 px, traces")
    c.shot("find-900-traces")
    d.set_window_size(1500, 1000)


def run(c, base, step):
    by_mouse_at_1400(c, base, step)
    by_keyboard_at_900(c, base, step)
