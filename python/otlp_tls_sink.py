"""An OTLP profiles receiver over TLS, for the forwarder's TLS test
(crates/spanprof/tests/it/tls.rs): OTLP/HTTP on HTTPS (http.server + ssl) and OTLP gRPC
with TLS (grpcio), both with the certificate and key given.

    otlp_tls_sink.py CERT KEY [CLIENT_CA]

Prints `listening https=PORT grpc=PORT`, then one line per export request received, decoded
with the opentelemetry-proto package: `received PROTOCOL profiles=N samples=M`. With
CLIENT_CA (mutual TLS), clients must show a certificate that CA signed, and each line ends
with ` client=CN`, the common name of the client's certificate.
"""

import ssl
import sys
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from opentelemetry.proto.collector.profiles.v1development import (
    profiles_service_pb2,
    profiles_service_pb2_grpc,
)

lock = threading.Lock()


def report(protocol, request, client=None):
    profiles = [
        p
        for rp in request.resource_profiles
        for sp in rp.scope_profiles
        for p in sp.profiles
    ]
    samples = sum(len(p.samples) for p in profiles)
    with lock:
        suffix = f" client={client}" if client else ""
        print(f"received {protocol} profiles={len(profiles)} samples={samples}{suffix}", flush=True)


class Http(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/v1development/profiles":
            request = profiles_service_pb2.ExportProfilesServiceRequest()
            request.ParseFromString(body)
            report("http", request, common_name(self.connection.getpeercert()))
        reply = profiles_service_pb2.ExportProfilesServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


def common_name(peer_cert):
    """The CN of a client certificate Python's ssl checked (None without one)."""
    for rdn in (peer_cert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return value
    return None


class Profiles(profiles_service_pb2_grpc.ProfilesServiceServicer):
    def Export(self, request, context):
        names = context.auth_context().get("x509_common_name", [])
        report("grpc", request, names[0].decode() if names else None)
        return profiles_service_pb2.ExportProfilesServiceResponse()


def main():
    cert, key = sys.argv[1], sys.argv[2]
    client_ca = sys.argv[3] if len(sys.argv) > 3 else None
    https = ThreadingHTTPServer(("127.0.0.1", 0), Http)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    if client_ca:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(client_ca)
    https.socket = context.wrap_socket(https.socket, server_side=True)
    threading.Thread(target=https.serve_forever, daemon=True).start()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    profiles_service_pb2_grpc.add_ProfilesServiceServicer_to_server(Profiles(), server)
    with open(cert, "rb") as c, open(key, "rb") as k:
        if client_ca:
            with open(client_ca, "rb") as ca:
                credentials = grpc.ssl_server_credentials(
                    [(k.read(), c.read())], root_certificates=ca.read(), require_client_auth=True
                )
        else:
            credentials = grpc.ssl_server_credentials([(k.read(), c.read())])
    grpc_port = server.add_secure_port("127.0.0.1:0", credentials)
    server.start()
    print(f"listening https={https.server_address[1]} grpc={grpc_port}", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
