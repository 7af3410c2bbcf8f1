"""Pushes CPU profiles to spanprof with the real Python SDK (pyroscope-io 1.x) while one
OpenTelemetry span burns CPU, most of it in a child span; pyroscope-otel's span processor tags
the samples with the span (it tags root spans only, so the child's CPU is the root's). The
spans go to spanprof's /v1/traces with the SDK's own OTLP/HTTP exporter.

Usage: span_profile.py http://127.0.0.1:PORT
Environment (all optional): SPANPROF_APP, the service name (py-checkout); SPANPROF_TENANT, a
tenant id sent by both the SDK and the exporter (X-Scope-OrgID); SPANPROF_BASIC_AUTH,
user:password both send as basic auth.
Prints {"span_id": "<16 hex>", "child_span_id": "<16 hex>", "trace_id": "<32 hex>"} of the
root span and its child as the last line.
"""

import base64
import json
import os
import sys
import time

import pyroscope
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from pyroscope.otel import PyroscopeSpanProcessor


def burn(seconds):
    """Spins until this thread has used `seconds` of CPU (so a busy machine only stretches it)."""
    end = time.thread_time() + seconds
    n = 0
    while time.thread_time() < end:
        n += sum(i * i for i in range(200))
    return n


def main():
    server = sys.argv[1]
    app = os.environ.get("SPANPROF_APP", "py-checkout")
    tenant = os.environ.get("SPANPROF_TENANT", "")
    user, _, password = os.environ.get("SPANPROF_BASIC_AUTH", "").partition(":")
    ok = pyroscope.configure(
        application_name=app,
        server_address=server,
        sample_rate=100,
        upload_interval=1,
        tags={"env": "ci"},
        enable_logging=True,
        tenant_id=tenant,
        basic_auth_username=user,
        basic_auth_password=password,
    )
    if ok is False:
        sys.exit("pyroscope.configure failed")
    headers = {}
    if tenant:
        headers["X-Scope-OrgID"] = tenant
    if user:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    provider = TracerProvider(resource=Resource.create({"service.name": app}))
    provider.add_span_processor(PyroscopeSpanProcessor())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=server + "/v1/traces",
                                                                    headers=headers)))
    trace.set_tracer_provider(provider)
    tracer = trace.get_tracer("spanprof-test")

    burn(0.3)  # outside any span
    with tracer.start_as_current_span("checkout") as span:
        burn(0.2)
        with tracer.start_as_current_span("compute_prices") as child:
            burn(1.3)
            # What the SDK records of an exception caught in the span: an `exception` event.
            try:
                raise LookupError("no price for sku 42")
            except LookupError as e:
                child.record_exception(e)
        ctx = span.get_span_context()
    burn(0.3)
    # Let the last upload interval pass, then flush and stop the agent.
    time.sleep(1.5)
    if not pyroscope.shutdown():
        sys.exit("pyroscope.shutdown failed")
    # Exports the spans still batched.
    provider.shutdown()
    print(json.dumps({
        "span_id": format(ctx.span_id, "016x"),
        "child_span_id": format(child.get_span_context().span_id, "016x"),
        "trace_id": format(ctx.trace_id, "032x"),
    }))


if __name__ == "__main__":
    main()
