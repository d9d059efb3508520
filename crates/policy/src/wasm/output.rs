//! A plugin's words: its stdout and stderr captured line by line into the router's log, rate-limited.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Plugin output and failure notes: a burst of this many lines, then this many a second.
const LOG_BURST: f64 = 20.0;
const LOG_PER_SECOND: f64 = 5.0;
/// Lines of a call's output kept to explain its failure (a panic message is two or three).
const TAIL_LINES: usize = 4;

/// Where a plugin's words go: its `log` calls, its stdout and stderr, and notes about its
/// failures. Shared by all instances of one plugin version, so the rate limit is per plugin:
/// a plugin that prints on every call under load cannot flood the router's log.
pub struct Output {
    plugin: Arc<str>,
    budget: Mutex<Budget>,
    /// `plugin check` keeps every line, to show it.
    capture: Option<Mutex<Vec<String>>>,
}

struct Budget {
    tokens: f64,
    refilled: Instant,
    suppressed: u64,
}

impl Output {
    pub(super) fn new(plugin: &str, capture: bool) -> Output {
        Output {
            plugin: Arc::from(plugin),
            budget: Mutex::new(Budget { tokens: LOG_BURST, refilled: Instant::now(), suppressed: 0 }),
            capture: capture.then(|| Mutex::new(Vec::new())),
        }
    }

    /// Logs one line from or about the plugin, within its budget; says how many were left out.
    pub fn line(&self, level: tracing::Level, source: &str, text: &str) {
        if let Some(c) = &self.capture {
            let line = match source {
                "log" => format!("log {}: {text}", level.as_str().to_lowercase()),
                _ => format!("{source}: {text}"),
            };
            c.lock().unwrap_or_else(|p| p.into_inner()).push(line);
        }
        let suppressed = {
            let mut b = self.budget.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            b.tokens = (b.tokens + now.duration_since(b.refilled).as_secs_f64() * LOG_PER_SECOND).min(LOG_BURST);
            b.refilled = now;
            if b.tokens < 1.0 {
                b.suppressed += 1;
                if b.suppressed == 1 {
                    drop(b);
                    tracing::warn!(
                        plugin = &*self.plugin,
                        "further lines from or about this plugin are left out of the log for now \
                         (at most {LOG_PER_SECOND} a second; the number left out follows)"
                    );
                }
                return;
            }
            b.tokens -= 1.0;
            std::mem::take(&mut b.suppressed)
        };
        let plugin = &*self.plugin;
        if suppressed > 0 {
            tracing::warn!(
                plugin,
                "{suppressed} lines from or about this plugin were left out of the log (at most {LOG_PER_SECOND} a second)"
            );
        }
        match level {
            tracing::Level::TRACE => tracing::trace!(plugin, source, "{text}"),
            tracing::Level::DEBUG => tracing::debug!(plugin, source, "{text}"),
            tracing::Level::INFO => tracing::info!(plugin, source, "{text}"),
            tracing::Level::WARN => tracing::warn!(plugin, source, "{text}"),
            tracing::Level::ERROR => tracing::error!(plugin, source, "{text}"),
        }
    }

    /// The lines kept so far (only for `plugin check`), and forgets them.
    pub fn take_captured(&self) -> Vec<String> {
        self.capture
            .as_ref()
            .map(|c| std::mem::take(&mut *c.lock().unwrap_or_else(|p| p.into_inner())))
            .unwrap_or_default()
    }
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Stream {
    Stdout = 0,
    Stderr = 1,
}

impl Stream {
    fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// What one instance printed and has not ended with a newline yet, and its last lines.
/// Per instance, not per stream handle: a guest may open a new handle for every write.
#[derive(Default)]
pub(super) struct Printed {
    pub(super) pending: [Vec<u8>; 2],
    pub(super) tail: VecDeque<String>,
}

impl Printed {
    /// Bounds what a plugin can make the host buffer without a newline.
    const MAX_LINE: usize = 8 * 1024;

    fn push(&mut self, output: &Output, stream: Stream, bytes: &[u8]) {
        let pending = &mut self.pending[stream as usize];
        pending.extend_from_slice(bytes);
        let mut lines = Vec::new();
        while let Some(i) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=i).collect();
            lines.push(line);
        }
        if pending.len() > Self::MAX_LINE {
            lines.push(std::mem::take(pending));
        }
        for line in lines {
            self.line(output, stream, &line);
        }
    }

    pub(super) fn line(&mut self, output: &Output, stream: Stream, bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        let text = text.trim_end();
        if text.is_empty() {
            return;
        }
        output.line(tracing::Level::INFO, stream.name(), text);
        // Rust's hint about backtraces explains nothing about this failure.
        if !text.starts_with("note: run with `RUST_BACKTRACE") {
            if self.tail.len() == TAIL_LINES {
                self.tail.pop_front();
            }
            self.tail.push_back(text.to_string());
        }
    }
}

/// A plugin's stdout or stderr: lines go to the router's log (stderr), never to stdout.
pub(super) struct LogStream {
    pub(super) output: Arc<Output>,
    pub(super) printed: Arc<Mutex<Printed>>,
    pub(super) stream: Stream,
}

impl wasmtime_wasi::cli::IsTerminal for LogStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl wasmtime_wasi::cli::StdoutStream for LogStream {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.logger())
    }

    fn p2_stream(&self) -> Box<dyn wasmtime_wasi::p2::OutputStream> {
        Box::new(self.logger())
    }
}

impl LogStream {
    fn logger(&self) -> LineLogger {
        LineLogger { output: self.output.clone(), printed: self.printed.clone(), stream: self.stream }
    }
}

/// One handle on a plugin's stdout or stderr. Writes never block and never need a runtime.
struct LineLogger {
    output: Arc<Output>,
    printed: Arc<Mutex<Printed>>,
    stream: Stream,
}

impl LineLogger {
    fn push(&self, bytes: &[u8]) {
        self.printed.lock().unwrap_or_else(|p| p.into_inner()).push(&self.output, self.stream, bytes);
    }
}

#[wasmtime_wasi::async_trait]
impl wasmtime_wasi::p2::Pollable for LineLogger {
    async fn ready(&mut self) {}
}

impl wasmtime_wasi::p2::OutputStream for LineLogger {
    fn write(&mut self, bytes: bytes::Bytes) -> wasmtime_wasi::p2::StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }
    fn flush(&mut self) -> wasmtime_wasi::p2::StreamResult<()> {
        Ok(())
    }
    fn check_write(&mut self) -> wasmtime_wasi::p2::StreamResult<usize> {
        Ok(64 * 1024)
    }
}

impl tokio::io::AsyncWrite for LineLogger {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.push(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}
