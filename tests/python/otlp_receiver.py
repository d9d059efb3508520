"""An OTLP/HTTP receiver for the telemetry tests: decodes each ExportTraceServiceRequest with the
opentelemetry-proto package and appends its spans to a file, one JSON object a line; the
histogram points of each ExportMetricsServiceRequest go to FILE.metrics the same way.

    python otlp_receiver.py --out FILE      prints "listening PORT", then serves until killed
    python otlp_receiver.py --discard       the same, answering each export unread (benchmarks)
    python otlp_receiver.py --conventions   prints the MCP conventions' names, as the
                                            semantic-conventions package spells them (JSON)

Each span line: trace_id, span_id, parent_span_id (hex, "" for a root), name, kind (SERVER,
CLIENT, ...), status (UNSET, OK, ERROR), attributes (key -> value), and the service.name of
its resource. Each metric line: name, unit, attributes, count, sum and bounds of one histogram
point (cumulative: a later export repeats it with the totals so far), and the service.name.
"""

import argparse
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status


def conventions():
    """The names the tests check against, taken from the semantic-conventions package."""
    from opentelemetry.semconv._incubating.attributes import (
        gen_ai_attributes as gen_ai,
        jsonrpc_attributes as jsonrpc,
        mcp_attributes as mcp,
    )
    from opentelemetry.semconv._incubating.metrics import mcp_metrics
    from opentelemetry.semconv.attributes import error_attributes, network_attributes

    return {
        "MCP_METHOD_NAME": mcp.MCP_METHOD_NAME,
        "MCP_PROTOCOL_VERSION": mcp.MCP_PROTOCOL_VERSION,
        "MCP_RESOURCE_URI": mcp.MCP_RESOURCE_URI,
        "MCP_SESSION_ID": mcp.MCP_SESSION_ID,
        "GEN_AI_TOOL_NAME": gen_ai.GEN_AI_TOOL_NAME,
        "GEN_AI_PROMPT_NAME": gen_ai.GEN_AI_PROMPT_NAME,
        "GEN_AI_OPERATION_NAME": gen_ai.GEN_AI_OPERATION_NAME,
        "GEN_AI_OPERATION_EXECUTE_TOOL": gen_ai.GenAiOperationNameValues.EXECUTE_TOOL.value,
        "JSONRPC_REQUEST_ID": jsonrpc.JSONRPC_REQUEST_ID,
        "ERROR_TYPE": error_attributes.ERROR_TYPE,
        "NETWORK_TRANSPORT": network_attributes.NETWORK_TRANSPORT,
        "NETWORK_TRANSPORT_PIPE": network_attributes.NetworkTransportValues.PIPE.value,
        "NETWORK_TRANSPORT_UNIX": network_attributes.NetworkTransportValues.UNIX.value,
        "NETWORK_TRANSPORT_TCP": network_attributes.NetworkTransportValues.TCP.value,
        "MCP_SERVER_OPERATION_DURATION": mcp_metrics.MCP_SERVER_OPERATION_DURATION,
        "MCP_CLIENT_OPERATION_DURATION": mcp_metrics.MCP_CLIENT_OPERATION_DURATION,
        "MCP_SERVER_SESSION_DURATION": mcp_metrics.MCP_SERVER_SESSION_DURATION,
    }


def value(v):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    if kind is None:
        return None
    return getattr(v, kind)


def spans_of(request):
    for rs in request.resource_spans:
        resource = {a.key: value(a.value) for a in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                yield {
                    "trace_id": s.trace_id.hex(),
                    "span_id": s.span_id.hex(),
                    "parent_span_id": s.parent_span_id.hex(),
                    "name": s.name,
                    "kind": Span.SpanKind.Name(s.kind).removeprefix("SPAN_KIND_"),
                    "status": Status.StatusCode.Name(s.status.code).removeprefix("STATUS_CODE_"),
                    "attributes": {a.key: value(a.value) for a in s.attributes},
                    "links": [l.span_id.hex() for l in s.links],
                    "service": resource.get("service.name"),
                }


def points_of(request):
    for rm in request.resource_metrics:
        resource = {a.key: value(a.value) for a in rm.resource.attributes}
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.WhichOneof("data") != "histogram":
                    continue
                for p in m.histogram.data_points:
                    yield {
                        "name": m.name,
                        "unit": m.unit,
                        "attributes": {a.key: value(a.value) for a in p.attributes},
                        "count": p.count,
                        "sum": p.sum,
                        "bounds": list(p.explicit_bounds),
                        "service": resource.get("service.name"),
                    }


def serve(out):
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        # Keeps the exporter's connection open, as a collector does.
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            if out is None:
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()
                return
            path = self.path.split("?")[0]
            if path not in ("/v1/traces", "/v1/metrics") or self.headers.get("content-type") != "application/x-protobuf":
                self.send_response(404)
                self.send_header("content-length", "0")
                self.end_headers()
                return
            with lock, open(out + ".headers", "a") as f:
                f.write(json.dumps({":path": path, **{k.lower(): v for k, v in self.headers.items()}}) + "\n")
            if path == "/v1/metrics":
                request = ExportMetricsServiceRequest()
                request.ParseFromString(body)
                with lock, open(out + ".metrics", "a") as f:
                    for point in points_of(request):
                        f.write(json.dumps(point) + "\n")
                answer = ExportMetricsServiceResponse().SerializeToString()
            else:
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                with lock, open(out, "a") as f:
                    for span in spans_of(request):
                        f.write(json.dumps(span) + "\n")
                answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"listening {server.server_address[1]}", flush=True)
    server.serve_forever()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out")
    p.add_argument("--discard", action="store_true")
    p.add_argument("--conventions", action="store_true")
    args = p.parse_args()
    if args.conventions:
        json.dump(conventions(), sys.stdout)
        return
    serve(None if args.discard else args.out)


if __name__ == "__main__":
    main()
