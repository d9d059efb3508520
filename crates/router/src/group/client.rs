//! The client's messages as a group reads them: each envelope read by the codec, as a session
//! of one server reads it (`jsonrpc` "2.0", an id that is a string or a number, no key twice),
//! its id kept as the text the client sent; a batch answered as one array, each of its requests
//! once; every answer to the client through [`GroupSession::to_client`].

use std::sync::{Arc, Mutex};

use super::GroupSession;
use switchyard_core::call::Call;
use switchyard_core::codec::{self, Kind};

/// A batch of the client's: the answers it has, and how many of its requests it waits for.
#[derive(Default)]
pub(super) struct Batch {
    answers: Vec<String>,
    owed: usize,
}

/// What one message of the client comes to before it is acted on.
enum Read {
    Request(Box<Call>),
    /// Answered at once (it was no valid message).
    Reply(String),
    /// A notification or a response, taken.
    Done,
}

impl GroupSession {
    /// One line of the client: a message, or a batch of them.
    pub(super) fn on_client_line(self: &Arc<Self>, line: String) {
        if line.trim().is_empty() {
            return;
        }
        if codec::is_batch(&line) {
            return self.on_batch(&line);
        }
        match self.read(line) {
            Read::Request(call) => self.on_request(*call),
            Read::Reply(r) => self.peer.send(r),
            Read::Done => {}
        }
    }

    /// A request of the client, its envelope read (by the HTTP front, or [`Self::read`]).
    pub(super) fn on_request(self: &Arc<Self>, call: Call) {
        // Refused as a member's session refuses it: the group would route by the last of two
        // names while a client may show the first.
        match call.unread_answer() {
            Some(answer) => self.to_client(call.id(), answer),
            None => self.request(call),
        }
    }

    /// Reads one message; notifications and responses are acted on here.
    fn read(self: &Arc<Self>, line: String) -> Read {
        let env = match codec::parse(&line) {
            Ok(env) => env,
            Err(e @ codec::ParseError::BadNotification { .. }) => {
                tracing::info!(session = %self.label, "dropped a notification from the client: {}", e.message());
                return Read::Done;
            }
            Err(e) => return Read::Reply(codec::response_error(e.reply_id(), e.code(), &e.message(), None)),
        };
        match env.kind {
            Kind::Request => Read::Request(Box::new(Call::read(line, env))),
            Kind::Notification => {
                self.notification(line, &env);
                Read::Done
            }
            Kind::Response => {
                self.answer(line, &env);
                Read::Done
            }
        }
    }

    /// A JSON-RPC batch: each request routed as it would be alone, the answers sent together,
    /// as one array, once the last is in.
    fn on_batch(self: &Arc<Self>, line: &str) {
        let items = match codec::split_batch(line) {
            Ok(items) => items,
            Err(e) => return self.peer.send(codec::response_error("null", e.code(), &e.message(), None)),
        };
        if items.is_empty() {
            let why = "Invalid Request: empty batch";
            return self.peer.send(codec::response_error("null", codec::INVALID_REQUEST, why, None));
        }
        // Read (its notifications and responses taken) before the batch is booked: a cancel
        // in it may settle another batch.
        let read: Vec<Read> = items.into_iter().map(|item| self.read(item.to_string())).collect();
        let batch = Arc::new(Mutex::new(Batch::default()));
        let mut calls = Vec::new();
        {
            let mut batches = self.batches.lock().expect("lock");
            let mut b = batch.lock().expect("lock");
            for r in read {
                match r {
                    Read::Request(call) => {
                        let id = call.id().to_string();
                        let busy = batches.contains_key(&id) || self.routes.lock().expect("lock").in_flight(&id);
                        if busy {
                            let why =
                                format!("Invalid Request: id {id} is already in use by a request still in flight");
                            b.answers.push(codec::response_error(&id, codec::INVALID_REQUEST, &why, None));
                            continue;
                        }
                        batches.insert(id, batch.clone());
                        b.owed += 1;
                        calls.push(*call);
                    }
                    Read::Reply(r) => b.answers.push(r),
                    Read::Done => {}
                }
            }
        }
        // Every request is booked before the first runs: the array goes when the last answers.
        for call in calls {
            self.on_request(call);
        }
        self.settle(&batch);
    }

    /// Sends the client the answer `line` to its request `id` (raw): in its batch's array when
    /// it came in one.
    pub(super) fn to_client(&self, id: &str, line: String) {
        let batch = self.batches.lock().expect("lock").remove(id);
        match batch {
            Some(batch) => {
                {
                    let mut b = batch.lock().expect("lock");
                    b.answers.push(line);
                    b.owed -= 1;
                }
                self.settle(&batch);
            }
            None => self.peer.send(line),
        }
    }

    /// The client cancelled its request `id`: when in a batch, the batch no longer waits for it.
    pub(super) fn unowed(&self, id: &str) {
        let batch = self.batches.lock().expect("lock").remove(id);
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
