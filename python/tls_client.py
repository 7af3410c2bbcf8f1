"""A client of spanprof's TLS listeners, trusting a private CA, optionally showing a client
certificate (mutual TLS):

  tls_client.py export-http URL CA [CERT KEY]   # the OTel SDK's OTLP/HTTP exporter, URL .../v1/traces
  tls_client.py export-grpc URL CA [CERT KEY]   # its OTLP/gRPC exporter, URL https://HOST:PORT
  tls_client.py get URL CA [CERT KEY]           # GET with Python's ssl (HTTP/1.1)
  tls_client.py pyroscope URL CA                # the pyroscope-io SDK pushing CPU profiles

export-*: exports one span (service tls-app, named after the protocol) and prints one JSON line
{"ok": bool, "trace_id": hex, "span_id": hex}. get: prints {"status": int, "body": text} or
{"error": text} when the connection or handshake failed. pyroscope: profiles about 1.5 s of
CPU as service py-tls, uploading every second, then prints {"done": true}.
SPANPROF_HEADERS ("key=value,key=value", optional): headers export-* and get send
(authorization, x-scope-orgid).
"""
import json
import os
import ssl
import sys
import urllib.error
import urllib.request

# Refusals are retried by the exporters until this; the tests that expect one wait for it.
EXPORT_TIMEOUT_S = 5


def headers():
    """SPANPROF_HEADERS as a dict."""
    pairs = [p.split("=", 1) for p in os.environ.get("SPANPROF_HEADERS", "").split(",") if p]
    return {k.strip().lower(): v.strip() for k, v in pairs}


def read(path):
    with open(path, "rb") as f:
        return f.read()


def export(protocol, url, ca, cert, key):
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExportResult

    if protocol == "http":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(
            endpoint=url,
            certificate_file=ca,
            client_certificate_file=cert,
            client_key_file=key,
            timeout=EXPORT_TIMEOUT_S,
            headers=headers(),
        )
    else:
        import grpc
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        credentials = grpc.ssl_channel_credentials(
            root_certificates=read(ca),
            private_key=read(key) if key else None,
            certificate_chain=read(cert) if cert else None,
        )
        exporter = OTLPSpanExporter(
            endpoint=url, credentials=credentials, timeout=EXPORT_TIMEOUT_S, headers=headers()
        )
    # No span processor: the one span is exported below, once, and its result printed.
    provider = TracerProvider(resource=Resource.create({"service.name": "tls-app"}))
    span = provider.get_tracer("spanprof-test").start_span(f"over {protocol} with TLS")
    span.end()
    result = exporter.export([span])
    print(json.dumps({
        "ok": result == SpanExportResult.SUCCESS,
        "trace_id": format(span.context.trace_id, "032x"),
        "span_id": format(span.context.span_id, "016x"),
    }))


def get(url, ca, cert, key):
    context = ssl.create_default_context(cafile=ca)
    if cert:
        context.load_cert_chain(cert, key)
    try:
        request = urllib.request.Request(url, headers=headers())
        with urllib.request.urlopen(request, context=context, timeout=30) as r:
            print(json.dumps({"status": r.status, "body": r.read().decode()}))
    except urllib.error.HTTPError as e:
        print(json.dumps({"status": e.code, "body": e.read().decode()}))
    except (urllib.error.URLError, ssl.SSLError, ConnectionError, OSError) as e:
        print(json.dumps({"error": str(e)}))


def push_pyroscope(url, ca):
    # The SDK's native agent (OpenSSL inside) has no CA option: it trusts OpenSSL's default
    # paths, which SSL_CERT_FILE sets. Set before the agent starts.
    os.environ["SSL_CERT_FILE"] = ca
    import time

    import pyroscope

    pyroscope.configure(
        application_name="py-tls", server_address=url, sample_rate=100, upload_interval=1
    )
    end = time.thread_time() + 1.5
    while time.thread_time() < end:
        sum(i * i for i in range(200))
    pyroscope.shutdown()
    print(json.dumps({"done": True}))


def main():
    command, url, ca = sys.argv[1:4]
    cert, key = (sys.argv[4], sys.argv[5]) if len(sys.argv) > 5 else (None, None)
    if command == "get":
        get(url, ca, cert, key)
    elif command == "pyroscope":
        push_pyroscope(url, ca)
    else:
        export(command.removeprefix("export-"), url, ca, cert, key)


if __name__ == "__main__":
    main()
