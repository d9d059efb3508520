//! The spans as the exporter gets them, through the tracing layer switchyard installs, with an
//! exporter that keeps them in memory.

use std::sync::{Arc, Mutex};

use opentelemetry::trace::{SpanId, SpanKind, Status, TraceId};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SimpleSpanProcessor, SpanData, SpanExporter};
use switchyard_core::call::Call;
use tracing::Span;
use tracing_subscriber::prelude::*;

use super::*;

#[derive(Debug, Clone, Default)]
struct Kept(Arc<Mutex<Vec<SpanData>>>);

impl SpanExporter for Kept {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0.lock().unwrap().extend(batch);
        Ok(())
    }
}

/// Runs `f` under a subscriber with switchyard's layer; the spans it ended.
fn spans_of(f: impl FnOnce()) -> Vec<SpanData> {
    let kept = Kept::default();
    let provider = SdkTracerProvider::builder().with_span_processor(SimpleSpanProcessor::new(kept.clone())).build();
    let subscriber = tracing_subscriber::registry().with(layer_of(&provider));
    tracing::subscriber::with_default(subscriber, f);
    kept.0.lock().unwrap().clone()
}

fn attr(span: &SpanData, key: &str) -> Option<String> {
    span.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| kv.value.to_string())
}

const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[test]
fn a_call_s_server_span_continues_the_client_s_trace_and_holds_its_client_span() {
    let line = format!(
        r#"{{"jsonrpc":"2.0","id":"c1","method":"tools/call","params":{{"name":"read_file","_meta":{{"traceparent":"{TP}"}}}}}}"#
    );
    let call = Call::parse(line).unwrap();
    let mut sent = None;
    let spans = spans_of(|| {
        let session = session("fs", "unix-3");
        let server = server_span(&call, "unix-3", Some("2025-11-25"), &session);
        let op = Operation {
            side: Side::Client,
            method: call.method(),
            target: Target::of(call.method(), Some("read_file"), None),
            request_id: None,
            session_id: None,
            protocol_version: None,
            transport: TRANSPORT_PIPE,
            instance: Some("fs#1"),
        };
        let client = operation(&op, None, Some(&server));
        let started = started(&client).unwrap();
        sent = started.traceparent();
        started.set(JSONRPC_REQUEST_ID, "17");
        started.ended(Some("-32602"), Some(-32602));
    });
    let by_kind = |k: SpanKind| spans.iter().find(|s| s.span_kind == k && s.name != "session fs").unwrap();
    let (server, client) = (by_kind(SpanKind::Server), by_kind(SpanKind::Client));
    assert_eq!((server.name.as_ref(), client.name.as_ref()), ("tools/call read_file", "tools/call read_file"));
    let trace = TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap();
    assert_eq!(server.span_context.trace_id(), trace);
    assert_eq!(
        (server.parent_span_id, server.parent_span_is_remote),
        (SpanId::from_hex("00f067aa0ba902b7").unwrap(), true)
    );
    assert_eq!((client.span_context.trace_id(), client.parent_span_id), (trace, server.span_context.span_id()));
    // What the server is given: the trace, under switchyard's CLIENT span.
    let sent = sent.unwrap();
    assert_eq!((sent.trace_id, sent.parent_id), (trace.to_bytes(), client.span_context.span_id().to_bytes()));
    assert_eq!(attr(server, MCP_METHOD_NAME).as_deref(), Some("tools/call"));
    assert_eq!(attr(server, GEN_AI_TOOL_NAME).as_deref(), Some("read_file"));
    assert_eq!(attr(server, JSONRPC_REQUEST_ID).as_deref(), Some("c1"), "the client's id, without its quotes");
    assert_eq!(attr(server, MCP_SESSION_ID).as_deref(), Some("unix-3"));
    assert_eq!(attr(server, NETWORK_TRANSPORT).as_deref(), Some(TRANSPORT_UNIX));
    assert_eq!(attr(server, MCP_PROTOCOL_VERSION).as_deref(), Some("2025-11-25"));
    assert_eq!(attr(server, GEN_AI_OPERATION_NAME).as_deref(), Some(GEN_AI_OPERATION_EXECUTE_TOOL));
    assert_eq!(attr(client, JSONRPC_REQUEST_ID).as_deref(), Some("17"));
    assert_eq!(attr(client, SWITCHYARD_INSTANCE).as_deref(), Some("fs#1"));
    assert_eq!(attr(client, ERROR_TYPE).as_deref(), Some("-32602"));
    assert!(matches!(client.status, Status::Error { .. }) && server.status == Status::Unset);
    // The session's span is its own trace; the call links to it.
    let session = spans.iter().find(|s| s.name == "session fs").unwrap();
    assert_eq!(
        server.links.iter().map(|l| l.span_context.span_id()).collect::<Vec<_>>(),
        [session.span_context.span_id()]
    );
}

#[test]
fn a_call_without_a_trace_context_starts_a_trace() {
    let call = Call::parse(r#"{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"file:///a"}}"#.into())
        .unwrap();
    let spans = spans_of(|| drop(server_span(&call, "stdio-1", None, &Span::none())));
    let [server] = spans.as_slice() else { panic!("{spans:?}") };
    assert_eq!((server.name.as_ref(), server.parent_span_id), ("resources/read file:///a", SpanId::INVALID));
    assert_eq!(attr(server, MCP_RESOURCE_URI).as_deref(), Some("file:///a"));
    assert_eq!(attr(server, GEN_AI_OPERATION_NAME), None);
    assert_eq!(attr(server, NETWORK_TRANSPORT).as_deref(), Some(TRANSPORT_PIPE));
}
