"""The web UI of a spanprof that needs credentials, in headless Debian chromium (Selenium).

Run by crates/spanprof/tests/it/ui.rs against `spanprof serve --demo` with a read token
configured: the UI shows nothing but its sign-in form without a token, says when a token is
refused, shows the demo's spans once signed in (and after a reload: the token is kept for the
tab's session), and forgets the token on "Sign out". Prints `ui_auth_check: all steps passed`.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ui_check import drive  # noqa: E402  (the same browser and helpers)


def step(msg):
    print(f"ui_auth_check: {msg}", flush=True)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--base", required=True, help="http://host:port of the demo server")
    p.add_argument("--token", required=True, help="a token with the read scope")
    p.add_argument("--chromium", required=True)
    p.add_argument("--chromedriver", required=True)
    p.add_argument("--user-data-dir", required=True)
    p.add_argument("--screens", required=True)
    return p.parse_args()


def status_of(c, path):
    """What the page's own fetch of `path` is answered, with the token it keeps (if any)."""
    return c.d.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "const t = sessionStorage.getItem('spanprof.token');"
        "fetch(arguments[0], {headers: t ? {Authorization: 'Bearer ' + t} : {}})"
        ".then(r => done(r.status), e => done(String(e)));", path)


def sign_in(c, token):
    box = c.wait("the token field", lambda: c.shown(".sign-in input[name=token]"))[0]
    box.clear()
    box.send_keys(token)
    c.css(".sign-in button[type=submit]")[0].click()


def run(c, args):
    c.open(args.base, "#/traces")
    c.wait("the sign-in form", lambda: c.shown(".sign-in"))
    assert "goapp" not in c.text() and "cpu-heavy" not in c.text(), c.text()
    assert c.d.title.startswith("Sign in"), c.d.title
    for path in ["/api/v1/services", "/api/v1/spans?service=goapp", "/metrics"]:
        got = status_of(c, path)
        assert got == 401, f"{path} without a token: {got}"
    c.shot("sign-in")
    # The form at both widths in both themes: nothing overflows sideways.
    for theme in ("light", "dark"):
        c.d.execute_cdp_cmd("Emulation.setEmulatedMedia",
                            {"features": [{"name": "prefers-color-scheme", "value": theme}]})
        for width in (1400, 900):
            c.d.set_window_size(width + 16, 1000)
            c.wait(f"the page at {width} px", lambda: width <= c.d.execute_script("return innerWidth;") <= width + 16)
            o = c.d.execute_script("const d = document.documentElement; return [d.scrollWidth, d.clientWidth];")
            assert o[0] <= o[1], f"the sign-in form overflows at {width} px in the {theme} theme: {o}"
            c.shot(f"sign-in-{width}-{theme}")
    c.d.execute_cdp_cmd("Emulation.setEmulatedMedia",
                        {"features": [{"name": "prefers-color-scheme", "value": "light"}]})
    c.d.set_window_size(1500, 1000)
    step("without a token: the sign-in form (both widths, both themes), and every read is 401")

    sign_in(c, "not-the-token")
    c.wait("the refusal", lambda: "refused the token" in c.text())
    c.shot("token-refused")
    step("a wrong token: refused, and said so")

    sign_in(c, args.token)
    c.wait("the demo's spans", lambda: "cpu-heavy" in c.text())
    c.shot("signed-in")
    assert status_of(c, "/api/v1/services") == 200
    step("signed in: the traces search shows the demo's spans")

    c.d.refresh()
    c.wait("the spans after a reload", lambda: "cpu-heavy" in c.text())
    assert not c.shown(".sign-in")
    step("a reload keeps the session's token")

    c.wait("the sign-out button", lambda: c.shown(".sign-out"))[0].click()
    c.wait("the sign-in form again", lambda: c.shown(".sign-in"))
    assert c.d.execute_script("return sessionStorage.getItem('spanprof.token')") is None
    step("signed out: the token is forgotten")

    c.no_alert()
    # 401s are what this test asks for; anything else the console says is an error.
    errors = [e for e in c.d.get_log("browser") if e["level"] == "SEVERE"
              and "favicon" not in e["message"] and "401" not in e["message"]]
    assert not errors, errors


def main():
    drive(parse_args(), run, step)


if __name__ == "__main__":
    sys.exit(main())
