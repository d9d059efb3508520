//! Tools suspected of crashing their server: a call of one runs alone (exclusive on the gate),
//! so a tool that ends its instance takes no other client's call with it.
//!
//! When an instance ends in the middle of calls, every tool among them is suspect: the death
//! cannot tell which of them caused it. A call of a suspect tool then waits for the calls
//! running to finish and runs with no other call beside it; one of its calls answered (the
//! instance lived through it) clears it. Without this, a client calling a crashing tool in a
//! loop on a pool of one pipelined instance takes every other client's calls down with each
//! crash, and as no call is ever answered the restarts are paced out to 10 s.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::Server;

/// At most this many tools are suspect at once: names come from clients, and a server that
/// dies in every call need not grow a list without end. Past it, new suspects are not added
/// (their calls share instances as before).
const MAX_SUSPECTS: usize = 64;

/// The server's suspect tools. `count` mirrors the list's length, so a call on a server with
/// none (nearly every call) takes no lock.
#[derive(Default)]
pub(super) struct Suspects {
    count: AtomicUsize,
    tools: Mutex<Vec<Box<str>>>,
}

impl Suspects {
    /// `tool` was in flight on an instance that ended; true when it was not suspect before.
    fn add(&self, tool: &str) -> bool {
        let mut tools = self.tools.lock().expect("lock");
        if tools.len() >= MAX_SUSPECTS || tools.iter().any(|t| **t == *tool) {
            return false;
        }
        tools.push(tool.into());
        self.count.store(tools.len(), Ordering::Release);
        true
    }

    /// A call of `tool` was answered; true when it was suspect.
    fn clear(&self, tool: &str) -> bool {
        if self.count.load(Ordering::Acquire) == 0 {
            return false;
        }
        let mut tools = self.tools.lock().expect("lock");
        let before = tools.len();
        tools.retain(|t| **t != *tool);
        self.count.store(tools.len(), Ordering::Release);
        tools.len() < before
    }

    fn contains(&self, tool: &str) -> bool {
        self.count.load(Ordering::Acquire) > 0 && self.tools.lock().expect("lock").iter().any(|t| **t == *tool)
    }
}

impl Server {
    /// A call of `tool` was in flight on `instance` when it ended: its calls run alone from now
    /// on, until one is answered.
    pub(crate) fn suspect_tool(&self, tool: &str, instance: &str) {
        if self.suspects.add(tool) {
            tracing::info!(
                server = %self.name,
                "tools/call `{tool}` was in flight when {instance} ended: its calls run alone on the server (exclusive) until one is answered, so they take no other call with them"
            );
        }
    }

    /// A call of `tool` got an answer: it no longer runs alone.
    pub(crate) fn tool_answered(&self, tool: &str) {
        if self.suspects.clear(tool) {
            tracing::info!(server = %self.name, "tools/call `{tool}` was answered: its calls share the server again");
        }
    }

    /// Whether calls of `tool` run alone (see [`Server::suspect_tool`]).
    pub(crate) fn is_suspect(&self, tool: &str) -> bool {
        self.suspects.contains(tool)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_is_suspect_from_a_death_in_its_call_until_one_of_its_calls_is_answered() {
        let s = Suspects::default();
        assert!(!s.contains("crash") && !s.clear("crash"));
        assert!(s.add("crash") && !s.add("crash"), "added once");
        assert!(s.add("echo"));
        assert!(s.contains("crash") && s.contains("echo") && !s.contains("other"));
        assert!(s.clear("echo") && !s.contains("echo") && s.contains("crash"));
        for n in 0..MAX_SUSPECTS * 2 {
            s.add(&format!("t{n}"));
        }
        assert_eq!(s.tools.lock().unwrap().len(), MAX_SUSPECTS, "bounded");
        assert!(s.contains("crash"), "the earlier suspects stay");
    }
}
