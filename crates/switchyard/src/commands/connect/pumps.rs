//! The tasks that move lines: the client's input and output, each connection's reader of the
//! router's lines, and the JSON-RPC ids they book in the ledger.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use switchyard_os::endpoint::ReadHalf as OwnedReadHalf;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use switchyard_core::codec;
use switchyard_router::control::{self, Reply};

use super::relay::{Event, Ledger};
use switchyard_router::handoff::response_ids;
pub(super) use switchyard_router::handoff::{for_each_message, request_ids};

/// At a start that failed, how long to wait for the client's first request, to answer it.
const FIRST_REQUEST_WAIT: Duration = Duration::from_secs(10);

/// The client's lines, one by one (each with its newline, if it had one), until it closes.
/// With `skip_first`, the first line (the rest of one the router was skipping as too long) is
/// dropped.
pub(super) fn spawn_reader<R: AsyncRead + Send + Unpin + 'static>(
    input: R,
    mut skip_first: bool,
) -> (mpsc::Receiver<Vec<u8>>, JoinHandle<()>) {
    let (tx, rx) = mpsc::channel(32);
    let task = tokio::spawn(async move {
        let mut input = BufReader::with_capacity(64 * 1024, input);
        loop {
            let mut line = Vec::new();
            match input.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            if std::mem::take(&mut skip_first) {
                continue;
            }
            if tx.send(line).await.is_err() {
                break;
            }
        }
    });
    (rx, task)
}

/// Writes whole lines to the client; tells the controller when the client stops taking them.
pub(super) fn spawn_writer<W: AsyncWrite + Send + Unpin + 'static>(
    mut output: W,
    events: Option<mpsc::UnboundedSender<Event>>,
) -> (mpsc::Sender<Vec<u8>>, JoinHandle<()>) {
    // Room for one line: a client that stops reading must hold up the router's socket at once
    // (the router then applies its buffer budget), not find megabytes buffered in `connect`.
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(1);
    let task = tokio::spawn(async move {
        while let Some(mut line) = rx.recv().await {
            if line.last() != Some(&b'\n') {
                line.push(b'\n');
            }
            let mut ok = output.write_all(&line).await.is_ok();
            // One flush per burst, not per line.
            if ok && rx.is_empty() {
                ok = output.flush().await.is_ok();
            }
            if !ok {
                if let Some(events) = &events {
                    let _ = events.send(Event::ClientGone);
                }
                return;
            }
        }
        let _ = output.flush().await;
        let _ = output.shutdown().await;
    });
    (tx, task)
}

/// Lets the writer finish what it has (briefly: a client that does not read must not hold
/// `connect` up).
pub(super) async fn finish_writer(out: mpsc::Sender<Vec<u8>>, writer: JoinHandle<()>) {
    drop(out);
    let abort = writer.abort_handle();
    if tokio::time::timeout(Duration::from_secs(2), writer).await.is_err() {
        abort.abort();
    }
}

/// At a failed start: answers the client's first request with `why` (one line on stderr says
/// it too), so that the client shows the reason rather than "server exited".
pub(super) async fn refuse_first_request(mut lines: mpsc::Receiver<Vec<u8>>, out: &mpsc::Sender<Vec<u8>>, why: &str) {
    switchyard_core::logging::say(&format!("switchyard connect: {why}"));
    let deadline = Instant::now() + FIRST_REQUEST_WAIT;
    while let Ok(Some(line)) = tokio::time::timeout_at(deadline, lines.recv()).await {
        let (ids, batch) = request_ids(&line);
        if ids.is_empty() {
            continue;
        }
        let errors: Vec<String> =
            ids.iter().map(|id| codec::response_error(id, codec::SERVER_UNAVAILABLE, why, None)).collect();
        let text = if batch { format!("[{}]", errors.join(",")) } else { errors.join("\n") };
        let _ = out.send(text.into_bytes()).await;
        // Every request until the client's `initialize` is answered (a client may ping first),
        // so the one the client waits on carries the reason.
        if std::str::from_utf8(&line).is_ok_and(|t| t.contains("\"initialize\"")) {
            return;
        }
    }
}

/// One connection's reader: the router's lines to the client, control lines to the controller,
/// answers to replayed requests swallowed.
pub(super) async fn read_router(
    generation: u64,
    at: String,
    mut reader: BufReader<OwnedReadHalf>,
    ledger: Arc<Mutex<Ledger>>,
    idle: Arc<Notify>,
    out: mpsc::Sender<Vec<u8>>,
    events: mpsc::UnboundedSender<Event>,
) {
    let why = loop {
        let mut line = Vec::new();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) => break None,
            Err(e) => break Some(e),
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&line);
        if control::is_control(&text) {
            match control::reply(&text) {
                Ok(Reply::Drain { reason }) => {
                    let _ = events.send(Event::Drain { generation, reason });
                }
                Ok(other) => switchyard_core::logging::say(&format!(
                    "switchyard connect: ignored a control line from the router: {other:?}"
                )),
                Err(e) => switchyard_core::logging::say(&format!("switchyard connect: {e}")),
            }
            continue;
        }
        if !pass_on(&text, &ledger, &idle) {
            continue;
        }
        if out.send(line).await.is_err() {
            break None;
        }
    };
    let why = match why {
        None => format!("the router at {at} closed the connection (it stopped or was killed)"),
        Some(e) => format!("the connection to the router at {at} failed: {e}"),
    };
    let _ = events.send(Event::Gone { generation, why });
}

/// Books the answers in a router line; false for an answer to a replayed request (which is
/// `connect`'s, not the client's).
fn pass_on(text: &str, ledger: &Mutex<Ledger>, idle: &Notify) -> bool {
    let ids = response_ids(text.as_bytes());
    if ids.is_empty() {
        return true;
    }
    let mut ledger = ledger.lock().expect("lock");
    if !codec::is_batch(text.trim())
        && let Some(method) = ledger.replayed.remove(&ids[0])
    {
        if let Ok(env) = codec::parse(text.trim())
            && env.is_error
        {
            switchyard_core::logging::say(&format!(
                "switchyard connect: the router refused the replayed {method}: {}",
                text.trim()
            ));
        }
        return false;
    }
    for id in &ids {
        ledger.ids.remove(id);
    }
    if !ledger.batches.is_empty() {
        let Ledger { ids, batches, .. } = &mut *ledger;
        batches.retain(|b| b.iter().any(|id| ids.contains(id)));
    }
    if ledger.ids.is_empty() {
        idle.notify_one();
    }
    true
}
