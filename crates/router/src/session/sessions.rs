//! `Sessions`: the live sessions of one router, of all its servers.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};

use super::Session;
use crate::server::Server;
use switchyard_core::ids::SessionId;

/// The sessions of one router, of all its servers: for status, for telling a server's sessions
/// that its configuration changed, and for knowing when the router has had no client for a while.
#[derive(Default)]
pub struct Sessions {
    sessions: Mutex<BTreeMap<SessionId, Weak<Session>>>,
    /// The number of live sessions, watched by whoever waits for the router to go idle.
    count: tokio::sync::watch::Sender<usize>,
}

/// Takes a session out of its registry when dropped.
pub(super) struct Registered<'a>(&'a Sessions, SessionId);

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        let mut sessions = self.0.sessions.lock().expect("lock");
        sessions.remove(&self.1);
        self.0.count.send_replace(sessions.len());
    }
}

impl Sessions {
    pub(super) fn add(&self, session: &Arc<Session>) -> Registered<'_> {
        let mut sessions = self.sessions.lock().expect("lock");
        sessions.insert(session.id, Arc::downgrade(session));
        self.count.send_replace(sessions.len());
        Registered(self, session.id)
    }

    /// The live sessions, oldest first.
    pub fn list(&self) -> Vec<Arc<Session>> {
        self.sessions.lock().expect("lock").values().filter_map(Weak::upgrade).collect()
    }

    /// Watches the number of live sessions.
    pub fn count(&self) -> tokio::sync::watch::Receiver<usize> {
        self.count.subscribe()
    }

    /// Tells every session of `server` (and of its siblings) that speaks control lines to move to the server as now
    /// configured (`control::Reply::Drain`); returns how many were told.
    pub fn drain(&self, server: &Arc<Server>, reason: &str) -> usize {
        let line = serde_json::to_string(&crate::control::Reply::Drain { reason: reason.to_string() })
            .expect("wire messages always serialise");
        let mut told = 0;
        for s in self.list().into_iter().filter(|s| Arc::ptr_eq(&s.server().base(), server) && s.speaks_control) {
            s.link.send(line.clone());
            told += 1;
        }
        told
    }
}
