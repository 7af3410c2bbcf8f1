"""Sends OTLP over gRPC with the official grpcio client and opentelemetry-proto stubs.

usage: otlp_grpc_send.py ADDR profiles FILE [--gzip]   # FILE: binary ExportProfilesServiceRequest
       otlp_grpc_send.py ADDR traces TRACE_ID SPAN_ID NAME START_NS END_NS
       otlp_grpc_send.py ADDR garbage                  # an Export call with an invalid payload
       otlp_grpc_send.py ADDR health                   # grpc.health.v1.Health/Check: SERVING or NOT_SERVING
Prints one JSON line: {"ok": true, "response": "..."} or {"ok": false, "code": "...", "details": "..."},
the latter with "status_code" and "retry_delay_s" when the answer carries a google.rpc.Status with a
RetryInfo in grpc-status-details-bin (what OTLP clients read to know whether and when to retry).
Environment (optional): SPANPROF_GRPC_METADATA, "key=value,key=value" sent with each call
(authorization, x-scope-orgid); SPANPROF_SERVICE, the traces' service.name (goapp).
"""
import os
import json
import sys

import grpc
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2, profiles_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2


def main():
    addr, kind = sys.argv[1], sys.argv[2]
    channel = grpc.insecure_channel(addr)
    pairs = [p.split("=", 1) for p in os.environ.get("SPANPROF_GRPC_METADATA", "").split(",") if p]
    metadata = [(k.strip().lower(), v.strip()) for k, v in pairs]
    try:
        if kind == "profiles":
            request = profiles_service_pb2.ExportProfilesServiceRequest.FromString(open(sys.argv[3], "rb").read())
            compression = grpc.Compression.Gzip if "--gzip" in sys.argv else grpc.Compression.NoCompression
            response = profiles_service_pb2_grpc.ProfilesServiceStub(channel).Export(request, timeout=30, compression=compression,
                                                                                      metadata=metadata)
        elif kind == "traces":
            trace_id, span_id, name, start, end = sys.argv[3:8]
            span = trace_pb2.Span(trace_id=bytes.fromhex(trace_id), span_id=bytes.fromhex(span_id), name=name,
                                  kind=trace_pb2.Span.SPAN_KIND_SERVER, start_time_unix_nano=int(start), end_time_unix_nano=int(end))
            resource = trace_pb2.ResourceSpans(scope_spans=[trace_pb2.ScopeSpans(spans=[span])])
            resource.resource.attributes.append(common_pb2.KeyValue(key="service.name", value=common_pb2.AnyValue(string_value=os.environ.get("SPANPROF_SERVICE", "goapp"))))
            request = trace_service_pb2.ExportTraceServiceRequest(resource_spans=[resource])
            response = trace_service_pb2_grpc.TraceServiceStub(channel).Export(request, timeout=30, metadata=metadata)
        elif kind == "garbage":
            # Bytes that are no protobuf message: the server must answer INVALID_ARGUMENT.
            export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export",
                                         request_serializer=lambda b: b, response_deserializer=lambda b: b)
            response = export(b"\xff\xff\xff\xff", timeout=30)
        elif kind == "health":
            # The standard health check, as a Kubernetes gRPC probe calls it (an empty request:
            # the whole server). HealthCheckResponse is field 1, a varint: 1 SERVING, 2 NOT_SERVING.
            check = channel.unary_unary("/grpc.health.v1.Health/Check",
                                        request_serializer=lambda b: b, response_deserializer=lambda b: b)
            raw = check(b"", timeout=30)
            response = {b"\x08\x01": "SERVING", b"\x08\x02": "NOT_SERVING"}.get(raw, raw.hex())
        else:
            raise SystemExit(f"unknown kind {kind}")
        print(json.dumps({"ok": True, "response": str(response)}))
    except grpc.RpcError as e:
        out = {"ok": False, "code": e.code().name, "details": e.details()}
        for key, value in e.trailing_metadata() or ():
            if key == "grpc-status-details-bin":
                status = status_pb2.Status.FromString(value)
                out["status_code"] = status.code
                for detail in status.details:
                    info = error_details_pb2.RetryInfo()
                    if detail.Unpack(info):
                        out["retry_delay_s"] = info.retry_delay.seconds + info.retry_delay.nanos / 1e9
        print(json.dumps(out))


if __name__ == "__main__":
    main()
