//! Search mode through a group (`[groups.NAME] expose = "search"`, or a client kind's
//! `[budgets.KIND] expose = "search"`): the client's tool list is `search_tools` and
//! `call_tool`; a search ranks the group's merged list (each member's tools as the group names
//! them, after each server's plugins), and `call_tool` is routed as a call of that tool is.

use std::sync::Arc;

use serde_json::{Value, json};

use super::GroupSession;
use super::catalog::{List, Unrouted};
use crate::budget::Budget;
use crate::search::{self, CALL_TOOL, SEARCH_TOOL};
use switchyard_config::Expose;
use switchyard_core::call::Call;
use switchyard_core::codec;

/// Whether `name` is one of search mode's two tools.
pub(super) fn is_search_tool(name: &str) -> bool {
    name == SEARCH_TOOL || name == CALL_TOOL
}

impl GroupSession {
    /// Whether this client is given search mode: the group's `expose`, else its budget's.
    pub(super) fn searching(&self) -> bool {
        match self.expose {
            Some(expose) => expose == Expose::Search,
            None => {
                self.budgets.values().any(|b| b.expose == Some(Expose::Search))
                    && Budget::for_client(self.peer.caller().name.as_deref(), &self.budgets).expose == Expose::Search
            }
        }
    }

    /// The client's `tools/list` in search mode: the two tools, and those its searches found
    /// that joined its list (as the group's merged list has them now).
    pub(super) fn search_list(self: Arc<Self>, id: String) {
        let found = self.found.lock().expect("lock").clone();
        if found.is_empty() {
            return self.reply(&id, json!({ "tools": search::fixed_tools() }));
        }
        tokio::spawn(async move {
            let index = self.search_index().await;
            let mut tools = search::fixed_tools();
            tools.extend(found.iter().filter_map(|name| index.get(name).cloned()));
            self.reply(&id, json!({ "tools": tools }));
        });
    }

    /// Adds the tools a search found (`result`, its answer) to the client's list when its
    /// budget says so; the client is told its list changed when any is new to it.
    fn add_found(&self, result: &Value) {
        if !Budget::for_client(self.peer.caller().name.as_deref(), &self.budgets).add_found {
            return;
        }
        let names = result["structuredContent"]["tools"].as_array().into_iter().flatten();
        let names = names.filter_map(|t| t["name"].as_str());
        let mut found = self.found.lock().expect("lock");
        let before = found.len();
        for name in names {
            if !found.iter().any(|f| f == name) {
                found.push(name.to_string());
            }
        }
        if found.len() > before {
            drop(found);
            tracing::debug!(group = %self.group, session = %self.label, "tools found by search join the client's list");
            self.send(&json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}));
        }
    }

    /// A member's tools changed: the next search fetches the merged list anew.
    pub(super) fn forget_search_index(&self) {
        *self.search_index.lock().expect("lock") = None;
    }

    /// `search_tools` or `call_tool` (`call`, request `id`): answered from the merged list, or
    /// routed as the call of the tool it names, spliced into the client's call (its params are
    /// not read again; its arguments are the search's input).
    pub(super) fn search_tools_call(self: Arc<Self>, id: String, call: Call) {
        tokio::spawn(async move {
            let index = self.search_index().await;
            let args = call.text(&call.fields().arguments).and_then(|a| serde_json::from_str(a).ok());
            let args = args.unwrap_or_else(|| json!({}));
            if call.name().as_deref() == Some(SEARCH_TOOL) {
                let result = search::search_result(&index, &args);
                self.add_found(&result);
                return self.reply(&id, result);
            }
            let (name, arguments) = match search::call_target(&index, &args) {
                Ok(target) => target,
                Err(e) => return self.reply(&id, search::tool_error(&e)),
            };
            // The target was read from `call_tool`'s arguments: they are there.
            let Some(at) = call.fields().arguments.clone() else {
                let why = format!("the call of `{name}` could not be made: `{CALL_TOOL}` has no arguments");
                return self.error(&id, codec::INTERNAL_ERROR, &why);
            };
            let call = call.into_spliced(at, &arguments.to_string());
            // Sent on once the search's list is in: not when the client cancelled it meanwhile.
            if self.cancelled_before_sent(&id) {
                return;
            }
            match self.catalog().route_name(List::Tools, &name) {
                // The server's own name goes where `call_tool`'s was.
                Ok(r) => {
                    let named = call.fields().name.clone();
                    self.forward(id, call, r, named)
                }
                Err(Unrouted::Unknown(why)) => self.error(&id, codec::INVALID_PARAMS, &why),
            }
        });
    }

    /// The merged tool list indexed, fetched once (and again after a member's list changed).
    async fn search_index(self: &Arc<Self>) -> Arc<search::Index> {
        if let Some(index) = self.search_index.lock().expect("lock").clone() {
            return index;
        }
        let merged = self.merged(List::Tools).await;
        let tools = merged.get("tools").and_then(Value::as_array).cloned().unwrap_or_default();
        let index = Arc::new(search::Index::new(tools));
        *self.search_index.lock().expect("lock") = Some(index.clone());
        index
    }
}
