//! One member of a group session: an ordinary session of its server, opened in memory (its
//! input the group's messages for it, its output handed back to the group), and whether it is
//! up, still starting, or down and why.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::peer::{Backlog, Out};
use crate::session::{Input, Message, Output};
use switchyard_core::call::Call;
use switchyard_core::codec::Frame;

/// Where a member stands.
#[derive(Debug, Clone)]
pub(crate) enum State {
    /// Its initialize is not answered yet.
    Starting,
    /// Initialised: the capabilities its server declared.
    Up(Value),
    /// Unusable, with why (it could not be reached, its initialize failed, its session ended).
    Down(String),
}

/// One member of a group session.
pub(crate) struct Member {
    pub server: String,
    pub prefix: String,
    /// The member session's input; None once it ended (or when it never began).
    inbox: Mutex<Option<mpsc::UnboundedSender<Message>>>,
    pub(crate) state: Mutex<State>,
    /// Ids of the requests the group sends it (its session sees the group as its client).
    next_id: AtomicU64,
    /// Fired to end the member's session at once (the client went away).
    pub(crate) abort: CancellationToken,
    /// Its session's label (`unix-12`), once known, for status.
    pub(crate) label: Arc<Mutex<Option<String>>>,
}

impl Member {
    /// A member whose session reads from the returned receiver (None: `down` says why it has none).
    pub(crate) fn new(
        server: &str,
        prefix: &str,
        down: Option<String>,
    ) -> (Arc<Member>, mpsc::UnboundedReceiver<Message>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let state = match down {
            Some(why) => State::Down(why),
            None => State::Starting,
        };
        let usable = matches!(state, State::Starting);
        let member = Arc::new(Member {
            server: server.to_string(),
            prefix: prefix.to_string(),
            inbox: Mutex::new(usable.then_some(tx)),
            state: Mutex::new(state),
            next_id: AtomicU64::new(1),
            abort: CancellationToken::new(),
            label: Arc::new(Mutex::new(None)),
        });
        (member, rx)
    }

    /// The next id of a request to it.
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Sends its session a line; false when the session is gone.
    pub(crate) fn send(&self, line: String) -> bool {
        match self.inbox.lock().expect("lock").as_ref() {
            Some(tx) => tx.send(Message::Frame(Frame::Line(line))).is_ok(),
            None => false,
        }
    }

    /// Hands its session a request read already (it is not read again there); false when the
    /// session is gone.
    pub(crate) fn send_request(&self, call: Call) -> bool {
        match self.inbox.lock().expect("lock").as_ref() {
            Some(tx) => tx.send(Message::Request(Box::new(call))).is_ok(),
            None => false,
        }
    }

    /// Whether its session takes messages.
    pub(crate) fn open(&self) -> bool {
        self.inbox.lock().expect("lock").is_some()
    }

    /// Closes its session's input: it winds down as a session whose client closed its input.
    pub(crate) fn close_input(&self) {
        self.inbox.lock().expect("lock").take();
    }

    /// Why it cannot take a call now, if it cannot.
    pub(crate) fn unusable(&self) -> Option<String> {
        match &*self.state.lock().expect("lock") {
            State::Down(why) => Some(why.clone()),
            _ if !self.open() => Some("its session ended".to_string()),
            _ => None,
        }
    }

    /// Whether it is up and declared capability `cap` (`tools`, `prompts`, ...).
    pub(crate) fn declares(&self, cap: &str) -> bool {
        matches!(&*self.state.lock().expect("lock"), State::Up(caps) if caps.get(cap).is_some_and(|v| !v.is_null()))
    }

    /// Its state for status: `up`, `starting`, or `down: why`.
    pub(crate) fn shown(&self) -> Value {
        let (state, error) = match &*self.state.lock().expect("lock") {
            State::Starting => ("starting", None),
            State::Up(_) if self.open() => ("up", None),
            State::Up(_) => ("ended", None),
            State::Down(why) => ("down", Some(why.clone())),
        };
        serde_json::json!({
            "server": self.server,
            "prefix": self.prefix,
            "state": state,
            "error": error,
            "session": self.label.lock().expect("lock").clone(),
        })
    }
}

/// A member session's input: what the group sends it, until the group closes it (end of input)
/// or aborts it (the client is gone: its calls are cancelled at once).
pub(crate) struct Inbox {
    pub(crate) rx: mpsc::UnboundedReceiver<Message>,
    pub(crate) abort: CancellationToken,
}

impl Input for Inbox {
    async fn next(&mut self) -> std::io::Result<Option<Message>> {
        tokio::select! {
            biased;
            _ = self.abort.cancelled() => Err(std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "the group's client went away")),
            m = self.rx.recv() => Ok(m),
        }
    }
}

/// What a member session writes: each line goes to `to`, which routes it to the client. The
/// member's own backlog is given back at once: the client's outbox (the group's) is where a
/// client that stops reading is noticed.
pub(crate) struct Relay<F: Fn(Out) + Send + Sync + 'static> {
    pub(crate) to: F,
    /// Set to its session's label when it starts.
    pub(crate) label: Arc<Mutex<Option<String>>>,
}

impl<F: Fn(Out) + Send + Sync + 'static> Output for Relay<F> {
    async fn run(self, mut rx: mpsc::UnboundedReceiver<Out>, backlog: Arc<Backlog>, label: String) {
        *self.label.lock().expect("lock") = Some(label);
        while let Some(out) = rx.recv().await {
            backlog.wrote(out.line.len() + 1);
            (self.to)(out);
        }
    }
}
