//! A session's requests about tasks: each to the instance that holds its task, and tasks/list
//! merged from the instances holding this session's tasks (never another session's).

use super::Session;
use crate::call::{self, Cancel};
use crate::server::tasks::{self, Pinned};
use switchyard_core::call::Call;
use switchyard_core::codec;

/// The most pages of one instance's tasks/list followed before the list is answered.
const MAX_PAGES: usize = 100;

impl Session {
    /// A request about one task (get, result, cancel, update): to the instance the task id
    /// names, if it is one this router handed this session and that instance still runs; else
    /// the spec's answer for an unknown task (-32602) at once. A request without a task id goes
    /// on as it is, for the server to answer.
    pub(super) async fn about_task(&self, call: &Call, cancel: &Cancel, modern: bool) -> Option<String> {
        let server = &self.server();
        let id = call.id();
        let span = call.fields().task_id.clone();
        let (Some(span), Some(client_task)) = (span, call.string(&call.fields().task_id)) else {
            return self.forward_to(call, cancel, modern, None).await;
        };
        let not_found = |why: String| {
            Some(codec::response_error(
                id,
                codec::INVALID_PARAMS,
                &format!("Task not found: {client_task} ({why})"),
                None,
            ))
        };
        let Some(route) = tasks::open(&server.name, &client_task) else {
            return not_found(format!(
                "switchyard did not hand out this task id for server `{}`: it is mistyped, from another server, or from before switchyard restarted",
                server.name
            ));
        };
        if route.session != if modern { tasks::NO_SESSION } else { self.id } {
            return not_found("it was not created in this session".to_string());
        }
        // The session may have moved to another server of the family since (its roots changed).
        let Some((holder, instance)) = server.family_instance(route.instance) else {
            return not_found(format!(
                "the instance of server `{}` that held it (#{}) has ended, and its tasks with it; start the task again",
                server.name, route.instance
            ));
        };
        let sent = call.splice(span, &codec::json_string(&route.upstream));
        let created_by = holder.hub.tasks.tool_of(route.instance, &route.upstream);
        let pinned = Pinned { instance, ids: Some((route.upstream, client_task.into_owned())), created_by };
        self.forward_to(&sent, cancel, modern, Some(&pinned)).await
    }

    /// The retry of a request the server answered `input_required` (2026-07-28): a
    /// `requestState` switchyard sealed goes, as the server gave it, to the instance that gave
    /// it (the spec's -32602 at once when that instance has ended). Any other state goes on as
    /// it is, for the server to judge as it would directly.
    pub(super) async fn resume(&self, call: &Call, cancel: &Cancel) -> Option<String> {
        let server = &self.server();
        let sealed = call.string(&call.fields().request_state);
        let (Some(span), Some(route)) =
            (call.fields().request_state.clone(), sealed.and_then(|s| tasks::open_state(&server.name, &s)))
        else {
            return self.forward_to(call, cancel, true, None).await;
        };
        let id = call.id();
        let Some((_, instance)) = server.family_instance(route.instance) else {
            let message = format!(
                "Invalid requestState: the instance of server `{}` that asked for this input (#{}) has ended, and the request's state with it; send the request again without `requestState` and `inputResponses`",
                server.name, route.instance
            );
            return Some(codec::response_error(id, codec::INVALID_PARAMS, &message, None));
        };
        let sent = call.splice(span, &codec::json_string(&route.upstream));
        let span = self.call_span(call);
        let req = call::Request { resume: Some(instance), span: &span, ..self.request(&sent, cancel, true, None) };
        call::forward(&self.server(), req).await
    }

    /// tasks/list (2025-11-25): each instance holding tasks of this session is asked (every page),
    /// and the tasks this session was handed are answered, under their ids, in one list. An
    /// instance lists every task it holds, other sessions' too: only this session's pass.
    pub(super) async fn list_tasks(&self, call: &Call, cancel: &Cancel) -> Option<String> {
        let server = &self.server();
        let id = call.id();
        if call.text(&call.fields().cursor).is_some_and(|c| c != "null") {
            return Some(codec::response_error(
                id,
                codec::INVALID_PARAMS,
                "Invalid cursor: switchyard answers tasks/list whole, without pages; send it without a cursor",
                None,
            ));
        }
        // Held on this server, or on another of its family the session was on before it moved.
        let mine: Vec<_> = server.family_members().iter().flat_map(|s| s.hub.tasks.of_session(self.id)).collect();
        let mut listed = Vec::new();
        let mut asked = false;
        for (number, ids) in mine {
            // An instance that ended took its tasks with it: they are not listed.
            let Some((holder, instance)) = server.family_instance(number) else {
                continue;
            };
            let pinned = Pinned { instance, ids: None, created_by: None };
            // The client's request asks for the first page; switchyard asks for the next ones.
            let mut next: Option<Call> = None;
            for _ in 0..MAX_PAGES {
                let page = next.as_ref().unwrap_or(call);
                let reply = self.forward_to(page, cancel, false, Some(&pinned)).await?;
                let v: serde_json::Value = match serde_json::from_str(&reply) {
                    Ok(v) => v,
                    Err(_) => return Some(reply),
                };
                // The server's own error (say, it lists no tasks) is the answer, as it would be directly.
                if v.get("error").is_some() {
                    return Some(reply);
                }
                asked = true;
                for t in v["result"]["tasks"].as_array().into_iter().flatten() {
                    let Some(upstream) = t["taskId"].as_str().filter(|u| ids.iter().any(|i| i == u)) else { continue };
                    let route = tasks::Route { instance: number, session: self.id, upstream: upstream.to_string() };
                    let mut t = t.clone();
                    t["taskId"] = serde_json::Value::String(tasks::seal(&server.name, &route));
                    if let Some(status) = t["status"].as_str() {
                        holder.hub.tasks.saw_status(number, upstream, status);
                    }
                    listed.push(t);
                }
                match v["result"]["nextCursor"].as_str() {
                    Some(cursor) => {
                        let params = serde_json::json!({ "cursor": cursor }).to_string();
                        next = match Call::parse(codec::request(id, "tasks/list", &params)) {
                            Ok(page) => Some(page),
                            Err(e) => return Some(codec::response_error(id, e.code(), &e.message(), None)),
                        };
                    }
                    None => break,
                }
            }
        }
        if !asked {
            // No task of this session is held anywhere: the server is asked as usual, for its
            // own answer (an error when it has no tasks), and shows none of its tasks.
            let reply = self.forward_to(call, cancel, false, None).await?;
            return Some(match serde_json::from_str::<serde_json::Value>(&reply) {
                Ok(v) if v.get("result").is_some() => codec::response_ok(id, r#"{"tasks":[]}"#),
                _ => reply,
            });
        }
        Some(codec::response_ok(id, &serde_json::json!({ "tasks": listed }).to_string()))
    }

    /// Through the policy and the engine: to the instance `task` names, else to one the pool picks
    /// (`modern`: of the 2026-07-28 era).
    pub(super) async fn forward_to(
        &self,
        call: &Call,
        cancel: &Cancel,
        modern: bool,
        task: Option<&Pinned>,
    ) -> Option<String> {
        // The call's span ends when the call does: here, or where the call is dropped (cancelled).
        let span = self.call_span(call);
        call::forward(&self.server(), call::Request { span: &span, ..self.request(call, cancel, modern, task) }).await
    }

    /// The span of `call` as switchyard serves it (see `switchyard_telemetry::server_span`):
    /// what its attempts' spans are children of.
    pub(super) fn call_span(&self, call: &Call) -> switchyard_telemetry::Span {
        if !switchyard_telemetry::on() {
            return switchyard_telemetry::Span::none();
        }
        let caller = self.link.caller();
        let era = Some(&*caller.era).filter(|e| !e.is_empty());
        switchyard_telemetry::server_span(call, &self.label, era, caller.name.as_deref(), &self.span)
    }

    pub(super) fn request<'a>(
        &'a self,
        call: &'a Call,
        cancel: &'a Cancel,
        modern: bool,
        task: Option<&'a Pinned>,
    ) -> call::Request<'a> {
        call::Request {
            call,
            session: self.id,
            session_label: &self.label,
            link: &self.link,
            cancel,
            modern,
            task,
            resume: None,
            span: switchyard_telemetry::Span::none_ref(),
        }
    }
}
