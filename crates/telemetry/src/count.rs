//! How many spans ended, reached the collector or were lost, so that the log can say it in
//! spans: when exports get through again, and at exit when the last ones could not go out.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};

/// The counts, shared by the processor and the exporter.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    /// Spans handed to the processor (each ended span).
    ended: AtomicU64,
    /// Spans the collector took.
    delivered: AtomicU64,
    /// Spans of exports that failed.
    failed: AtomicU64,
    /// Spans failed since the last export that got through.
    failing: AtomicU64,
}

impl Counts {
    /// Spans of exports that failed so far.
    pub(crate) fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    /// Spans ended that did not reach the collector, but for `failed_before` (those of exports
    /// that failed earlier): those waiting, in flight, dropped by a full queue, or of exports
    /// that failed since.
    pub(crate) fn undelivered(&self, failed_before: u64) -> u64 {
        let ended = self.ended.load(Ordering::Relaxed);
        ended.saturating_sub(self.delivered.load(Ordering::Relaxed) + failed_before)
    }
}

/// A span processor that counts the spans it passes on to `inner`.
#[derive(Debug)]
pub(crate) struct Counting<P> {
    pub(crate) inner: P,
    pub(crate) counts: Arc<Counts>,
}

impl<P: SpanProcessor> SpanProcessor for Counting<P> {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        self.counts.ended.fetch_add(1, Ordering::Relaxed);
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// An exporter that counts the spans of each export by how it went, and says when exports get
/// through again how many spans were lost meanwhile.
#[derive(Debug)]
pub(crate) struct Counted<E> {
    pub(crate) inner: E,
    pub(crate) counts: Arc<Counts>,
    /// The collector's URL for the log (without credentials or query).
    pub(crate) url: String,
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len() as u64;
        let got = self.inner.export(batch).await;
        let c = &self.counts;
        if got.is_ok() {
            c.delivered.fetch_add(n, Ordering::Relaxed);
            let lost = c.failing.swap(0, Ordering::Relaxed);
            if lost > 0 {
                tracing::info!("traces reach {} again ({lost} spans were lost meanwhile)", self.url);
            }
        } else {
            c.failed.fetch_add(n, Ordering::Relaxed);
            c.failing.fetch_add(n, Ordering::Relaxed);
        }
        got
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use opentelemetry::trace::{SpanContext, SpanKind, Status};
    use opentelemetry_sdk::error::OTelSdkError;
    use opentelemetry_sdk::trace::{SpanEvents, SpanLinks};

    use super::*;

    /// An exporter that fails while `down` is set.
    #[derive(Debug, Default)]
    struct Flaky {
        down: AtomicBool,
    }

    impl SpanExporter for Flaky {
        async fn export(&self, _: Vec<SpanData>) -> OTelSdkResult {
            if self.down.load(Ordering::Relaxed) { Err(OTelSdkError::InternalFailure("down".into())) } else { Ok(()) }
        }
    }

    fn spans(n: usize) -> Vec<SpanData> {
        let one = SpanData {
            span_context: SpanContext::empty_context(),
            parent_span_id: opentelemetry::trace::SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: "s".into(),
            start_time: std::time::SystemTime::UNIX_EPOCH,
            end_time: std::time::SystemTime::UNIX_EPOCH,
            attributes: Vec::new(),
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Unset,
            instrumentation_scope: Default::default(),
        };
        vec![one; n]
    }

    #[tokio::test]
    async fn exports_are_counted_in_spans() {
        let counts = Arc::new(Counts::default());
        let exporter = Counted { inner: Flaky::default(), counts: counts.clone(), url: "http://c/v1/traces".into() };
        counts.ended.fetch_add(10, Ordering::Relaxed);
        exporter.export(spans(2)).await.unwrap();
        exporter.inner.down.store(true, Ordering::Relaxed);
        exporter.export(spans(3)).await.unwrap_err();
        exporter.export(spans(1)).await.unwrap_err();
        assert_eq!(counts.failing.load(Ordering::Relaxed), 4, "the spans lost while failing");
        let failed_before = counts.failed();
        assert_eq!(counts.undelivered(failed_before), 4, "10 ended, 2 delivered, 4 lost before");
        exporter.export(spans(2)).await.unwrap_err();
        assert_eq!(counts.undelivered(failed_before), 4, "those of a failed last export are undelivered too");
        exporter.inner.down.store(false, Ordering::Relaxed);
        exporter.export(spans(2)).await.unwrap();
        assert_eq!(counts.failing.load(Ordering::Relaxed), 0, "said when exports got through");
        assert_eq!(counts.undelivered(counts.failed()), 0);
    }

    #[test]
    fn spans_left_at_exit_are_said_with_their_count_and_where_they_were_to_go() {
        use crate::export::unsent;
        assert_eq!(unsent(true, 0, "http://c/v1/traces", None), None);
        let line = unsent(true, 7, "http://c/v1/traces", None).unwrap();
        assert!(line.starts_with("7 spans were not sent to http://c/v1/traces at exit: "), "{line}");
        assert!(line.contains("within 2 s"), "{line}");
        let one = unsent(false, 1, "http://c/v1/traces", None).unwrap();
        assert_eq!(one, "1 span was not sent to http://c/v1/traces at exit: the collector did not take it; it is lost");
        // An export that failed at exit says why, in this line (not in a line of its own).
        let refused = unsent(false, 3, "http://c/v1/traces", Some("the collector answered 503 Service Unavailable"));
        assert_eq!(
            refused.as_deref(),
            Some(
                "3 spans were not sent to http://c/v1/traces at exit: the collector answered 503 Service Unavailable; they are lost"
            )
        );
    }

    #[test]
    fn the_last_metrics_left_at_exit_are_one_line_that_says_they_are_lost() {
        use crate::export::metrics_unsent;
        let url = "http://c/v1/metrics";
        assert_eq!(metrics_unsent(Some(true), url, None), None);
        let refused = metrics_unsent(Some(false), url, Some("the collector answered 503 Service Unavailable")).unwrap();
        assert!(refused.starts_with("the last metrics were not sent to http://c/v1/metrics at exit: the collector answered 503 Service Unavailable; "), "{refused}");
        let late = metrics_unsent(None, url, None).unwrap();
        assert!(late.contains("did not take them within 2 s of exit"), "{late}");
        for line in [refused, late] {
            assert!(line.ends_with("is lost") && !line.contains("sent again"), "{line}");
        }
    }
}
