//! The tools a client is shown and calls, as switchyard shapes them for it: its list kept within
//! its budget (a call by a shortened name comes back to the tool), search mode's two tools
//! answered here, and `tools.listChanged` declared at initialize (Claude Code re-fetches its
//! tools on a list_changed only from a server that declared it).

use std::sync::Arc;

use serde_json::{Value, json};

use super::Session;
use crate::call::Cancel;
use crate::search::{self, CALL_TOOL, SEARCH_TOOL};
use crate::server::Server;
use switchyard_core::call::Call;
use switchyard_core::codec;

/// What becomes of a client's request before it is forwarded.
pub(super) enum Shaped {
    /// Forwarded as it came.
    AsIs,
    /// Forwarded as this request (a tool's name put back, `call_tool` made the tool's call).
    Rewritten(Box<Call>),
    /// Answered here (None: the client cancelled it).
    Answered(Option<String>),
}

impl Session {
    /// A `tools/list` or `tools/call` as the client's budget and search mode make it.
    pub(super) async fn shape_request(self: &Arc<Self>, call: &Call, cancel: &Cancel) -> Shaped {
        // Other requests pass at the cost of this comparison.
        if !matches!(call.method(), "tools/list" | "tools/call") {
            return Shaped::AsIs;
        }
        let server = self.server();
        match call.method() {
            // Answered at once, while the server may still start: the list does not depend on it.
            "tools/list"
                if server.searching(&self.link) && (self.sent_initialize() || call.protocol_version().is_some()) =>
            {
                Shaped::Answered(Some(codec::response_ok(call.id(), &server.search_list(&self.link))))
            }
            "tools/call" => {
                let Some(called) = call.name() else { return Shaped::AsIs };
                if server.searching(&self.link) {
                    match called.as_ref() {
                        // Boxed where awaited: each holds a whole request of its own.
                        SEARCH_TOOL => {
                            return Shaped::Answered(Box::pin(self.search_tools(&server, call, cancel)).await);
                        }
                        CALL_TOOL => return Box::pin(self.call_tool(&server, call, cancel)).await,
                        _ => {}
                    }
                }
                match (server.unshortened(&self.link, &called), call.fields().name.clone()) {
                    (Some(original), Some(span)) => {
                        Shaped::Rewritten(Box::new(call.splice(span, &codec::json_string(&original))))
                    }
                    _ => Shaped::AsIs,
                }
            }
            _ => Shaped::AsIs,
        }
    }

    /// The response to the client's `method` as its budget shapes it: a tools/list's names
    /// kept within it; an initialize that declares `tools.listChanged`.
    pub(super) fn shape_response(&self, method: &str, resp: String) -> String {
        if !matches!(method, "tools/list" | "initialize") {
            return resp;
        }
        let server = self.server();
        let Ok(env) = codec::parse(&resp) else { return resp };
        let Some(r) = env.result.clone() else { return resp };
        let new = match method {
            // Search mode's list is made as it is shown (`Server::search_list`).
            "tools/list" if server.searching(&self.link) => None,
            "tools/list" => server.shape_tools(&self.link, &resp[r.clone()]),
            "initialize" => declare_list_changed(&resp[r.clone()], server.searching(&self.link)),
            _ => None,
        };
        match new {
            Some(new) => codec::splice(&resp, r, &new),
            None => resp,
        }
    }

    /// `search_tools`: the best matches of its query among the server's tools.
    async fn search_tools(self: &Arc<Self>, server: &Arc<Server>, call: &Call, cancel: &Cancel) -> Option<String> {
        let index = match self.search_index(server, cancel).await? {
            Ok(index) => index,
            Err(e) => return Some(tool_answer(call.id(), search::tool_error(&e))),
        };
        let result = search::search_result(&index, &arguments(call));
        // A client that acts on list_changed may get the tools found in its list too.
        let found: Vec<String> = result["structuredContent"]["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["name"].as_str().map(str::to_string))
            .collect();
        if server.add_found(&self.link, &found) {
            self.link.send_from_server(codec::notification("notifications/tools/list_changed", "{}"));
        }
        Some(tool_answer(call.id(), result))
    }

    /// `call_tool`: the call of the tool it names, through the policy of the server as any.
    async fn call_tool(self: &Arc<Self>, server: &Arc<Server>, call: &Call, cancel: &Cancel) -> Shaped {
        let index = match self.search_index(server, cancel).await {
            None => return Shaped::Answered(None),
            Some(Ok(index)) => index,
            Some(Err(e)) => return Shaped::Answered(Some(tool_answer(call.id(), search::tool_error(&e)))),
        };
        let (name, args) = match search::call_target(&index, &arguments(call)) {
            Ok(target) => target,
            Err(e) => return Shaped::Answered(Some(tool_answer(call.id(), search::tool_error(&e)))),
        };
        let mut params = json!({ "name": name, "arguments": args });
        // Its progress token and trace context stay the client's.
        if let Some(meta) =
            call.params().and_then(|p| serde_json::from_str::<Value>(p).ok()).and_then(|p| p.get("_meta").cloned())
        {
            params["_meta"] = meta;
        }
        let line = format!(r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{params}}}"#, call.id());
        match Call::parse(line) {
            Ok(c) => Shaped::Rewritten(Box::new(c)),
            Err(e) => {
                Shaped::Answered(Some(codec::response_error(call.id(), codec::INVALID_PARAMS, &e.message(), None)))
            }
        }
    }

    /// The tools `search_tools` searches for this client: its whole tool list as the plugins
    /// show it, fetched once per session (and renewed when the server's list changes). None: the
    /// client cancelled; Err: why the list could not be had.
    async fn search_index(
        self: &Arc<Self>,
        server: &Arc<Server>,
        cancel: &Cancel,
    ) -> Option<Result<Arc<search::Index>, String>> {
        if let Some(index) = self.link.shown_tools(&server.name).and_then(|s| s.index.clone()) {
            return Some(Ok(index));
        }
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        for page in 0..100 {
            let params = match &cursor {
                Some(c) => json!({ "cursor": c }),
                None => json!({}),
            };
            let line = json!({"jsonrpc": "2.0", "id": format!("switchyard-search-{page}"), "method": "tools/list", "params": params});
            let call = match Call::parse(line.to_string()) {
                Ok(c) => c,
                Err(e) => return Some(Err(e.message())),
            };
            let resp = self.dispatch(&call, call.id(), cancel).await?;
            let v: Value = serde_json::from_str(&resp).unwrap_or_default();
            if let Some(error) = v.get("error") {
                let why = error.get("message").and_then(Value::as_str).unwrap_or("an error");
                return Some(Err(format!(
                    "The tools of server `{}` could not be listed to search them: {why}",
                    server.name
                )));
            }
            let Some(result) = v.get("result") else { return Some(Err("tools/list gave no result".into())) };
            items.extend(result.get("tools").and_then(Value::as_array).cloned().unwrap_or_default());
            cursor = result.get("nextCursor").and_then(Value::as_str).map(str::to_string);
            if cursor.is_none() {
                return Some(Ok(server.keep_search_index(&self.link, items)));
            }
        }
        Some(Err(format!("server `{}` lists its tools in more than 100 pages; not searched", server.name)))
    }
}

/// The `params.arguments` of a tools/call (`{}` when absent).
fn arguments(call: &Call) -> Value {
    let params: Value = call.params().and_then(|p| serde_json::from_str(p).ok()).unwrap_or_default();
    params.get("arguments").cloned().unwrap_or_else(|| json!({}))
}

fn tool_answer(id: &str, result: Value) -> String {
    codec::response_ok(id, &result.to_string())
}

/// An initialize result that declares `tools.listChanged: true` (None: it stays): switchyard
/// tells its clients when the tools they see change. A server with no tools declares none,
/// unless the client is given search mode's two.
fn declare_list_changed(result: &str, searching: bool) -> Option<String> {
    let mut v: Value = serde_json::from_str(result).ok()?;
    let caps = v.get_mut("capabilities")?.as_object_mut()?;
    match caps.get_mut("tools") {
        Some(Value::Object(tools)) => {
            if tools.get("listChanged") == Some(&Value::Bool(true)) {
                return None;
            }
            tools.insert("listChanged".into(), Value::Bool(true));
        }
        _ if searching => {
            caps.insert("tools".into(), json!({ "listChanged": true }));
        }
        _ => return None,
    }
    Some(v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initialize_declares_list_changed_for_tools_only() {
        let with = declare_list_changed(r#"{"capabilities":{"tools":{}},"protocolVersion":"2025-11-25"}"#, false);
        let v: Value = serde_json::from_str(&with.expect("changed")).expect("json");
        assert_eq!(v["capabilities"]["tools"]["listChanged"], true);
        assert_eq!(v["protocolVersion"], "2025-11-25");
        assert_eq!(declare_list_changed(r#"{"capabilities":{"tools":{"listChanged":true}}}"#, false), None);
        assert_eq!(declare_list_changed(r#"{"capabilities":{"prompts":{}}}"#, false), None);
        let searching = declare_list_changed(r#"{"capabilities":{}}"#, true).expect("tools added");
        assert!(searching.contains(r#""tools":{"listChanged":true}"#), "{searching}");
    }
}
