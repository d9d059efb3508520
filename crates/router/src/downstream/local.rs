//! One connection to the daemon's local endpoint (the Unix socket, or the named pipe on
//! Windows): a control hello (`control::Hello`) says what it wants; anything else is the first
//! MCP message of a session with the router's only server.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio_util::sync::CancellationToken;

use crate::control::{self, Hello, Reply};
use crate::registry::Servers;
use crate::server::Server;
use crate::session::{self, Opening};

/// Serves a session whose `connect` hands its own pipes over (Linux's socket only): the server,
/// the connection, the opening, the server's end and the router's shutdown.
pub(crate) type HandOff<R, W> =
    fn(Arc<Server>, BufReader<R>, W, Opening, CancellationToken, CancellationToken) -> BoxFuture<'static, ()>;

/// The longest first line read before a connection is known to be a hello or an MCP message.
const FIRST_LINE_MAX: u64 = 64 * 1024 * 1024;

/// One accepted connection (`transport`: `unix` or `pipe`, the first part of its sessions'
/// labels): a hello (`control::Hello`) says what it wants; anything else is the
/// first MCP message of a session with the router's only server.
pub(crate) async fn open<R, W>(
    transport: &'static str,
    router: Arc<Servers>,
    r: R,
    mut w: W,
    shutdown: CancellationToken,
    handoff: Option<HandOff<R, W>>,
) where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
    let mut reader = BufReader::with_capacity(64 * 1024, r);
    let mut first = Vec::new();
    let mut limited = (&mut reader).take(FIRST_LINE_MAX);
    let read = tokio::select! {
        r = limited.read_until(b'\n', &mut first) => r,
        _ = shutdown.cancelled() => return,
    };
    if !matches!(read, Ok(n) if n > 0) {
        return;
    }
    let text = String::from_utf8_lossy(&first).into_owned();
    let reply = |r: &Reply| control::line(r);
    match control::hello(&text) {
        Some(Ok(Hello::Connect { group: Some(group), version, env, dir, .. })) => {
            open_group(transport, router, &group, &version, &env, dir, reader, w, shutdown).await
        }
        Some(Ok(Hello::Connect { server, version, env, dir, handoff: offered, group: None })) => {
            match router.lookup(server.as_deref(), &env) {
                Ok(server) => {
                    if version != env!("CARGO_PKG_VERSION") {
                        tracing::info!(server = %server.name, "a client of switchyard {version} joined (this router is {})", env!("CARGO_PKG_VERSION"));
                    }
                    // Taken only where this endpoint can take descriptors.
                    let handoff = handoff.filter(|_| offered);
                    let welcome = Reply::Welcome {
                        server: server.name.clone(),
                        version: env!("CARGO_PKG_VERSION").to_string(),
                        pid: std::process::id(),
                        handoff: handoff.is_some(),
                    };
                    if w.write_all(reply(&welcome).as_bytes()).await.is_err() {
                        return;
                    }
                    let opening = Opening {
                        transport,
                        sessions: router.sessions.clone(),
                        speaks_control: true,
                        client_dir: dir,
                        client_token: None,
                    };
                    let ends = server.shutdown.clone();
                    match handoff {
                        Some(serve_handed) => serve_handed(server, reader, w, opening, ends, shutdown).await,
                        None => session::serve(server, reader, w, opening, ends).await,
                    }
                }
                Err(error) => {
                    tracing::info!("refused a client: {error}");
                    let _ = w.write_all(reply(&Reply::Refused { error }).as_bytes()).await;
                }
            }
        }
        Some(Ok(Hello::Status)) => {
            let _ = w.write_all(reply(&Reply::Status { status: router.status() }).as_bytes()).await;
        }
        Some(Ok(Hello::Stop)) => {
            tracing::info!("asked to stop (switchyard stop)");
            let _ = w.write_all(reply(&Reply::Stopping { pid: std::process::id() }).as_bytes()).await;
            router.shutdown.cancel();
        }
        Some(Err(error)) => {
            let _ = w.write_all(reply(&Reply::Refused { error }).as_bytes()).await;
        }
        // No hello: a raw MCP client, for the only server.
        None => match router.lookup(None, &Default::default()) {
            Ok(server) => {
                let opening = Opening {
                    transport,
                    sessions: router.sessions.clone(),
                    speaks_control: false,
                    client_dir: None,
                    client_token: None,
                };
                let ends = server.shutdown.clone();
                let reader = std::io::Cursor::new(first).chain(reader);
                session::serve(server, reader, w, opening, ends).await;
            }
            Err(why) => {
                let id = switchyard_core::codec::parse(text.trim())
                    .ok()
                    .and_then(|e| e.id.map(|r| text.trim()[r].to_string()));
                let msg = format!("{why}; this connection sent no switchyard hello, so it cannot name one");
                let _ = w
                    .write_all(
                        switchyard_core::codec::response_error(
                            id.as_deref().unwrap_or("null"),
                            switchyard_core::codec::INVALID_REQUEST,
                            &msg,
                            None,
                        )
                        .as_bytes(),
                    )
                    .await;
                let _ = w.write_all(b"\n").await;
            }
        },
    }
}

/// A `connect --group NAME`: welcomed as a session of the group (never handed off: the group
/// reads its client itself), or refused with why.
#[allow(clippy::too_many_arguments)]
async fn open_group<R, W>(
    transport: &'static str,
    router: Arc<Servers>,
    name: &str,
    version: &str,
    env: &std::collections::BTreeMap<String, String>,
    dir: Option<String>,
    reader: BufReader<R>,
    mut w: W,
    shutdown: CancellationToken,
) where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    use tokio::io::AsyncWriteExt;
    let group = match router.group(name) {
        Ok(g) => g,
        Err(error) => {
            tracing::info!("refused a client: {error}");
            let _ = w.write_all(control::line(&Reply::Refused { error }).as_bytes()).await;
            return;
        }
    };
    if version != env!("CARGO_PKG_VERSION") {
        tracing::info!(group = %group.name, "a client of switchyard {version} joined (this router is {})", env!("CARGO_PKG_VERSION"));
    }
    let welcome = Reply::Welcome {
        server: format!("group {}", group.name),
        version: env!("CARGO_PKG_VERSION").to_string(),
        pid: std::process::id(),
        handoff: false,
    };
    if w.write_all(control::line(&welcome).as_bytes()).await.is_err() {
        return;
    }
    let opening = Opening {
        transport,
        sessions: router.sessions.clone(),
        speaks_control: true,
        client_dir: dir,
        client_token: None,
    };
    crate::group::serve(router.clone(), group, env, reader, w, opening, shutdown).await;
}
