//! The server's reply made the client's: how it counts in the metrics, task ids and an
//! `input_required` state sealed with their instance, the client's id put back, lists rewritten.

use std::sync::Arc;
use std::time::Duration;

use super::Request;
use super::resolve::Effective;
use crate::gate::Permit;
use crate::server::Server;
use crate::server::tasks::{self, Pinned};
use crate::upstream::{Instance, Reply};
use switchyard_core::codec;
use switchyard_core::decision::{CallInfo, Concurrency};
use switchyard_core::metrics::Outcome;
use switchyard_policy::{Kind, PluginSet};

/// How an answer from the server counts: a JSON-RPC error (with its code), a tool's own error
/// (`isError`), or a success. Only an error is parsed further.
pub(super) fn reply_outcome(reply: &Reply, tool_call: bool) -> (Outcome, Option<i64>) {
    if reply.env.is_error {
        let code =
            serde_json::from_str::<serde_json::Value>(&reply.line).ok().and_then(|v| v["error"]["code"].as_i64());
        return (Outcome::Error, code);
    }
    match &reply.env.result {
        Some(r) if tool_call && switchyard_core::metrics::is_tool_error(&reply.line[r.clone()]) => {
            (Outcome::ToolError, None)
        }
        _ => (Outcome::Ok, None),
    }
}

/// Task ids in a reply, between the server's and the client's: a call that created a task gets
/// the id that routes back to its instance (and its gate permit stays with the task); a request
/// about a task gets the id the client sent. Other replies pass unchanged.
pub(super) fn task_ids(
    server: &Server,
    req: &Request<'_>,
    info: &CallInfo,
    eff: &Effective,
    mut reply: Reply,
    permit: Option<Permit>,
    instance: &Instance,
) -> Reply {
    let Some(r) = reply.env.result.clone() else { return reply };
    let result = &reply.line[r.clone()];
    let new = match req.task {
        Some(Pinned { ids: Some((upstream, client)), .. }) => {
            // tasks/result answers once the task is terminal; the others say its status.
            let status = match req.call.method() {
                "tasks/result" => Some("completed".to_string()),
                _ => tasks::status_in(result),
            };
            if let Some(status) = status {
                server.hub.tasks.saw_status(instance.number(), upstream, &status);
            }
            tasks::replace_task_id(result, upstream, client)
        }
        Some(Pinned { ids: None, .. }) => None,
        None if req.call.method() == "tools/call" => {
            let Some((upstream, status, ttl)) = tasks::created_task(result) else { return reply };
            let session = if req.modern { tasks::NO_SESSION } else { req.session };
            // Held until the task ends, or its time to live (the call's longest allowed
            // time when the server gives none) passes.
            let hold = Duration::from_millis(ttl.unwrap_or(server.limits.max_call_timeout_ms));
            let permit = permit.filter(|_| !tasks::TERMINAL.contains(&status.as_str()));
            if permit.is_some() && !matches!(eff.concurrency, Concurrency::Shared) {
                tracing::info!(server = %server.name, instance = %instance.label(), "task {upstream} keeps its call's {:?} gate until it ends", eff.concurrency);
            }
            let tool = info.tool.as_deref().map(String::from);
            let client =
                server.hub.tasks.created(&server.name, instance.number(), session, &upstream, tool, permit, hold);
            tasks::replace_task_id(result, &upstream, &client)
        }
        None => None,
    };
    if let Some(new) = new {
        let line = codec::splice(&reply.line, r, &new);
        match codec::parse(&line) {
            Ok(env) => reply = Reply { line, env },
            Err(e) => {
                tracing::warn!(server = %server.name, "a reply with task ids rewritten did not parse ({}); sent as the server sent it", e.message())
            }
        }
    }
    reply
}

/// The `requestState` of an `input_required` reply, sealed with the instance that gave it: the
/// client's retry carries it back, and goes to that instance (a server may keep the state, or the
/// key that protects it, in that instance's memory only). Other replies pass unchanged.
pub(super) fn input_state(server: &Server, reply: Reply, instance: &Instance) -> Reply {
    let Some(r) = reply.env.result.clone() else { return reply };
    let Some(state) = tasks::input_state(&reply.line[r.clone()]) else { return reply };
    let route = tasks::Route { instance: instance.number(), session: tasks::NO_SESSION, upstream: state };
    let sealed = tasks::seal_state(&server.name, &route);
    let Some(result) = tasks::replace_input_state(&reply.line[r.clone()], &sealed) else { return reply };
    let line = codec::splice(&reply.line, r, &result);
    match codec::parse(&line) {
        Ok(env) => Reply { line, env },
        Err(e) => {
            tracing::warn!(server = %server.name, "an input_required reply with its state sealed did not parse ({}); sent as the server sent it", e.message());
            reply
        }
    }
}

/// Puts the client's id back.
pub(super) fn finish(reply: Reply, client_id: &str) -> String {
    let id_span = reply.env.id.clone().expect("responses routed by id have one");
    codec::splice_owned(reply.line, id_span, client_id)
}

/// The reply to a list of `kind` (tools/list, prompts/list): what it lists learned, annotation
/// overrides applied, and the client's id put back.
pub(super) async fn finish_list(
    server: &Server,
    set: &Arc<PluginSet>,
    req: &Request<'_>,
    info: &CallInfo,
    kind: Kind,
    reply: Reply,
    client_id: &str,
) -> String {
    if let Some(r) = reply.env.result.clone() {
        let id_span = reply.env.id.clone().expect("responses routed by id have one");
        let result = &reply.line[r.clone()];
        server.learn_listed(kind, result);
        if let Some(new) = server.list_for_client(set, req.session_label, &info.caller, req.link, kind, result).await {
            return codec::splice_many(&reply.line, vec![(id_span, client_id), (r, new.as_str())]);
        }
    }
    finish(reply, client_id)
}
