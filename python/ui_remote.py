"""The span page over a remote frontend (`storage.backend: remote`), in a real browser (run by
crates/spanprof/tests/it/ui_remote.rs): the trace's waterfall and the span's flame graph
render from the Pyroscope and Tempo APIs of the peers, the remote's note on what it cannot
know is shown as text, the children focus renders too, the span's timeline in Explore has
bars and says what the remote leaves out, and nothing logs a console error.
Saves screenshots."""

import argparse
import sys
import urllib.parse

from ui_check import Check, browser, step


def parse_args():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--base", required=True, help="the remote frontend")
    p.add_argument("--trace", required=True, help="a trace with a sampled span")
    p.add_argument("--span", required=True, help="the sampled span")
    for a in ["--chromium", "--chromedriver", "--user-data-dir", "--screens"]:
        p.add_argument(a, required=True)
    return p.parse_args()


def no_console_errors(c, where):
    bad = [e for e in c.d.get_log("browser") if e["level"] == "SEVERE" and "favicon" not in e["message"]]
    assert not bad, f"{where}: console errors {bad}"


def run(c, a):
    c.d.set_window_size(1400, 1000)
    q = {"trace": a.trace, "span": a.span}
    c.open(a.base, "#/trace?" + urllib.parse.urlencode(q))
    c.wait("the span's flame graph", c.flame_loaded)
    c.wait("the remote note", lambda: "not available there" in c.text())
    notes = c.css(".remote-note")
    assert notes, "no .remote-note element"
    # Text, not markup: the note holds no element of its own.
    assert all(not n.find_elements("css selector", "*") for n in notes), "markup in the note"
    assert "Pyroscope" in c.text(), c.text()
    step("span flame graph rendered over the remote frontend")
    c.shot("remote-span")
    no_console_errors(c, "remote span")
    q["focus"] = "children"
    c.open(a.base, "#/trace?" + urllib.parse.urlencode(q))
    c.wait("the children flame graph", c.flame_loaded)
    c.shot("remote-span-children")
    no_console_errors(c, "remote span with children")
    # The span's timeline: each step's total asked of Pyroscope with the span as selector;
    # what it cannot hold (the exemplars) is said beside it as text.
    c.open(a.base, "#/explore?" + urllib.parse.urlencode({"service": "goapp", "span_id": a.span}))
    c.wait("the span's timeline", lambda: "one bar per" in c.text())
    c.wait("the timeline's remote note", lambda: "exemplars of a series of spans" in c.text())
    assert "could not be loaded" not in c.text(), c.text()
    bars = c.d.execute_script("return document.querySelector('canvas.timeline').timeline.points.length")
    assert bars > 0, "no bars in the span's timeline"
    step(f"span timeline rendered over the remote frontend ({bars} bars)")
    c.shot("remote-span-timeline")
    no_console_errors(c, "remote span timeline")


def main():
    a = parse_args()
    driver = browser(a)
    c = Check(driver, a)
    try:
        run(c, a)
    finally:
        driver.quit()
    print("ui_remote: all steps passed")


if __name__ == "__main__":
    sys.exit(main())
