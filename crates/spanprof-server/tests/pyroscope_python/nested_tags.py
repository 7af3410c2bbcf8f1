"""Pushes CPU profiles to spanprof with the real Python SDK (pyroscope-io 1.x) while a child
span's tag_wrapper runs inside its parent's, both tagging `span_id` (what a tracing
integration that tags every span does). pyroscope-rs keeps a thread's tags as a set, so the
child's samples carry both span ids.

Usage: nested_tags.py http://127.0.0.1:PORT
Prints {"parent": "<16 hex>", "child": "<16 hex>"} as the last line.
"""

import json
import secrets
import sys
import time

import pyroscope


def burn(seconds):
    """Spins until this thread has used `seconds` of CPU."""
    end = time.thread_time() + seconds
    n = 0
    while time.thread_time() < end:
        n += sum(i * i for i in range(200))
    return n


def parent_work(seconds):
    return burn(seconds)


def child_work(seconds):
    return burn(seconds)


def main():
    server = sys.argv[1]
    ok = pyroscope.configure(
        application_name="py-nested",
        server_address=server,
        sample_rate=100,
        upload_interval=1,
        enable_logging=True,
    )
    if ok is False:
        sys.exit("pyroscope.configure failed")
    parent, child = secrets.token_hex(8), secrets.token_hex(8)
    with pyroscope.tag_wrapper({"span_id": parent}):
        parent_work(0.2)
        with pyroscope.tag_wrapper({"span_id": child}):
            child_work(1.2)
        parent_work(0.2)
    # Let the last upload interval pass, then flush and stop the agent.
    time.sleep(1.5)
    if not pyroscope.shutdown():
        sys.exit("pyroscope.shutdown failed")
    print(json.dumps({"parent": parent, "child": child}))


if __name__ == "__main__":
    main()
