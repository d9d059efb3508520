//! An in-memory transport for unit tests: records what is sent, and lets a test answer, lose a
//! request or end the link, with no process and no socket (so paused tokio time drives it).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::transport::{BoxFuture, Closed, Connector, Ended, Failure, Inbound, Lost, Outbound, Transport};
use super::{Events, Instance};
use switchyard_core::codec::Envelope;

/// What a fake server does with each message it is sent.
pub type Behaviour = Arc<dyn Fn(&Arc<FakeLink>, &Outbound) + Send + Sync>;

/// Answers every request with an empty result, at once.
pub fn answer_all() -> Behaviour {
    Arc::new(|link, msg| {
        if let Some(id) = msg.request {
            link.reply(&format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#));
        }
    })
}

/// Opens `FakeLink`s; keeps every one so a test can reach them.
pub struct FakeConnector {
    behaviour: Behaviour,
    pub links: Mutex<Vec<Arc<FakeLink>>>,
    /// When set, connects fail with this reason.
    pub refuse: Mutex<Option<String>>,
    /// How long a connect takes (a cold start).
    pub delay: Duration,
}

impl FakeConnector {
    pub fn new(behaviour: Behaviour) -> Arc<FakeConnector> {
        Arc::new(FakeConnector {
            behaviour,
            links: Mutex::new(Vec::new()),
            refuse: Mutex::new(None),
            delay: Duration::ZERO,
        })
    }

    /// A connector whose connects take `delay` (a server slow to start).
    pub fn slow(behaviour: Behaviour, delay: Duration) -> Arc<FakeConnector> {
        Arc::new(FakeConnector { behaviour, links: Mutex::new(Vec::new()), refuse: Mutex::new(None), delay })
    }

    pub fn link(&self, n: usize) -> Arc<FakeLink> {
        self.links.lock().unwrap()[n].clone()
    }
}

impl Connector for FakeConnector {
    fn connect(
        &self,
        _label: &str,
        inbound: Arc<dyn Inbound>,
    ) -> BoxFuture<'static, Result<Arc<dyn Transport>, Failure>> {
        let refused = self.refuse.lock().unwrap().clone();
        let link = Arc::new(FakeLink {
            inbound: Mutex::new(Some(inbound)),
            sent: Mutex::new(Vec::new()),
            abandoned: Mutex::new(Vec::new()),
            behaviour: self.behaviour.clone(),
            silent_since: Mutex::new(None),
        });
        if refused.is_none() {
            self.links.lock().unwrap().push(link.clone());
        }
        let delay = self.delay;
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            match refused {
                Some(reason) => Err(Failure { reason, transient: true }),
                None => Ok(Arc::new(FakeTransport(link)) as Arc<dyn Transport>),
            }
        })
    }

    fn describe(&self) -> String {
        "a fake server".into()
    }
}

/// The server's side of one fake connection.
pub struct FakeLink {
    inbound: Mutex<Option<Arc<dyn Inbound>>>,
    pub sent: Mutex<Vec<Outbound>>,
    pub abandoned: Mutex<Vec<u64>>,
    behaviour: Behaviour,
    /// Set: the link says every request has had nothing from it since then (a remote link's
    /// liveness watch); unset: it does not watch.
    pub silent_since: Mutex<Option<tokio::time::Instant>>,
}

impl FakeLink {
    fn inbound(&self) -> Option<Arc<dyn Inbound>> {
        self.inbound.lock().unwrap().clone()
    }
    /// The server sends a message.
    pub fn reply(&self, line: &str) {
        if let Some(i) = self.inbound() {
            i.message(line.to_string());
        }
    }
    pub fn lose(&self, id: u64, lost: Lost) {
        if let Some(i) = self.inbound() {
            i.lost(id, lost);
        }
    }
    pub fn renew(&self) {
        if let Some(i) = self.inbound() {
            i.renewed();
        }
    }
    /// The link ends (reported once; later calls do nothing).
    pub fn end(&self, status: &str) {
        self.end_quiet(status, Duration::ZERO);
    }
    /// The link is ended after it carried nothing for `quiet_for` (a silent link found dead).
    pub fn end_quiet(&self, status: &str, quiet_for: Duration) {
        if let Some(i) = self.inbound.lock().unwrap().take() {
            i.ended(Ended { status: status.to_string(), stderr: vec!["last words".into()], quiet_for });
        }
    }
    pub fn is_ended(&self) -> bool {
        self.inbound.lock().unwrap().is_none()
    }
    /// The lines sent so far.
    pub fn lines(&self) -> Vec<String> {
        self.sent.lock().unwrap().iter().map(|m| m.line.clone()).collect()
    }
}

struct FakeTransport(Arc<FakeLink>);

impl Transport for FakeTransport {
    fn send(&self, msg: Outbound) -> Result<(), Closed> {
        if self.0.is_ended() {
            return Err(Closed);
        }
        self.0.sent.lock().unwrap().push(msg.clone());
        (self.0.behaviour)(&self.0, &msg);
        Ok(())
    }
    fn abandon(&self, id: u64) {
        self.0.abandoned.lock().unwrap().push(id);
    }
    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move { self.0.end("closed") })
    }
    fn kill(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move { self.0.end("killed") })
    }
    fn endpoint(&self) -> String {
        "fake".into()
    }
    fn silent_for(&self, _id: u64) -> Option<Duration> {
        let since = (*self.0.silent_since.lock().unwrap())?;
        Some(tokio::time::Instant::now().saturating_duration_since(since))
    }
}

/// Events that are only counted.
#[derive(Default)]
pub struct CountEvents {
    pub requests: AtomicU64,
    pub notifications: AtomicU64,
    /// How often an instance was said to answer one request at a time.
    pub one_at_a_time: AtomicU64,
}

impl Events for CountEvents {
    fn server_request(self: Arc<Self>, _from: &Arc<Instance>, _line: String, _env: Envelope) {
        self.requests.fetch_add(1, Ordering::SeqCst);
    }
    fn server_notification(self: Arc<Self>, _from: &Arc<Instance>, _line: String, _env: Envelope) {
        self.notifications.fetch_add(1, Ordering::SeqCst);
    }
    fn linger(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn answers_one_at_a_time(&self, _from: &Instance, _waited: Duration) {
        self.one_at_a_time.fetch_add(1, Ordering::SeqCst);
    }
}
