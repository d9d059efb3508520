//! The tasks that move lines: each connection's reader of the router's lines, and the JSON-RPC
//! ids they book in the ledger (the client's input and output are `commands::lines`).

use std::sync::{Arc, Mutex};

use switchyard_os::endpoint::ReadHalf as OwnedReadHalf;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::{Notify, mpsc};

use switchyard_core::codec;
use switchyard_router::control::{self, Reply};

use super::relay::{Event, Ledger};
use switchyard_router::handoff::response_ids;
pub(super) use switchyard_router::handoff::{for_each_message, request_ids};

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
