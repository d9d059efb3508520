//! What a group asks every member and merges: the client's initialize (answered once the
//! members did, or [`super::INIT_WAIT`] passed), and the lists (every page of every member
//! that declared the capability, merged into one page by the catalog).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::catalog::List;
use super::member::State;
use super::{GroupSession, INIT_WAIT, LIST_READY, LIST_WAIT};
use switchyard_core::codec;

/// The most pages read of one member's list (a server that always gives a next cursor).
const MAX_PAGES: usize = 100;

/// What one member answered to initialize.
enum Answer {
    Result(Value),
    Error(String),
    /// Not within the wait; the receiver still waits for it.
    Late(oneshot::Receiver<Value>),
}

impl GroupSession {
    /// The client's initialize: sent to every member; answered with their results merged.
    pub(super) fn initialize(self: Arc<Self>, id: String, params: Value) {
        // Who the client is, for status (its members' sessions learn it from the same params).
        self.peer.declare_capabilities(&params.to_string());
        let asks: Vec<(usize, oneshot::Receiver<Value>)> = (0..self.members.len())
            .filter(|i| self.members[*i].open())
            // Each member's budget counts its tool names as this group shows them.
            .map(|i| {
                let shown_as = self.catalog().expose(i, "");
                (i, self.ask(i, "initialize", crate::budget::member_initialize(&params, &self.group, &shown_as)))
            })
            .collect();
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + INIT_WAIT;
            let waits = asks.into_iter().map(|(i, mut rx)| async move {
                let answer = match tokio::time::timeout_at(deadline, &mut rx).await {
                    Ok(Ok(msg)) => answer_of(msg),
                    Ok(Err(_)) => Answer::Error("its session ended before it answered initialize".into()),
                    Err(_) => Answer::Late(rx),
                };
                (i, answer)
            });
            let answers = futures_util::future::join_all(waits).await;
            let mut results = Vec::new();
            for (i, answer) in answers {
                match answer {
                    Answer::Result(r) => {
                        self.up(i, &r);
                        results.push((i, r));
                    }
                    Answer::Error(why) => self.down(i, why),
                    Answer::Late(rx) => {
                        tracing::info!(group = %self.group, server = %self.members[i].server, "not initialised within {INIT_WAIT:?}; the client gets its tools when it is");
                        tokio::spawn(self.clone().join_late(i, rx));
                    }
                }
            }
            let starting = self.members.iter().any(|m| matches!(*m.state.lock().expect("lock"), State::Starting));
            if results.is_empty() && !starting {
                let why: Vec<String> =
                    self.members.iter().filter_map(|m| m.unusable().map(|w| format!("`{}`: {w}", m.server))).collect();
                return self.error(
                    &id,
                    codec::SERVER_UNAVAILABLE,
                    &format!("no server of group `{}` could be used: {}", self.group, why.join("; ")),
                );
            }
            let merged = self.merged_initialize(&params, &results);
            self.reply(&id, merged);
        });
    }

    /// A member that answered initialize after the client was answered: once up, the client
    /// is told that its lists changed.
    async fn join_late(self: Arc<Self>, i: usize, rx: oneshot::Receiver<Value>) {
        let answer = match rx.await {
            Ok(msg) => answer_of(msg),
            Err(_) => Answer::Error("its session ended before it answered initialize".into()),
        };
        match answer {
            Answer::Result(r) => {
                self.up(i, &r);
                for list in [List::Tools, List::Prompts, List::Resources] {
                    if self.members[i].declares(list.capability()) {
                        self.list_may_have_changed(list);
                    }
                }
            }
            Answer::Error(why) => self.down(i, why),
            Answer::Late(_) => {}
        }
    }

    fn up(&self, i: usize, result: &Value) {
        let caps = result.get("capabilities").cloned().unwrap_or_else(|| json!({}));
        if caps.get("resources").is_some_and(|v| !v.is_null()) {
            self.catalog().has_resources(i);
        }
        *self.members[i].state.lock().expect("lock") = State::Up(caps);
    }

    fn down(&self, i: usize, why: String) {
        let m = &self.members[i];
        tracing::warn!(group = %self.group, server = %m.server, "a server of the group is down: {why}");
        *m.state.lock().expect("lock") = State::Down(why);
    }

    /// One initialize result for the client from its members': the version the first of them
    /// agreed, every capability one of them has (lists always, as members may come later, with
    /// `listChanged`), and their instructions, each under its server's prefix.
    fn merged_initialize(&self, params: &Value, results: &[(usize, Value)]) -> Value {
        let version = results
            .iter()
            .find_map(|(_, r)| r.get("protocolVersion").cloned())
            .or_else(|| params.get("protocolVersion").cloned())
            .unwrap_or_else(|| json!(switchyard_mcp::version::LATEST_SESSION));
        let has = |cap: &str| results.iter().any(|(_, r)| r["capabilities"].get(cap).is_some_and(|v| !v.is_null()));
        let subscribe = results.iter().any(|(_, r)| r["capabilities"]["resources"]["subscribe"] == true);
        let mut caps = json!({
            "tools": {"listChanged": true},
            "prompts": {"listChanged": true},
            "resources": {"listChanged": true, "subscribe": subscribe},
            "logging": {},
        });
        if has("completions") {
            caps["completions"] = json!({});
        }
        let separator = self.catalog().separator().to_string();
        let instructions: Vec<String> = results
            .iter()
            .filter_map(|(i, r)| {
                let text = r.get("instructions")?.as_str()?;
                let m = &self.members[*i];
                Some(format!(
                    "Server `{}` (its tools and prompts are named {}{separator}NAME):\n{text}",
                    m.server, m.prefix
                ))
            })
            .collect();
        let mut result = json!({
            "protocolVersion": version,
            "capabilities": caps,
            "serverInfo": {"name": format!("switchyard group {}", self.group), "version": env!("CARGO_PKG_VERSION")},
        });
        if !instructions.is_empty() {
            result["instructions"] = Value::String(instructions.join("\n\n"));
        }
        result
    }

    /// A list the client asked for: every page of every member that has it, merged. A member
    /// whose list is not read within [`LIST_READY`] (its server restarting, say) is left out of
    /// this answer; once it is read, the client is told its list changed (if it did).
    pub(super) fn list(self: Arc<Self>, id: String, list: List) {
        let asked: Vec<usize> =
            (0..self.members.len()).filter(|i| self.members[*i].declares(list.capability())).collect();
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + LIST_READY;
            let reads = asked.iter().map(|&i| {
                let s = self.clone();
                let mut read = tokio::spawn(async move { s.read_all(i, list).await });
                async move {
                    match tokio::time::timeout_at(deadline, &mut read).await {
                        Ok(done) => (i, Ok(done.unwrap_or_else(|e| Err(format!("its read failed: {e}"))))),
                        Err(_) => (i, Err(read)),
                    }
                }
            });
            let mut pages = Vec::new();
            for (i, read) in futures_util::future::join_all(reads).await {
                let server = &self.members[i].server;
                match read {
                    Ok(Ok(items)) => pages.push((i, items)),
                    Ok(Err(why)) => tracing::warn!(
                        group = %self.group,
                        server = %server,
                        "{} of server `{server}` left out of the group's list: {why}",
                        list.key(),
                    ),
                    Err(late) => {
                        tracing::info!(group = %self.group, server = %server, "{} of server `{server}` not read within {LIST_READY:?}: left out of this answer, the client is told when it is", list.key());
                        let s = self.clone();
                        tokio::spawn(async move {
                            if let Ok(Ok(_)) = late.await {
                                s.list_may_have_changed(list);
                            }
                        });
                    }
                }
            }
            let merged = self.catalog().merge(list, pages);
            if list == List::Tools {
                self.check_count(&merged);
                let tools = merged["tools"].as_array().map_or(&[][..], Vec::as_slice);
                *self.shown_tools.lock().expect("lock") = Some(crate::budget::list_digest(tools));
            }
            self.reply(&id, merged);
        });
    }

    /// A member's `list` may have changed (it joined late, its list was read late, it said so):
    /// the client is told only when the list it sees did. A tool list is read again and compared
    /// with the one the client was last shown (a client that has not listed its tools yet will
    /// get the new list when it does: it is told nothing); a search-mode client's list stays
    /// (what it searches is fetched anew). Prompts and resources are said as they come.
    pub(super) fn list_may_have_changed(self: &Arc<Self>, list: List) {
        if list == List::Tools && self.searching() {
            return self.forget_search_index();
        }
        if !self.initialised.load(Ordering::SeqCst) {
            return;
        }
        let notify = move |s: &Self| {
            s.send(&json!({"jsonrpc": "2.0", "method": format!("notifications/{}/list_changed", list.capability())}));
        };
        if list != List::Tools {
            return notify(self);
        }
        if self.shown_tools.lock().expect("lock").is_none() {
            return;
        }
        let s = self.clone();
        tokio::spawn(async move {
            let merged = s.merged(List::Tools).await;
            let tools = merged["tools"].as_array().map_or(&[][..], Vec::as_slice);
            let digest = Some(crate::budget::list_digest(tools));
            let mut shown = s.shown_tools.lock().expect("lock");
            if *shown == digest {
                return;
            }
            *shown = digest;
            drop(shown);
            notify(&s);
        });
    }

    /// Says (in status, and once in the log) a merged tool list longer than the client's
    /// `tools_max`; it is passed whole (docs/search.md).
    fn check_count(&self, merged: &Value) {
        let count = merged["tools"].as_array().map_or(0, Vec::len);
        let budget = crate::budget::Budget::for_client(self.peer.caller().name.as_deref(), &self.budgets);
        let over = (budget.tools_max > 0 && count > budget.tools_max).then(|| {
            json!({"client": budget.kind, "tools": count, "tools_max": budget.tools_max, "renamed": [], "unfit": []})
        });
        let mut said = self.over_budget.lock().expect("lock");
        if *said == over {
            return;
        }
        if over.is_some() {
            tracing::warn!(
                group = %self.group,
                client = %budget.kind,
                "tool list over the client's budget: {count} tools, over the {} this client takes: set `expose = \"search\"` in [groups.{}] or [budgets.{}] to give it a search instead",
                budget.tools_max,
                self.group,
                budget.kind
            );
        }
        *said = over;
    }

    /// The merged `list` of every member that declares it, as [`GroupSession::list`] answers
    /// it (without answering anyone): what search mode searches.
    pub(super) async fn merged(self: &Arc<Self>, list: List) -> Value {
        let asked: Vec<usize> =
            (0..self.members.len()).filter(|i| self.members[*i].declares(list.capability())).collect();
        let reads = asked.iter().map(|i| async move { (*i, self.read_all(*i, list).await) });
        let pages =
            futures_util::future::join_all(reads).await.into_iter().filter_map(|(i, r)| Some((i, r.ok()?))).collect();
        self.catalog().merge(list, pages)
    }

    /// Every item of member `i`'s `list`, page after page.
    async fn read_all(&self, i: usize, list: List) -> Result<Vec<Value>, String> {
        let mut items = Vec::new();
        let mut cursor: Option<Value> = None;
        for _ in 0..MAX_PAGES {
            let params = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => Value::Null,
            };
            let rx = self.ask(i, list.method(), params);
            let msg = match tokio::time::timeout(LIST_WAIT, rx).await {
                Ok(Ok(msg)) => msg,
                Ok(Err(_)) => return Err("its session ended".into()),
                Err(_) => return Err(format!("no answer within {LIST_WAIT:?}")),
            };
            if let Some(e) = msg.get("error") {
                return Err(e["message"].as_str().unwrap_or("an error").to_string());
            }
            let result = &msg["result"];
            items.extend(result[list.key()].as_array().cloned().unwrap_or_default());
            match result.get("nextCursor").filter(|c| !c.is_null()) {
                Some(c) => cursor = Some(c.clone()),
                None => return Ok(items),
            }
        }
        Err(format!("it gave a next page {MAX_PAGES} times"))
    }
}

/// A member's response to initialize.
fn answer_of(msg: Value) -> Answer {
    match msg.get("error") {
        Some(e) => Answer::Error(format!("its initialize failed: {}", e["message"].as_str().unwrap_or("an error"))),
        None => Answer::Result(msg.get("result").cloned().unwrap_or_else(|| json!({}))),
    }
}
