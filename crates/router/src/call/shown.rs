//! A call by the name a plugin shows its client: checked against what the plugins show that
//! client (a hidden tool is refused), and put back under the server's own name.

use std::sync::Arc;
use std::time::Duration;

use super::refused::{Refused, refused};
use super::{End, Request, caller_of};
use crate::server::Server;
use switchyard_core::call::Call;
use switchyard_core::codec;
use switchyard_policy::{Kind, PluginSet, annotate};

/// How long a call by an unknown name waits for a starting server's tool list.
const RENAMED_WAIT: Duration = Duration::from_secs(2);

/// The server's item of `kind` a plugin shows this client as `called`, when the client calls
/// by a name the server does not list and no list this session saw gave it: a daemon started
/// anew under a `connect` whose client listed before, or a client that keeps its tool list
/// between sessions. Asked of the chain for the items the server is known to list (its answers
/// are mostly kept already).
async fn renamed_to(
    set: &Arc<PluginSet>,
    server: &Arc<Server>,
    req: &Request<'_>,
    caller: &switchyard_core::decision::Caller,
    kind: Kind,
    called: &str,
) -> Option<String> {
    // A server just started has not been asked for its tools yet: it is, once (a name it does
    // not list is then known not to be its own).
    // (A server of the 2026-07-28 era is not asked: its tools are learned from the lists that
    // pass.)
    if kind == Kind::Tool && !req.modern {
        server.declared_hints_fetched(called, RENAMED_WAIT).await;
    }
    let items: Vec<_> = server.known_names(kind).iter().map(|n| server.listed_item(kind, n)).collect();
    let shown = set.list_tools_async(req.session_label, caller, items.clone(), false).await;
    items
        .into_iter()
        .zip(shown)
        .find(|(_, s)| s.hidden_by.is_none() && s.listing.name == called)
        .map(|(item, _)| item.name)
}

/// Whether `req` is checked against what the plugins show its client ([`shown_tool`]): a
/// `tools/call` or `prompts/get` (not about a task) while a plugin of the set may hide or rename
/// tools and prompts. The set, and the kind of item called, when it is.
pub(super) fn shows(server: &Server, req: &Request<'_>) -> Option<(Kind, Arc<PluginSet>)> {
    let kind = match req.call.method() {
        "tools/call" => Kind::Tool,
        "prompts/get" => Kind::Prompt,
        _ => return None,
    };
    if req.task.is_some() {
        return None;
    }
    let set = server.policy.current();
    set.may_hide_or_rename(&server.name).then_some((kind, set))
}

/// A `tools/call` (or `prompts/get`) checked against what the plugins of `set` show its client
/// (asked only when [`shows`] says so): Ok(Some(the request with the server's name of the
/// tool)) when the client called it by a name a plugin gave it; Ok(None) to send it as it is;
/// Err(the client's answer) when a plugin hides the tool from this client or shows it under
/// another name (for a tool, a result the model reads; see `refused`). The request made is
/// boxed: only a renamed call pays for it, and the call's future holds a pointer. A refusal
/// notes in `end` the plugins that judged it, for the audit line.
pub(super) async fn shown_tool(
    server: &Arc<Server>,
    req: &Request<'_>,
    (kind, set): (Kind, Arc<PluginSet>),
    end: &mut End,
) -> Result<Option<Box<Call>>, Refused> {
    let (Some(span), Some(called)) = (req.call.fields().name.clone(), req.call.name()) else { return Ok(None) };
    let called = called.into_owned();
    let caller = caller_of(req);
    let mut view = req.link.tool_view(&server.name, kind);
    if !view.as_ref().is_some_and(|v| v.renamed.contains_key(&called))
        && !server.lists(kind, &called)
        && let Some(original) = renamed_to(&set, server, req, &caller, kind, &called).await
    {
        let found = annotate::ClientView { renamed: [(called.clone(), original)].into(), ..Default::default() };
        req.link.set_tool_view(&server.name, kind, found);
        view = req.link.tool_view(&server.name, kind);
    }
    let listed = |name: &str| server.listed_item(kind, name);
    let client_id = req.call.id();
    match annotate::check_call(&set, req.session_label, &caller, view.as_deref(), &called, listed).await {
        Ok(None) => Ok(None),
        // The server's name in place of the one the client called: the rest stays as it came.
        Ok(Some(original)) => Ok(Some(Box::new(req.call.splice(span, &codec::json_string(&original))))),
        Err(rejection) => {
            server.log_refusal(req.session_label, &format!("{} `{called}`", kind.noun()), &rejection);
            let tool = (kind == Kind::Tool).then_some(called.as_str());
            // The audit line names the chain that judged the call, refused before `decide` too.
            if server.audit().is_some() {
                end.plugins = set.judges_of(&server.name);
            }
            Err(refused(&set, tool, req.modern, client_id, rejection))
        }
    }
}
