//! The OTLP exporters: spans batched on the SDK's own thread and posted as HTTP/protobuf by the
//! workspace's reqwest, on a small runtime of the exporter's own, so neither a slow collector
//! nor a dead one ever holds up a call. A failing export is said once, and once more when
//! exports get through again, with how many spans were lost ([`crate::count`]); spans the last
//! flush at exit could not send are said too.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Once, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use switchyard_config::TelemetryTarget;

use crate::count::{Counted, Counting, Counts};

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
    /// What it sends (`traces`, `metrics`), for the failure line.
    what: &'static str,
    /// The headers of each export, as `[telemetry]` and `OTEL_EXPORTER_OTLP_HEADERS` give them
    /// (decoded and checked by switchyard, not by the SDK, which would drop a bad one unsaid).
    headers: reqwest::header::HeaderMap,
    client: reqwest::Client,
    runtime: tokio::runtime::Runtime,
    failing: AtomicBool,
}

impl Poster {
    pub(crate) fn new(url: &str, what: &'static str, headers: &[(String, String)]) -> Result<Poster, String> {
        let mut map = reqwest::header::HeaderMap::new();
        for (name, value) in headers {
            // Both were checked when the target was read; the error names the key alone.
            let bad = || format!("the {what} export header `{name}` cannot be sent as it is");
            let name = reqwest::header::HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad())?;
            let value = reqwest::header::HeaderValue::from_str(value).map_err(|_| bad())?;
            map.insert(name, value);
        }
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
            .map_err(|e| format!("could not set up the HTTP client for {what}: {e}"))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("could not start the runtime that sends {what}: {e}"))?;
        Ok(Poster { url: url.to_string(), what, headers: map, client, runtime, failing: AtomicBool::new(false) })
    }

    /// Says the first failure of a run of them (for spans, its end is said with the spans lost,
    /// by [`Counted`]; metrics are cumulative, and the next export that gets through has them).
    fn note(&self, outcome: Result<(), String>) {
        match outcome {
            Ok(()) => self.failing.store(false, Ordering::Relaxed),
            Err(why) => {
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "{} could not be sent to {}: {why}; calls go on{} (said once)",
                        self.what,
                        self.url,
                        if self.what == "traces" {
                            ", and their spans are dropped until the collector takes them"
                        } else {
                            ", and the totals are sent again once the collector takes them"
                        }
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
        // The SDK's own headers are left out but for the body's type and encoding: it adds the
        // variable's headers as it parses them, and switchyard's are in `self.headers`.
        let mut headers = self.headers.clone();
        for name in [http::header::CONTENT_TYPE, http::header::CONTENT_ENCODING] {
            if let Some(v) = parts.headers.get(&name) {
                headers.insert(name, v.clone());
            }
        }
        let req = self.client.request(parts.method, parts.uri.to_string()).headers(headers).body(body);
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

/// The provider, its counts and the collector's URL for the log, for [`flush`].
static PROVIDER: OnceLock<(SdkTracerProvider, Arc<Counts>, String)> = OnceLock::new();

/// The tracer provider for `target`: spans batched, then posted as OTLP/HTTP protobuf.
pub(crate) fn provider(target: &TelemetryTarget) -> Result<SdkTracerProvider, String> {
    let url = target.shown_url();
    let poster = Poster::new(&url, "traces", &target.headers)?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(target.traces_url.clone())
        .with_timeout(EXPORT_TIMEOUT)
        .with_http_client(poster)
        .build()
        .map_err(|e| format!("could not set up the OTLP exporter for {}: {e}", target.shown_url()))?;
    let batch = BatchConfigBuilder::default()
        .with_max_queue_size(QUEUE_SPANS)
        .with_scheduled_delay(EXPORT_EVERY)
        .with_max_export_batch_size(512)
        .build();
    let counts = Arc::new(Counts::default());
    let exporter = Counted { inner: exporter, counts: counts.clone(), url: url.clone() };
    let processor = BatchSpanProcessor::builder(exporter).with_batch_config(batch).build();
    let processor = Counting { inner: processor, counts: counts.clone() };
    let mut resource = Resource::builder();
    if let Some(name) = &target.service_name {
        resource = resource.with_service_name(name.clone());
    } else if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("switchyard");
    }
    let resource =
        resource.with_attribute(opentelemetry::KeyValue::new("service.version", env!("CARGO_PKG_VERSION"))).build();
    if let Some(metrics_url) = &target.metrics_url {
        crate::metrics::start(metrics_url, &target.headers, resource.clone())?;
    }
    let provider = SdkTracerProvider::builder().with_span_processor(processor).with_resource(resource).build();
    let _ = PROVIDER.set((provider.clone(), counts, url));
    Ok(provider)
}

/// Where traces go (the collector's URL without credentials or query), None when they are off.
pub fn destination() -> Option<&'static str> {
    PROVIDER.get().map(|(_, _, url)| url.as_str())
}

/// Sends what is still waiting, for at most two seconds; for exit. Spans it could not send are
/// said in one line, with where they were to go.
pub fn flush() {
    if let Some((p, counts, url)) = PROVIDER.get() {
        let failed_before = counts.failed();
        crate::metrics::flush(EXIT_FLUSH / 2);
        let got = p.shutdown_with_timeout(EXIT_FLUSH);
        if let Some(line) = unsent(got.is_err(), counts.undelivered(failed_before), url) {
            tracing::warn!("{line}");
        }
    }
}

/// The line for spans the flush at exit left unsent (`waiting` of them; `timed_out` when it
/// gave up or failed), if any were.
pub(crate) fn unsent(timed_out: bool, waiting: u64, url: &str) -> Option<String> {
    if waiting == 0 {
        return None;
    }
    let why = if timed_out {
        format!("the collector did not take them within {} s of exit", EXIT_FLUSH.as_secs())
    } else {
        "the collector did not take them".to_string()
    };
    Some(format!("{waiting} spans were not sent to {url}: {why}; they are lost"))
}
