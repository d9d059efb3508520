//! A group session: one client (`switchyard connect --group NAME`, the HTTP front's
//! `/groups/NAME/mcp`) served as one MCP server that carries the tools, prompts and resources
//! of every server of a `[groups.NAME]` (or of all servers: the group `all`).
//!
//! Each member is an ordinary session of its server ([`member`]), opened in memory exactly as
//! `connect NAME` opens one and sent the client's own initialize (its clientInfo, capabilities,
//! directory, token and `--env` values), so every call runs under its own server's policy,
//! gates, pools and per-client plugins, unchanged. This module only merges and routes:
//!
//! - [`catalog`]: the ONE place where what the client sees is made and read back. The merged
//!   `tools/list` (and prompts, resources, templates) answer is produced by
//!   `Catalog::merge`, called from `fanout::list`; a `tools/call` (or `prompts/get`) is routed
//!   by name in `Catalog::route_name`, a resource URI in `Catalog::route_uri`, both called
//!   from `GroupSession::route`. Shaping a list per client (shorter names, budgets, search)
//!   hooks in there.
//! - [`route`]: the id tables: a client's request to the member that runs it and its response
//!   back, a server's request (sampling, elicitation, roots, ping) to the client and its answer
//!   back to that member, cancels both ways, notifications.
//! - [`fanout`]: initialize and the lists, asked of every member and merged.
//!
//! A member that cannot start, or whose server dies, leaves the others working: a call of its
//! tools is answered with an error naming the server and the cause.

mod catalog;
mod client;
mod fanout;
mod member;
mod route;
mod search;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::peer::ClientPeer;
use crate::registry::Servers;
use crate::server::Server;
use crate::session::{self, Input, Message, Opening, Output, Writer};
use catalog::Catalog;
use member::{Inbox, Member, Relay};
use switchyard_config::Group;
use switchyard_core::codec::{self, Frame, LineReader};

static NEXT_GROUP_SESSION: AtomicU64 = AtomicU64::new(1);

/// How long a group waits for its members' initialize before it answers its client with those
/// that answered; the rest join when they answer (the client is told its lists changed). Well
/// within the clients' own startup timeouts (Codex's is about 10 s).
const INIT_WAIT: Duration = Duration::from_secs(5);
/// How long a client's list waits for the members' lists: a member not done by then is left
/// out of that answer, and the client is told its list changed once the member's list is read.
const LIST_READY: Duration = Duration::from_secs(5);
/// How long one page of a member's list may take (when nothing waits for it but the group).
const LIST_WAIT: Duration = Duration::from_secs(60);
/// After the client left, how long the members' sessions get to wind down.
const CLOSE_GRACE: Duration = Duration::from_secs(6);

/// One client's session with a group.
pub struct GroupSession {
    pub group: String,
    pub label: String,
    members: Vec<Arc<Member>>,
    /// The client's outbox (and its backlog: a client that stops reading ends the session).
    peer: Arc<ClientPeer>,
    routes: Mutex<route::Routes>,
    catalog: Mutex<Catalog>,
    /// The client sent `notifications/initialized`: members that start later may tell it
    /// their lists changed.
    initialised: std::sync::atomic::AtomicBool,
    started: tokio::time::Instant,
    /// Search mode (docs/search.md): the group's `expose`, the file's `[budgets]` (whose
    /// `expose` a client kind may set), and the merged tool list `search_tools` searches, once
    /// fetched (None again when a member's list changes).
    expose: Option<switchyard_config::Expose>,
    budgets: std::collections::BTreeMap<String, switchyard_config::BudgetConfig>,
    search_index: Mutex<Option<Arc<crate::search::Index>>>,
    /// The tools its searches found that joined its list, in the order found (search mode, for
    /// a client whose budget says `add_found`).
    found: Mutex<Vec<String>>,
    /// The merged tool list's count against the client's `tools_max`, when over it (status).
    over_budget: Mutex<Option<Value>>,
    /// The digest of the tool list the client was last shown (or told of): None until it
    /// listed its tools. It hears `tools/list_changed` only when its list differs from this.
    shown_tools: Mutex<Option<[u8; 32]>>,
    /// The client's requests not answered yet, by raw id (an id in it is in use): answered
    /// once, those of a batch in the batch's one array (see [`client`]).
    open: Mutex<client::Open>,
}

impl GroupSession {
    /// The session as `switchyard status --json` shows it under its group.
    pub fn status(&self) -> Value {
        serde_json::json!({
            "label": self.label,
            "client": self.peer.client(),
            "members": self.members.iter().map(|m| m.shown()).collect::<Vec<_>>(),
            "uptime_ms": self.started.elapsed().as_millis() as u64,
            "budget": self.over_budget.lock().expect("lock").clone(),
        })
    }

    /// The config changed the group (None: it has no such group now): members it no longer
    /// has leave this session (their tools' calls are answered with why) and the client is told
    /// its lists changed; servers added, and new prefixes, apply to sessions opened from now on.
    pub(crate) fn regroup(self: &Arc<Self>, group: Option<&Group>) {
        let kept = |server: &str| group.is_some_and(|g| g.members.iter().any(|m| m.server == server));
        let gone: Vec<usize> =
            (0..self.members.len()).filter(|&i| !kept(&self.members[i].server) && self.members[i].open()).collect();
        for &i in &gone {
            let why = format!("it was taken out of group `{}` in the config", self.group);
            tracing::info!(group = %self.group, session = %self.label, server = %self.members[i].server, "{why}");
            *self.members[i].state.lock().expect("lock") = member::State::Down(why.clone());
            self.member_ended(i, &why);
        }
        if !gone.is_empty() {
            self.forget_search_index();
            for list in [catalog::List::Tools, catalog::List::Prompts, catalog::List::Resources] {
                self.list_may_have_changed(list);
            }
        }
    }

    /// Sends the client a message.
    fn send(&self, msg: &Value) {
        self.peer.send(msg.to_string());
    }

    /// Answers the client's request `id` (its raw JSON text) with `result`.
    fn reply(&self, id: &str, result: Value) {
        self.to_client(id, format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#));
    }

    /// Answers the client's request `id` (its raw JSON text) with an error.
    fn error(&self, id: &str, code: i64, message: &str) {
        self.to_client(id, codec::response_error(id, code, message, None));
    }
}

/// Serves group `name` of `router` to a client on `reader`/`writer` (the Unix socket's
/// `connect --group`), with the client's `--env` values.
pub async fn serve<R, W>(
    router: Arc<Servers>,
    group: Group,
    env: &std::collections::BTreeMap<String, String>,
    reader: R,
    writer: W,
    opening: Opening,
    shutdown: CancellationToken,
) where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let joined = join(&router, &group, env);
    let max = joined.iter().flatten().map(|s| s.limits.max_message_bytes).max();
    let max = max.unwrap_or_else(|| switchyard_config::Limits::default().max_message_bytes);
    serve_in(router, group, joined, LineReader::new(reader, max), Writer(writer), opening, shutdown).await
}

/// The servers of `group` as this client gets them (a template's variant for its values), or
/// why one cannot be had.
pub fn join(
    router: &Arc<Servers>,
    group: &Group,
    env: &std::collections::BTreeMap<String, String>,
) -> Vec<Result<Arc<Server>, String>> {
    group.members.iter().map(|m| router.lookup(Some(&m.server), env)).collect()
}

/// [`serve_with`], shown in `router`'s status while it runs.
pub async fn serve_in(
    router: Arc<Servers>,
    group: Group,
    joined: Vec<Result<Arc<Server>, String>>,
    input: impl Input,
    output: impl Output,
    opening: Opening,
    shutdown: CancellationToken,
) {
    let shown = router.clone();
    serve_with(&group, joined, input, output, opening, shutdown, move |s| {
        let (weak, again) = (Arc::downgrade(s), Arc::downgrade(s));
        let regroup = move |g: Option<&Group>| {
            if let Some(s) = again.upgrade() {
                s.regroup(g);
            }
        };
        shown.show_group_session(
            &s.group,
            s.label.clone(),
            Box::new(move || weak.upgrade().map(|s| s.status())),
            Box::new(regroup),
        )
    })
    .await
}

/// Serves one client of `group` on `input`/`output` until it leaves or `shutdown` fires: a
/// session of each member's server in `joined` (an error: why that member is down), merged.
/// `on_open` is given the session once it runs; what it returns is dropped when it ends.
pub async fn serve_with<G>(
    group: &Group,
    joined: Vec<Result<Arc<Server>, String>>,
    mut input: impl Input,
    output: impl Output,
    opening: Opening,
    shutdown: CancellationToken,
    on_open: impl FnOnce(&Arc<GroupSession>) -> G,
) {
    let n = NEXT_GROUP_SESSION.fetch_add(1, Ordering::Relaxed);
    let label = format!("{}-group-{n}", opening.transport);
    let first = joined.iter().flatten().next().cloned();
    let max = first
        .as_ref()
        .map_or_else(|| switchyard_config::Limits::default().max_message_bytes, |s| s.limits.max_message_bytes);
    let buffered = first.as_ref().map_or_else(|| crate::peer::Buffered::new(usize::MAX), |s| s.buffered.clone());
    let (tx, rx) = mpsc::unbounded_channel();
    // Its own id space, apart from the sessions' (the shared output budget tells them apart).
    let peer = ClientPeer::new((1 << 48) + n, tx, max.saturating_mul(4), buffered);
    let mut members = Vec::new();
    let mut inboxes = Vec::new();
    for (m, server) in group.members.iter().zip(&joined) {
        let down = server.as_ref().err().map(|why| format!("server `{}` cannot be used: {why}", m.server));
        let (member, inbox) = Member::new(&m.server, &m.prefix, down);
        members.push(member);
        inboxes.push(inbox);
    }
    let prefixes = members.iter().map(|m| m.prefix.clone()).collect();
    let session = Arc::new(GroupSession {
        group: group.name.clone(),
        label: label.clone(),
        members,
        peer,
        routes: Mutex::new(route::Routes::default()),
        catalog: Mutex::new(Catalog::new(&group.name, prefixes, &group.separator)),
        initialised: Default::default(),
        started: tokio::time::Instant::now(),
        expose: group.expose,
        budgets: first.as_ref().map(|s| s.budgets().clone()).unwrap_or_default(),
        search_index: Mutex::new(None),
        found: Mutex::new(Vec::new()),
        over_budget: Mutex::new(None),
        shown_tools: Mutex::new(None),
        open: Mutex::default(),
    });
    let mut writer = tokio::spawn(output.run(rx, session.peer.backlog(), label.clone()));
    let tasks = start_members(&session, joined, inboxes, &opening);
    let _shown = on_open(&session);
    tracing::info!(group = %group.name, session = %label, "group session started ({} servers)", session.members.len());
    let (ended, writer_done) = read_client(&session, &mut input, &shutdown, &mut writer, max).await;
    for m in &session.members {
        match ended {
            Ended::Gone => m.abort.cancel(),
            Ended::Eof | Ended::Shutdown => m.close_input(),
        }
    }
    let all = futures_util::future::join_all(tasks);
    if tokio::time::timeout(CLOSE_GRACE, all).await.is_err() {
        tracing::warn!(session = %label, "the group's member sessions did not end within {CLOSE_GRACE:?}");
        for m in &session.members {
            m.abort.cancel();
        }
    }
    session.fail_all(ended != Ended::Gone);
    drop(session);
    if !writer_done && tokio::time::timeout(CLOSE_GRACE, &mut writer).await.is_err() {
        writer.abort();
    }
    tracing::info!(group = %group.name, session = %label, "group session ended");
}

/// Opens the session of each member whose server could be had, on the inbox made for it; each
/// task ends when that session does, and marks the member down.
fn start_members(
    session: &Arc<GroupSession>,
    joined: Vec<Result<Arc<Server>, String>>,
    inboxes: Vec<mpsc::UnboundedReceiver<Message>>,
    opening: &Opening,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    for (i, (server, rx)) in joined.into_iter().zip(inboxes).enumerate() {
        let Ok(server) = server else { continue };
        let member = session.members[i].clone();
        // As `connect NAME` would open it, but for control lines: the group speaks to it.
        let opening = Opening {
            transport: opening.transport,
            sessions: opening.sessions.clone(),
            speaks_control: false,
            client_dir: opening.client_dir.clone(),
            client_token: opening.client_token.clone(),
        };
        let to = {
            let s = session.clone();
            move |out| s.on_member_line(i, out)
        };
        let input = Inbox { rx, abort: member.abort.clone() };
        let relay = Relay { to, label: member.label.clone() };
        let s = session.clone();
        tasks.push(tokio::spawn(async move {
            let ends = server.shutdown.clone();
            session::serve_with(server, input, relay, opening, ends).await;
            s.member_ended(i, "its session ended (its server was removed from the config, or switchyard is stopping)");
        }));
    }
    tasks
}

/// Reads the client's messages until it leaves, `shutdown` fires or its writer ends; why, and
/// whether the writer ended (then it was awaited already).
async fn read_client(
    session: &Arc<GroupSession>,
    input: &mut impl Input,
    shutdown: &CancellationToken,
    writer: &mut tokio::task::JoinHandle<()>,
    max: usize,
) -> (Ended, bool) {
    loop {
        let message = tokio::select! {
            m = input.next() => m,
            _ = shutdown.cancelled() => return (Ended::Shutdown, false),
            _ = session.peer.overflow.cancelled() => return (Ended::Gone, false),
            _ = &mut *writer => return (Ended::Gone, true),
        };
        match message {
            Ok(Some(Message::Frame(Frame::Line(line)))) => session.on_client_line(line),
            Ok(Some(Message::Request(call))) => session.on_request(*call),
            // Answered once, under its own id when its ends show one (as `connect NAME` does).
            Ok(Some(Message::Frame(Frame::TooLong { bytes }))) => {
                let (head, tail) = input.skipped_ends();
                let id = codec::skipped_request_id(head, tail).unwrap_or_else(|| "null".to_string());
                session.peer.send(codec::response_error(
                    &id,
                    codec::INVALID_REQUEST,
                    &format!("message of {bytes} bytes is over the limit of {max} bytes (limits.max_message_bytes); it was skipped"),
                    None,
                ))
            }
            Ok(Some(Message::Frame(Frame::NotUtf8))) => session.peer.send(codec::response_error(
                "null",
                codec::PARSE_ERROR,
                "Parse error: the message is not valid UTF-8",
                None,
            )),
            Ok(None) => return (Ended::Eof, false),
            Err(e) => {
                tracing::debug!(session = %session.label, "the group's client left: {e}");
                return (Ended::Gone, false);
            }
        }
    }
}

/// Why a group's client stopped being read.
#[derive(Clone, Copy, PartialEq)]
enum Ended {
    Shutdown,
    Eof,
    Gone,
}
