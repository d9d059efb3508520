//! What `switchyard status` shows of one server: its instances, what they cost, what went wrong last.

use std::sync::atomic::Ordering;

use serde_json::{Value, json};

use super::Server;

/// Counters kept for status.
#[derive(Default)]
pub(super) struct Counts {
    /// Instances that finished their start.
    pub starts: std::sync::atomic::AtomicU64,
    /// Instances that ended without switchyard ending them (crashed, exited, link lost).
    pub unexpected_ends: std::sync::atomic::AtomicU64,
    /// The latest failure: a failed start or an unexpected end.
    pub last_error: std::sync::Mutex<Option<String>>,
}

impl Server {
    pub(super) fn note_error(&self, what: String) {
        *self.counts.last_error.lock().expect("lock") = Some(what);
    }

    /// The server as `switchyard status --json` shows it (sessions are added by the router,
    /// which knows them).
    pub fn status(&self) -> Value {
        let instances: Vec<Value> = self
            .all_instances()
            .iter()
            .map(|i| {
                let endpoint = i.endpoint();
                let url = (!endpoint.starts_with("pid ")).then(|| endpoint.to_string());
                // A supervised instance's process is the supervisor; the server is its child.
                let server_pid = i.pid().map(|p| supervised_child(p).unwrap_or(p));
                json!({
                    "label": i.label(),
                    "pool": &*i.pool(),
                    "pid": server_pid,
                    "supervisor_pid": i.pid().filter(|p| Some(*p) != server_pid),
                    "url": url,
                    "transport": if i.pid().is_some() { "stdio" } else { "http" },
                    "uptime_ms": i.uptime().as_millis() as u64,
                    "inflight": i.inflight(),
                    "ready": i.is_ready(),
                    "owner_session": i.owner,
                    // Which calls it serves: `shared`, `session 3`, `client cursor`, `key docs`.
                    "scope": i.scope.describe(),
                    // Whose: the clients (`name version`) of the sessions it may serve now.
                    "clients": self.clients_of(i.owner),
                })
            })
            .collect();
        json!({
            "name": self.name,
            "target": self.connector.describe().trim_matches('`'),
            "starts": self.counts.starts.load(Ordering::Relaxed),
            "restarts": self.counts.unexpected_ends.load(Ordering::Relaxed),
            "last_error": *self.counts.last_error.lock().expect("lock"),
            "initialized": self.init.result.initialized(),
            "instances": instances,
            "calls": self.calls.status(),
            "one_at_a_time": *self.serial.lock().expect("lock"),
            // The clients its instances serve and served lately, and what the server asked
            // clients for (which decides which kinds of client share them).
            "clients": self.clients_status(),
            "asks": self.asked().iter().map(|f| f.name()).collect::<Vec<_>>(),
            // A remote server's sign-in: its state and expiry, never a token.
            "sign_in": self.connector.sign_in(),
            // What the clients' budgets did to its tool list, per kind of client: names
            // shortened, names left too long, a list over the count a client takes.
            "budgets": self.budget_status(),
        })
    }
}

/// The first child of process `pid`, when it has one.
/// Windows runs servers under no supervisor: the instance's process is the server.
fn supervised_child(pid: u32) -> Option<u32> {
    if cfg!(windows) {
        return None;
    }
    switchyard_os::process::first_child(pid)
}
