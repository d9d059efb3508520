//! Tasks: which instance holds each task a client was handed, under a task id only this daemon
//! can make, and the gate a task's creating call keeps until the task ends.
//!
//! A task lives in the memory of the instance that created it (the SDKs' task stores are
//! in-memory), so every request about it must reach that instance and no other. The id a client
//! is handed names the instance, the session and the server's own id, sealed with a key made at
//! start-up: a client cannot forge or alter one to reach another instance's or session's task,
//! and one from before a restart is refused as unknown (its instance is gone anyway).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use base64::Engine as _;
use sha2::{Digest, Sha256};

use crate::gate::Permit;
use crate::upstream::Instance;
use switchyard_core::ids::SessionId;

/// The requests about one task, both eras (2025-11-25 `tasks/*`; the 2026-07-28 tasks
/// extension's get, update and cancel). Each carries `params.taskId`.
pub const ABOUT_ONE_TASK: &[&str] = &["tasks/get", "tasks/result", "tasks/cancel", "tasks/update"];
/// Those of them the 2026-07-28 tasks extension has: it removed `tasks/result` (and
/// `tasks/list`), which a server of that era answers -32601, as it must get to.
pub const ABOUT_ONE_TASK_2026: &[&str] = &["tasks/get", "tasks/cancel", "tasks/update"];
/// The statuses after which a task changes no more.
pub const TERMINAL: &[&str] = &["completed", "failed", "cancelled"];
/// The `_meta` key that ties a result or a server's request to a task (2025-11-25).
pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";
/// What every sealed task id starts with.
const PREFIX: &str = "sy-task.";
/// What every sealed `requestState` starts with: the state a server gave with an
/// `input_required` answer (2026-07-28), sealed with the instance that gave it, because the
/// server may keep (or key) it in that instance's memory only.
const STATE_PREFIX: &str = "sy-state.";
/// The session recorded for tasks of the 2026-07-28 era, which has no sessions: any request of
/// that era may reach them (as it would reach the server directly).
pub const NO_SESSION: SessionId = 0;

/// The key task ids are sealed with: random, made once per process (one daemon, one key).
fn key() -> &'static [u8; 32] {
    static KEY: OnceLock<[u8; 32]> = OnceLock::new();
    KEY.get_or_init(|| {
        switchyard_core::ids::random::<32>()
            .unwrap_or_else(|e| panic!("cannot read the kernel's random source (getrandom: {e}) for the task-id key"))
    })
}

/// HMAC-SHA256 (RFC 2104) of `parts` under the process key.
fn mac(parts: &[&[u8]]) -> [u8; 32] {
    let mut ipad = [0x36u8; 64];
    let mut opad = [0x5cu8; 64];
    for (i, k) in key().iter().enumerate() {
        ipad[i] ^= k;
        opad[i] ^= k;
    }
    let mut inner = Sha256::new();
    inner.update(ipad);
    for p in parts {
        inner.update((p.len() as u64).to_be_bytes());
        inner.update(p);
    }
    let mut outer = Sha256::new();
    outer.update(opad);
    outer.update(inner.finalize());
    outer.finalize().into()
}

/// Where a task is: the instance that holds it, the session it was created for, and the id the
/// server gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub instance: u64,
    pub session: SessionId,
    pub upstream: String,
}

/// The id a client is handed for `route`, on server `server`.
pub fn seal(server: &str, route: &Route) -> String {
    seal_as(PREFIX, server, route)
}

/// The route of a task id this process handed out for `server`; None for any other string.
pub fn open(server: &str, id: &str) -> Option<Route> {
    open_as(PREFIX, server, id)
}

/// The `requestState` a client is handed for `route` (its `upstream`: the server's own state).
pub fn seal_state(server: &str, route: &Route) -> String {
    seal_as(STATE_PREFIX, server, route)
}

/// The route of a `requestState` this process handed out for `server`; None for any other string.
pub fn open_state(server: &str, state: &str) -> Option<Route> {
    open_as(STATE_PREFIX, server, state)
}

/// `route` sealed under the process key, for `server`; `prefix` says what it is, and is sealed
/// too, so that a task id is never taken for a request state or the other way round.
fn seal_as(prefix: &str, server: &str, route: &Route) -> String {
    let payload = format!("{}.{}.{}", route.instance, route.session, route.upstream);
    let tag = mac(&[prefix.as_bytes(), server.as_bytes(), payload.as_bytes()]);
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    format!("{prefix}{}.{}", b64.encode(payload), b64.encode(&tag[..16]))
}

fn open_as(prefix: &str, server: &str, sealed: &str) -> Option<Route> {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let (payload, tag) = sealed.strip_prefix(prefix)?.split_once('.')?;
    let payload = b64.decode(payload).ok()?;
    let tag = b64.decode(tag).ok()?;
    let want = mac(&[prefix.as_bytes(), server.as_bytes(), &payload]);
    // Compared in constant time: the tag must not be guessable byte by byte.
    if tag.len() != 16 || tag.iter().zip(&want[..16]).fold(0u8, |acc, (a, b)| acc | (a ^ b)) != 0 {
        return None;
    }
    let payload = String::from_utf8(payload).ok()?;
    let mut parts = payload.splitn(3, '.');
    let instance = parts.next()?.parse().ok()?;
    let session = parts.next()?.parse().ok()?;
    let upstream = parts.next()?.to_string();
    Some(Route { instance, session, upstream })
}

/// A task request bound for the instance that holds its task: sent there whatever the pool
/// would pick, past the gate (a poll is a read and must not wait behind the task's own call).
pub struct Pinned {
    pub instance: Arc<Instance>,
    /// The server's id of the task and the id the client knows it by (None: tasks/list, which
    /// names no one task).
    pub ids: Option<(String, String)>,
    /// The server's name of the tool whose call created the task, while it is held (what a
    /// policy is told of the task).
    pub created_by: Option<String>,
}

/// A task a client was handed.
struct Held {
    session: SessionId,
    /// The server's name of the tool whose call created it.
    tool: Option<String>,
    /// The gate permit of the call that created the task: the task's work runs on after the
    /// call's response, so the call's exclusive or keyed claim holds until the task ends.
    permit: Option<Permit>,
}

/// The tasks of one server's clients, by (instance number, the server's task id).
#[derive(Default)]
pub struct Tasks {
    held: Mutex<HashMap<(u64, String), Held>>,
}

impl Tasks {
    /// A call of `tool` created a task on `instance`: records it (keeping `permit` until the task
    /// ends, or for `hold` at most: its time to live) and returns the id to hand the client.
    #[allow(clippy::too_many_arguments)]
    pub fn created(
        self: &Arc<Self>,
        server: &str,
        instance: u64,
        session: SessionId,
        upstream: &str,
        tool: Option<String>,
        permit: Option<Permit>,
        hold: Duration,
    ) -> String {
        let key = (instance, upstream.to_string());
        self.held.lock().expect("lock").insert(key.clone(), Held { session, tool, permit });
        // Past its time to live the server has dropped the task: so does switchyard.
        let me: Weak<Tasks> = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep(hold).await;
            if let Some(me) = me.upgrade() {
                me.held.lock().expect("lock").remove(&key);
            }
        });
        seal(server, &Route { instance, session, upstream: upstream.to_string() })
    }

    /// The session a task of `instance` belongs to, if a client was handed it.
    pub fn session_of(&self, instance: u64, upstream: &str) -> Option<SessionId> {
        self.held.lock().expect("lock").get(&(instance, upstream.to_string())).map(|h| h.session)
    }

    /// The server's name of the tool whose call created a task of `instance`, while it is held.
    pub fn tool_of(&self, instance: u64, upstream: &str) -> Option<String> {
        self.held.lock().expect("lock").get(&(instance, upstream.to_string())).and_then(|h| h.tool.clone())
    }

    /// A task was seen in `status`: a terminal one releases the gate its creating call held.
    pub fn saw_status(&self, instance: u64, upstream: &str, status: &str) {
        if TERMINAL.contains(&status)
            && let Some(h) = self.held.lock().expect("lock").get_mut(&(instance, upstream.to_string()))
        {
            h.permit = None;
        }
    }

    /// The tasks `session` was handed, by instance: the server's ids.
    pub fn of_session(&self, session: SessionId) -> HashMap<u64, Vec<String>> {
        let mut by_instance: HashMap<u64, Vec<String>> = HashMap::new();
        for ((inst, id), h) in self.held.lock().expect("lock").iter() {
            if h.session == session {
                by_instance.entry(*inst).or_default().push(id.clone());
            }
        }
        by_instance
    }

    /// An instance ended: its tasks are gone with it, and the gates their calls held are free.
    pub fn instance_gone(&self, instance: u64) {
        self.held.lock().expect("lock").retain(|(n, _), _| *n != instance);
    }

    /// How many tasks are recorded (for tests and status).
    pub fn len(&self) -> usize {
        self.held.lock().expect("lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The task a `tools/call` result created, if it is one: its id, status and time to live.
/// 2025-11-25: `{"task": {"taskId", "status", "ttl"}}`; the 2026-07-28 tasks extension:
/// `{"resultType": "task", "taskId", "status", "ttlMs"}`.
pub fn created_task(result: &str) -> Option<(String, String, Option<u64>)> {
    // Parsed only when it can be one: results are passed through unparsed otherwise.
    if !result.contains("\"taskId\"") {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(result).ok()?;
    let (task, ttl_key) = match v.get("task") {
        Some(t) if t.is_object() => (t, "ttl"),
        _ if v.get("resultType").and_then(|r| r.as_str()) == Some("task") => (&v, "ttlMs"),
        _ => return None,
    };
    let id = task.get("taskId")?.as_str()?.to_string();
    let status = task.get("status").and_then(|s| s.as_str()).unwrap_or_default().to_string();
    Some((id, status, task.get(ttl_key).and_then(|t| t.as_u64())))
}

/// `json` with every `taskId` whose value is `from` (at any depth: a task object, a
/// related-task `_meta`) set to `to`; None when there is none.
pub fn replace_task_id(json: &str, from: &str, to: &str) -> Option<String> {
    if !json.contains("\"taskId\"") {
        return None;
    }
    let mut v: serde_json::Value = serde_json::from_str(json).ok()?;
    fn walk(v: &mut serde_json::Value, from: &str, to: &str) -> bool {
        match v {
            serde_json::Value::Object(m) => {
                let mut changed = false;
                if let Some(t) = m.get_mut("taskId")
                    && t.as_str() == Some(from)
                {
                    *t = serde_json::Value::String(to.to_string());
                    changed = true;
                }
                for (k, child) in m.iter_mut() {
                    if k != "taskId" {
                        changed |= walk(child, from, to);
                    }
                }
                changed
            }
            serde_json::Value::Array(a) => a.iter_mut().fold(false, |c, x| walk(x, from, to) | c),
            _ => false,
        }
    }
    walk(&mut v, from, to).then(|| v.to_string())
}

/// The `requestState` of an `input_required` result (2026-07-28), if it is one with a state.
pub fn input_state(result: &str) -> Option<String> {
    // Parsed only when it can be one: results are passed through unparsed otherwise.
    if !result.contains("\"input_required\"") || !result.contains("\"requestState\"") {
        return None;
    }
    #[derive(serde::Deserialize)]
    struct R {
        #[serde(rename = "resultType")]
        result_type: Option<String>,
        #[serde(rename = "requestState")]
        request_state: Option<String>,
    }
    let r: R = serde_json::from_str(result).ok()?;
    r.request_state.filter(|_| r.result_type.as_deref() == Some("input_required"))
}

/// `result` (an `input_required` one) with its top-level `requestState` set to `to`.
pub fn replace_input_state(result: &str, to: &str) -> Option<String> {
    let mut v: serde_json::Value = serde_json::from_str(result).ok()?;
    *v.get_mut("requestState")? = serde_json::Value::String(to.to_string());
    Some(v.to_string())
}

/// The status a task object (or a result that is one) reports.
pub fn status_in(json: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct S {
        status: Option<String>,
    }
    serde_json::from_str::<S>(json).ok()?.status
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_id_opens_only_on_its_server_and_unaltered() {
        let r = Route { instance: 3, session: 7, upstream: "a.b-c/d".into() };
        let id = seal("everything", &r);
        assert_eq!(open("everything", &id), Some(r.clone()));
        assert_eq!(open("other", &id), None, "another server's task");
        // Any one character changed is refused.
        for i in PREFIX.len()..id.len() {
            let mut bytes = id.clone().into_bytes();
            bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
            let forged = String::from_utf8(bytes).unwrap();
            assert_eq!(open("everything", &forged), None, "{forged}");
        }
        assert_eq!(open("everything", "no-such-task"), None);
        assert_ne!(seal("everything", &Route { session: 8, ..r.clone() }), id, "the session is part of the id");
    }

    #[test]
    fn a_sealed_request_state_is_never_taken_for_a_task_id() {
        let r = Route { instance: 2, session: NO_SESSION, upstream: "opaque+state/==".into() };
        let state = seal_state("py", &r);
        assert_eq!(open_state("py", &state), Some(r.clone()));
        assert_eq!(open_state("other", &state), None);
        assert_eq!(open("py", &state), None, "a request state opened as a task id");
        assert_eq!(open_state("py", &seal("py", &r)), None, "a task id opened as a request state");
        let mut forged = state.clone().into_bytes();
        let last = forged.len() - 1;
        forged[last] = if forged[last] == b'A' { b'B' } else { b'A' };
        assert_eq!(open_state("py", &String::from_utf8(forged).unwrap()), None);
    }

    #[test]
    fn the_state_of_an_input_required_result_is_found_and_replaced() {
        let asked = r#"{"resultType":"input_required","inputRequests":{"a":{"method":"elicitation/create"}},"requestState":"s1"}"#;
        assert_eq!(input_state(asked).as_deref(), Some("s1"));
        let sealed = replace_input_state(asked, "sy-state.x").unwrap();
        let v: serde_json::Value = serde_json::from_str(&sealed).unwrap();
        assert_eq!(v["requestState"], "sy-state.x");
        assert_eq!(v["inputRequests"]["a"]["method"], "elicitation/create", "the rest is kept");
        // A complete result, or one that only mentions the words in its content, is not one.
        assert_eq!(input_state(r#"{"resultType":"complete","requestState":"s"}"#), None);
        let text = r#"{"content":[{"type":"text","text":"\"input_required\" \"requestState\""}]}"#;
        assert_eq!(input_state(text), None);
    }

    #[test]
    fn created_tasks_of_both_eras_are_recognised() {
        let old = r#"{"task":{"taskId":"t1","status":"working","ttl":60000,"createdAt":"x"}}"#;
        assert_eq!(created_task(old), Some(("t1".into(), "working".into(), Some(60000))));
        let new = r#"{"resultType":"task","taskId":"t2","status":"working","ttlMs":5000}"#;
        assert_eq!(created_task(new), Some(("t2".into(), "working".into(), Some(5000))));
        assert_eq!(created_task(r#"{"content":[{"type":"text","text":"\"taskId\""}]}"#), None);
    }

    #[test]
    fn task_ids_are_replaced_wherever_they_appear() {
        let r = r#"{"content":[],"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"up"}},"taskId":"up","x":{"taskId":"other"}}"#;
        let out: serde_json::Value = serde_json::from_str(&replace_task_id(r, "up", "client").unwrap()).unwrap();
        assert_eq!(out["taskId"], "client");
        assert_eq!(out["_meta"][RELATED_TASK]["taskId"], "client");
        assert_eq!(out["x"]["taskId"], "other");
        assert_eq!(replace_task_id(r#"{"taskId":"x"}"#, "up", "c"), None);
    }

    /// Whether an exclusive call could enter the gate now.
    async fn free(gate: &crate::gate::Gate) -> bool {
        let exclusive = gate.acquire(switchyard_core::decision::Concurrency::Exclusive);
        tokio::time::timeout(Duration::from_millis(1), exclusive).await.is_ok()
    }

    #[tokio::test(start_paused = true)]
    async fn a_gate_is_held_until_the_task_ends_or_its_time_to_live_passes() {
        let gate = crate::gate::Gate::new();
        let tasks = Arc::new(Tasks::default());
        let exclusive = || gate.acquire(switchyard_core::decision::Concurrency::Exclusive);
        let id =
            tasks.created("s", 1, 5, "u", Some("research".into()), Some(exclusive().await), Duration::from_secs(60));
        assert!(!free(&gate).await, "held by the task");
        assert_eq!(open("s", &id).map(|r| r.session), Some(5));
        tasks.saw_status(1, "u", "working");
        assert!(!free(&gate).await, "still working");
        tasks.saw_status(1, "u", "completed");
        assert!(free(&gate).await, "released at the terminal status");
        assert_eq!(tasks.session_of(1, "u"), Some(5));
        assert_eq!(tasks.tool_of(1, "u").as_deref(), Some("research"), "the tool that created it");

        tasks.created("s", 2, 5, "v", None, Some(exclusive().await), Duration::from_secs(60));
        assert!(!free(&gate).await);
        tokio::time::sleep(Duration::from_secs(61)).await;
        assert!(free(&gate).await, "released when its time to live passed");
        assert_eq!(tasks.session_of(2, "v"), None);

        tasks.created("s", 3, 5, "w", None, Some(exclusive().await), Duration::from_secs(60));
        assert!(!free(&gate).await);
        tasks.instance_gone(3);
        assert!(free(&gate).await, "released when its instance ended");
        assert!(tasks.of_session(5).is_empty(), "each is gone: its time to live passed, or its instance ended");
    }
}
