//! The spans as the exporter gets them, made by a tracer of the tests' own, with an exporter that
//! keeps them in memory.

use std::sync::{Arc, Mutex};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::trace::{SpanId, SpanKind, Status, TraceId};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, SimpleSpanProcessor, SpanData, SpanExporter};
use switchyard_core::call::Call;

use super::*;
use crate::keys::*;
use crate::span::{operation_of, server_span_of, session_of};

#[derive(Debug, Clone, Default)]
struct Kept(Arc<Mutex<Vec<SpanData>>>);

impl SpanExporter for Kept {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0.lock().unwrap().extend(batch);
        Ok(())
    }
}

/// Runs `f` with a tracer whose spans are kept; the spans it ended.
fn spans_of(f: impl FnOnce(&SdkTracer)) -> Vec<SpanData> {
    let kept = Kept::default();
    let provider = SdkTracerProvider::builder().with_span_processor(SimpleSpanProcessor::new(kept.clone())).build();
    f(&provider.tracer("switchyard"));
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
    let spans = spans_of(|t| {
        let session = session_of(t, "fs", "unix-3");
        let server = server_span_of(t, &call, "unix-3", Some("2025-11-25"), Some("claude"), &session);
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
        let client = operation_of(t, &op, None, Some(&server), Vec::new(), Vec::new());
        sent = client.traceparent();
        client.set(JSONRPC_REQUEST_ID, "17");
        client.ended(Some("-32602"), Some(-32602), vec![opentelemetry::KeyValue::new(SWITCHYARD_ATTEMPT, 1)]);
        server
            .set_all(vec![opentelemetry::KeyValue::new(SWITCHYARD_PLUGINS, Span::strings(vec!["a sha256:1".into()]))]);
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
    assert_eq!(
        (client.span_context.trace_id(), client.parent_span_id, client.parent_span_is_remote),
        (trace, server.span_context.span_id(), false),
        "the CLIENT span is the local child of the call's"
    );
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
    assert_eq!(attr(server, SWITCHYARD_CLIENT_NAME).as_deref(), Some("claude"));
    assert_eq!(attr(server, SWITCHYARD_PLUGINS).as_deref(), Some("[\"a sha256:1\"]"));
    assert_eq!(attr(client, ERROR_TYPE).as_deref(), Some("-32602"));
    assert_eq!(attr(client, RPC_RESPONSE_STATUS_CODE).as_deref(), Some("-32602"));
    assert_eq!(attr(client, SWITCHYARD_ATTEMPT).as_deref(), Some("1"));
    assert_eq!(attr(client, MCP_SESSION_ID), None);
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
    let spans = spans_of(|t| drop(server_span_of(t, &call, "stdio-1", None, None, &Span::none())));
    let [server] = spans.as_slice() else { panic!("{spans:?}") };
    assert_eq!((server.name.as_ref(), server.parent_span_id), ("resources/read file:///a", SpanId::INVALID));
    assert_eq!(attr(server, MCP_RESOURCE_URI).as_deref(), Some("file:///a"));
    assert_eq!(attr(server, GEN_AI_OPERATION_NAME), None);
    assert_eq!(attr(server, NETWORK_TRANSPORT).as_deref(), Some(TRANSPORT_PIPE));
    assert_eq!(attr(server, SWITCHYARD_CLIENT_NAME), None);
    assert!(server.links.is_empty(), "no session span, no link");
}

#[test]
fn a_resource_s_credentials_stay_out_of_its_spans() {
    let call = Call::parse(
        r#"{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"https://me:pw@h/x?token=SECRETQ&v=2#access_token=SECRETF"}}"#
            .into(),
    )
    .unwrap();
    let spans = spans_of(|t| {
        let server = server_span_of(t, &call, "stdio-1", None, None, &Span::none());
        let op = Operation {
            side: Side::Client,
            method: call.method(),
            target: Target::of(call.method(), None, Some("https://me:pw@h/x?token=SECRETQ&v=2#access_token=SECRETF")),
            request_id: None,
            session_id: None,
            protocol_version: None,
            transport: TRANSPORT_TCP,
            instance: Some("r#1"),
        };
        drop(operation_of(t, &op, None, Some(&server), Vec::new(), Vec::new()));
    });
    assert_eq!(spans.len(), 2);
    let shown = "https://REDACTED:REDACTED@h/x?token=REDACTED&v=REDACTED#access_token=REDACTED";
    for span in &spans {
        assert_eq!(span.name, format!("resources/read {shown}"), "{:?}", span.span_kind);
        assert_eq!(attr(span, MCP_RESOURCE_URI).as_deref(), Some(shown));
        let text = format!("{span:?}");
        assert!(!text.contains("SECRETQ") && !text.contains("SECRETF") && !text.contains("pw@"), "{text}");
    }
}

#[test]
fn a_span_ends_when_its_owner_drops_it_and_not_before() {
    let call = Call::parse(r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#.into()).unwrap();
    let kept = Kept::default();
    let provider = SdkTracerProvider::builder().with_span_processor(SimpleSpanProcessor::new(kept.clone())).build();
    let t = provider.tracer("switchyard");
    let session = session_of(&t, "fs", "http-2");
    let server = server_span_of(&t, &call, "http-2", None, None, &session);
    server.set(SWITCHYARD_ATTEMPTS, 1);
    assert!(kept.0.lock().unwrap().is_empty(), "nothing is exported while the spans are held");
    drop(server);
    assert_eq!(kept.0.lock().unwrap().len(), 1, "the call's span, once its call dropped it");
    drop(session);
    let spans = kept.0.lock().unwrap().clone();
    let names: Vec<_> = spans.iter().map(|s| s.name.as_ref()).collect();
    assert_eq!(names, ["tools/list", "session fs"], "the call's span first, the session's when it ends");
    assert!(spans[0].end_time <= spans[1].end_time);
    assert_eq!(attr(&spans[1], NETWORK_TRANSPORT).as_deref(), Some(TRANSPORT_TCP));
    assert_eq!(attr(&spans[1], SWITCHYARD_SERVER).as_deref(), Some("fs"));
}

#[test]
fn with_traces_off_every_span_is_none_and_sends_no_traceparent() {
    // The tests' process never starts the exporter.
    assert!(!on());
    let call = Call::parse(format!(
        r#"{{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{{"name":"echo","_meta":{{"traceparent":"{TP}"}}}}}}"#
    ))
    .unwrap();
    let session = session("fs", "stdio-1");
    let server = server_span(&call, "stdio-1", None, Some("c"), &session);
    assert!(session.is_none() && server.is_none());
    assert_eq!(server.traceparent(), None, "the server then gets the client's own traceparent, untouched");
    server.ended(Some("x"), Some(1), Vec::new());
}
