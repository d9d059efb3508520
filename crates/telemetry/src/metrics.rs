//! The MCP conventions' histograms over OTLP: `mcp.server.operation.duration`,
//! `mcp.client.operation.duration` and `mcp.server.session.duration`, recorded where the
//! Prometheus registry records its own (the router's metrics mirror them here, see
//! [`switchyard_core::metrics::mirror`]) and posted as cumulative totals every
//! [`EXPORT_EVERY`] by the SDK's reader, on its own thread.

use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Histogram, MeterProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use switchyard_core::metrics::OTEL_BUCKETS;
use switchyard_core::metrics::mirror::{self, Mirror, Operation, Side};

use crate::export::Poster;
use crate::keys::*;

/// How often the totals are sent.
const EXPORT_EVERY: Duration = Duration::from_secs(10);
/// How long one export may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The three histograms, in seconds with the conventions' buckets.
pub(crate) struct Durations {
    server_op: Histogram<f64>,
    client_op: Histogram<f64>,
    session: Histogram<f64>,
}

impl Durations {
    pub(crate) fn new(provider: &SdkMeterProvider) -> Durations {
        let meter = provider.meter("switchyard");
        let hist = |name: &'static str, about: &'static str| {
            meter
                .f64_histogram(name)
                .with_unit("s")
                .with_description(about)
                .with_boundaries(OTEL_BUCKETS.to_vec())
                .build()
        };
        Durations {
            server_op: hist(MCP_SERVER_OPERATION_DURATION, "MCP requests from a client to their response"),
            client_op: hist(MCP_CLIENT_OPERATION_DURATION, "switchyard's requests to a server, each attempt"),
            session: hist(MCP_SERVER_SESSION_DURATION, "Client sessions from start to end"),
        }
    }
}

impl Mirror for Durations {
    fn operation(&self, op: &Operation<'_>) {
        let mut attributes = Vec::with_capacity(5);
        attributes.push(KeyValue::new(MCP_METHOD_NAME, op.method));
        attributes.push(KeyValue::new(NETWORK_TRANSPORT, op.transport));
        attributes.push(KeyValue::new(SWITCHYARD_SERVER, op.server.to_string()));
        if !op.tool.is_empty() {
            attributes.push(KeyValue::new(GEN_AI_TOOL_NAME, op.tool.to_string()));
        }
        if !op.error_type.is_empty() {
            attributes.push(KeyValue::new(ERROR_TYPE, op.error_type));
        }
        let hist = match op.side {
            Side::Server => &self.server_op,
            Side::Client => &self.client_op,
        };
        hist.record(op.seconds, &attributes);
    }

    fn session(&self, transport: &'static str, seconds: f64) {
        self.session.record(seconds, &[KeyValue::new(NETWORK_TRANSPORT, transport)]);
    }
}

/// The provider, and the collector's URL for the log (without credentials or query).
static PROVIDER: OnceLock<(SdkMeterProvider, String)> = OnceLock::new();

/// Starts exporting the durations to `url` (once per process; later calls change nothing).
pub(crate) fn start(url: &str, headers: &[(String, String)], resource: Resource) -> Result<(), String> {
    if PROVIDER.get().is_some() {
        return Ok(());
    }
    let shown = switchyard_config::TelemetryTarget::shown(url);
    let poster = Poster::new(&shown, "metrics", headers)?;
    let exporter = opentelemetry_otlp::MetricExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(url)
        .with_timeout(EXPORT_TIMEOUT)
        .with_http_client(poster)
        .with_temporality(Temporality::Cumulative)
        .build()
        .map_err(|e| format!("could not set up the OTLP metrics exporter for {shown}: {e}"))?;
    let reader = PeriodicReader::builder(exporter).with_interval(EXPORT_EVERY).build();
    let provider = SdkMeterProvider::builder().with_reader(reader).with_resource(resource).build();
    if PROVIDER.set((provider.clone(), shown)).is_ok() {
        mirror::mirror_to(Box::new(Durations::new(&provider)));
    }
    Ok(())
}

/// The provider and where its metrics go, once they are exported; for the flush at exit.
pub(crate) fn exporting() -> Option<(SdkMeterProvider, &'static str)> {
    PROVIDER.get().map(|(p, url)| (p.clone(), url.as_str()))
}

/// Where metrics go (the collector's URL without credentials or query), None when they are off.
pub fn destination() -> Option<&'static str> {
    PROVIDER.get().map(|(_, url)| url.as_str())
}
