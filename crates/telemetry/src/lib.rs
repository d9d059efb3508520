//! switchyard's traces: a span per session, per call as the client sees it (kind SERVER) and per
//! request to a server (kind CLIENT), named and attributed by the OpenTelemetry MCP conventions,
//! with the W3C trace context carried across the hop in `params._meta` ([`context`]), and
//! exported over OTLP/HTTP ([`export`]).
//!
//! Off unless an endpoint is configured: then [`on`] is false and every span here is
//! `Span::none()`, which costs a branch. The spans have a target of their own ([`TARGET`]) that
//! only the exporter's layer takes, so they never show in the log and the log level never
//! hides them.

#![forbid(unsafe_code)]

pub mod context;
mod count;
mod export;
pub mod keys;
mod metrics;

use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

pub use context::TraceParent;
pub use export::{destination, flush};
use keys::*;

/// The `tracing` target of switchyard's spans for export.
pub const TARGET: &str = "switchyard::otel";

static ON: AtomicBool = AtomicBool::new(false);

/// Whether traces are exported (an endpoint was configured and the exporter started).
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// The layer that exports switchyard's spans to `target`, for the process's subscriber (see
/// [`only_ours`] for the other layers). Turns [`on`] on.
pub fn layer<S>(target: &switchyard_config::TelemetryTarget) -> Result<impl Layer<S> + use<S>, String>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    Ok(layer_of(&export::provider(target)?))
}

/// The layer of [`layer`] over `provider` (the tests' has an exporter of their own).
fn layer_of<S>(provider: &opentelemetry_sdk::trace::SdkTracerProvider) -> impl Layer<S> + use<S>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    use opentelemetry::trace::TracerProvider as _;
    let tracer = provider.tracer("switchyard");
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_level(false)
        .with_target(false)
        .with_tracked_inactivity(false)
        .with_context_activation(false)
        // Decided per span and event, not once per callsite: with per-layer filters, a callsite
        // whose interest is cached (`always`) skips the filters, and would be judged by what
        // the filters said of the last one asked (after a `tracing::enabled!`, say, which
        // creates nothing): the log could lose a line. Asked every time, the answer is current.
        .with_filter(tracing_subscriber::filter::filter_fn(|m| m.target() == TARGET));
    ON.store(true, Ordering::Relaxed);
    layer
}

/// A filter that takes switchyard's spans for export alone. Its `.not()` is the filter for the
/// log's layers when traces are on: the spans would otherwise prefix every log line written
/// inside them.
pub fn ours() -> tracing_subscriber::filter::Targets {
    tracing_subscriber::filter::Targets::new().with_target(TARGET, tracing::Level::TRACE)
}

/// Which side of the hop an operation is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// switchyard serving its client: kind SERVER.
    Server,
    /// switchyard's request to a server: kind CLIENT.
    Client,
}

/// What an MCP operation is about: the target in its span's name and attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target<'a> {
    Tool(&'a str),
    Prompt(&'a str),
    Resource(&'a str),
}

impl<'a> Target<'a> {
    /// The target of a request of `method` with `name` and `uri` in its params.
    pub fn of(method: &str, name: Option<&'a str>, uri: Option<&'a str>) -> Option<Target<'a>> {
        match method {
            "tools/call" => name.map(Target::Tool),
            "prompts/get" => name.map(Target::Prompt),
            "resources/read" | "resources/subscribe" | "resources/unsubscribe" => uri.map(Target::Resource),
            _ => None,
        }
    }

    fn text(&self) -> &'a str {
        match *self {
            Target::Tool(t) | Target::Prompt(t) | Target::Resource(t) => t,
        }
    }
}

/// One MCP operation, as its span describes it.
pub struct Operation<'a> {
    pub side: Side,
    pub method: &'a str,
    pub target: Option<Target<'a>>,
    /// The JSON-RPC id as written on the wire (quotes of a string id are taken off).
    pub request_id: Option<&'a str>,
    pub session_id: Option<&'a str>,
    pub protocol_version: Option<&'a str>,
    /// `pipe` (stdio), `unix` (the daemon's socket) or `tcp` (HTTP).
    pub transport: &'static str,
    /// The instance a request goes to (CLIENT).
    pub instance: Option<&'a str>,
}

/// The span of `op` (`Span::none()` when traces are off), named `{mcp.method.name} {target}`.
/// A SERVER span is the root of its own trace, or the child of `parent` (the client's
/// `traceparent`); a CLIENT span is the child of `within`. Attributes known later (the outcome,
/// switchyard's decision) are set through [`started`].
pub fn operation(op: &Operation<'_>, parent: Option<(&TraceParent, Option<&str>)>, within: Option<&Span>) -> Span {
    if !on() {
        return Span::none();
    }
    let name = match op.target {
        Some(t) => format!("{} {}", op.method, t.text()),
        None => op.method.to_string(),
    };
    let kind = match op.side {
        Side::Server => "server",
        Side::Client => "client",
    };
    let (tool, prompt, uri) = match op.target {
        Some(Target::Tool(t)) => (Some(t), None, None),
        Some(Target::Prompt(p)) => (None, Some(p), None),
        Some(Target::Resource(r)) => (None, None, Some(r)),
        None => (None, None, None),
    };
    let request_id = op.request_id.map(|id| id.trim_matches('"'));
    let operation = (op.method == "tools/call").then_some(GEN_AI_OPERATION_EXECUTE_TOOL);
    let span = tracing::info_span!(
        target: TARGET,
        parent: within.and_then(Span::id),
        "mcp",
        "otel.name" = name,
        "otel.kind" = kind,
        { MCP_METHOD_NAME } = op.method,
        { GEN_AI_TOOL_NAME } = tool,
        { GEN_AI_PROMPT_NAME } = prompt,
        { MCP_RESOURCE_URI } = uri,
        { JSONRPC_REQUEST_ID } = request_id,
        { MCP_SESSION_ID } = op.session_id,
        { MCP_PROTOCOL_VERSION } = op.protocol_version,
        { NETWORK_TRANSPORT } = op.transport,
        { GEN_AI_OPERATION_NAME } = operation,
        { SWITCHYARD_INSTANCE } = op.instance,
    );
    if let Some((p, state)) = parent {
        let state = state.and_then(|s| s.parse::<TraceState>().ok()).unwrap_or_default();
        let remote = SpanContext::new(
            TraceId::from_bytes(p.trace_id),
            SpanId::from_bytes(p.parent_id),
            TraceFlags::new(p.flags),
            true,
            state,
        );
        let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(remote));
    }
    span
}

/// The span of a client's call as switchyard serves it (kind SERVER; `Span::none()` when traces
/// are off): the child of the trace context the client sent in `_meta`, else the root of a trace
/// of its own. `session` is the session's label (`stdio-1`, `http-3`), whose first part says the
/// transport; `version_of_session` the protocol version its initialize agreed (a request of
/// the 2026-07-28 era names its own); `of_session` the session's span, which it links to.
pub fn server_span(
    call: &switchyard_core::call::Call,
    session: &str,
    version_of_session: Option<&str>,
    of_session: &Span,
) -> Span {
    if !on() {
        return Span::none();
    }
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
    let sent = context::sent(call);
    let span = operation(&op, sent.as_ref().map(|(p, s)| (p, s.as_deref())), None);
    span.follows_from(of_session);
    span
}

/// The span of a client's session, from its start to its end (kind SERVER; `Span::none()` when
/// traces are off): the calls' spans link to it. `session` is its label (see [`server_span`]).
pub fn session(server: &str, session: &str) -> Span {
    if !on() {
        return Span::none();
    }
    tracing::info_span!(
        target: TARGET,
        parent: None,
        "mcp.session",
        "otel.name" = format!("session {server}"),
        "otel.kind" = "server",
        { MCP_SESSION_ID } = session,
        { NETWORK_TRANSPORT } = transport_of(session),
        { SWITCHYARD_SERVER } = server,
    )
}

/// `network.transport` of a session by its label (`stdio-1`, `unix-4`, `http-2`).
fn transport_of(session: &str) -> &'static str {
    match session.split('-').next() {
        Some("stdio") => TRANSPORT_PIPE,
        Some("unix") => TRANSPORT_UNIX,
        _ => TRANSPORT_TCP,
    }
}

/// A span's OpenTelemetry side once it has started: attributes known later go straight to it,
/// without a lookup through the subscriber for each.
pub struct Started(opentelemetry::Context);

/// `span` started (None when traces are off).
pub fn started(span: &Span) -> Option<Started> {
    (!span.is_none()).then(|| Started(span.context()))
}

impl Started {
    /// The `traceparent` that makes this span the parent of what it sends.
    pub fn traceparent(&self) -> Option<TraceParent> {
        let sc = self.0.span().span_context().clone();
        sc.is_valid().then(|| TraceParent {
            trace_id: sc.trace_id().to_bytes(),
            parent_id: sc.span_id().to_bytes(),
            flags: sc.trace_flags().to_u8(),
        })
    }

    /// An attribute known late: switchyard's own (`switchyard.*`, see [`keys`]) or the upstream id.
    pub fn set(&self, key: &'static str, value: impl Into<opentelemetry::Value>) {
        self.0.span().set_attribute(opentelemetry::KeyValue::new(key, value));
    }

    /// A list of strings as one attribute.
    pub fn set_strings(&self, key: &'static str, values: Vec<String>) {
        let values = values.into_iter().map(opentelemetry::StringValue::from).collect();
        self.set(key, opentelemetry::Value::Array(opentelemetry::Array::String(values)));
    }

    /// How the operation ended: `error.type` (the JSON-RPC error code, `tool_error` for a
    /// result with `isError`, or switchyard's own reason) with the status ERROR, and the
    /// JSON-RPC error code.
    pub fn ended(&self, error: Option<&str>, code: Option<i64>) {
        if let Some(code) = code {
            self.set(RPC_RESPONSE_STATUS_CODE, code.to_string());
        }
        if let Some(e) = error {
            self.set(ERROR_TYPE, e.to_string());
            self.0.span().set_status(opentelemetry::trace::Status::error(e.to_string()));
        }
    }
}

#[cfg(test)]
mod tests;
