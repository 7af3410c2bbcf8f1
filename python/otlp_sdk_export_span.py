"""Exports one span with the OpenTelemetry SDK's own OTLP/HTTP exporter, which retries what the
server marks as worth it (429, 502, 503, 504; after its Retry-After) until its timeout.

usage: otlp_sdk_export_span.py ENDPOINT   # e.g. http://127.0.0.1:4040/v1/traces
Prints one JSON line: {"ok": bool, "seconds": time the export took, "trace_id": hex, "span_id": hex}.
"""
import json
import sys
import time

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult


def main():
    exporter = OTLPSpanExporter(endpoint=sys.argv[1], timeout=60)
    # No span processor: the one span is exported below, once, and timed.
    provider = TracerProvider(resource=Resource.create({"service.name": "pyapp"}))
    span = provider.get_tracer("spanprof-test").start_span("GET /retried")
    span.end()
    start = time.time()
    result = exporter.export([span])
    print(json.dumps({
        "ok": result == SpanExportResult.SUCCESS,
        "seconds": time.time() - start,
        "trace_id": format(span.context.trace_id, "032x"),
        "span_id": format(span.context.span_id, "016x"),
    }))


if __name__ == "__main__":
    main()
