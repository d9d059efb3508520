//! The client's input and output as lines (a reader task and a writer task), and a start that
//! failed told to the client on them: `connect` relays with these, and `connect` and `run` both
//! answer the first request of a client they cannot serve with the reason.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use switchyard_core::codec;
use switchyard_router::handoff::request_ids;

/// At a start that failed, how long to wait for the client's first request, to answer it.
const FIRST_REQUEST_WAIT: Duration = Duration::from_secs(10);

/// The client's lines, one by one (each with its newline, if it had one), until it closes.
/// With `skip_first`, the first line (the rest of one the router was skipping as too long) is
/// dropped.
pub(crate) fn spawn_reader<R: AsyncRead + Send + Unpin + 'static>(
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

/// Writes whole lines to the client; calls `gone` when the client stops taking them.
pub(crate) fn spawn_writer<W: AsyncWrite + Send + Unpin + 'static>(
    mut output: W,
    gone: impl FnOnce() + Send + 'static,
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
                gone();
                return;
            }
        }
        let _ = output.flush().await;
        let _ = output.shutdown().await;
    });
    (tx, task)
}

/// Lets the writer finish what it has (briefly: a client that does not read must not hold the
/// process up).
pub(crate) async fn finish_writer(out: mpsc::Sender<Vec<u8>>, writer: JoinHandle<()>) {
    drop(out);
    let abort = writer.abort_handle();
    if tokio::time::timeout(Duration::from_secs(2), writer).await.is_err() {
        abort.abort();
    }
}

/// At a failed start: answers the client's requests with `why` until its `initialize`, so that
/// the client shows the reason rather than "server exited" or "connection closed". Gives up
/// when the client closes its input or sends nothing for [`FIRST_REQUEST_WAIT`]. The caller
/// says `why` on stderr.
pub(crate) async fn refuse_first_request(mut lines: mpsc::Receiver<Vec<u8>>, out: &mpsc::Sender<Vec<u8>>, why: &str) {
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

/// [`refuse_first_request`] on the process's own stdin and stdout, which nothing else reads
/// or writes yet. Not on a terminal: a person there has read the reason on stderr, and no
/// client waits for an answer.
pub(crate) async fn refuse_on_stdio(why: &str) {
    if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        return;
    }
    let (input, output, restore) = switchyard_router::downstream::stdio::open();
    refuse_on(input, output, why).await;
    drop(restore);
}

/// [`refuse_first_request`] on `input` and `output`.
async fn refuse_on<R, W>(input: R, output: W, why: &str)
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let (lines, reader) = spawn_reader(input, false);
    let (out, writer) = spawn_writer(output, || {});
    refuse_first_request(lines, &out, why).await;
    finish_writer(out, writer).await;
    reader.abort();
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// A client that pings, then initializes, gets both answered with the reason; nothing after
    /// its initialize is read.
    #[tokio::test]
    async fn requests_until_initialize_are_answered_with_the_reason() {
        let (client, ours) = tokio::io::duplex(64 * 1024);
        let (ours_in, ours_out) = tokio::io::split(ours);
        let (mut from, mut to) = tokio::io::split(client);
        let sent = concat!(
            r#"{"jsonrpc":"2.0","method":"notifications/x"}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":"p","method":"ping"}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
            "\n",
        );
        to.write_all(sent.as_bytes()).await.unwrap();
        refuse_on(ours_in, ours_out, "config file /c.toml, line 3: bad").await;
        let mut got = String::new();
        from.read_to_string(&mut got).await.unwrap();
        let answers: Vec<serde_json::Value> = got.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(answers.len(), 2, "{got}");
        assert_eq!((&answers[0]["id"], &answers[1]["id"]), (&serde_json::json!("p"), &serde_json::json!(1)));
        for a in &answers {
            assert_eq!(a["error"]["code"], codec::SERVER_UNAVAILABLE);
            assert_eq!(a["error"]["message"], "config file /c.toml, line 3: bad");
        }
    }

    /// A client that sends nothing is given up on after the wait; one that closes its input at once.
    #[tokio::test(start_paused = true)]
    async fn a_silent_client_is_given_up_on() {
        let (_client, ours) = tokio::io::duplex(1024);
        let (ours_in, ours_out) = tokio::io::split(ours);
        let started = Instant::now();
        refuse_on(ours_in, ours_out, "why").await;
        let waited = started.elapsed();
        assert!(waited >= FIRST_REQUEST_WAIT && waited < FIRST_REQUEST_WAIT + Duration::from_secs(1), "{waited:?}");
        let (client, ours) = tokio::io::duplex(1024);
        drop(client);
        let (ours_in, ours_out) = tokio::io::split(ours);
        let started = Instant::now();
        refuse_on(ours_in, ours_out, "why").await;
        assert!(started.elapsed() < Duration::from_secs(1));
    }
}
