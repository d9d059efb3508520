//! A session being served: opened (its outbox, its place among the router's sessions, its
//! writer), its read loop, and its wind-down when the client leaves or switchyard stops.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::place::Placement;
use super::sessions::Registered;
use super::{Input, Message, Opening, Output, Session};
use crate::call::Cancel;
use crate::peer::ClientPeer;
use crate::server::Server;
use switchyard_core::codec::{self, Frame};
use switchyard_core::decision::Transport;

static NEXT_SESSION: AtomicU64 = AtomicU64::new(1);

/// How long in-flight calls get to wind down when a session ends.
const SESSION_GRACE: Duration = Duration::from_secs(3);
/// After the client closed its input, how long calls in flight get to finish and be answered
/// before they are cancelled (the SDKs wait as long after closing a server's stdin).
const EOF_GRACE: Duration = Duration::from_secs(2);

/// A session being served, from [`Session::open`] to [`Serving::close`].
pub(super) struct Serving<'a> {
    session: Arc<Session>,
    server: Arc<Server>,
    label: String,
    transport: &'static str,
    started: tokio::time::Instant,
    /// Takes the session out of the router's sessions when the serving ends.
    _registered: Registered<'a>,
    writer_task: JoinHandle<()>,
    /// The writer ends early only when writing to the client failed: the client is gone.
    writer_ended: bool,
    /// The session's calls (and batches) running.
    tasks: TaskTracker,
}

/// Why the read loop ended.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Ended {
    /// switchyard is shutting down: the client is still there to read an answer for what is
    /// cancelled.
    Shutdown,
    /// The client closed its input; it may still read what it is owed.
    Eof,
    /// The client is gone: it ended its session, stopped reading, or reading from it failed.
    Gone,
}

impl Session {
    /// Sets a session up: its outbox on the server's hub, its place among the router's
    /// sessions, and its writer.
    pub(super) fn open<'a>(server: Arc<Server>, output: impl Output, opening: &'a Opening) -> Serving<'a> {
        let id = NEXT_SESSION.fetch_add(1, Ordering::Relaxed);
        let started = tokio::time::Instant::now();
        let label = format!("{}-{id}", opening.transport);
        let (tx, rx) = mpsc::unbounded_channel();
        // A client that stops reading may fall this far behind before its session is closed.
        let queue_limit = server.limits.max_message_bytes.saturating_mul(4);
        let link = ClientPeer::new(id, tx, queue_limit, server.buffered.clone());
        link.set_origin(
            Transport::of_label(opening.transport),
            opening.client_dir.clone(),
            opening.client_token.clone(),
        );
        server.hub.attach(link.clone());
        let session = Arc::new(Session {
            id,
            label: label.as_str().into(),
            link,
            server: std::sync::RwLock::new(server.clone()),
            placement: Placement::new(opening),
            inflight: Mutex::new(HashMap::new()),
            in_order: tokio::sync::Mutex::new(()),
            started,
            speaks_control: opening.speaks_control,
            promised: std::sync::OnceLock::new(),
            leaving: Default::default(),
            withdrawn: std::sync::OnceLock::new(),
            span: switchyard_telemetry::session(&server.name, &label),
        });
        let registered = opening.sessions.add(&session);
        server.metrics.session_opened(opening.transport);
        let writer_task = tokio::spawn(output.run(rx, session.link.backlog(), label.clone()));
        tracing::debug!(session = %label, "session started");
        Serving {
            session,
            server,
            label,
            transport: opening.transport,
            started,
            _registered: registered,
            writer_task,
            writer_ended: false,
            tasks: TaskTracker::new(),
        }
    }
}

impl Serving<'_> {
    /// Reads the client's messages and acts on each, until the client leaves or `shutdown` fires.
    pub(super) async fn read_loop(&mut self, input: &mut impl Input, shutdown: &CancellationToken) -> Ended {
        let session = &self.session;
        loop {
            let frame = tokio::select! {
                f = input.next() => f,
                _ = shutdown.cancelled() => return Ended::Shutdown,
                _ = session.link.overflow.cancelled() => return Ended::Gone,
                _ = &mut self.writer_task => {
                    self.writer_ended = true;
                    return Ended::Gone;
                }
            };
            match frame {
                Ok(Some(Message::Request(call))) => session.on_request(call, &self.tasks),
                Ok(Some(Message::Frame(Frame::Line(line)))) => session.on_line(line, &self.tasks),
                Ok(Some(Message::Frame(Frame::TooLong { bytes }))) => session.link.send(codec::response_error(
                    &{
                        let (head, tail) = input.skipped_ends();
                        codec::skipped_request_id(head, tail).unwrap_or_else(|| "null".to_string())
                    },
                    codec::INVALID_REQUEST,
                    &format!(
                        "message of {bytes} bytes is over the limit of {} bytes (limits.max_message_bytes); it was skipped",
                        self.server.limits.max_message_bytes
                    ),
                    None,
                )),
                Ok(Some(Message::Frame(Frame::NotUtf8))) => session.link.send(codec::response_error(
                    "null",
                    codec::PARSE_ERROR,
                    "Parse error: the message is not valid UTF-8",
                    None,
                )),
                Ok(None) => return Ended::Eof,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionAborted => {
                    tracing::debug!(session = %self.label, "the client ended its session: {e}");
                    return Ended::Gone;
                }
                Err(e) => {
                    tracing::warn!(session = %self.label, "reading from the client failed: {e}");
                    return Ended::Gone;
                }
            }
        }
    }

    /// Winds the session down: its calls get their grace, then are cancelled; it leaves its
    /// server; its writer gets what is queued out to the client (unless the client is gone).
    pub(super) async fn close(mut self, ended: Ended, shutdown: &CancellationToken) {
        self.session.leaving.store(true, std::sync::atomic::Ordering::SeqCst);
        // Whether the client is still there to read an answer for what is cancelled below.
        let mut client_listening = ended == Ended::Shutdown;
        // End of input is not a cancel: what is in flight gets a short grace to be answered, as a
        // server run directly would answer it.
        if ended == Ended::Eof && !self.session.inflight.lock().expect("lock").is_empty() {
            self.tasks.close();
            tokio::select! {
                _ = tokio::time::timeout(EOF_GRACE, self.tasks.wait()) => {}
                _ = shutdown.cancelled() => client_listening = true,
                _ = self.session.link.overflow.cancelled() => {}
                _ = &mut self.writer_task => self.writer_ended = true,
            }
        }
        self.cancel_calls(client_listening).await;
        self.session.server().detach(self.session.id).await;
        let session_overflowed = self.session.link.overflow.is_cancelled();
        let peak = self.session.link.backlog().peak();
        drop(self.session);
        // What is queued still goes out, unless the client stopped reading: then it is dropped.
        // An aborted writer drops what it still held once it is polled to its end.
        let mut writer_task = self.writer_task;
        if self.writer_ended {
            // Already awaited: its output is gone, and so is what was queued for it.
        } else if session_overflowed {
            writer_task.abort();
            let _ = writer_task.await;
        } else if tokio::time::timeout(SESSION_GRACE, &mut writer_task).await.is_err() {
            tracing::warn!(session = %self.label, "the client did not take its last messages within {SESSION_GRACE:?}");
            writer_task.abort();
            let _ = writer_task.await;
        }
        if peak >= crate::peer::GIVE_BACK_AFTER {
            crate::peer::give_back_memory();
        }
        self.server.metrics.session_closed(self.transport, self.started.elapsed());
        tracing::debug!(session = %self.label, "session ended");
    }

    /// The client is gone, or switchyard is shutting down: cancels the session's calls upstream
    /// and waits (a while) for them to wind down. A client that is still there
    /// (`client_listening`) gets an error for each; one that left is owed nothing.
    async fn cancel_calls(&self, client_listening: bool) {
        let open: Vec<Arc<Cancel>> = self.session.inflight.lock().expect("lock").values().cloned().collect();
        if !open.is_empty() {
            tracing::info!(session = %self.label, "session ended with {} calls in flight; cancelling them", open.len());
        }
        // Shutting down, or (the server's own token fired) its server was removed.
        let why = self.session.server().ended().to_string();
        for c in open {
            if client_listening {
                c.cancel_and_answer(&why);
            } else {
                c.cancel(Some("the client disconnected".to_string()));
            }
        }
        self.tasks.close();
        if tokio::time::timeout(SESSION_GRACE, self.tasks.wait()).await.is_err() {
            tracing::warn!(session = %self.label, "calls did not wind down within {SESSION_GRACE:?}");
        }
    }
}

/// Writes the session's messages to the client. It ends before the session only when a write
/// fails (a closed pipe or socket: the client stopped reading), which ends the session.
pub(super) async fn write_loop<W: AsyncWrite + Unpin>(
    writer: W,
    mut rx: mpsc::UnboundedReceiver<crate::peer::Out>,
    backlog: Arc<crate::peer::Backlog>,
    label: String,
) {
    let mut w = BufWriter::with_capacity(64 * 1024, writer);
    let failed = async {
        while let Some(out) = rx.recv().await {
            let mut next = Some(out.line);
            while let Some(l) = next {
                w.write_all(l.as_bytes()).await?;
                w.write_all(b"\n").await?;
                backlog.wrote(l.len() + 1);
                next = rx.try_recv().ok().map(|o| o.line);
            }
            w.flush().await?;
        }
        std::io::Result::Ok(())
    }
    .await;
    if let Err(e) = failed {
        tracing::info!(session = %label, "the client stopped reading its output (writing to it failed: {e}); ending its session");
    }
}
