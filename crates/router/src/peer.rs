//! One client session as servers see it: output queue, messages held until it initialised, its requests, log level.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::upstream::Instance;
use switchyard_core::decision::{Caller, Transport};
use switchyard_core::ids::SessionId;
use switchyard_policy::Kind;
use switchyard_policy::annotate::ClientView;

pub(crate) mod lenient;

/// One message for the client; `related`: the raw id of the client's request it is about, when
/// the message itself does not name it (a notice about the request), so a transport with a
/// stream per request (HTTP) can put it there. Byte streams ignore it.
pub struct Out {
    pub line: String,
    pub related: Option<String>,
}

/// What the hub knows of one client session.
pub struct ClientPeer {
    pub id: SessionId,
    /// Lines to the client. Unbounded so one slow client cannot stall an instance's reader
    /// (and with it every other session's replies); `backlog` bounds it instead.
    out: mpsc::UnboundedSender<Out>,
    /// What is queued for the client and not yet written (shared with the writer, which must
    /// not hold the link itself: the channel closes when the last link goes).
    backlog: Arc<Backlog>,
    /// Fired when the queue overflows: the session ends (its calls are cancelled).
    pub overflow: tokio_util::sync::CancellationToken,
    /// Requests and notifications from servers wait here until the client has finished its
    /// initialisation (`None` from then on). switchyard initialises a server once, on the
    /// first client's behalf, so the server may call back (roots/list, say) before this client
    /// has even seen its initialize result; MCP lets a server do that only after `initialized`.
    held: Mutex<Option<Vec<String>>>,
    /// Requests from a server to this client, by the id this session sees: (instance, server's id).
    pub(crate) outbound: Mutex<HashMap<u64, (Weak<Instance>, String)>>,
    pub(crate) next_out: AtomicU64,
    /// The level this client asked for with logging/setLevel (RFC 5424 severity, 7 = debug).
    pub(crate) log_level: Mutex<Option<u8>>,
    /// The `capabilities` the client declared in its initialize (`None`: it sent none yet, as a
    /// 2026-07-28 client never does). MCP lets a server ask a client only for what it declared.
    capabilities: Mutex<Option<serde_json::Value>>,
    /// `clientInfo` of its initialize, as `name version` (for status).
    client: Mutex<Option<String>>,
    /// Calls of this session waiting for the gate or a pool now.
    waiting: std::sync::atomic::AtomicUsize,
    /// Who the client is, as the policy is told (its transport and directory from the start,
    /// its name, version and era from its initialize).
    caller: Mutex<Caller>,
    /// Per server and kind (tools, prompts): the renames in the last list of it this client
    /// was shown.
    tool_views: Mutex<HashMap<(String, Kind), Arc<ClientView>>>,
    /// Per server: the tool list this client was last shown, as switchyard shaped it (its
    /// budget, search mode): a list_changed reaches it only when this changes.
    shown_tools: Mutex<HashMap<String, Arc<ShownTools>>>,
    /// When this session is a member of a group session: the group's name and what the group
    /// puts before this server's tool names (from [`crate::budget::GROUP_META`] in its
    /// initialize), so its budget counts the names as the group's client sees them.
    in_group: Mutex<Option<(String, String)>>,
}

/// The tool list of one server as a client was last shown it (see `server::shaped`).
#[derive(Default)]
pub struct ShownTools {
    /// The digest of the whole list shown (None: only pages of it were).
    pub digest: Option<[u8; 32]>,
    /// Names shortened for the client's budget: shown -> the name before.
    pub renamed: std::collections::BTreeMap<String, String>,
    /// Search mode: the tools `search_tools` searches, once fetched.
    pub index: Option<Arc<crate::search::Index>>,
    /// Search mode: the tools searches found that joined the client's list (by name).
    pub added: std::collections::BTreeSet<String>,
}

/// Counts a call as waiting while it lives.
pub struct WaitingCall<'a>(&'a ClientPeer);

impl Drop for WaitingCall<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

impl crate::upstream::ProgressSink for ClientPeer {
    fn progress(&self, line: String) {
        self.send(line);
    }
}

impl ClientPeer {
    pub fn new(
        id: SessionId,
        out: mpsc::UnboundedSender<Out>,
        queue_limit: usize,
        buffered: Arc<Buffered>,
    ) -> Arc<ClientPeer> {
        let backlog = Arc::new(Backlog::new(queue_limit, buffered.clone()));
        let overflow = tokio_util::sync::CancellationToken::new();
        buffered.join(id, &backlog, &overflow);
        Arc::new(ClientPeer {
            id,
            out,
            backlog,
            overflow,
            held: Mutex::new(Some(Vec::new())),
            outbound: Mutex::new(HashMap::new()),
            next_out: AtomicU64::new(1),
            log_level: Mutex::new(None),
            capabilities: Mutex::new(None),
            client: Mutex::new(None),
            waiting: Default::default(),
            caller: Mutex::new(Caller::default()),
            tool_views: Mutex::new(HashMap::new()),
            shown_tools: Mutex::new(HashMap::new()),
            in_group: Mutex::new(None),
        })
    }

    /// Notes what carries the session, the project directory its client runs in, and the
    /// name of the HTTP front's named token that serves it.
    pub fn set_origin(&self, transport: Transport, dir: Option<String>, token: Option<String>) {
        let mut caller = self.caller.lock().expect("lock");
        caller.transport = transport;
        caller.dir = dir.map(Into::into);
        caller.token = token.map(Into::into);
    }

    /// Who the client is, as far as known (the policy's `client`); its texts are shared, not copied.
    pub fn caller(&self) -> Caller {
        self.caller.lock().expect("lock").clone()
    }

    /// Adds the renames of the list of `kind` (or page of one) of `server` this client was just
    /// shown to those of its earlier lists. One that no longer holds is harmless: a call is
    /// checked against what the chain shows the client now.
    pub fn set_tool_view(&self, server: &str, kind: Kind, view: ClientView) {
        let mut views = self.tool_views.lock().expect("lock");
        let kept = views.entry((server.to_string(), kind)).or_default();
        if view.renamed.iter().all(|(shown, original)| kept.renamed.get(shown) == Some(original))
            && view.unrenamed.is_subset(&kept.unrenamed)
        {
            return;
        }
        let mut merged = ClientView::clone(kept);
        merged.renamed.extend(view.renamed);
        merged.unrenamed.extend(view.unrenamed);
        *kept = Arc::new(merged);
    }

    /// The renames of the last list of `kind` of `server` this client was shown.
    pub fn tool_view(&self, server: &str, kind: Kind) -> Option<Arc<ClientView>> {
        self.tool_views.lock().expect("lock").get(&(server.to_string(), kind)).cloned()
    }

    /// The group this session is a member of, and the prefix its tools are shown with there.
    pub fn in_group(&self) -> Option<(String, String)> {
        self.in_group.lock().expect("lock").clone()
    }

    /// The tool list of `server` this client was last shown, as switchyard shaped it.
    pub fn shown_tools(&self, server: &str) -> Option<Arc<ShownTools>> {
        self.shown_tools.lock().expect("lock").get(server).cloned()
    }

    /// Records the tool list of `server` this client is shown now.
    pub fn set_shown_tools(&self, server: &str, shown: ShownTools) {
        self.shown_tools.lock().expect("lock").insert(server.to_string(), Arc::new(shown));
    }

    /// Records the capabilities in this client's initialize params (none declared when absent).
    /// A string in them that is not valid Unicode is read lossily and costs no other field.
    pub fn declare_capabilities(&self, initialize_params: &str) {
        let mut params = lenient::parse(initialize_params);
        let declared = params
            .as_mut()
            .and_then(|v| v.get_mut("capabilities").map(serde_json::Value::take))
            .unwrap_or_else(|| serde_json::json!({}));
        *self.capabilities.lock().expect("lock") = Some(declared);
        let group = params.as_ref().and_then(|p| p.get("_meta")?.get(crate::budget::GROUP_META));
        if let Some(g) = group {
            let text = |k: &str| g.get(k).and_then(|v| v.as_str()).unwrap_or_default().to_string();
            *self.in_group.lock().expect("lock") = Some((text("group"), text("prefix")));
        }
        let info = params.as_ref().and_then(|p| p.get("clientInfo"));
        let part = |k: &str| {
            info.and_then(|i| i.get(k)).and_then(|v| v.as_str()).map(|s| s.chars().take(80).collect::<String>())
        };
        {
            let mut caller = self.caller.lock().expect("lock");
            let full = |k: &str| info.and_then(|i| i.get(k)).and_then(|v| v.as_str()).map(Arc::from);
            caller.name = full("name");
            caller.version = full("version");
            if let Some(v) = params.as_ref().and_then(|p| p.get("protocolVersion")).and_then(|v| v.as_str()) {
                caller.era = v.into();
            }
        }
        if let Some(name) = part("name") {
            let client = match part("version") {
                Some(v) => format!("{name} {v}"),
                None => name,
            };
            *self.client.lock().expect("lock") = Some(client);
        }
    }

    /// The client's name and version from its initialize, if it gave them.
    pub fn client(&self) -> Option<String> {
        self.client.lock().expect("lock").clone()
    }

    /// Calls of this session waiting for the gate or a pool now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Counts a call as waiting until the returned guard is dropped.
    pub fn wait_begins(&self) -> WaitingCall<'_> {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        WaitingCall(self)
    }

    /// The capability a server-to-client request needs that this client did not declare.
    /// Unknown (no initialize seen) counts as declared: switchyard refuses only what it knows.
    pub(crate) fn lacks_capability_for(&self, method: &str) -> Option<&'static str> {
        let needed = match method {
            "sampling/createMessage" => "sampling",
            "elicitation/create" => "elicitation",
            "roots/list" => "roots",
            _ => return None,
        };
        let caps = self.capabilities.lock().expect("lock");
        let declared = caps.as_ref().is_none_or(|c| c.get(needed).is_some_and(|v| !v.is_null()));
        (!declared).then_some(needed)
    }

    pub fn send(&self, line: String) {
        self.send_out(line, None);
    }

    /// A message about the client's request `id` (its raw id) that does not name it.
    pub fn send_for(&self, id: &str, line: String) {
        self.send_out(line, Some(id.to_string()));
    }

    fn send_out(&self, line: String, related: Option<String>) {
        if self.overflow.is_cancelled() {
            return;
        }
        match self.backlog.add(line.len() + 1) {
            Over::No => {}
            Over::Began(run) => {
                // Over the limit from now: while it stays so, the client must keep reading.
                let (backlog, overflow, id) = (self.backlog.clone(), self.overflow.clone(), self.id);
                tokio::spawn(async move {
                    let mut seen = backlog.written();
                    loop {
                        tokio::time::sleep(BACKLOG_STALL).await;
                        if !backlog.still_over(run) {
                            return;
                        }
                        let now = backlog.written();
                        if now == seen {
                            tracing::warn!(
                                session = id,
                                "the client is not reading its messages: more than {} bytes wait for it and it took none for {} s; closing its session",
                                backlog.limit,
                                BACKLOG_STALL.as_secs()
                            );
                            overflow.cancel();
                            return;
                        }
                        seen = now;
                    }
                });
            }
            Over::Far => {
                tracing::warn!(
                    session = self.id,
                    "the client is not reading its messages fast enough: more than {} bytes wait for it; closing its session",
                    self.backlog.limit * BACKLOG_CAP
                );
                self.overflow.cancel();
                return;
            }
            Over::Budget => {
                // Sessions furthest behind are closed until what the rest hold fits the budget;
                // when this one is among them its line goes nowhere.
                if self.backlog.shared.shed().contains(&self.id) {
                    return;
                }
            }
        }
        let _ = self.out.send(Out { line, related });
    }

    /// A request or notification that a server started: held until the client is initialised.
    pub fn send_from_server(&self, line: String) {
        {
            let mut held = self.held.lock().expect("lock");
            if let Some(queue) = held.as_mut() {
                if queue.len() < HELD_MAX {
                    queue.push(line);
                } else {
                    tracing::warn!(
                        session = self.id,
                        "dropped a server message: the client has not finished initialising"
                    );
                }
                return;
            }
        }
        self.send(line);
    }

    /// The client finished initialising: what servers sent meanwhile goes out, in order.
    pub fn open(&self) {
        let held = self.held.lock().expect("lock").take();
        for line in held.into_iter().flatten() {
            self.send(line);
        }
    }

    /// Takes this session's pending requests from `inst` (only the one the server knows as
    /// `upstream_id`, when given) and returns the ids this session knows them by.
    pub(crate) fn take_outbound(&self, inst: &Instance, upstream_id: Option<&str>) -> Vec<u64> {
        let mut out = self.outbound.lock().expect("lock");
        let ids: Vec<u64> = out
            .iter()
            .filter(|(_, (w, id))| std::ptr::eq(w.as_ptr(), inst) && upstream_id.is_none_or(|u| u == id))
            .map(|(n, _)| *n)
            .collect();
        for n in &ids {
            out.remove(n);
        }
        ids
    }

    /// The backlog the writer lowers as it writes queued output to the client.
    pub fn backlog(&self) -> Arc<Backlog> {
        self.backlog.clone()
    }
}

/// How long a client whose output is over its limit may take nothing before it is taken to
/// have stopped reading. A client that reads takes something well within this.
pub const BACKLOG_STALL: Duration = Duration::from_secs(5);
/// Past this many times its limit, a backlog closes the session at once, even if the client
/// still reads: a slow reader must not let a fast server fill memory.
const BACKLOG_CAP: usize = 16;

/// Output queued for one client. Memory is bounded by what the client fails to read over time,
/// not by the size of one answer: over `limit`, the session is closed when the client takes
/// nothing for `BACKLOG_STALL`, or when the backlog reaches `BACKLOG_CAP` times the limit.
pub struct Backlog {
    limit: usize,
    queued: std::sync::atomic::AtomicUsize,
    /// The most that was ever queued (whether memory is worth giving back when it goes).
    peak: std::sync::atomic::AtomicUsize,
    /// What all sessions hold together.
    shared: Arc<Buffered>,
    /// Bytes written to the client so far (progress, for the stall check).
    written: AtomicU64,
    /// The current run of being over `limit` (None: under it), numbered so a check of an earlier
    /// run never closes the session for a later one.
    over: Mutex<Option<u64>>,
    runs: AtomicU64,
}

/// What one more line did to a backlog.
enum Over {
    No,
    /// It went over the limit (this run of being over).
    Began(u64),
    /// It went past the hard cap.
    Far,
    /// All sessions together hold more than the budget.
    Budget,
}

/// Output queued for every client of the process together, against `limits.max_buffered_bytes`:
/// each session's own bound still lets many slow clients add up to too much.
pub struct Buffered {
    /// `limits.max_buffered_bytes`; the smallest one given when servers set different ones.
    budget: std::sync::atomic::AtomicUsize,
    total: std::sync::atomic::AtomicUsize,
    /// Every session's backlog and the token that closes the session, to close the ones
    /// furthest behind when the total is over the budget.
    members: Mutex<Vec<Member>>,
}

struct Member {
    id: SessionId,
    backlog: Weak<Backlog>,
    overflow: tokio_util::sync::CancellationToken,
}

impl Buffered {
    pub fn new(budget: usize) -> Arc<Buffered> {
        Arc::new(Buffered { budget: budget.into(), total: Default::default(), members: Mutex::new(Vec::new()) })
    }

    /// Bytes queued for all clients now.
    pub fn total(&self) -> usize {
        self.total.load(Ordering::Acquire)
    }

    /// The budget all sessions share.
    pub fn budget(&self) -> usize {
        self.budget.load(Ordering::Relaxed)
    }

    /// A server that sets a smaller budget lowers it for all: it is one bound on the process.
    pub fn lower_budget(&self, budget: usize) {
        self.budget.fetch_min(budget, Ordering::Relaxed);
    }

    fn join(&self, id: SessionId, backlog: &Arc<Backlog>, overflow: &tokio_util::sync::CancellationToken) {
        let mut m = self.members.lock().expect("lock");
        m.retain(|m| m.backlog.strong_count() > 0);
        m.push(Member { id, backlog: Arc::downgrade(backlog), overflow: overflow.clone() });
    }

    /// All sessions together hold more than the budget: closes the sessions furthest behind
    /// until what the others hold fits it (sessions already closing count as gone). Returns
    /// the sessions it closed.
    fn shed(&self) -> Vec<SessionId> {
        let budget = self.budget();
        let mut m = self.members.lock().expect("lock");
        m.retain(|m| m.backlog.strong_count() > 0);
        let mut open: Vec<(usize, &Member)> = m
            .iter()
            .filter(|m| !m.overflow.is_cancelled())
            .filter_map(|m| m.backlog.upgrade().map(|b| (b.queued(), m)))
            .collect();
        let mut held: usize = open.iter().map(|(q, _)| q).sum();
        open.sort_by_key(|m| std::cmp::Reverse(m.0));
        let mut closed = Vec::new();
        for (queued, member) in open {
            if held <= budget || queued == 0 {
                break;
            }
            tracing::warn!(
                session = member.id,
                "switchyard holds {held} bytes of output for its clients, more than limits.max_buffered_bytes ({budget}); closing this session, the furthest behind ({queued} bytes unread)"
            );
            member.overflow.cancel();
            held -= queued;
            closed.push(member.id);
        }
        closed
    }
}

/// Backlogs at least this large leave enough freed memory behind to be worth returning.
pub const GIVE_BACK_AFTER: usize = 4 * 1024 * 1024;

/// Returns freed heap memory to the system. glibc keeps what a large backlog freed (hundreds of
/// MiB after a few clients stopped reading) for reuse; a long-lived router should not.
#[allow(unsafe_code)]
pub fn give_back_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks and trims the allocator's own free lists; it takes no
    // pointers and is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

impl Backlog {
    fn new(limit: usize, shared: Arc<Buffered>) -> Backlog {
        Backlog {
            limit,
            queued: Default::default(),
            peak: Default::default(),
            shared,
            written: AtomicU64::new(0),
            over: Mutex::new(None),
            runs: AtomicU64::new(0),
        }
    }

    fn add(&self, bytes: usize) -> Over {
        let queued = self.queued.fetch_add(bytes, Ordering::AcqRel) + bytes;
        let total = self.shared.total.fetch_add(bytes, Ordering::AcqRel) + bytes;
        self.peak.fetch_max(queued, Ordering::Relaxed);
        if total > self.shared.budget() {
            return Over::Budget;
        }
        if queued <= self.limit {
            return Over::No;
        }
        if queued > self.limit.saturating_mul(BACKLOG_CAP) {
            return Over::Far;
        }
        let mut over = self.over.lock().expect("lock");
        if over.is_some() {
            return Over::No;
        }
        let run = self.runs.fetch_add(1, Ordering::Relaxed);
        *over = Some(run);
        Over::Began(run)
    }

    fn written(&self) -> u64 {
        self.written.load(Ordering::Acquire)
    }

    fn still_over(&self, run: u64) -> bool {
        *self.over.lock().expect("lock") == Some(run)
    }

    /// The most that was ever queued for this client.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// The writer wrote `bytes` to the client.
    /// Bytes queued for the client now.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// Bytes queued past which the client counts as behind.
    pub fn limit(&self) -> usize {
        self.limit
    }

    pub fn wrote(&self, bytes: usize) {
        self.written.fetch_add(bytes as u64, Ordering::AcqRel);
        self.shared.total.fetch_sub(bytes, Ordering::AcqRel);
        let queued = self.queued.fetch_sub(bytes, Ordering::AcqRel) - bytes;
        if queued <= self.limit {
            self.over.lock().expect("lock").take();
        }
    }
}

impl Drop for Backlog {
    /// What was never written leaves the shared total with the session.
    fn drop(&mut self) {
        self.shared.total.fetch_sub(*self.queued.get_mut(), Ordering::AcqRel);
    }
}

/// Server messages held for a client that has not finished initialising, at most.
const HELD_MAX: usize = 1024;

/// MCP logging levels, most verbose first; index = how verbose (0 = emergency ... 7 = debug).
pub(crate) const LEVELS: [&str; 8] = ["emergency", "alert", "critical", "error", "warning", "notice", "info", "debug"];

pub fn level_rank(level: &str) -> Option<u8> {
    LEVELS.iter().position(|l| *l == level).map(|i| i as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_large_answer_to_a_reading_client_passes_and_a_client_that_stops_reading_is_closed() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let link = ClientPeer::new(1, tx, 1000, Buffered::new(usize::MAX));
        let backlog = link.backlog();
        // One answer four times the limit, read slowly (a tenth every second): never closed.
        link.send("x".repeat(4000));
        let l = rx.try_recv().unwrap().line;
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            backlog.wrote((l.len() + 1) / 10);
        }
        backlog.wrote((l.len() + 1) % 10);
        tokio::time::sleep(BACKLOG_STALL * 2).await;
        assert!(!link.overflow.is_cancelled(), "a large answer to a client that reads is not a stall");
        // Then it reads nothing more: once it took nothing for BACKLOG_STALL, its session closes.
        link.send("y".repeat(4000));
        tokio::time::sleep(BACKLOG_STALL - Duration::from_secs(1)).await;
        link.send("z".repeat(10));
        assert!(!link.overflow.is_cancelled(), "not stalled long enough yet");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(link.overflow.is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn a_reader_slower_than_its_server_is_closed_at_the_cap() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let link = ClientPeer::new(1, tx, 1000, Buffered::new(usize::MAX));
        for _ in 0..15 {
            link.send("x".repeat(999));
        }
        assert!(!link.overflow.is_cancelled());
        link.send("x".repeat(2000));
        assert!(link.overflow.is_cancelled(), "past BACKLOG_CAP times the limit");
    }

    #[test]
    fn the_policy_is_told_the_client_its_transport_dir_and_era() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let link = ClientPeer::new(1, tx, 1000, Buffered::new(usize::MAX));
        link.set_origin(Transport::Socket, Some("/work/p".into()), None);
        link.declare_capabilities(
            r#"{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"cursor","version":"1.7.2"}}"#,
        );
        let c = link.caller();
        assert_eq!((c.name.as_deref(), c.version.as_deref()), (Some("cursor"), Some("1.7.2")));
        assert_eq!((c.transport, c.dir.as_deref(), &*c.era), (Transport::Socket, Some("/work/p"), "2025-11-25"));
    }

    #[test]
    fn a_client_name_that_is_not_valid_unicode_keeps_its_version_and_era() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let link = ClientPeer::new(1, tx, 1000, Buffered::new(usize::MAX));
        link.declare_capabilities(
            r#"{"protocolVersion":"2025-11-25","capabilities":{"sampling":{}},"clientInfo":{"name":"\ud800x","version":"1.7.2"}}"#,
        );
        let c = link.caller();
        assert_eq!((c.name.as_deref(), c.version.as_deref()), (Some("\u{fffd}x"), Some("1.7.2")));
        assert_eq!(&*c.era, "2025-11-25");
        assert_eq!(link.lacks_capability_for("sampling/createMessage"), None, "its capabilities are read too");
    }

    #[test]
    fn the_renames_of_every_page_of_a_tools_list_add_up_per_server() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let link = ClientPeer::new(1, tx, 1000, Buffered::new(usize::MAX));
        let view = |shown: &str, original: &str| ClientView {
            renamed: [(shown.into(), original.into())].into(),
            ..Default::default()
        };
        link.set_tool_view("fs", Kind::Tool, view("cat", "read_file"));
        link.set_tool_view("fs", Kind::Tool, view("put", "write_file"));
        let fs = link.tool_view("fs", Kind::Tool).unwrap();
        assert_eq!(fs.renamed.get("cat").map(String::as_str), Some("read_file"));
        assert_eq!(fs.renamed.get("put").map(String::as_str), Some("write_file"));
        assert!(link.tool_view("github", Kind::Tool).is_none(), "renames are per server");
        assert!(link.tool_view("fs", Kind::Prompt).is_none(), "and per kind");
    }

    #[test]
    fn a_client_is_asked_only_for_what_it_declared() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let link = ClientPeer::new(1, tx, 1000, Buffered::new(usize::MAX));
        // Before any initialize nothing is known, so nothing is refused.
        assert_eq!(link.lacks_capability_for("sampling/createMessage"), None);
        link.declare_capabilities(r#"{"capabilities":{"sampling":{},"roots":null},"clientInfo":{}}"#);
        assert_eq!(link.lacks_capability_for("sampling/createMessage"), None);
        assert_eq!(link.lacks_capability_for("elicitation/create"), Some("elicitation"));
        assert_eq!(link.lacks_capability_for("roots/list"), Some("roots"));
        assert_eq!(link.lacks_capability_for("ping"), None);
        // No capabilities at all: none declared.
        link.declare_capabilities(r#"{"protocolVersion":"2025-06-18"}"#);
        assert_eq!(link.lacks_capability_for("sampling/createMessage"), Some("sampling"));
    }

    #[test]
    fn levels_rank_from_emergency_to_debug() {
        assert_eq!(level_rank("emergency"), Some(0));
        assert_eq!(level_rank("warning"), Some(4));
        assert_eq!(level_rank("debug"), Some(7));
        assert_eq!(level_rank("loud"), None);
    }

    #[test]
    fn the_budget_closes_the_sessions_furthest_behind_even_within_their_own_limits() {
        let budget = Buffered::new(10_000);
        let (tx, _rx) = mpsc::unbounded_channel();
        // Each may fall 8,000 bytes behind on its own; three together may hold 10,000.
        let links: Vec<_> = (1..=3).map(|id| ClientPeer::new(id, tx.clone(), 8_000, budget.clone())).collect();
        links[0].send("a".repeat(2_999));
        links[1].send("b".repeat(4_999));
        links[2].send("c".repeat(1_999));
        assert!(links.iter().all(|l| !l.overflow.is_cancelled()), "9,000 bytes: within the budget");
        links[2].send("c".repeat(1_999));
        // 11,000 held: the one furthest behind goes, and only it.
        assert!(links[1].overflow.is_cancelled());
        assert!(!links[0].overflow.is_cancelled() && !links[2].overflow.is_cancelled());
        // Its bytes count as gone: the next line over nothing new closes no one else.
        links[0].send("a".repeat(9));
        assert!(!links[0].overflow.is_cancelled() && !links[2].overflow.is_cancelled());
    }
}
