//! The spans themselves: the OpenTelemetry SDK's, built with kind, name, attributes, parent and
//! link at once, and held by what they describe (the session, the call, the attempt), which
//! hands them down the call by reference. A span ends, and goes to the exporter, when its owner
//! drops it: at the end of its session, call or attempt, or when the call is cancelled.

use std::sync::Mutex;

use opentelemetry::trace::{
    Link, SpanBuilder, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
    Tracer as _,
};
use opentelemetry::{Array, Context, KeyValue, StringValue, Value};
use opentelemetry_sdk::trace::SdkTracer;

use crate::keys::*;
use crate::{Operation, Side, Target, TraceParent};

/// One of switchyard's spans, or none (traces are off): then each method is a branch and no
/// more.
#[derive(Debug)]
pub struct Span(Option<Live>);

#[derive(Debug)]
struct Live {
    /// Its context, kept beside it: its children and the `traceparent` it sends read it
    /// without the lock.
    context: SpanContext,
    /// Locked only to note what is known late (the outcome, switchyard's decision).
    span: Mutex<opentelemetry_sdk::trace::Span>,
}

/// The span of no session or call, for a request that is not traced.
static NONE: Span = Span(None);

impl Span {
    /// No span: what every span is when traces are off.
    pub const fn none() -> Span {
        Span(None)
    }

    /// A reference to no span, for a request whose caller made none.
    pub fn none_ref() -> &'static Span {
        &NONE
    }

    /// Whether this is no span.
    pub fn is_none(&self) -> bool {
        self.0.is_none()
    }

    fn start(tracer: &SdkTracer, builder: SpanBuilder, parent: &Context) -> Span {
        let span = tracer.build_with_context(builder, parent);
        let context = opentelemetry::trace::Span::span_context(&span).clone();
        Span(Some(Live { context, span: Mutex::new(span) }))
    }

    /// Its context, for a child or a link (None: no span).
    fn context(&self) -> Option<&SpanContext> {
        self.0.as_ref().map(|l| &l.context).filter(|c| c.is_valid())
    }

    /// The `traceparent` that makes this span the parent of what it sends.
    pub fn traceparent(&self) -> Option<TraceParent> {
        let sc = self.context()?;
        Some(TraceParent {
            trace_id: sc.trace_id().to_bytes(),
            parent_id: sc.span_id().to_bytes(),
            flags: sc.trace_flags().to_u8(),
        })
    }

    /// Attributes known late, under one lock: switchyard's own (`switchyard.*`, see
    /// [`crate::keys`]) or the upstream id.
    pub fn set_all(&self, attributes: Vec<KeyValue>) {
        if let Some(live) = &self.0 {
            opentelemetry::trace::Span::set_attributes(&mut *live.span.lock().expect("lock"), attributes);
        }
    }

    /// One attribute known late (see [`Span::set_all`]).
    pub fn set(&self, key: &'static str, value: impl Into<Value>) {
        if let Some(live) = &self.0 {
            let attribute = KeyValue::new(key, value);
            opentelemetry::trace::Span::set_attribute(&mut *live.span.lock().expect("lock"), attribute);
        }
    }

    /// A list of strings as one attribute's value.
    pub fn strings(values: Vec<String>) -> Value {
        Value::Array(Array::String(values.into_iter().map(StringValue::from).collect()))
    }

    /// How the operation ended: `error.type` (the JSON-RPC error code, `tool_error` for a
    /// result with `isError`, or switchyard's own reason) with the status ERROR, and the
    /// JSON-RPC error code; with `more` attributes known at the end.
    pub fn ended(&self, error: Option<&str>, code: Option<i64>, mut more: Vec<KeyValue>) {
        let Some(live) = &self.0 else { return };
        if let Some(code) = code {
            more.push(KeyValue::new(RPC_RESPONSE_STATUS_CODE, code.to_string()));
        }
        if let Some(e) = error {
            more.push(KeyValue::new(ERROR_TYPE, e.to_string()));
        }
        let mut span = live.span.lock().expect("lock");
        opentelemetry::trace::Span::set_attributes(&mut *span, more);
        if let Some(e) = error {
            opentelemetry::trace::Span::set_status(&mut *span, Status::error(e.to_string()));
        }
    }
}

/// The span of `op` ([`Span::none`] when traces are off), named `{mcp.method.name} {target}`.
/// A SERVER span is the root of its own trace, or the child of `parent` (the client's
/// `traceparent` and `tracestate`); a CLIENT span is the child of `within`. Attributes known
/// later (the outcome, switchyard's decision) are set on the span.
pub fn operation(op: &Operation<'_>, parent: Option<(&TraceParent, Option<&str>)>, within: Option<&Span>) -> Span {
    match crate::TRACER.get() {
        Some(tracer) => operation_of(tracer, op, parent, within, Vec::new(), Vec::new()),
        None => Span::none(),
    }
}

/// [`operation`] by `tracer`, with `more` attributes and `links`.
pub(crate) fn operation_of(
    tracer: &SdkTracer,
    op: &Operation<'_>,
    parent: Option<(&TraceParent, Option<&str>)>,
    within: Option<&Span>,
    more: Vec<KeyValue>,
    links: Vec<Link>,
) -> Span {
    // A resource's URI redacted (a credential in it stays out of the span), the rest as named.
    let target = op.target.map(|t| match t {
        Target::Resource(uri) => crate::uri::redacted(uri),
        other => std::borrow::Cow::Borrowed(other.text()),
    });
    let name = match &target {
        Some(t) => format!("{} {t}", op.method),
        None => op.method.to_string(),
    };
    let kind = match op.side {
        Side::Server => SpanKind::Server,
        Side::Client => SpanKind::Client,
    };
    let mut attributes = Vec::with_capacity(10 + more.len());
    let mut add = |key: &'static str, value: Option<&str>| {
        if let Some(v) = value {
            attributes.push(KeyValue::new(key, v.to_string()));
        }
    };
    add(MCP_METHOD_NAME, Some(op.method));
    match op.target {
        Some(Target::Tool(t)) => add(GEN_AI_TOOL_NAME, Some(t)),
        Some(Target::Prompt(p)) => add(GEN_AI_PROMPT_NAME, Some(p)),
        Some(Target::Resource(_)) => add(MCP_RESOURCE_URI, target.as_deref()),
        None => {}
    }
    add(JSONRPC_REQUEST_ID, op.request_id.map(|id| id.trim_matches('"')));
    add(MCP_SESSION_ID, op.session_id);
    add(MCP_PROTOCOL_VERSION, op.protocol_version);
    add(SWITCHYARD_INSTANCE, op.instance);
    attributes.push(KeyValue::new(NETWORK_TRANSPORT, op.transport));
    if op.method == "tools/call" {
        attributes.push(KeyValue::new(GEN_AI_OPERATION_NAME, GEN_AI_OPERATION_EXECUTE_TOOL));
    }
    attributes.extend(more);
    let mut builder = SpanBuilder::from_name(name).with_kind(kind).with_attributes(attributes);
    if !links.is_empty() {
        builder = builder.with_links(links);
    }
    let parent = match (parent, within.and_then(Span::context)) {
        (Some((p, state)), _) => {
            let state = state.and_then(|s| s.parse::<TraceState>().ok()).unwrap_or_default();
            let remote = SpanContext::new(
                TraceId::from_bytes(p.trace_id),
                SpanId::from_bytes(p.parent_id),
                TraceFlags::new(p.flags),
                true,
                state,
            );
            Context::new().with_remote_span_context(remote)
        }
        // A span of this process: its context as it is (not remote).
        (None, Some(within)) => Context::new().with_remote_span_context(within.clone()),
        (None, None) => Context::new(),
    };
    Span::start(tracer, builder, &parent)
}

/// The span of a client's call as switchyard serves it (kind SERVER; [`Span::none`] when traces
/// are off): the child of the trace context the client sent in `_meta`, else the root of a trace
/// of its own. `session` is the session's label (`stdio-1`, `http-3`), whose first part says the
/// transport; `version_of_session` the protocol version its initialize agreed (a request of
/// the 2026-07-28 era names its own); `client` the client's name; `of_session` the session's
/// span, which it links to.
pub fn server_span(
    call: &switchyard_core::call::Call,
    session: &str,
    version_of_session: Option<&str>,
    client: Option<&str>,
    of_session: &Span,
) -> Span {
    match crate::TRACER.get() {
        Some(tracer) => server_span_of(tracer, call, session, version_of_session, client, of_session),
        None => Span::none(),
    }
}

/// [`server_span`] by `tracer`.
pub(crate) fn server_span_of(
    tracer: &SdkTracer,
    call: &switchyard_core::call::Call,
    session: &str,
    version_of_session: Option<&str>,
    client: Option<&str>,
    of_session: &Span,
) -> Span {
    let (name, uri) = (call.name(), call.string(&call.fields().uri));
    let version = call.protocol_version();
    let op = Operation {
        side: Side::Server,
        method: call.method(),
        target: Target::of(call.method(), name.as_deref(), uri.as_deref()),
        request_id: Some(call.id()),
        session_id: Some(session),
        protocol_version: version.as_deref().or(version_of_session),
        transport: transport_of(session),
        instance: None,
    };
    let sent = crate::context::sent(call);
    let links = of_session.context().map(|c| vec![Link::with_context(c.clone())]).unwrap_or_default();
    let more = client.map(|name| vec![KeyValue::new(SWITCHYARD_CLIENT_NAME, name.to_string())]).unwrap_or_default();
    operation_of(tracer, &op, sent.as_ref().map(|(p, s)| (p, s.as_deref())), None, more, links)
}

/// The span of a client's session, from its start to its end (kind SERVER; [`Span::none`] when
/// traces are off): the calls' spans link to it. `session` is its label (see [`server_span`]).
pub fn session(server: &str, session: &str) -> Span {
    match crate::TRACER.get() {
        Some(tracer) => session_of(tracer, server, session),
        None => Span::none(),
    }
}

/// [`session`] by `tracer`.
pub(crate) fn session_of(tracer: &SdkTracer, server: &str, session: &str) -> Span {
    let attributes = vec![
        KeyValue::new(MCP_SESSION_ID, session.to_string()),
        KeyValue::new(NETWORK_TRANSPORT, transport_of(session)),
        KeyValue::new(SWITCHYARD_SERVER, server.to_string()),
    ];
    let builder =
        SpanBuilder::from_name(format!("session {server}")).with_kind(SpanKind::Server).with_attributes(attributes);
    Span::start(tracer, builder, &Context::new())
}

/// `network.transport` of a session by its label (`stdio-1`, `unix-4`, `http-2`).
fn transport_of(session: &str) -> &'static str {
    match session.split('-').next() {
        Some("stdio") => TRANSPORT_PIPE,
        Some("unix") => TRANSPORT_UNIX,
        _ => TRANSPORT_TCP,
    }
}
