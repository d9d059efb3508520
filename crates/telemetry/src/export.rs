//! The OTLP exporters: spans batched on the SDK's own thread and posted as HTTP/protobuf by the
//! workspace's reqwest, on a small runtime of the exporter's own, so neither a slow collector
//! nor a dead one ever holds up a call. A failing export is said once, and once more when
//! exports get through again, with how many spans were lost ([`crate::count`]); what the last
//! flush at exit could not send is said too. That flush waits for traces and metrics together
//! until one deadline, when any post still in flight is abandoned.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex, Once, OnceLock, mpsc};
use std::time::{Duration, Instant};

use bytes::Bytes;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use tokio::sync::watch;

use crate::count::{Counted, Counting, Counts};

/// How long one export may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// Spans that may wait for export; past this, new ones are dropped (counted by the SDK).
const QUEUE_SPANS: usize = 8192;
/// How often waiting spans are sent.
const EXPORT_EVERY: Duration = Duration::from_millis(1000);
/// How long exit waits for the last spans and metrics to go out, both together.
const EXIT_FLUSH: Duration = Duration::from_secs(2);

/// The deadline of the flush at exit, once it began: every post in flight then, or started
/// after, is abandoned at it.
static EXIT: LazyLock<watch::Sender<Option<Instant>>> = LazyLock::new(|| watch::Sender::new(None));

/// Why an export failed once the flush at exit began, by signal (`traces`, `metrics`): for its
/// line, instead of a line of its own.
static AT_EXIT: Mutex<BTreeMap<&'static str, String>> = Mutex::new(BTreeMap::new());

/// Why the last failed export of `what` at exit failed, if one did.
fn failed_at_exit(what: &str) -> Option<String> {
    AT_EXIT.lock().expect("lock").get(what).cloned()
}

/// Ends at the exit's deadline (never before the flush at exit set one).
async fn exit_deadline() {
    let mut deadline = EXIT.subscribe();
    loop {
        let at = *deadline.borrow_and_update();
        if let Some(at) = at {
            tokio::time::sleep_until(at.into()).await;
            return;
        }
        // The sender is a static: it never closes, but should it, there is no deadline.
        if deadline.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Posts each export with reqwest, on a runtime of its own (the batch processor calls it from
/// its own thread, outside switchyard's runtime).
#[derive(Debug)]
pub(crate) struct Poster {
    /// The collector's URL, for the failure line (never its headers).
    url: String,
    /// What it sends (`traces`, `metrics`), for the failure line.
    what: &'static str,
    /// The headers of each export, the signal's own as `[telemetry]` and the variables give them
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
                // At exit the flush says, in one line per signal, what was not sent and why.
                if EXIT.borrow().is_some() {
                    AT_EXIT.lock().expect("lock").insert(self.what, why);
                    return;
                }
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
        // Sent inside the runtime: its timeout needs the runtime's timer. A post still in flight
        // at the exit's deadline is abandoned (the flush at exit says what was not sent).
        let got = self.runtime.block_on(async move {
            let post = async {
                let resp = req.send().await?;
                let status = resp.status();
                let body = resp.bytes().await?;
                Ok::<_, reqwest::Error>((status, body))
            };
            tokio::select! {
                got = post => Some(got),
                () = exit_deadline() => None,
            }
        });
        let Some(got) = got else {
            return Err(format!("{} abandoned at the deadline of exit", self.what).into());
        };
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

/// The resource of switchyard's spans and metrics: its service name and version.
pub(crate) fn resource(service_name: Option<&str>) -> Resource {
    let mut resource = Resource::builder();
    if let Some(name) = service_name {
        resource = resource.with_service_name(name.to_string());
    } else if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("switchyard");
    }
    resource.with_attribute(opentelemetry::KeyValue::new("service.version", env!("CARGO_PKG_VERSION"))).build()
}

/// The tracer provider for spans posted to `url` with `headers`: batched, then sent as
/// OTLP/HTTP protobuf.
pub(crate) fn provider(
    url: &str,
    headers: &[(String, String)],
    resource: Resource,
) -> Result<SdkTracerProvider, String> {
    let shown = switchyard_config::TelemetryTarget::shown(url);
    let poster = Poster::new(&shown, "traces", headers)?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(url)
        .with_timeout(EXPORT_TIMEOUT)
        .with_http_client(poster)
        .build()
        .map_err(|e| format!("could not set up the OTLP exporter for {shown}: {e}"))?;
    let batch = BatchConfigBuilder::default()
        .with_max_queue_size(QUEUE_SPANS)
        .with_scheduled_delay(EXPORT_EVERY)
        .with_max_export_batch_size(512)
        .build();
    let counts = Arc::new(Counts::default());
    let exporter = Counted { inner: exporter, counts: counts.clone(), url: shown.clone() };
    let processor = BatchSpanProcessor::builder(exporter).with_batch_config(batch).build();
    let processor = Counting { inner: processor, counts: counts.clone() };
    let provider = SdkTracerProvider::builder().with_span_processor(processor).with_resource(resource).build();
    let _ = PROVIDER.set((provider.clone(), counts, shown));
    Ok(provider)
}

/// Where traces go (the collector's URL without credentials or query), None when they are off.
pub fn destination() -> Option<&'static str> {
    PROVIDER.get().map(|(_, _, url)| url.as_str())
}

/// Sends the spans and metrics still waiting, for at most two seconds in all; for exit. What it
/// could not send is said, a line for each signal, with where it was to go.
pub fn flush() {
    let traces = PROVIDER.get().map(|(p, counts, url)| (p.clone(), counts, url, counts.failed()));
    let metrics = crate::metrics::exporting();
    let mut shutdowns: Vec<(Signal, Shutdown)> = Vec::new();
    if let Some((p, ..)) = &traces {
        let p = p.clone();
        shutdowns.push((Signal::Traces, Box::new(move |within| p.shutdown_with_timeout(within).is_ok())));
    }
    if let Some((p, _)) = &metrics {
        let p = p.clone();
        shutdowns.push((Signal::Metrics, Box::new(move |within| p.shutdown_with_timeout(within).is_ok())));
    }
    if shutdowns.is_empty() {
        return;
    }
    let done = shut_down_by(Instant::now() + EXIT_FLUSH, shutdowns);
    if let Some((_, counts, url, failed_before)) = traces {
        let finished = done.iter().any(|(s, _)| *s == Signal::Traces);
        let why = failed_at_exit("traces");
        if let Some(line) = unsent(!finished, counts.undelivered(failed_before), url, why.as_deref()) {
            tracing::warn!("{line}");
        }
    }
    if let Some((_, url)) = metrics {
        let finished = done.iter().find(|(s, _)| *s == Signal::Metrics).map(|(_, sent)| *sent);
        if let Some(line) = metrics_unsent(finished, url, failed_at_exit("metrics").as_deref()) {
            tracing::warn!("{line}");
        }
    }
}

/// Why the collector did not take what exit sent: `why` the export failed, else that it did
/// not take it (in time, when `timed_out`).
fn not_taken(timed_out: bool, why: Option<&str>) -> String {
    match why {
        Some(why) => why.to_string(),
        None if timed_out => format!("the collector did not take them within {} s of exit", EXIT_FLUSH.as_secs()),
        None => "the collector did not take them".to_string(),
    }
}

/// The one line for the last metrics when exit could not send them (`finished`: whether the
/// shutdown ended by the deadline, and then whether it sent them), with why (`why`: the failed
/// export's reason, when one failed).
pub(crate) fn metrics_unsent(finished: Option<bool>, url: &str, why: Option<&str>) -> Option<String> {
    if finished == Some(true) {
        return None;
    }
    let why = not_taken(finished.is_none(), why);
    Some(format!(
        "the last metrics were not sent to {url} at exit: {why}; what they counted since the last export the collector took is lost"
    ))
}

/// A signal's shutdown, given the time it may take; whether all it held was sent.
type Shutdown = Box<dyn FnOnce(Duration) -> bool + Send>;

/// The signals whose export the flush at exit waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signal {
    Traces,
    Metrics,
}

/// Runs the `shutdowns` at once, each on a thread of its own, and waits for them until
/// `deadline`, which every post in flight keeps too: the signals that finished by then, each
/// with whether it sent all it held. A shutdown still running at the deadline is left to the
/// process's exit (the SDK's metrics wait 5 s whatever they are given).
pub(crate) fn shut_down_by(deadline: Instant, shutdowns: Vec<(Signal, Shutdown)>) -> Vec<(Signal, bool)> {
    EXIT.send_replace(Some(deadline));
    let (tx, rx) = mpsc::channel();
    let within = deadline.saturating_duration_since(Instant::now());
    for (signal, shutdown) in shutdowns {
        let tx = tx.clone();
        let spawned = std::thread::Builder::new().name("otel-exit".into()).spawn(move || {
            let _ = tx.send((signal, shutdown(within)));
        });
        if spawned.is_err() {
            tracing::debug!("could not start the thread that sends the last {signal:?} at exit");
        }
    }
    drop(tx);
    let mut done = Vec::new();
    while let Ok(one) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        done.push(one);
    }
    done
}

/// The line for spans the flush at exit left unsent (`waiting` of them; `timed_out` when it
/// gave up at the deadline; `why` a failed export's reason), if any were.
pub(crate) fn unsent(timed_out: bool, waiting: u64, url: &str, why: Option<&str>) -> Option<String> {
    if waiting == 0 {
        return None;
    }
    let why = not_taken(timed_out, why);
    let (spans, were, them) = if waiting == 1 { ("span", "was", "it is") } else { ("spans", "were", "they are") };
    let why = if waiting == 1 { why.replace("take them", "take it") } else { why };
    Some(format!("{waiting} {spans} {were} not sent to {url} at exit: {why}; {them} lost"))
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use super::*;

    #[test]
    fn a_post_to_a_collector_that_never_answers_is_abandoned_at_the_exit_deadline() {
        // Accepts the connection, never answers: a black-holed collector.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
        let poster = Poster::new(&url, "traces", &[]).unwrap();
        let post: Shutdown = Box::new(move |_| {
            let request = Request::builder().method("POST").uri(&url).body(Bytes::from_static(b"x")).unwrap();
            // The post blocks on the Poster's own runtime: one poll runs it to its end.
            let mut sending = pin!(poster.send_bytes(request));
            match sending.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
                Poll::Ready(got) => got.is_ok(),
                Poll::Pending => panic!("the post did not run to its end in one poll"),
            }
        });
        let (tx, rx) = mpsc::channel();
        let started = Instant::now();
        let timed: Shutdown = Box::new(move |within| {
            let sent = post(within);
            let _ = tx.send(started.elapsed());
            sent
        });
        let done = shut_down_by(started + Duration::from_millis(300), vec![(Signal::Traces, timed)]);
        assert!(
            started.elapsed() < Duration::from_millis(1000),
            "the wait ends at the deadline: {:?}",
            started.elapsed()
        );
        let took = rx.recv_timeout(Duration::from_secs(3)).expect("the post in flight is abandoned, not left for 10 s");
        assert!(took < Duration::from_millis(1500), "{took:?}");
        assert!(done.iter().all(|(_, sent)| !sent), "nothing was sent: {done:?}");
        drop(listener);
    }

    #[test]
    fn exit_waits_for_traces_and_metrics_together_until_one_deadline() {
        let slow = |s: Signal| -> (Signal, Shutdown) {
            (
                s,
                Box::new(|_| {
                    std::thread::sleep(Duration::from_secs(5));
                    true
                }),
            )
        };
        let started = Instant::now();
        let done =
            shut_down_by(started + Duration::from_millis(400), vec![slow(Signal::Traces), slow(Signal::Metrics)]);
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(390) && took < Duration::from_millis(900), "{took:?}");
        assert!(done.is_empty(), "neither finished: {done:?}");
        // Those that finish in time are said with how they went; the wait ends with the last.
        let quick = |s: Signal, sent: bool| -> (Signal, Shutdown) { (s, Box::new(move |_| sent)) };
        let started = Instant::now();
        let mut done = shut_down_by(
            started + Duration::from_secs(2),
            vec![quick(Signal::Traces, true), quick(Signal::Metrics, false)],
        );
        assert!(started.elapsed() < Duration::from_millis(500), "{:?}", started.elapsed());
        done.sort_by_key(|(s, _)| *s as u8);
        assert_eq!(done, [(Signal::Traces, true), (Signal::Metrics, false)]);
    }
}
