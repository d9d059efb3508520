//! switchyard's traces: a span per session, per call as the client sees it (kind SERVER) and per
//! request to a server (kind CLIENT), named and attributed by the OpenTelemetry MCP conventions,
//! with the W3C trace context carried across the hop in `params._meta` ([`context`]), and
//! exported over OTLP/HTTP ([`export`]).
//!
//! Off unless an endpoint is configured: then [`on`] is false and every span here is
//! [`Span::none`], which costs a branch. The spans are the OpenTelemetry SDK's own, made with
//! their kind, name, attributes and parent at once and handed along the call by their owners
//! ([`Span`]): not `tracing` spans, so they never show in the log, the log level never hides
//! them, and the log pays nothing for them.

#![forbid(unsafe_code)]

pub mod context;
mod count;
mod export;
pub mod keys;
mod metrics;
mod span;
mod uri;

use std::sync::OnceLock;

use opentelemetry_sdk::trace::SdkTracer;

pub use context::TraceParent;
pub use export::{destination, flush};
pub use metrics::destination as metrics_destination;
pub use opentelemetry::KeyValue;
pub use span::{Span, operation, server_span, session};

/// The tracer of switchyard's spans, once traces are on.
static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// Whether traces are exported (an endpoint was configured and the exporter started).
pub fn on() -> bool {
    TRACER.get().is_some()
}

/// Starts exporting switchyard's spans (turns [`on`] on) and metrics where `target` says.
pub fn start(target: &switchyard_config::TelemetryTarget) -> Result<(), String> {
    use opentelemetry::trace::TracerProvider as _;
    let resource = export::resource(target.service_name.as_deref());
    if let Some(url) = &target.metrics_url {
        metrics::start(url, &target.metrics_headers, resource.clone())?;
    }
    if let Some(url) = &target.traces_url {
        let provider = export::provider(url, &target.traces_headers, resource)?;
        let _ = TRACER.set(provider.tracer("switchyard"));
    }
    Ok(())
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

#[cfg(test)]
mod tests;
