"""Drives the spanprof web UI in headless Debian chromium through chromedriver (Selenium).

Run by crates/spanprof/tests/it/ui.rs against a live `spanprof serve` that holds a Go service's
profiles and spans; prints one line per step and `ui_check: all steps passed` at the end,
saves a screenshot of every view under --screens, and exits non-zero at the first failure.
"""

import argparse
import datetime
import json
import sys
import time
import urllib.parse
import urllib.request

import ui_find
from selenium import webdriver
from selenium.common.exceptions import (NoAlertPresentException, StaleElementReferenceException,
                                        TimeoutException)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.actions.action_builder import ActionBuilder
from selenium.webdriver.support.select import Select
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

HOSTILE = "<img src=x onerror=alert(1)>"
# An exception's stack trace as Python prints it: the span's event keeps it, folded.
STACK = 'Traceback (most recent call last):\n  File "inventory.py", line 12, in reserve\nTimeoutError'

STEP_TIMEOUT_S = 20


def parse_args():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--base", required=True, help="http://host:port of the server with data")
    p.add_argument("--empty-base", required=True, help="a server with no data")
    p.add_argument("--first", required=True, help="the slowest GET /cpu-heavy span id")
    p.add_argument("--span", required=True, help="the slowest sampled GET /cpu-heavy span id")
    p.add_argument("--trace", required=True, help="its trace id")
    p.add_argument("--other", required=True, help="another sampled GET /cpu-heavy span id")
    p.add_argument("--unsampled", required=True, help="TRACE/SPAN of a span without samples")
    p.add_argument("--between", required=True, help="TRACE/SPAN of a span between two CPU windows")
    p.add_argument("--now", required=True, help="unix seconds, for the hostile profile")
    p.add_argument("--chromium", required=True)
    p.add_argument("--chromedriver", required=True)
    p.add_argument("--user-data-dir", required=True)
    p.add_argument("--screens", required=True)
    return p.parse_args()


def step(msg):
    print(f"ui_check: {msg}", flush=True)


def ingest_hostile(base, now):
    """A folded profile whose hottest function's name is markup."""
    body = f"main.main;{HOSTILE} 70\nmain.main;main.safe 30\n".encode()
    q = urllib.parse.urlencode({"name": "hostile.cpu", "from": now, "until": int(now) + 10,
                                "format": "folded", "sampleRate": 100})
    req = urllib.request.Request(f"{base}/ingest?{q}", data=body, method="POST",
                                 headers={"Content-Type": "text/plain"})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 200, r.status


def send_span(base, now):
    """One 200 ms server span over OTLP/HTTP JSON, ended a second ago, failed with a message
    and with attributes and resource attributes (one of each markup); returns its trace and
    span ids."""
    trace, span = "7e" * 16, "5a" * 8
    end = (int(now) - 1) * 10**9
    attributes = [{"key": "http.route", "value": {"stringValue": "/orders/{id}"}},
                  {"key": "http.response.status_code", "value": {"intValue": "503"}},
                  {"key": "user.note", "value": {"stringValue": HOSTILE}}]
    body = json.dumps({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "orders"}},
                                    {"key": "host.name", "value": {"stringValue": "orders-7f9c"}},
                                    {"key": "process.pid", "value": {"intValue": "4242"}},
                                    {"key": "container.name", "value": {"stringValue": HOSTILE}}]},
        "scopeSpans": [{"spans": [{
            "traceId": trace, "spanId": span, "name": "GET /orders", "kind": 2,
            "attributes": attributes,
            "events": [{"timeUnixNano": str(end - 50 * 10**6), "name": "exception", "attributes": [
                {"key": "exception.type", "value": {"stringValue": "TimeoutError"}},
                {"key": "exception.message", "value": {"stringValue": HOSTILE}},
                {"key": "exception.stacktrace", "value": {"stringValue": STACK}}]}],
            "status": {"code": 2, "message": "inventory timed out"},
            "startTimeUnixNano": str(end - 200 * 10**6), "endTimeUnixNano": str(end)}]}]}]}).encode()
    req = urllib.request.Request(f"{base}/v1/traces", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 200, r.status
    return trace, span


def browser(args):
    opts = webdriver.ChromeOptions()
    opts.binary_location = args.chromium
    for flag in ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--no-first-run", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", f"--user-data-dir={args.user_data_dir}", "--window-size=1500,1000"]:
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # Leave alerts open so that a fired one is seen, not dismissed silently.
    opts.set_capability("unhandledPromptBehavior", "ignore")
    return webdriver.Chrome(options=opts, service=Service(executable_path=args.chromedriver))


class Check:
    def __init__(self, driver, args):
        self.d = driver
        self.args = args
        self.shots = []

    def wait(self, what, cond):
        try:
            # A row read while the view re-renders is stale: read the new one on the next try.
            return WebDriverWait(self.d, STEP_TIMEOUT_S,
                                 ignored_exceptions=[StaleElementReferenceException]).until(lambda d: cond())
        except TimeoutException:
            self.shot("failed")
            raise AssertionError(f"timed out waiting for {what}; url {self.d.current_url}; "
                                 f"page text:\n{self.text()[:3000]}")

    def text(self):
        return self.d.find_element(By.TAG_NAME, "body").text

    def css(self, sel):
        return self.d.find_elements(By.CSS_SELECTOR, sel)

    def shown(self, sel):
        return [e for e in self.css(sel) if e.is_displayed()]

    def shot(self, name):
        path = f"{self.args.screens}/{len(self.shots):02d}-{name}.png"
        self.d.save_screenshot(path)
        self.shots.append(path)
        step(f"screenshot {path}")

    def no_alert(self):
        try:
            a = self.d.switch_to.alert
        except NoAlertPresentException:
            return
        raise AssertionError(f"an alert fired: {a.text!r}")

    def open(self, base, hash_):
        self.d.get(f"{base}/{hash_}")
        # Within the same page only the hash changes: get() returns before the app's hashchange
        # handler runs, and the last view (its rows, its flame graph) would still be read.
        self.wait(f"the page to show {hash_}", lambda: self.d.execute_script(
            "return document.documentElement.dataset.rendered === location.hash;"))

    def flame_loaded(self):
        return self.d.execute_script(
            "const c = document.querySelector('canvas.flame');"
            "return !!(c && c.flameGraph && c.flameGraph.levels && c.offsetParent);")

    def click_frame(self, name):
        # A real pointer click at the frame's point in the viewport, scrolled there first:
        # clicking at an offset from the canvas lets WebDriver scroll the canvas (taller than
        # the window, in a sticky pane) after the offset was measured.
        where = "return document.querySelector('canvas.flame').flameGraph.frameCenter(arguments[0]);"
        pos = self.d.execute_script(where, name)
        assert pos, f"no frame {name} on the canvas"
        height = self.d.execute_script("return window.innerHeight;")
        if not 8 <= pos["y"] < height - 8:
            self.d.execute_script("window.scrollBy(0, arguments[0]);", pos["y"] - height / 2)
        # The same point on two reads half a second apart: a line that comes above the canvas
        # late (a search's match count) would move the frame after it was measured, and the
        # click would land on its parent (seen in a run).
        last = [None]

        def settled():
            now = self.d.execute_script(where, name)
            same = now is not None and now == last[0]
            last[0] = now
            return now if same else None
        pos = self.wait(f"the frame {name} to stay put", settled)
        click = ActionBuilder(self.d)
        click.pointer_action.move_to_location(int(pos["x"]), int(pos["y"])).click()
        click.perform()

    def zoom_label(self):
        return " ".join(e.text for e in self.shown(".zoom-label"))

    def severe_logs(self):
        return [e for e in self.d.get_log("browser") if e["level"] == "SEVERE"
                and "favicon" not in e["message"] and "/api/v1/" not in e["message"]]


def run(c, args):
    d = c.d
    legend = lambda: " ".join(e.text for e in c.shown(".legend"))
    flame_names = lambda: d.execute_script(
        "return document.querySelector('canvas.flame').flameGraph.names;")
    # 1. Empty server: says there is no data and how to send some.
    c.open(args.empty_base, "#/traces")
    c.wait("the no-data notice", lambda: "No data yet" in c.text())
    assert "spanprof serve --scrape name=http://host:6060" in c.text()
    # The empty server's OTLP listeners are off: OTLP/HTTP goes to its main port.
    empty_port = urllib.parse.urlsplit(args.empty_base).port
    c.wait("the ports of this server", lambda: f"OTLP/HTTP on :{empty_port} (this port" in c.text())
    assert "OTLP gRPC is off" in c.text(), c.text()
    assert "spanprof serve --demo" in c.text()
    c.shot("empty")
    c.open(args.empty_base, "#/explore")
    c.wait("explore's no-data notice", lambda: "No data yet" in c.text())
    # A span on a server without any profile: waiting will not bring its samples.
    trace, span = send_span(args.empty_base, args.now)
    c.open(args.empty_base, "#/trace?" + urllib.parse.urlencode({"trace": trace, "span": span}))
    c.wait("the unprofiled span's notice", lambda: "No samples in this span" in c.text())
    assert "No profile is stored at all" in c.text(), c.text()
    assert "Reload" not in c.text(), c.text()
    # What the tracer said of it: kind, error and message, attributes (markup as text).
    details = " ".join(e.text for e in c.shown(".span-details"))
    for said in ["server", "error: inventory timed out", "http.route /orders/{id}",
                 "http.response.status_code 503", f"user.note {HOSTILE}"]:
        assert said in details, (said, details)
    assert not d.find_elements("css selector", ".span-details img"), "an attribute became markup"
    # What ran it, folded: the host (and container) in the summary, everything once unfolded.
    summary = c.shown(".span-resource summary")
    assert summary and summary[0].text == f"resource: orders-7f9c · {HOSTILE} · 3 attributes", \
        [e.text for e in summary]
    assert "process.pid" not in " ".join(e.text for e in c.shown(".span-details")), "the resource is not folded"
    summary[0].click()
    c.wait("the unfolded resource", lambda: c.shown(".span-resource .span-details"))
    resource = c.shown(".span-resource .span-details")[0].text
    for said in ["host.name orders-7f9c", "process.pid 4242", f"container.name {HOSTILE}"]:
        assert said in resource, (said, resource)
    assert "service.name" not in resource, resource
    # What happened in it: the exception, 150 ms after the start, its stack trace folded.
    event = c.shown(".span-event")
    assert event and event[0].text.startswith("+150 ms exception") \
        and f"exception.message {HOSTILE}" in event[0].text and "TimeoutError" in event[0].text, \
        [e.text for e in event]
    assert "inventory.py" not in event[0].text, "the stack trace is not folded"
    event[0].find_element(By.CSS_SELECTOR, "summary").click()
    c.wait("the unfolded stack trace", lambda: "inventory.py" in c.shown(".span-event pre")[0].text
           if c.shown(".span-event pre") else False)
    assert not d.find_elements("css selector", ".span-event img"), "an event attribute became markup"
    c.shot("span-resource")
    assert not d.find_elements("css selector", ".span-resource img"), "a resource attribute became markup"
    failed = c.css(f".wf-row[data-span-id='{span}'] .wf-name.failed")
    assert failed and "inventory timed out" in failed[0].get_attribute("title"), "the failed span is not marked"
    # An attribute links to the spans that have it too: the host's, and the markup one's
    # (a value with spaces, quoted in the search it opens).
    for chip, where in [(".span-resource a.span-attr[title^='host.name ']", "resource.host.name=orders-7f9c"),
                        (".span-details a.span-attr[title^='user.note ']", f'user.note="{HOSTILE}"')]:
        links = c.shown(chip)
        assert links, f"no link on {chip}"
        links[0].click()
        c.wait(f"the search for {where}", lambda: urllib.parse.parse_qs(
            urllib.parse.urlsplit(d.current_url).fragment.partition("?")[2]).get("where") == [where])
        c.wait("the span, found by it", lambda: [r.get_attribute("data-span-id")
                                                for r in c.css("table:not([aria-busy]) tr.span-row")] == [span])
        d.back()
        c.wait("the span again", lambda: c.shown(".span-resource"))
        if not c.shown(".span-resource .span-details"):
            c.shown(".span-resource summary")[0].click()
    c.open(args.empty_base, "#/traces")
    c.wait("the failed span's row", lambda: c.css(f"table:not([aria-busy]) tr.span-row[data-span-id='{span}']"))
    mark = c.css(f"table:not([aria-busy]) tr.span-row[data-span-id='{span}'] .failed-mark")
    assert mark and mark[0].text == "error" and mark[0].get_attribute("title") == "inventory timed out", \
        "the search does not mark the failed span"
    # Errors only: the failed span here; none in the demo recording, whose spans all succeeded.
    c.css("input.errors-only")[0].click()
    c.css("form.filters button[type=submit]")[0].click()
    c.wait("status=error in the URL", lambda: "status=error" in d.current_url)
    c.wait("the failed span, alone", lambda: [r.get_attribute("data-span-id")
                                             for r in c.css("table:not([aria-busy]) tr.span-row")] == [span])
    # By what ran it and what it was: typed into the search, kept in the URL.
    c.open(args.empty_base, "#/traces")
    c.wait("the search form", lambda: c.css("input[name=where]"))
    c.css("input[name=where]")[0].send_keys(
        f'resource.host.name=orders-7f9c http.route=/orders/{{id}} user.note="{HOSTILE}"')
    c.css("form.filters button[type=submit]")[0].click()
    c.wait("where= in the URL", lambda: "where=" in d.current_url)
    c.wait("the span on its host", lambda: [r.get_attribute("data-span-id")
                                           for r in c.css("table:not([aria-busy]) tr.span-row")] == [span])
    c.shot("traces-where")
    c.open(args.empty_base, "#/traces?" + urllib.parse.urlencode({"where": "resource.host.name=elsewhere"}))
    c.wait("no span on another host", lambda: "No span matches" in c.text())
    c.open(args.empty_base, "#/traces?" + urllib.parse.urlencode(
        {"where": "resource.host.name!=elsewhere http.route=~/orders/.*"}))
    c.wait("the span, by != and a regex", lambda: [r.get_attribute("data-span-id")
                                                  for r in c.css("table:not([aria-busy]) tr.span-row")] == [span])
    c.open(args.empty_base, "#/traces?" + urllib.parse.urlencode({"where": "http.route!~/orders/.*"}))
    c.wait("none left by !~", lambda: "No span matches" in c.text())
    # The failed requests by their status code, a number in order (its int attribute).
    c.open(args.empty_base, "#/traces?" + urllib.parse.urlencode(
        {"where": "http.response.status_code>=500 http.route=~/orders/.*"}))
    c.wait("the span, by >= 500", lambda: [r.get_attribute("data-span-id")
                                          for r in c.css("table:not([aria-busy]) tr.span-row")] == [span])
    c.open(args.empty_base, "#/traces?" + urllib.parse.urlencode({"where": "http.response.status_code<500"}))
    c.wait("none below 500", lambda: "No span matches" in c.text())
    # By kind, picked in the form: the span is a server's; no client span was sent.
    c.open(args.empty_base, "#/traces")
    c.wait("the kind picker", lambda: c.css("select[name=kind]"))
    Select(c.css("select[name=kind]")[0]).select_by_value("server")
    c.css("form.filters button[type=submit]")[0].click()
    c.wait("kind=server in the URL", lambda: "kind=server" in d.current_url)
    c.wait("the server span", lambda: [r.get_attribute("data-span-id")
                                       for r in c.css("table:not([aria-busy]) tr.span-row")] == [span])
    c.open(args.empty_base, "#/traces?kind=client")
    c.wait("no client span", lambda: "No span matches" in c.text())
    assert c.css("select[name=kind]")[0].get_attribute("value") == "client"
    c.open(args.empty_base, "#/traces?" + urllib.parse.urlencode({"where": "orders"}))
    c.wait("a pair without = refused", lambda: "The search failed" in c.text())
    assert "expected key=value" in c.text(), c.text()
    c.open(args.base, "#/traces?status=error")
    # The demo's failed spans: /alloc requests answered 500 (one in 20, by span id).
    c.wait("the demo's failed spans", lambda: c.css("table:not([aria-busy]) tr.span-row"))
    failed = [r.text for r in c.css("table:not([aria-busy]) tr.span-row")]
    assert all("/alloc" in t for t in failed), failed
    assert c.css("input.errors-only")[0].is_selected()
    c.no_alert()
    c.shot("span-details")

    # 2. Traces search: the slowest GET /cpu-heavy span comes first; open the slowest sampled.
    c.open(args.base, "#/traces?" + urllib.parse.urlencode({"service": "goapp", "name": "GET /cpu-heavy"}))
    c.wait("span rows", lambda: c.css("table:not([aria-busy]) tr.span-row"))
    first = c.css("table:not([aria-busy]) tr.span-row")[0]
    assert first.get_attribute("data-span-id") == args.first, \
        f"first row {first.get_attribute('data-span-id')} is not the slowest span {args.first}"
    chosen = [r for r in c.css("table:not([aria-busy]) tr.span-row") if r.get_attribute("data-span-id") == args.span]
    assert chosen, f"no row for the span {args.span}"
    assert "sampled" in chosen[0].text, chosen[0].text
    c.shot("traces-search")
    chosen[0].click()

    # 3. The trace: waterfall with the span selected and its flame graph.
    c.wait("the trace view", lambda: "#/trace?" in d.current_url and c.css(".wf-row.selected"))
    assert args.trace in d.current_url and args.span in d.current_url, d.current_url
    rows = c.css(".wf-row")
    assert len(rows) >= 2, "the span and its child"
    assert c.css(".wf-row.selected .mark.on"), "the span is marked as sampled"
    c.wait("the span's flame graph", c.flame_loaded)
    c.wait("the top table", lambda: c.css("table.top tbody tr"))
    # Its values read as durations with their share ("60 ms 75.0%"); nothing is "0", not
    # "0 ns" (the span's root frames have no self time).
    cells = [e.text for e in c.css("table.top tbody td")]
    assert any(" ms " in t for t in cells), cells[:12]
    assert any(t.startswith("0 ") for t in cells), cells[:24]
    assert not any(t.startswith("0 ns") for t in cells), cells[:24]
    c.shot("trace-flame")

    # 4. Search main.countPrimes: highlighted, share shown.
    box = c.shown(".flame-search")[0]
    box.send_keys("countPrimes")
    c.wait("the match share", lambda: "match" in " ".join(e.text for e in c.shown(".match-label")))
    assert "search=countPrimes" in d.current_url, d.current_url
    c.shot("search-countPrimes")

    # 5. Zoom into main.countPrimes by clicking its frame on the canvas.
    c.click_frame("main.countPrimes")
    c.wait("the zoom", lambda: "main.countPrimes" in c.zoom_label())
    assert "zoom=" in d.current_url, d.current_url
    c.shot("zoom-countPrimes")

    # 6. Include child spans: the selection widens (more samples or the same), zoom resets.
    c.shown(".focus-switch button.focus-children")[0].click()
    c.wait("focus=children in the URL", lambda: "focus=children" in d.current_url)
    c.wait("the wider flame graph", lambda: c.flame_loaded() and c.shown(".summary")
           and c.shown(".summary")[0].text != "")
    # The heading says what the total measures.
    heading = c.shown(".summary")[0].text
    assert heading.endswith(" of CPU time"), heading
    names = d.execute_script("return document.querySelector('canvas.flame').flameGraph.names;")
    assert "main.countPrimes" in names, names[:20]
    c.click_frame("main.countPrimes")
    c.wait("the zoom again", lambda: "main.countPrimes" in c.zoom_label())
    c.shot("children-zoom")
    state_url = d.current_url

    # 7. Reload: the same view (span, child spans, search, zoom).
    d.refresh()
    c.wait("the reloaded flame graph", c.flame_loaded)
    c.wait("the reloaded zoom", lambda: "main.countPrimes" in c.zoom_label())
    assert d.current_url == state_url, (d.current_url, state_url)
    assert c.shown(".focus-switch button.focus-children.active")
    assert c.shown(".flame-search")[0].get_attribute("value") == "countPrimes"
    assert c.css(".wf-row.selected")[0].get_attribute("data-span-id") == args.span
    c.shot("reloaded")

    # 8. Back undoes the zoom, forward redoes it.
    d.back()
    c.wait("back: no zoom", lambda: c.zoom_label() == "")
    d.forward()
    c.wait("forward: zoomed", lambda: "main.countPrimes" in c.zoom_label())

    # 9. Top functions sorted by total.
    c.css("table.top th button.sort")[1].click()
    c.wait("sort=total", lambda: "sort=total" in d.current_url)
    c.wait("the total-sorted table", lambda: c.css("table.top th button.sort.active")
           and "Total" in c.css("table.top th button.sort.active")[0].text)

    # 10. A span without samples explains why.
    trace, span = args.unsampled.split("/")
    c.open(args.base, "#/trace?" + urllib.parse.urlencode({"trace": trace}))
    # Its own row: the last trace's rows stay (hidden) until this one has loaded.
    c.wait("the unsampled span's trace", lambda: c.shown(f".wf-row[data-span-id='{span}']"))
    c.shown(f".wf-row[data-span-id='{span}']")[0].click()
    c.wait("the coverage notice", lambda: "No samples in this span" in c.text())
    assert any(v in c.text() for v in ["shorter than the sampling period", "no CPU used",
                                       "no profile covers the span"]), c.text()
    c.shot("span-without-samples")
    # A span between two windows: said so, and that none of its time was profiled.
    trace, span = args.between.split("/")
    c.open(args.base, "#/trace?" + urllib.parse.urlencode({"trace": trace, "span": span}))
    c.wait("the between-windows notice", lambda: "fell (mostly) between two profiles" in c.text())
    assert "the profiles cover none of its " in c.text(), c.text()

    # 10b. The span's type picker offers the types of its samples; choosing one shows its
    # flame graph and the trace's totals in it.
    c.open(args.base, "#/trace?" + urllib.parse.urlencode({"trace": args.trace, "span": args.span}))
    c.wait("the span's type picker", lambda: c.shown("select[name=type]"))
    options = [o.get_attribute("value") for o in c.css("select[name=type] option")]
    assert len(options) >= 2 and all(":" in o for o in options), options
    assert not any("alloc" in o or "inuse" in o for o in options), options
    counted = [o for o in options if o.split(":")[1] == "samples"]
    assert counted, options
    c.css(f"select[name=type] option[value='{counted[0]}']")[0].click()
    c.wait("type= in the URL", lambda: "type=" in d.current_url)
    c.wait("the span's sample count", lambda: c.flame_loaded() and c.shown(".summary")
           and c.shown(".summary")[0].text.endswith(" samples"))
    c.wait("the trace's totals in samples", lambda: "of CPU" not in c.shown(".trace-head")[0].text
           and " samples" in c.shown(".trace-head")[0].text)
    c.shot("span-type-samples")

    # 11. A trace that is not stored says so, with the way back; a failed request says what
    # failed.
    c.open(args.base, "#/trace?trace=" + "ab" * 16)
    c.wait("the not-stored notice", lambda: f"Trace {'ab' * 16} is not stored" in c.text())
    back = c.shown(".notice a.back-to-search")
    assert back and back[0].get_attribute("href").split("#", 1)[1].startswith("/traces"), "a way back to the search"
    assert not c.shown(".wf-row"), "no waterfall"
    c.shot("trace-not-stored")
    c.open(args.base, "#/trace?trace=zz")
    c.wait("the error notice", lambda: c.shown(".notice.error"))
    assert "400" in c.text() and "expected 32 hex characters" in c.text(), c.text()
    c.shot("error")

    # 12. Explore: service, type and range pickers; the pprof link carries the selection.
    c.open(args.base, "#/explore?service=goapp")
    c.wait("explore's flame graph", c.flame_loaded)
    link = c.shown("a.download")[0].get_attribute("href")
    assert "/api/v1/pprof?" in link and "service=goapp" in link, link
    with urllib.request.urlopen(link, timeout=30) as r:
        assert r.read(2) == b"\x1f\x8b", "the pprof download is gzip"
    # The SVG export is drawn from the canvas (python/ui_flame.py compares them).
    body = d.execute_script("return document.querySelector('.profile-panel').profilePanel.svgText();")
    assert "<svg" in body and "main.countPrimes" in body, body[:300]
    # The timeline of totals: drag across its middle third to narrow the range.
    bars = lambda: d.execute_script(
        "const t = document.querySelector('canvas.timeline');"
        "return t && t.timeline.domain ? t.timeline.points.length : 0;")
    c.wait("the timeline's bars", lambda: bars() > 0)
    c.shot("explore")
    before = d.current_url
    timeline = c.shown("canvas.timeline")[0]
    # Around the tallest bar, in pixels from the canvas centre (where move_to_element lands).
    peak = d.execute_script(
        "const t = document.querySelector('canvas.timeline').timeline;"
        "const w = t.canvas.getBoundingClientRect().width;"
        "const [at] = t.points.reduce((a, b) => (b[1] > a[1] ? b : a));"
        "return t.xOf(at + t.stepMs / 2) - w / 2;")
    ActionChains(d).move_to_element_with_offset(timeline, int(peak) - 15, 0).click_and_hold() \
        .move_by_offset(30, 0).release().perform()
    c.wait("the brushed range in the URL", lambda: d.current_url != before
           and "from=" in d.current_url and "to=" in d.current_url)
    q = urllib.parse.parse_qs(urllib.parse.urlparse(d.current_url).fragment.split("?", 1)[1])
    # Written as RFC 3339 in the browser's time zone (python/ui_flame.py checks the zone).
    frm, to = (datetime.datetime.fromisoformat(q[k][0]) for k in ["from", "to"])
    assert frm < to, (frm, to)
    c.wait("the narrowed flame graph", c.flame_loaded)
    c.shot("explore-brushed")

    # 13. Hostile function name: text, never markup, no alert.
    ingest_hostile(args.base, args.now)
    c.open(args.base, "#/explore?service=hostile")
    # Read through JS: the table is rebuilt while it loads, so element handles go stale.
    cells = lambda: d.execute_script(
        "return [...document.querySelectorAll('table.top td.fn')].map(e => e.textContent);")
    c.wait("the hostile name as text in the top table", lambda: HOSTILE in cells())
    assert not c.css("img"), "an <img> element was created from a function name"
    c.no_alert()
    names = d.execute_script("return document.querySelector('canvas.flame').flameGraph.names;")
    assert HOSTILE in names, names
    box = c.shown(".flame-search")[0]
    box.send_keys("<img")
    c.wait("the hostile match", lambda: "match" in " ".join(e.text for e in c.shown(".match-label")))
    c.no_alert()
    c.shot("hostile-name")

    # 14. Compare: slow against fast spans of GET /cpu-heavy, reached from the span's view.
    c.open(args.base, f"#/trace?trace={args.trace}&span={args.span}")
    link = c.wait("the slow-vs-fast link", lambda: [
        a for a in c.shown("a.compare-link") if a.text.startswith("slow vs fast")])[0]
    link.click()
    c.wait("the slow-vs-fast diff", lambda: c.flame_loaded() and "slow spans (above p90)" in legend())
    assert not c.shown(".notice.error"), c.shown(".notice.error")[0].text
    assert "countPrimes" in " ".join(flame_names()), flame_names()
    c.shot("compare-slow-fast")

    # 15. Compare two spans: the slowest sampled one against another sampled one.
    pick = c.d.find_element(By.CSS_SELECTOR, "select[name=mode]")
    pick.find_element(By.CSS_SELECTOR, "option[value=spans]").click()
    # Picked from the lists of the span name's spans (python/ui_flame.py types the name).
    c.wait("the left span's list", lambda: c.css(f"select[name=a] option[value='{args.span}']"))
    Select(c.shown("select[name=a]")[0]).select_by_value(args.span)
    c.wait("the right span's list", lambda: args.span in d.current_url
           and c.css(f"select[name=b] option[value='{args.other}']"))
    Select(c.shown("select[name=b]")[0]).select_by_value(args.other)
    c.wait("the two-span diff", lambda: c.flame_loaded() and f"span {args.other[:8]}…" in legend())
    assert "mode=spans" in d.current_url and args.other in d.current_url, d.current_url
    c.shot("compare-two-spans")

    # 16. Against a span without samples: the notice names the side that has none.
    unsampled_span = args.unsampled.split("/")[1]
    c.open(args.base, "#/compare?" + urllib.parse.urlencode(
        {"mode": "spans", "service": "goapp", "a": args.span, "b": unsampled_span}))
    c.wait("the one-sided notice", lambda: f"Span {unsampled_span[:8]}… has no samples" in c.text())
    assert "A diff needs samples on both sides: choose spans with samples" in c.text(), c.text()[:2000]
    # No one-sided diff is drawn beside the notice.
    assert not c.shown("canvas.flame"), "a flame graph is shown beside the notice"
    c.shot("compare-one-sided")

    # 17. A refused selection is explained once, with nothing to download.
    c.open(args.base, "#/explore?" + urllib.parse.urlencode(
        {"service": "goapp", "query": 'span_name="GET /cpu-heavy"'}))
    c.wait("the refusal", lambda: c.shown(".notice.error"))
    c.wait("the timeline's pointer to it", lambda: "(see below)" in c.text())
    assert len(c.shown(".notice.error")) == 1, [e.text for e in c.shown(".notice.error")]
    assert "label matchers go in braces" in c.text(), c.text()[:2000]
    assert not c.shown("a.download"), "nothing to download"
    c.shot("explore-refused")

    # 18. Finding the costly span: count, sorts, pages, the chart, traces, names; two widths.
    ui_find.run(c, args.base, step)

    logs = c.severe_logs()
    assert not logs, f"browser console errors: {json.dumps(logs, indent=1)}"


def drive(args, run, say):
    """Runs `run(c, args)` in a fresh browser, quit however it ends; `say` the end."""
    driver = browser(args)
    c = Check(driver, args)
    try:
        run(c, args)
    finally:
        driver.quit()
    say("all steps passed")


def main():
    drive(parse_args(), run, step)


if __name__ == "__main__":
    sys.exit(main())
