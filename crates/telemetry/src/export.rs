//! The OTLP exporter: spans batched on the SDK's own thread and posted as HTTP/protobuf by the
//! workspace's reqwest, on a small runtime of the exporter's own, so neither a slow collector
//! nor a dead one ever holds up a call. A failing export is said once, and once more when
//! exports get through again.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Once, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use switchyard_config::TelemetryTarget;

/// How long one export may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// Spans that may wait for export; past this, new ones are dropped (counted by the SDK).
const QUEUE_SPANS: usize = 8192;
/// How often waiting spans are sent.
const EXPORT_EVERY: Duration = Duration::from_millis(1000);
/// How long exit waits for the last spans to go out.
const EXIT_FLUSH: Duration = Duration::from_secs(2);

/// Posts each export with reqwest, on a runtime of its own (the batch processor calls it from
/// its own thread, outside switchyard's runtime).
#[derive(Debug)]
pub(crate) struct Poster {
    /// The collector's URL, for the failure line (never its headers).
    url: String,
    client: reqwest::Client,
    runtime: tokio::runtime::Runtime,
    failing: AtomicBool,
    failures: AtomicU64,
}

impl Poster {
    fn new(url: &str) -> Result<Poster, String> {
        static CRYPTO: Once = Once::new();
        // Ring is the TLS crypto rustls uses here (as for the remote transports). Err: one is
        // installed already.
        CRYPTO.call_once(|| {
            let _ = rustls::crypto::ring::default_provider().install_default();
        });
        let client = reqwest::Client::builder()
            .timeout(EXPORT_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("switchyard/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("could not set up the HTTP client for traces: {e}"))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("could not start the runtime that sends traces: {e}"))?;
        Ok(Poster {
            url: url.to_string(),
            client,
            runtime,
            failing: AtomicBool::new(false),
            failures: AtomicU64::new(0),
        })
    }

    /// Says the first failure of a run of them, and the end of the run.
    fn note(&self, outcome: Result<(), String>) {
        match outcome {
            Ok(()) => {
                if self.failing.swap(false, Ordering::Relaxed) {
                    let n = self.failures.swap(0, Ordering::Relaxed);
                    tracing::info!("traces reach {} again ({n} exports were lost)", self.url);
                }
            }
            Err(why) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "traces could not be sent to {}: {why}; calls go on, and their spans are dropped until the collector takes them (said once)",
                        self.url
                    );
                }
            }
        }
    }
}

#[async_trait::async_trait]
impl HttpClient for Poster {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let req = self.client.request(parts.method, parts.uri.to_string()).headers(parts.headers).body(body);
        // Sent inside the runtime: its timeout needs the runtime's timer.
        let got = self.runtime.block_on(async move {
            let resp = req.send().await?;
            let status = resp.status();
            let body = resp.bytes().await?;
            Ok::<_, reqwest::Error>((status, body))
        });
        let (status, body) = match got {
            Ok(r) => r,
            Err(e) => {
                self.note(Err(short_error(&e)));
                return Err(Box::new(e.without_url()));
            }
        };
        self.note(if status.is_success() { Ok(()) } else { Err(format!("the collector answered {status}")) });
        let mut resp = Response::new(body);
        *resp.status_mut() = status;
        Ok(resp)
    }
}

/// A reqwest error and its causes on one line, without the URL.
fn short_error(e: &reqwest::Error) -> String {
    let mut text = if e.is_timeout() { "timed out".to_string() } else { String::new() };
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&s.to_string());
        source = s.source();
    }
    if text.is_empty() { "the request failed".to_string() } else { text }
}

static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// The tracer provider for `target`: spans batched, then posted as OTLP/HTTP protobuf.
pub(crate) fn provider(target: &TelemetryTarget) -> Result<SdkTracerProvider, String> {
    let poster = Poster::new(&target.shown_url())?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(target.traces_url.clone())
        .with_timeout(EXPORT_TIMEOUT)
        .with_headers(target.headers.iter().cloned().collect())
        .with_http_client(poster)
        .build()
        .map_err(|e| format!("could not set up the OTLP exporter for {}: {e}", target.shown_url()))?;
    let batch = BatchConfigBuilder::default()
        .with_max_queue_size(QUEUE_SPANS)
        .with_scheduled_delay(EXPORT_EVERY)
        .with_max_export_batch_size(512)
        .build();
    let processor = BatchSpanProcessor::builder(exporter).with_batch_config(batch).build();
    let mut resource = Resource::builder();
    if let Some(name) = &target.service_name {
        resource = resource.with_service_name(name.clone());
    } else if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("switchyard");
    }
    let resource =
        resource.with_attribute(opentelemetry::KeyValue::new("service.version", env!("CARGO_PKG_VERSION"))).build();
    let provider = SdkTracerProvider::builder().with_span_processor(processor).with_resource(resource).build();
    let _ = PROVIDER.set(provider.clone());
    Ok(provider)
}

/// Sends what is still waiting, for at most two seconds; for exit.
pub fn flush() {
    if let Some(p) = PROVIDER.get() {
        let _ = p.shutdown_with_timeout(EXIT_FLUSH);
    }
}
