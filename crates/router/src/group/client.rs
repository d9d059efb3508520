//! The client's messages as a group reads them: each line read as a session of one server
//! reads it ([`Incoming::read`]: `jsonrpc` "2.0", an id that is a string or an integer, no key
//! twice), each request admitted as it admits one ([`Call::admit`]: refused when its id is in
//! use by a request still open), its id kept as the text the client sent; a batch answered as
//! one array, each of its requests once; every answer to the client through
//! [`GroupSession::to_client`].

use std::collections::hash_map::Entry;
use std::sync::{Arc, Mutex};

use super::GroupSession;
use switchyard_core::call::{Call, Incoming};
use switchyard_core::codec;

/// A batch of the client's: the answers it has, and how many of its requests it waits for.
#[derive(Default)]
pub(super) struct Batch {
    answers: Vec<String>,
    owed: usize,
}

/// A request of the client's the group has not answered yet.
pub(super) struct Booked {
    /// The batch whose array its answer goes in, when it came in one (and is still owed).
    batch: Option<Arc<Mutex<Batch>>>,
    /// The client cancelled it while the group itself works on its answer (a list it merges,
    /// say): that answer is dropped when it comes, and only then is its id free, so that it is
    /// never taken for the answer to a later request under the same id.
    cancelled: bool,
}

/// The client's requests not answered yet, by raw id.
pub(super) type Open = std::collections::HashMap<String, Booked>;

impl GroupSession {
    /// One line of the client: a message, or a batch of them.
    pub(super) fn on_client_line(self: &Arc<Self>, line: String) {
        if line.trim().is_empty() {
            return;
        }
        if codec::is_batch(&line) {
            return self.on_batch(&line);
        }
        if let Some(call) = self.read(line) {
            self.on_request(call);
        }
    }

    /// A request of the client, its envelope read (by the HTTP front, or [`Self::read`]):
    /// booked as open until it is answered (or cancelled), then routed; refused as a member's
    /// session refuses it (the group would route by the last of two names while a client may
    /// show the first; two requests under one id could not be told apart).
    pub(super) fn on_request(self: &Arc<Self>, call: Call) {
        match call.admit(|id| book(&mut self.open.lock().expect("lock"), id, None)) {
            Ok(()) => self.request(call),
            Err(refused) => self.peer.send(refused.into_answer()),
        }
    }

    /// Reads one message: a request is handed back; the rest is acted on here (a notification
    /// or a response taken, a message that does not read answered or dropped).
    fn read(self: &Arc<Self>, line: String) -> Option<Call> {
        match Incoming::read(line) {
            Incoming::Request(call) => return Some(call),
            Incoming::Notification(line, env) => self.notification(line, &env),
            Incoming::Response(line, env) => self.answer(line, &env),
            Incoming::Refused(e) => self.peer.send(e.answer()),
            Incoming::Dropped(e) => {
                tracing::info!(session = %self.label, "dropped a notification from the client: {}", e.message())
            }
        }
        None
    }

    /// A JSON-RPC batch: each request routed as it would be alone, the answers sent together,
    /// as one array, once the last is in.
    fn on_batch(self: &Arc<Self>, line: &str) {
        let items = match codec::split_batch(line) {
            Ok(items) => items,
            Err(e) => return self.peer.send(e.answer()),
        };
        if items.is_empty() {
            let why = "Invalid Request: empty batch";
            return self.peer.send(codec::response_error("null", codec::INVALID_REQUEST, why, None));
        }
        // Read (its notifications and responses taken) before the batch is booked: a cancel
        // in it may settle another batch.
        let batch = Arc::new(Mutex::new(Batch::default()));
        let mut read = Vec::new();
        for item in items {
            match Incoming::read(item.to_string()) {
                Incoming::Request(call) => read.push(Ok(call)),
                Incoming::Refused(e) => read.push(Err(e.answer())),
                Incoming::Notification(line, env) => self.notification(line, &env),
                Incoming::Response(line, env) => self.answer(line, &env),
                Incoming::Dropped(e) => {
                    tracing::info!(session = %self.label, "dropped a notification from the client: {}", e.message())
                }
            }
        }
        let mut calls = Vec::new();
        {
            let mut open = self.open.lock().expect("lock");
            let mut b = batch.lock().expect("lock");
            for r in read {
                let admitted = r.and_then(|call| match call.admit(|id| book(&mut open, id, Some(&batch))) {
                    Ok(()) => Ok(call),
                    Err(refused) => Err(refused.into_answer()),
                });
                match admitted {
                    Ok(call) => {
                        b.owed += 1;
                        calls.push(call);
                    }
                    Err(answer) => b.answers.push(answer),
                }
            }
        }
        // Every request is booked before the first runs: the array goes when the last answers.
        for call in calls {
            self.request(call);
        }
        self.settle(&batch);
    }

    /// Sends the client the answer `line` to its open request `id` (raw): in its batch's array
    /// when it came in one. A request the client cancelled is owed nothing.
    pub(super) fn to_client(&self, id: &str, line: String) {
        let booked = self.open.lock().expect("lock").remove(id);
        match booked {
            Some(Booked { cancelled: false, batch: Some(batch) }) => {
                {
                    let mut b = batch.lock().expect("lock");
                    b.answers.push(line);
                    b.owed -= 1;
                }
                self.settle(&batch);
            }
            Some(Booked { cancelled: false, batch: None }) => self.peer.send(line),
            _ => {
                tracing::debug!(session = %self.label, "an answer to request {id}, which the client cancelled; dropped")
            }
        }
    }

    /// Whether the client cancelled its request `id` before the group sent it on (its booking
    /// is then settled: nothing will answer it).
    pub(super) fn cancelled_before_sent(&self, id: &str) -> bool {
        let mut open = self.open.lock().expect("lock");
        let cancelled = open.get(id).is_some_and(|b| b.cancelled);
        if cancelled {
            open.remove(id);
        }
        cancelled
    }

    /// The client cancelled its request `id`: no answer is owed for it, and when in a batch, the
    /// batch no longer waits for it. Its id is free at once when a member runs it (`forwarded`:
    /// the member's answer is dropped by id), else once the group's own work for it is done.
    pub(super) fn unowed(&self, id: &str, forwarded: bool) {
        let batch = {
            let mut open = self.open.lock().expect("lock");
            match forwarded {
                true => open.remove(id).and_then(|b| b.batch),
                false => open.get_mut(id).and_then(|b| {
                    b.cancelled = true;
                    b.batch.take()
                }),
            }
        };
        if let Some(batch) = batch {
            batch.lock().expect("lock").owed -= 1;
            self.settle(&batch);
        }
    }

    /// Sends `batch`'s array once it waits for nothing (none when it has no answer: a batch of
    /// notifications).
    fn settle(&self, batch: &Mutex<Batch>) {
        let mut b = batch.lock().expect("lock");
        if b.owed == 0 && !b.answers.is_empty() {
            let answers = std::mem::take(&mut b.answers);
            self.peer.send(format!("[{}]", answers.join(",")));
        }
    }
}

/// Books request `id` as open (in `batch`, when it came in one); false when an open request has
/// that id already.
fn book(open: &mut Open, id: &str, batch: Option<&Arc<Mutex<Batch>>>) -> bool {
    match open.entry(id.to_string()) {
        Entry::Occupied(_) => false,
        Entry::Vacant(v) => {
            v.insert(Booked { batch: batch.cloned(), cancelled: false });
            true
        }
    }
}
