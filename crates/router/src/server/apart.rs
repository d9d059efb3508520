//! Keeping sessions apart once a server asks clients things, and noting what it asked (which
//! decides which clients share its instances: see `alike`). A server's request to a client
//! (sampling, elicitation) names no call: it reaches the right client only when the instance
//! that sent it has one client's calls. From the first such request on (remembered for later
//! runs), the server's pools give calls of different sessions instances of their own where they
//! can (see `Pool::keep_sessions_apart`).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::Server;
use crate::upstream::{Events, Instance};
use switchyard_core::codec::Envelope;

/// The requests of a server to a client that only that client's call can have made.
const ASKS: &[&str] = &["sampling/createMessage", "elicitation/create"];

impl Server {
    /// The server asked a client `what`: from now on (and in later runs) calls of different
    /// sessions go to different instances where the pools can have them.
    pub fn keep_sessions_apart(&self, what: &str) {
        if self.apart.swap(true, Ordering::Relaxed) {
            return;
        }
        let most = self.pools.values().map(|p| p.config.max).max().unwrap_or(1);
        tracing::info!(
            server = %self.name,
            "the server asks clients for {what}: from now on calls of different sessions go to different instances where the pools can start them (up to max = {most}), so each request reaches the client whose call made it{}",
            if most < 2 {
                "; with max = 1 sessions share the one instance, and a request made while two sessions' calls are on it is refused: raise the pool's max"
            } else {
                ""
            }
        );
        if let Some((answers, key)) = self.answers.get() {
            answers.put(&format!("{key}:asks-clients"), what);
        }
    }
}

/// What an instance reports goes to the server's hub, and a request to a client also tells the
/// server to keep sessions apart.
pub(super) struct Watch {
    hub: Arc<super::fanout::Fanout>,
    server: Weak<Server>,
}

impl Watch {
    pub(super) fn new(server: &Arc<Server>) -> Arc<Watch> {
        Arc::new(Watch { hub: server.hub.clone(), server: Arc::downgrade(server) })
    }
}

impl Events for Watch {
    fn server_request(self: Arc<Self>, from: &Arc<Instance>, line: String, env: Envelope) {
        if let Some(method) = env.method.as_deref()
            && let Some(server) = self.server.upgrade()
        {
            // Before it is routed: what it shows the server uses decides whom it may share with.
            server.saw_request(method);
            if ASKS.contains(&method) {
                server.keep_sessions_apart(method);
            }
        }
        self.hub.clone().server_request(from, line, env);
    }
    fn server_notification(self: Arc<Self>, from: &Arc<Instance>, line: String, env: Envelope) {
        self.hub.clone().server_notification(from, line, env);
    }
    fn linger(&self) -> Duration {
        self.hub.linger()
    }
    fn answers_one_at_a_time(&self, from: &Instance, waited: Duration) {
        self.hub.answers_one_at_a_time(from, waited);
    }
}
