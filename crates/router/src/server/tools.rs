//! The tools a server declared (hints for policy), list fetching, and the policy reload watcher.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::Server;
use crate::server::fanout::sort_list;
use crate::upstream::Instance;
use switchyard_core::codec;
use switchyard_core::decision::Hints;
use switchyard_policy::{Kind, ListedTool, PluginSet};

/// The server's tools as switchyard knows them, and the one refresh of them at a time.
#[derive(Default)]
pub(super) struct Tools {
    cache: std::sync::RwLock<ToolCache>,
    refresh: tokio::sync::Mutex<()>,
}

/// A tools/list result as the server declared it, for hints and annotation diffs.
#[derive(Default)]
struct ToolCache {
    declared: HashMap<String, Hints>,
    /// The instance whose whole tools/list `declared` holds, since its last tools/list_changed:
    /// while it lives, a new client session costs the server no tools/list.
    fetched_from: Option<u64>,
    /// Each tool's `title` and `description`, as listed (what a tool-list hook judges).
    words: HashMap<String, (Option<String>, Option<String>)>,
    /// Each prompt's and resource template's `title` and `description`, from the lists that
    /// passed (what a list hook judges of them).
    other_words: HashMap<(Kind, String), (Option<String>, Option<String>)>,
}

impl Server {
    /// Records declared hints from a tools/list result that passed through.
    pub fn learn_tools(&self, result_json: &str) {
        #[derive(serde::Deserialize)]
        struct ToolsResult {
            #[serde(default)]
            tools: Vec<serde_json::Value>,
        }
        #[derive(serde::Deserialize)]
        struct Cursor {
            #[serde(default, rename = "nextCursor")]
            next_cursor: Option<serde_json::Value>,
        }
        let Ok(r) = serde_json::from_str::<ToolsResult>(result_json) else { return };
        self.learn_tool_values(&r.tools);
        // A whole list (no further page) is what this client now shows; a last page of several
        // is taken for the whole too, which can only make one list_changed too many pass.
        if serde_json::from_str::<Cursor>(result_json).is_ok_and(|c| c.next_cursor.is_none()) {
            self.remember_list("tools/list", &r.tools);
            self.hub.shown_list("tools", r.tools);
        }
    }

    fn learn_tool_values(&self, tools: &[serde_json::Value]) {
        if let Some(headers) = self.connector.tool_headers() {
            headers.learn(tools);
        }
        let mut cache = self.tools.cache.write().expect("lock");
        for t in tools {
            if let Some(name) = t.get("name").and_then(|n| n.as_str()) {
                let hints = switchyard_policy::annotate::declared_hints(t.get("annotations"));
                cache.declared.insert(name.to_string(), hints);
                let text = |k: &str| t.get(k).and_then(|v| v.as_str()).map(str::to_string);
                cache.words.insert(name.to_string(), (text("title"), text("description")));
            }
        }
    }

    /// Records each prompt's (or resource template's) title and description from a
    /// `prompts/list` (`resources/templates/list`) result that passed.
    pub fn learn_listed(&self, kind: Kind, result_json: &str) {
        let field = match kind {
            Kind::Prompt => "prompts",
            Kind::ResourceTemplate => "resourceTemplates",
            Kind::Tool => return self.learn_tools(result_json),
        };
        let Ok(mut r) = serde_json::from_str::<serde_json::Value>(result_json) else { return };
        let whole = r.get("nextCursor").is_none_or(serde_json::Value::is_null);
        let Some(items) = r.get_mut(field).and_then(|v| v.as_array_mut()).map(std::mem::take) else { return };
        if whole && kind == Kind::Prompt {
            self.remember_list("prompts/list", &items);
            self.hub.shown_list("prompts", items.clone());
        }
        let mut cache = self.tools.cache.write().expect("lock");
        for p in &items {
            if let Some(name) = p.get("name").and_then(|n| n.as_str()) {
                let text = |k: &str| p.get(k).and_then(|v| v.as_str()).map(str::to_string);
                cache.other_words.insert((kind, name.to_string()), (text("title"), text("description")));
            }
        }
    }

    /// A tool (or prompt) as the server listed it, as far as known (the list hook judges a
    /// call with it).
    pub fn listed_item(&self, kind: Kind, name: &str) -> switchyard_policy::ListedTool {
        let cache = self.tools.cache.read().expect("lock");
        let words = match kind {
            Kind::Tool => cache.words.get(name),
            _ => cache.other_words.get(&(kind, name.to_string())),
        };
        let (title, description) = words.cloned().unwrap_or_default();
        let declared = if kind == Kind::Tool { cache.declared.get(name).cloned() } else { None };
        switchyard_policy::ListedTool {
            kind,
            server: self.name.clone(),
            name: name.to_string(),
            title,
            description,
            declared: declared.unwrap_or_default(),
        }
    }

    pub fn declared_hints(&self, tool: &str) -> Hints {
        self.tools.cache.read().expect("lock").declared.get(tool).cloned().unwrap_or_default()
    }

    /// The hints `tool` was declared with, fetching tools/list first when it is not known yet
    /// (the fetch after initialize may not have finished, or the instance it ran on died).
    /// Waits at most `within` for an instance to ask; None: the server did not declare it.
    pub async fn declared_hints_fetched(self: &Arc<Self>, tool: &str, within: Duration) -> Option<Hints> {
        let known = |s: &Self| s.tools.cache.read().expect("lock").declared.get(tool).cloned();
        if let Some(h) = known(self) {
            return Some(h);
        }
        let fetch = async {
            loop {
                if self.all_instances().iter().any(|i| i.is_ready() && !self.is_modern(i)) {
                    return self.refresh_tools().await;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        let _ = tokio::time::timeout(within, fetch).await;
        known(self)
    }

    /// The label of `tool` in metrics: its name when the server declared it (see
    /// [`switchyard_core::metrics::ToolNames`]), else `other`.
    pub fn tool_label(&self, tool: &str) -> Arc<str> {
        self.tool_labels.label(tool, |t| self.tools.cache.read().expect("lock").declared.contains_key(t))
    }

    /// Names in metrics the tools of `items`, the items of a tools/list a client was given that
    /// the server did not send it just now (one remembered from its earlier run): the client
    /// calls them before the server's own list is fetched, and they are no `other`.
    pub fn declare_listed_tools(&self, items: &[serde_json::Value]) {
        self.tool_labels.declare(items.iter().filter_map(|t| t["name"].as_str()));
    }

    /// The kinds of list (tools, prompts, resource templates) whose known items the list hooks
    /// of `before` and `after` show some connected client otherwise.
    async fn shown_differs(&self, before: &Arc<PluginSet>, after: &Arc<PluginSet>) -> Vec<Kind> {
        let items: Vec<ListedTool> = {
            let cache = self.tools.cache.read().expect("lock");
            let tools = cache.declared.keys().map(|n| (Kind::Tool, n.clone()));
            tools.chain(cache.other_words.keys().cloned()).collect::<Vec<_>>()
        }
        .into_iter()
        .map(|(kind, name)| self.listed_item(kind, &name))
        .collect();
        let mut differ = Vec::new();
        let mut callers = self.hub.callers();
        callers.dedup();
        for caller in callers {
            let shown = |set: &Arc<PluginSet>| {
                let (set, items, caller) = (set.clone(), items.clone(), caller.clone());
                async move {
                    let shown = set.list_tools_async("", &caller, items, false).await;
                    shown.into_iter().map(|s| s.listing).collect::<Vec<_>>()
                }
            };
            let (was, is) = (shown(before).await, shown(after).await);
            for ((item, a), b) in items.iter().zip(&was).zip(&is) {
                if a != b && !differ.contains(&item.kind) {
                    differ.push(item.kind);
                }
            }
            if differ.len() == 3 {
                break;
            }
        }
        differ
    }

    /// The names of the items of `kind` the server is known to list.
    pub fn known_names(&self, kind: Kind) -> Vec<String> {
        let cache = self.tools.cache.read().expect("lock");
        match kind {
            Kind::Tool => cache.declared.keys().cloned().collect(),
            _ => cache.other_words.keys().filter(|(k, _)| *k == kind).map(|(_, n)| n.clone()).collect(),
        }
    }

    /// Whether the server is known to list an item of `kind` named `name` (no copy of the names).
    pub fn lists(&self, kind: Kind, name: &str) -> bool {
        let cache = self.tools.cache.read().expect("lock");
        match kind {
            Kind::Tool => cache.declared.contains_key(name),
            _ => cache.other_words.keys().any(|(k, n)| *k == kind && n == name),
        }
    }

    pub fn known_tools(&self) -> Vec<(String, Hints)> {
        let cache = self.tools.cache.read().expect("lock");
        cache.declared.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    /// Fetches every page of tools/list from one instance into the hints cache, unless the
    /// cache holds a whole list from an instance still alive that has not said its list changed.
    /// Refreshes run one at a time, so many sessions starting together send the server one.
    pub async fn refresh_tools(self: &Arc<Self>) {
        let _one = self.tools.refresh.lock().await;
        let instances = self.all_instances();
        let fresh = self.tools.cache.read().expect("lock").fetched_from;
        if fresh.is_some_and(|n| instances.iter().any(|i| i.number() == n && !i.is_dead())) {
            return;
        }
        let Some(inst) = instances.into_iter().find(|i| i.is_ready() && !self.is_modern(i)) else {
            return;
        };
        // The whole list is learnt by fetch_pages itself.
        self.fetch_pages(&inst, "tools").await;
    }

    /// Whether the server's whole tools list is known (and remembered, see
    /// [`Server::remember_list`]), fetched now by [`Server::refresh_tools`] unless it is known
    /// from an instance still alive: what a new session would fetch, fetched once.
    pub(super) async fn tools_fetched(self: &Arc<Self>) -> bool {
        self.refresh_tools().await;
        self.tools.cache.read().expect("lock").fetched_from.is_some()
    }

    /// Every page of `<kind>/list` from one instance, sorted by name (or URI); None on any error.
    /// A fetch of tools/list holds the refresh lock, so a session that starts while a
    /// list_changed is being checked waits for that fetch rather than sending one of its own.
    pub async fn fetch_list(&self, inst: &Instance, kind: &'static str) -> Option<Vec<serde_json::Value>> {
        let _one = if kind == "tools" { Some(self.tools.refresh.lock().await) } else { None };
        self.fetch_pages(inst, kind).await
    }

    async fn fetch_pages(&self, inst: &Instance, kind: &'static str) -> Option<Vec<serde_json::Value>> {
        let method = format!("{kind}/list");
        if kind == "tools" {
            // Fetched again after a tools/list_changed: until this one succeeds, the last
            // whole list is not taken as the server's.
            self.tools.cache.write().expect("lock").fetched_from = None;
        }
        let mut items = self.all_pages(inst, &method, kind).await?;
        if matches!(kind, "tools" | "prompts") {
            self.remember_list(&method, &items);
        }
        sort_list(&mut items);
        if kind == "tools" {
            self.learn_tool_values(&items);
            self.tools.cache.write().expect("lock").fetched_from = Some(inst.number());
        }
        Some(items)
    }

    /// Every page of `method` from `inst`: the items under `field`, in the server's order; None
    /// on any error, or past 100 pages.
    pub(super) async fn all_pages(&self, inst: &Instance, method: &str, field: &str) -> Option<Vec<serde_json::Value>> {
        let timeout = Duration::from_millis(self.limits.init_timeout_ms);
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..100 {
            let params = match &cursor {
                Some(c) => format!(r#"{{"cursor":{}}}"#, codec::json_string(c)),
                None => "{}".to_string(),
            };
            let result = self.own_request(inst, method, &params, timeout, method).await.ok()?;
            let mut page: serde_json::Value = serde_json::from_str(&result).ok()?;
            items.extend(page.get_mut(field).and_then(|v| v.as_array_mut()).map(std::mem::take).unwrap_or_default());
            cursor = page.get("nextCursor").and_then(|c| c.as_str()).map(str::to_string);
            if cursor.is_none() {
                return Some(items);
            }
        }
        None
    }

    /// A list result of `kind` as the plugins of `set` show it to one client (`link`, whose calls
    /// run in `lane` as `caller`): the new result where they change it, None where it stays as
    /// the server sent it. The renames the client is shown are kept on its link.
    pub async fn list_for_client(
        &self,
        set: &Arc<PluginSet>,
        lane: &str,
        caller: &switchyard_core::decision::Caller,
        link: &crate::peer::ClientPeer,
        kind: Kind,
        result: &str,
    ) -> Option<String> {
        if !set.reads_calls() {
            return None;
        }
        match switchyard_policy::annotate::rewrite_list(set, lane, caller, &self.name, kind, result).await {
            Ok(rewritten) => {
                if set.may_hide_or_rename(&self.name) {
                    link.set_tool_view(&self.name, kind, rewritten.view);
                }
                rewritten.result
            }
            Err(e) => {
                tracing::warn!(server = %self.name, "{} result left as the server sent it: {e}", kind.list_method());
                None
            }
        }
    }

    /// When the plugin set changes, tells clients to re-fetch tools/list if any tool's effective
    /// annotations changed (and only then).
    pub async fn watch_policy(self: Arc<Self>) {
        let mut changes = self.policy.changes();
        let mut last = self.policy.current();
        loop {
            tokio::select! {
                _ = self.shutdown.cancelled() => return,
                r = changes.changed() => if r.is_err() { return },
            }
            let now = self.policy.current();
            let known = self.known_tools();
            let any_known = !known.is_empty();
            let differs = any_known
                && last.annotate_async("", &self.name, known.clone()).await
                    != now.annotate_async("", &self.name, known).await;
            // A plugin that judges lists per client changed: what the connected clients are shown
            // of the tools, prompts and resource templates known is compared, kind by kind (a
            // plugin added that changes no list, as timeouts, makes no client re-fetch).
            let changed = if last.shows_tools_as(&now) { Vec::new() } else { self.shown_differs(&last, &now).await };
            last = now;
            for (kind, capability, method) in [
                (Kind::Prompt, "prompts", "notifications/prompts/list_changed"),
                (Kind::ResourceTemplate, "resources", "notifications/resources/list_changed"),
            ] {
                if changed.contains(&kind) && self.declares(capability) {
                    self.hub.broadcast(&codec::notification(method, "{}"));
                }
            }
            let shown_differs = changed.contains(&Kind::Tool);
            if differs || shown_differs {
                let what = if differs { "tool annotations" } else { "the tools some clients are shown" };
                tracing::info!(server = %self.name, "plugins changed {what}; sending tools/list_changed");
                let note = codec::notification("notifications/tools/list_changed", "{}");
                self.hub.broadcast(&note);
            }
        }
    }
}
