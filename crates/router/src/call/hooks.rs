//! The plugins' content hooks on a call (`switchyard:policy@0.3.0`): its params before it is
//! sent, its result before the client gets it. A call no hook is for pays one test of the
//! plugin set: nothing is copied or parsed.

use std::sync::Arc;

use super::refused::{Refused, refused, withheld};
use super::{End, Request};
use crate::server::Server;
use crate::upstream::Reply;
use switchyard_core::call::Call;
use switchyard_core::codec;
use switchyard_core::decision::{CallInfo, Rejection};
use switchyard_core::metrics::Outcome;
use switchyard_policy::{Hooked, Phase, PluginSet};

/// The plugin set when a request hook of it is for `req` ([`requested`] is to run), else None:
/// a call no hook is for pays this test alone.
pub(super) fn request_hooked(server: &Server, req: &Request<'_>) -> Option<Arc<PluginSet>> {
    let set = server.policy.current();
    let call = req.call;
    let tool = if call.method() == "tools/call" { call.name() } else { None };
    set.hooked(Phase::Request, &server.name, call.method(), tool.as_deref()).then_some(set)
}

/// The request hooks of `set` on `req`'s params, in chain order (asked only when
/// [`request_hooked`] says one is for it): Ok(None) to send it as it is, Ok(Some(the request with
/// the params they made), boxed: the call's future holds a pointer), or Err(the client's answer)
/// when one denied it (or failed closed).
pub(super) async fn requested(
    server: &Arc<Server>,
    req: &Request<'_>,
    set: Arc<PluginSet>,
    end: &mut End,
) -> Result<Option<Box<Call>>, Refused> {
    let call = req.call;
    let method = call.method();
    let (info, _) = super::call_info(server, req);
    let hooked = set.hook_async(Phase::Request, &info, call.params().unwrap_or("{}")).await;
    let Hooked { changed, denied, notes } = hooked;
    end.hooks.extend(notes);
    if let Some(rejection) = denied {
        return Err(denial(server, &set, req, &info, end, rejection));
    }
    let Some(params) = changed else { return Ok(None) };
    // Read anew: every field (the arguments, the progress token) may have moved or changed.
    let line = match call.envelope().params.clone() {
        Some(at) => codec::splice(call.line(), at, &params),
        None => codec::request(call.id(), method, &params),
    };
    match Call::parse(line) {
        Ok(changed) => Ok(Some(Box::new(changed))),
        Err(e) => {
            let why = format!("the params a plugin made do not read as a request ({}); nothing was sent", e.message());
            Err(denial(server, &set, req, &info, end, Rejection::new("switchyard", why)))
        }
    }
}

/// Whether a result hook of `set` is for `reply` ([`resulted`] is to run): a result (not an
/// error) of a call a hook is for. A call no hook is for pays this test alone.
pub(super) fn result_hooked(server: &Server, set: &PluginSet, info: &CallInfo, reply: &Reply) -> bool {
    reply.env.result.is_some()
        && !reply.env.is_error
        && set.hooked(Phase::Result, &server.name, &info.method, info.tool.as_deref())
}

/// The result hooks on the server's `reply`, in reverse chain order: the reply the client is to
/// get (changed as if the server had sent it), or Err(the client's answer) when one denied it
/// (or failed closed). An error the server answered passes untouched.
pub(super) async fn resulted(
    server: &Arc<Server>,
    set: &Arc<PluginSet>,
    req: &Request<'_>,
    info: &CallInfo,
    reply: Reply,
    end: &mut End,
) -> Result<Reply, String> {
    let Some(r) = reply.env.result.clone().filter(|_| !reply.env.is_error) else { return Ok(reply) };
    if !set.hooked(Phase::Result, &server.name, &info.method, info.tool.as_deref()) {
        return Ok(reply);
    }
    let Hooked { changed, denied, notes } = set.hook_async(Phase::Result, info, &reply.line[r.clone()]).await;
    end.hooks.extend(notes);
    if let Some(rejection) = denied {
        return Err(withhold(server, set, req, info, end, rejection));
    }
    let Some(result) = changed else { return Ok(reply) };
    let line = codec::splice(&reply.line, r, &result);
    match codec::parse(&line) {
        Ok(env) => Ok(Reply { line, env }),
        Err(e) => {
            let why = format!("the result a plugin made does not read as a response ({})", e.message());
            Err(withhold(server, set, req, info, end, Rejection::new("switchyard", why)))
        }
    }
}

/// A request hook's refusal as the client's answer (a tool result with `isError` for
/// `tools/call`), logged and noted in `end`.
fn denial(
    server: &Server,
    set: &PluginSet,
    req: &Request<'_>,
    info: &CallInfo,
    end: &mut End,
    rejection: Rejection,
) -> Refused {
    answered(server, set, req, info, end, rejection, false)
}

/// A result hook's refusal as the client's answer: the server ran the call, so the answer says
/// its result was withheld (never that it did not run), and the audit line says `withheld`.
fn withhold(
    server: &Server,
    set: &PluginSet,
    req: &Request<'_>,
    info: &CallInfo,
    end: &mut End,
    rejection: Rejection,
) -> String {
    answered(server, set, req, info, end, rejection, true).answer
}

/// [`denial`] (`ran` false) and [`withhold`] (`ran` true): logged, answered, noted in `end`.
fn answered(
    server: &Server,
    set: &PluginSet,
    req: &Request<'_>,
    info: &CallInfo,
    end: &mut End,
    rejection: Rejection,
    ran: bool,
) -> Refused {
    let call = match &info.tool {
        Some(t) => format!("tools/call `{t}`"),
        None => info.method.to_string(),
    };
    let what = if ran { format!("the result of {call} (it ran)") } else { call };
    server.log_refusal(req.session_label, &what, &rejection);
    let (tool, id) = (info.tool.as_deref(), req.call.id());
    let (answer, outcome) = match ran {
        true => (withheld(set, tool, req.modern, id, rejection), Outcome::Withheld),
        false => (refused(set, tool, req.modern, id, rejection), Outcome::Rejected),
    };
    (end.outcome, end.code, end.refused_by) = (outcome, answer.code, Some(answer.by.clone()));
    // The chain that judged the call, also when a hook refused it before the chain's `decide`.
    if server.audit().is_some() {
        end.plugins = set.judges_of(&server.name);
    }
    answer
}
