//! For in-process tests: a client's session of a server over an in-memory pipe.

use std::sync::Arc;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader, DuplexStream, WriteHalf};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::server::Server;
use crate::session::{self, Opening, Sessions};

/// Serves a stdio session of `server` (ended by `ended`): what the client writes, and each
/// message the router sends it, parsed.
pub(crate) fn open(
    server: &Arc<Server>,
    ended: CancellationToken,
) -> (WriteHalf<DuplexStream>, mpsc::UnboundedReceiver<Value>) {
    let (mine, theirs) = tokio::io::duplex(1 << 20);
    let (r, w) = tokio::io::split(theirs);
    let opening = Opening {
        transport: "stdio",
        sessions: Arc::new(Sessions::default()),
        speaks_control: false,
        client_dir: None,
        client_token: None,
    };
    tokio::spawn(session::serve(server.clone(), BufReader::new(r), w, opening, ended));
    let (r, out) = tokio::io::split(mine);
    let (tx, inbox) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut lines = BufReader::new(r).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let _ = tx.send(serde_json::from_str::<Value>(&line).expect("the router sends JSON"));
        }
    });
    (out, inbox)
}
