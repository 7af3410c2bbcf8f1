"""Every view of the UI by keyboard, and at two widths (issue 42's "every control reachable
by keyboard" and "works at 900 px and 1400 px without overflow"), on a spanprof serve --demo.

Per view (the span search, the trace list, one trace with its span's flame graph, the
sandwich, Explore, Compare): at 1400 px and at 900 px, no sideways overflow of the page;
at 900 px, Tab alone walks the view: every interactive control shown (links, buttons,
inputs, selects, the canvases, the waterfall, sortable table headers) is reached, and each
one Tab reaches shows a visible focus ring (an outline or a box-shadow). Then the keys of
the keyboard-only controls: the duration chart's arrows and Enter open a span, the
waterfall's arrows and Enter open another span, the timeline's arrows show a bar's values and
Enter pins its exemplar spans. Screenshots of every view at both widths, in the light and
the dark theme.
"""

import argparse
import sys

from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from ui_check import Check, drive

# Controls a keyboard user must reach: what the browser makes focusable, and what the UI
# made focusable (tabindex 0: canvases, the waterfall, the split handle, table rows).
CONTROLS = ("a[href], button:not([disabled]), input:not([disabled]):not([type=hidden]), "
            "select:not([disabled]), textarea, summary, [tabindex]:not([tabindex='-1'])")

# The controls shown now, each marked with a data-kbd id; returns their descriptions.
LIST_CONTROLS = """
const out = [];
let n = 0;
for (const e of document.querySelectorAll(arguments[0])) {
  const r = e.getBoundingClientRect();
  // Folded (a closed <details>) or hidden; the waterfall's rows and fold buttons are reached
  // through the tree's own keys (checked below), not by Tab.
  const hidden = e.closest('[hidden]') || r.width === 0 || r.height === 0 ||
    !e.checkVisibility({visibilityProperty: true, contentVisibilityAuto: true}) ||
    (e.closest('.wf-viewport') && e.tabIndex < 0);
  if (hidden) continue;
  e.dataset.kbd = String(n++);
  out.push({id: e.dataset.kbd, what: e.tagName.toLowerCase() + (e.className ? '.' + String(e.className).split(' ')[0] : '') +
    ' ' + (e.getAttribute('aria-label') || e.textContent || e.getAttribute('placeholder') || '').trim().slice(0, 40)});
}
return out;
"""

OVERFLOW = """
const d = document.documentElement;
const wide = [...document.querySelectorAll('body *')].filter((e) => {
  const r = e.getBoundingClientRect();
  return r.width > 0 && r.right > d.clientWidth + 1 && !e.closest('.table-box, .wf-viewport, .top-box');
}).slice(0, 5).map((e) => e.tagName.toLowerCase() + '.' + String(e.className).split(' ')[0] + ' ' +
  Math.round(e.getBoundingClientRect().right));
return {scroll: d.scrollWidth, client: d.clientWidth, wide};
"""


def parse_args():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--base", required=True, help="http://host:port of a spanprof serve --demo")
    p.add_argument("--trace", required=True, help="a trace of a sampled span")
    p.add_argument("--span", required=True, help="that span")
    p.add_argument("--chromium", required=True)
    p.add_argument("--chromedriver", required=True)
    p.add_argument("--user-data-dir", required=True)
    p.add_argument("--screens", required=True)
    return p.parse_args()


def step(msg):
    print(f"ui_keyboard: {msg}", flush=True)


def views(args):
    """(name, hash, ready: CSS selector shown once the view has drawn its data)."""
    trace = f"#/trace?trace={args.trace}&span={args.span}"
    return [
        ("spans", "#/traces?service=goapp", "table:not([aria-busy]) tr.span-row"),
        ("traces", "#/traces?service=goapp&group=trace", "table:not([aria-busy]) tr.trace-row"),
        ("trace", trace, "canvas.flame"),
        ("sandwich", f"{trace}&fn=main.countPrimes", "canvas.callees"),
        ("explore", "#/explore?service=goapp", "canvas.timeline"),
        ("compare", "#/compare?mode=slow&service=goapp&span_name=GET+%2Fcpu-heavy", ".diff-table tbody tr"),
    ]


def more_views(args):
    """Views shot at both widths in both themes and checked for overflow, not Tab-walked:
    (name, hash, ready selector, a script run before the shot or None)."""
    trace = f"#/trace?trace={args.trace}&span={args.span}"
    below = "document.querySelector(arguments[0]).scrollIntoView({block: 'start'});"
    return [
        ("focus-during", f"{trace}&focus=during", "canvas.flame", None),
        ("bottom-up", f"{trace}&inverted=1", "canvas.flame", None),
        ("table-only", f"{trace}&show=table", ".top-box table.top tbody tr", None),
        ("compare-table", "#/compare?mode=slow&service=goapp&span_name=GET+%2Fcpu-heavy",
         ".diff-table tbody tr", (below, ".diff-search")),
        ("empty-search", "#/traces?service=goapp&name=no-such-span", ".notice.empty", None),
        ("empty-trace", "#/trace?trace=00000000000000000000000000000bad", ".notice.empty", None),
        ("empty-compare", "#/compare", ".notice", None),
    ]


def open_view(c, args, name, hash_, ready):
    c.open(args.base, hash_)
    c.wait(f"the {name} view", lambda: c.shown(ready) and not c.shown(".loading"))
    # A view still loading its second half (the chart, the flame graph) changes its controls.
    c.wait(f"the {name} view to settle", lambda: not [e for e in c.shown("p.muted") if
                                                      e.text.startswith(("Loading", "Searching"))])


def no_overflow(c, name, width):
    o = c.d.execute_script(OVERFLOW)
    assert o["scroll"] <= o["client"], f"{name} at {width} px overflows sideways: {o}"


# Records, in order, what each focus change lands on: its data-kbd id, and whether a focus
# ring shows (an outline or a box shadow), so that Tab can be pressed many times per call.
RECORD_FOCUS = """
window.__kbdSeen = [];
if (!window.__kbdListening) {
  window.__kbdListening = true;
  document.addEventListener('focusin', (ev) => {
    const e = ev.target;
    if (!e || e === document.body || !window.__kbdSeen) return;
    const s = getComputedStyle(e);
    const ring = (s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) > 0) || s.boxShadow !== 'none';
    window.__kbdSeen.push({id: e.dataset.kbd || null, ring,
      what: e.tagName.toLowerCase() + '.' + String(e.className).split(' ')[0]});
  }, true);
}
"""
TAKE_FOCUS_SEEN = "const s = window.__kbdSeen || []; window.__kbdSeen = []; return s;"
# Tab presses per WebDriver call: a round trip per press made the walks a third of the test.
TABS_PER_CALL = 20


def tab_walk(c, name):
    """Tabs from the top of the page until every control shown has had the focus (or the
    focus comes back round), each with a focus ring."""
    controls = c.d.execute_script(LIST_CONTROLS, CONTROLS)
    assert controls, f"{name}: no control"
    # The walk starts at the page's top: a blur alone leaves Tab's starting point at the element
    # blurred (the walk then began mid-page, and missed the header when the focus did not come
    # back round from past the last control); focusing the body moves it to the top.
    c.d.execute_script("document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0);"
                       "document.body.tabIndex = -1; document.body.focus(); document.body.removeAttribute('tabindex');")
    c.d.execute_script(RECORD_FOCUS)
    want = {x["id"] for x in controls}
    reached, ringless = set(), []
    first = None
    presses, done = 0, False
    while not done and presses < len(controls) * 2 + 20:
        ActionChains(c.d).send_keys(Keys.TAB * TABS_PER_CALL).perform()
        presses += TABS_PER_CALL
        for f in c.d.execute_script(TAKE_FOCUS_SEEN):
            if f["id"] is not None and f["id"] == first:
                done = True
                break
            if first is None:
                first = f["id"]
            if f["id"] is not None:
                reached.add(f["id"])
            if not f["ring"]:
                ringless.append(f["what"])
            if want <= reached:
                done = True
                break
    c.d.execute_script("window.__kbdSeen = null;")
    missed = [x["what"] for x in controls if x["id"] not in reached]
    assert not missed, f"{name}: Tab never reached {missed}"
    assert not ringless, f"{name}: no visible focus ring on {ringless}"
    step(f"{name}: Tab reached all {len(controls)} controls, each with a focus ring")


def focus(c, selector):
    # The element shown: a view visited before may keep a hidden one earlier in the page.
    e = c.shown(selector)[0]
    c.d.execute_script("arguments[0].focus();", e)
    return e


def keys(c, *ks):
    ActionChains(c.d).send_keys(*ks).perform()


def run(c, args):
    d = c.d
    for theme in ("light", "dark"):
        # The system's theme, as the page's prefers-color-scheme query sees it.
        d.execute_cdp_cmd("Emulation.setEmulatedMedia",
                          {"features": [{"name": "prefers-color-scheme", "value": theme}]})
        for width in (1400, 900):
            d.set_window_size(width + 16, 1000)
            for name, hash_, ready in views(args):
                open_view(c, args, name, hash_, ready)
                no_overflow(c, name, width)
                c.shot(f"{name}-{width}" + ("-dark" if theme == "dark" else ""))
                if width == 900 and theme == "light":
                    tab_walk(c, name)
            for name, hash_, ready, before in more_views(args):
                open_view(c, args, name, hash_, ready)
                no_overflow(c, name, width)
                if before:
                    d.execute_script(*before)
                c.shot(f"{name}-{width}" + ("-dark" if theme == "dark" else ""))
            step(f"no view overflows at {width} px in the {theme} theme")
    d.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "light"}]})

    # The duration chart without a mouse: arrows pick a span, Enter opens it.
    open_view(c, args, "spans", "#/traces?service=goapp", "table:not([aria-busy]) tr.span-row")
    c.wait("the chart", lambda: c.shown("canvas.span-chart"))
    focus(c, "canvas.span-chart")
    keys(c, Keys.ARROW_RIGHT, Keys.ARROW_RIGHT, Keys.ENTER)
    c.wait("the span the chart's Enter opened", lambda: "#/trace?" in d.current_url and c.shown(".wf-row"))
    step("the duration chart opens a span by arrows and Enter")

    # The waterfall: Down moves to the next span, Enter opens it.
    open_view(c, args, "trace", f"#/trace?trace={args.trace}&span={args.span}", "canvas.flame")
    before = d.current_url
    focus(c, ".wf-viewport")
    keys(c, Keys.HOME, Keys.ARROW_DOWN, Keys.ENTER)
    c.wait("another span opened by the waterfall's keys", lambda: d.current_url != before)
    step("the waterfall opens a span by arrows and Enter")

    # The timeline: Right shows the first bar's values, Enter lists its exemplar spans.
    open_view(c, args, "explore", "#/explore?service=goapp", "canvas.timeline")
    # The canvas is shown before its bars are in: keys before that do nothing.
    c.wait("the timeline's bars", lambda: "bar per" in " ".join(e.text for e in c.shown(".timeline-wrap")))
    focus(c, "canvas.timeline")
    keys(c, Keys.ARROW_LEFT)
    c.wait("the last bar's values", lambda: c.shown(".timeline-tip"))
    # Back to the last bar with samples: Left walks from the end until a bar lists spans.
    for _ in range(60):
        keys(c, Keys.ENTER)
        if c.shown(".exemplars a"):
            break
        keys(c, Keys.ARROW_LEFT)
    assert c.shown(".exemplars a"), "no bar's Enter listed exemplar spans"
    c.shot("timeline-keys")
    step("the timeline's arrows and Enter pin a bar's exemplar spans")

    logs = c.severe_logs()
    assert not logs, f"browser console errors: {logs}"


def main():
    drive(parse_args(), run, step)


if __name__ == "__main__":
    sys.exit(main())
