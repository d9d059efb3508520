//! The POST path: one message per POST, its JSON or SSE answer, and the replay after a lost session.

use std::sync::Arc;

use reqwest::header::{CONTENT_TYPE, HeaderValue};
use reqwest::{Method, Response, StatusCode};

use super::auto::Mode;
use super::session::says_session_lost;
use super::{Info, Inner, answers, header_value, negotiated_version};
use crate::upstream::remote::event::{Event, Parser};
use crate::upstream::remote::retry::Reconnect;
use crate::upstream::remote::{
    Core, For, MAX_SIGN_INS, describe, is_event_stream, jsonrpc_error_message, maybe_delivered, never_sent,
    not_delivered, refused, snippet_of,
};
use crate::upstream::transport::{Outbound, RemoteKind};
use switchyard_core::codec;
use switchyard_mcp as mcp;

/// How one POST ended, for the caller that decides what follows.
enum Outcome {
    /// Done: answered, accepted, or reported as lost.
    Done,
    /// The server no longer knows the session: re-initialise and replay.
    SessionLost(String),
    /// `auto`'s probe was refused the way legacy servers refuse it.
    Legacy(String),
    /// The server asked for a sign-in, which is done: send the message again.
    SignedIn,
    /// A 2026-07-28 `tools/call` refused for a missing `Mcp-Param-*` header (-32020), of a tool
    /// switchyard knows no schema of yet: the server's answer, held while the tool list is read.
    ParamsUnknown(String),
}

/// Pages of a tool list read for a call's `Mcp-Param-*` headers, at most.
const MAX_TOOL_PAGES: usize = 20;

impl Inner {
    /// Sends one message, re-initialising and replaying it once if the session was lost, and
    /// falling back to legacy SSE if it is `auto`'s refused probe.
    pub(super) async fn deliver(self: Arc<Self>, msg: Outbound, info: Info, probe: bool) {
        let generation = self.state.lock().unwrap().generation;
        let outcome = self.post_signed(&msg, &info, probe).await;
        if probe && !matches!(outcome, Outcome::Legacy(_)) {
            // The probe neither settled it (it failed otherwise) nor was refused: the next
            // request probes again, and what waited goes over Streamable HTTP meanwhile.
            self.mode.send_if_modified(|m| {
                let was = matches!(m, Mode::Probing);
                if was {
                    *m = Mode::Unknown;
                }
                was
            });
        }
        match outcome {
            Outcome::Done | Outcome::SignedIn => {}
            Outcome::ParamsUnknown(answer) => self.core.message(answer),
            Outcome::Legacy(why) => self.fall_back(msg, why).await,
            Outcome::SessionLost(why) => {
                if let Err(e) = self.renew(generation, &why).await {
                    if let Some(id) = msg.request {
                        self.core.lost(id, not_delivered(e.clone()));
                    }
                    self.core.end(e);
                    return;
                }
                match self.post_signed(&msg, &info, false).await {
                    Outcome::Done | Outcome::SignedIn => {}
                    Outcome::ParamsUnknown(answer) => self.core.message(answer),
                    Outcome::SessionLost(again) | Outcome::Legacy(again) => {
                        let cause =
                            format!("{} refused the replay on its new session as well: {again}", self.core.shown_url());
                        if let Some(id) = msg.request {
                            self.core.lost(id, not_delivered(cause));
                        }
                    }
                }
            }
        }
    }

    /// [`Inner::post`], again after each sign-in the server asked for (a bounded number), and
    /// once more when a call was refused for headers that the tool list, read then, gives.
    async fn post_signed(self: &Arc<Self>, msg: &Outbound, info: &Info, probe: bool) -> Outcome {
        let mut sign_ins = 0;
        let mut listed = false;
        loop {
            let last = sign_ins >= MAX_SIGN_INS;
            match self.post(msg, info, probe, !last).await {
                Outcome::SignedIn => sign_ins += 1,
                // Refused before it ran (the server checks headers first): safe to send again.
                Outcome::ParamsUnknown(answer) if !listed => {
                    listed = true;
                    if !self.learn_tool_headers(msg, info).await {
                        return Outcome::ParamsUnknown(answer);
                    }
                }
                other => return other,
            }
        }
    }

    /// Reads the server's tool list (every page, with the envelope of `msg`, a 2026-07-28
    /// request) into the tool headers. True when the tool `msg` calls mirrors arguments now.
    async fn learn_tool_headers(&self, msg: &Outbound, info: &Info) -> bool {
        let core = &self.core;
        let meta = serde_json::from_str::<serde_json::Value>(&msg.line)
            .ok()
            .and_then(|v| v["params"].get("_meta").cloned())
            .unwrap_or_default();
        let mut cursor: Option<serde_json::Value> = None;
        let read = async {
            for _ in 0..MAX_TOOL_PAGES {
                let mut params = serde_json::json!({ "_meta": meta });
                if let Some(c) = cursor.take() {
                    params["cursor"] = c;
                }
                let line = codec::request(r#""switchyard-tools""#, "tools/list", &params.to_string());
                let mut req = core
                    .request(Method::POST, core.url.clone())
                    .header(reqwest::header::ACCEPT, "application/json, text/event-stream")
                    .header(CONTENT_TYPE, "application/json")
                    .header(mcp::header::METHOD, "tools/list")
                    .body(line);
                if let Some(v) = info.envelope_version.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
                    req = req.header(mcp::header::PROTOCOL_VERSION, v);
                }
                let Ok(mut resp) = req.send().await else { return };
                let Some(result) = tools_list_result(core, &mut resp).await else { return };
                if let Some(tools) = result["tools"].as_array() {
                    core.tool_headers.learn(tools);
                }
                match result.get("nextCursor").filter(|c| !c.is_null()) {
                    Some(c) => cursor = Some(c.clone()),
                    None => return,
                }
            }
        };
        if tokio::time::timeout(core.post_timeout, read).await.is_err() {
            tracing::debug!(instance = %core.label, "the tool list, read for a call's headers, did not come in time");
        }
        !mirrored(&core.tool_headers, &msg.line).is_empty()
    }

    /// One POST of one message, and the reading of its answer. `may_sign_in`: a 401 (or a 403
    /// asking for scope) starts a sign-in, and SignedIn says to send the message again.
    async fn post(self: &Arc<Self>, msg: &Outbound, info: &Info, probe: bool, may_sign_in: bool) -> Outcome {
        let core = &self.core;
        let url = core.shown_url();
        // The token is refreshed first when it is about to expire.
        let token = core.bearer().await;
        let (session, version, modern) = {
            let st = self.state.lock().unwrap();
            let modern = st.init_line.is_none() && info.envelope_version.is_some();
            (st.session.clone().filter(|_| !modern), st.version.clone(), modern)
        };
        let mut req = core
            .request(Method::POST, core.url.clone())
            .header(reqwest::header::ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .body(msg.line.clone());
        if let Some(s) = &session {
            req = self.with_session(req, s);
        }
        // The trace context in `_meta` is in the W3C header as well, where HTTP servers look.
        if let Some(tp) = msg.traceparent.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
            req = req.header(mcp::meta::TRACEPARENT, tp);
        }
        let version = if modern { info.envelope_version.clone() } else { version };
        if let Some(v) = version.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
            req = req.header(mcp::header::PROTOCOL_VERSION, v);
        }
        if modern {
            if let Some(m) = info.method.as_deref().and_then(|m| HeaderValue::from_str(&header_value(m)).ok()) {
                req = req.header(mcp::header::METHOD, m);
            }
            if let Some(n) = info.name.as_deref().and_then(|n| HeaderValue::from_str(&header_value(n)).ok()) {
                req = req.header(mcp::header::NAME, n);
            }
            if info.method.as_deref() == Some("tools/call") && !core.tool_headers.is_empty() {
                for (name, value) in mirrored(&core.tool_headers, &msg.line) {
                    if let Ok(v) = HeaderValue::from_str(&header_value(&value)) {
                        req = req.header(name, v);
                    }
                }
            }
        }
        // A request waits as long as the router waits for it (it abandons it at its deadline);
        // anything else gets the short deadline.
        let sent = if msg.request.is_some() {
            req.send().await
        } else {
            match tokio::time::timeout(core.post_timeout, req.send()).await {
                Ok(r) => r,
                Err(_) => {
                    tracing::warn!(instance = %core.label, "{url} did not accept a {} within {} ms",
                        info.method.as_deref().unwrap_or("reply"), core.post_timeout.as_millis());
                    return Outcome::Done;
                }
            }
        };
        let mut resp = match sent {
            Ok(r) => {
                if let Some(id) = msg.request {
                    core.watch.heard(id);
                }
                r
            }
            Err(e) if never_sent(&e) => {
                let cause = format!("could not reach {url}: {}", describe(&e));
                if let Some(id) = msg.request {
                    core.lost(id, not_delivered(cause.clone()));
                }
                // Unreachable: the pool's start backoff decides when to try again.
                core.end(cause);
                return Outcome::Done;
            }
            Err(e) => {
                let cause = format!("the request to {url} failed: {}", describe(&e));
                match msg.request {
                    Some(id) => core.lost(id, maybe_delivered(cause)),
                    None => tracing::warn!(instance = %core.label, "{cause}"),
                }
                return Outcome::Done;
            }
        };
        let status = resp.status();
        if status.is_success() {
            if probe {
                self.resolved(RemoteKind::StreamableHttp, "");
            }
            if info.method.as_deref() == Some("initialize")
                && let Some(sid) = resp.headers().get(mcp::header::SESSION_ID).and_then(|v| v.to_str().ok())
            {
                self.state.lock().unwrap().session = Some(sid.to_string());
            }
            self.read_answer(&mut resp, msg, info, modern).await;
            return Outcome::Done;
        }
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            let signed = if may_sign_in { core.sign_in(&resp, token.as_ref(), !msg.quiet).await } else { None };
            let cause = match signed {
                Some(Ok(())) => return Outcome::SignedIn,
                // The instance stays: the next request may sign in (or a `switchyard login`
                // may have signed in meanwhile).
                Some(Err(cause)) => {
                    match msg.request {
                        Some(id) => core.lost(id, refused(cause)),
                        None => tracing::warn!(instance = %core.label, "{cause}"),
                    }
                    return Outcome::Done;
                }
                None if core.auth.is_some() && !may_sign_in => {
                    format!("{url} still refused the request (HTTP {}) after {MAX_SIGN_INS} sign-ins", status.as_u16())
                }
                None => core.refused(status),
            };
            if let Some(id) = msg.request {
                core.lost(id, not_delivered(cause.clone()));
            }
            core.end(cause);
            return Outcome::Done;
        }
        let body = match core.read_body(&mut resp, 4096, For::Other).await {
            Ok(Ok(b)) => b,
            _ => Vec::new(),
        };
        let text = String::from_utf8_lossy(&body).into_owned();
        let shown = snippet_of(&body);
        let code = status.as_u16();
        if probe && matches!(code, 400 | 404 | 405) && !looks_like_jsonrpc_error(&text) {
            return Outcome::Legacy(format!("the POST was refused with HTTP {code}"));
        }
        if session.is_some()
            && (status == StatusCode::NOT_FOUND || (status == StatusCode::BAD_REQUEST && says_session_lost(&text)))
        {
            return Outcome::SessionLost(format!("HTTP {code}: {shown}"));
        }
        // The server's own JSON-RPC answer to the request, under an HTTP error status (a
        // 2026-07-28 server answers an unknown method 404 with -32601): it is the client's, as it
        // would be directly, and says nothing of the link.
        let text = text.trim();
        if let Some(id) = msg.request
            && answers(text, id)
        {
            let tool_call = info.method.as_deref() == Some("tools/call");
            if modern
                && tool_call
                && code == 400
                && is_header_mismatch(text)
                && mirrored(&core.tool_headers, &msg.line).is_empty()
            {
                return Outcome::ParamsUnknown(text.to_string());
            }
            core.message(text.to_string());
            return Outcome::Done;
        }
        let cause = format!("{url} answered HTTP {code}: {shown}");
        match msg.request {
            Some(id) => core.lost(id, maybe_delivered(cause)),
            None => {
                tracing::warn!(instance = %core.label, "{} was refused: {cause}", info.method.as_deref().unwrap_or("a reply"))
            }
        }
        Outcome::Done
    }

    /// Reads a 2xx answer: a JSON body, an SSE stream, or nothing (accepted).
    async fn read_answer(self: &Arc<Self>, resp: &mut Response, msg: &Outbound, info: &Info, modern: bool) {
        let core = &self.core;
        let url = core.shown_url();
        let Some(id) = msg.request else {
            // A notification or a reply: accepted (202, or any 2xx), and a body means nothing.
            if info.method.as_deref() == Some("notifications/initialized") && !modern {
                self.listen();
            }
            return;
        };
        let is_init = info.method.as_deref() == Some("initialize");
        if is_event_stream(resp) {
            return self.read_request_stream(resp, id, is_init, modern).await;
        }
        let body = match core.read_body(resp, core.limit, For::Request(id)).await {
            Ok(Ok(b)) => b,
            Ok(Err(bytes)) => return core.too_long(bytes, Some(id)),
            Err(e) => {
                let cause = format!("the answer from {url} broke off: {}", describe(&e));
                return core.lost(id, maybe_delivered(cause));
            }
        };
        let text = String::from_utf8_lossy(&body);
        let text = text.trim();
        if text.is_empty() {
            let status = resp.status().as_u16();
            return core
                .lost(id, maybe_delivered(format!("{url} accepted the request without answering it (HTTP {status})")));
        }
        if is_init && let Some(v) = negotiated_version(text) {
            self.state.lock().unwrap().version = Some(v);
        }
        core.message(text.to_string());
        if !answers(text, id) {
            core.lost(id, maybe_delivered(format!("the answer from {url} did not hold the response to the request")));
        }
    }

    /// Reads a request's SSE stream to its response, resuming it where the server allows.
    async fn read_request_stream(&self, resp: &mut Response, id: u64, is_init: bool, modern: bool) {
        let core = &self.core;
        let url = core.shown_url();
        let mut parser = Parser::new(core.limit);
        let mut reconnect = Reconnect::resume();
        let mut answered = Some(id);
        // The last resume could not connect: the next one waits its own backoff, not the
        // server's `retry:` (meant for a server that closed the stream on purpose).
        let mut unreachable = false;
        let mut cause = match self.read_stream(resp, Some(&mut reconnect), &mut parser, &mut answered, is_init).await {
            Ok(()) => "the server closed it".to_string(),
            Err(e) => describe(&e),
        };
        loop {
            if answered.is_none() {
                return;
            }
            // Resumable only in the 2025 era, and only when the server numbered its events.
            if modern || parser.last_id().is_empty() {
                core.lost(
                    id,
                    maybe_delivered(format!("the response stream from {url} ended before the response ({cause})")),
                );
                return;
            }
            match parser.retry() {
                Some(retry) if !unreachable => reconnect.hint(retry),
                _ if unreachable => reconnect.clear_hint(),
                _ => {}
            }
            if !reconnect.wait().await {
                tracing::info!(instance = %core.label, "gave up resuming the response stream of request {id}: {cause}");
                core.lost(
                    id,
                    maybe_delivered(format!(
                        "the response stream from {url} ended before the response and could not be resumed ({cause})"
                    )),
                );
                return;
            }
            let (session, version) = {
                let st = self.state.lock().unwrap();
                (st.session.clone(), st.version.clone())
            };
            let mut req = core.get_stream(core.url.clone()).header(mcp::header::LAST_EVENT_ID, parser.last_id());
            if let Some(s) = &session {
                req = self.with_session(req, s);
            }
            if let Some(v) = version.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
                req = req.header(mcp::header::PROTOCOL_VERSION, v);
            }
            // The resume's answer is bounded like its stream: a server whose event store is stuck
            // may never send the headers.
            let sent = match core.liveness {
                Some(window) => match tokio::time::timeout(window, req.send()).await {
                    Ok(sent) => sent,
                    Err(_) => {
                        let waited = window.as_secs_f64();
                        tracing::info!(instance = %core.label,
                            "gave up resuming the response stream of request {id}: no answer to the resume within {waited:.1} s");
                        core.lost(id, maybe_delivered(format!(
                            "the response stream from {url} ended before the response ({cause}); resuming it got no answer within {waited:.1} s"
                        )));
                        return;
                    }
                },
                None => req.send().await,
            };
            unreachable = matches!(&sent, Err(e) if never_sent(e));
            match sent {
                Ok(mut r) if r.status().is_success() && is_event_stream(&r) => {
                    tracing::info!(instance = %core.label, "resumed the response stream of request {id} ({cause})");
                    core.reconnected("resume");
                    // A resumed stream that stays silent is as good as lost (a server whose event
                    // store lost the events answers the resume and sends nothing).
                    let since = tokio::time::Instant::now();
                    let quiet = async {
                        match core.liveness {
                            Some(window) => core.watch.quiet_for(id, since, window).await,
                            None => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        read = self.read_stream(&mut r, Some(&mut reconnect), &mut parser, &mut answered, is_init) => {
                            cause = match read {
                                Ok(()) => "the server closed it".to_string(),
                                Err(e) => describe(&e),
                            };
                        }
                        () = quiet => {
                            let waited = core.liveness.unwrap_or_default().as_secs_f64();
                            tracing::info!(instance = %core.label,
                                "gave up the resumed response stream of request {id}: nothing came on it within {waited:.1} s");
                            core.lost(id, maybe_delivered(format!(
                                "the response stream from {url} ended before the response ({cause}); it was resumed, but nothing came on it within {waited:.1} s"
                            )));
                            return;
                        }
                    }
                }
                // Refused (the session or its events are gone): trying again
                // soon will not help, and the call must not wait for nothing.
                Ok(r) if r.status().is_client_error() => {
                    let why = format!("{cause}; resuming it was refused with HTTP {}", r.status().as_u16());
                    core.lost(
                        id,
                        maybe_delivered(format!("the response stream from {url} ended before the response ({why})")),
                    );
                    return;
                }
                // Unreachable for now (a link that dropped, a server restarting): the next of the
                // capped attempts may get through; the count runs out otherwise.
                Err(e) if never_sent(&e) => {
                    let first = cause.split("; resuming").next().unwrap_or_default().to_string();
                    cause = format!("{first}; resuming it failed: {}", describe(&e));
                }
                Ok(r) => cause = format!("resuming it answered HTTP {}", r.status().as_u16()),
                Err(e) => cause = format!("resuming it failed: {}", describe(&e)),
            }
        }
    }
}

/// Whether a body is a JSON-RPC error: a server that speaks Streamable HTTP refused the
/// request itself (unsupported version, unknown method, bad headers), so no fallback.
fn looks_like_jsonrpc_error(body: &str) -> bool {
    jsonrpc_error_message(body.trim()).is_some()
}

/// The response with id `own_id` from a JSON or SSE answer (other messages are dropped: they
/// belong to no call of the router's).
pub(super) async fn own_answer(core: &Core, resp: &mut Response, own_id: &str, limit: usize) -> Result<String, String> {
    let is_own = |line: &str| codec::parse(line).ok().and_then(|e| e.id.map(|r| &line[r] == own_id)).unwrap_or(false);
    if is_event_stream(resp) {
        let mut parser = Parser::new(limit);
        loop {
            match core.next_event(resp, &mut parser, For::Other).await {
                Ok(Some(Event::Data { data, .. })) if is_own(&data) => return Ok(data),
                Ok(Some(_)) => {}
                Ok(None) => return Err("the initialize's stream ended before its response".into()),
                Err(e) => return Err(describe(&e)),
            }
        }
    }
    match core.read_body(resp, limit, For::Other).await {
        Ok(Ok(body)) => {
            let text = String::from_utf8_lossy(&body).trim().to_string();
            if is_own(&text) { Ok(text) } else { Err("the initialize was answered with something else".into()) }
        }
        Ok(Err(bytes)) => Err(format!("the initialize's answer is {bytes} bytes, over the limit")),
        Err(e) => Err(describe(&e)),
    }
}

/// The `Mcp-Param-*` headers of the `tools/call` in `line`: the arguments its tool mirrors.
fn mirrored(headers: &super::ToolHeaders, line: &str) -> Vec<(String, String)> {
    #[derive(serde::Deserialize)]
    struct Call {
        params: Params,
    }
    #[derive(serde::Deserialize)]
    struct Params {
        name: String,
        #[serde(default)]
        arguments: serde_json::Value,
    }
    match serde_json::from_str::<Call>(line) {
        Ok(c) => headers.for_call(&c.params.name, &c.params.arguments),
        Err(_) => Vec::new(),
    }
}

/// An error answer with the code of a header that does not match the body (-32020).
fn is_header_mismatch(text: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(text).is_ok_and(|v| v["error"]["code"] == -32020)
}

/// The result of the router's own `tools/list` (id `"switchyard-tools"`), from a JSON body or
/// an SSE stream; None when the server answered anything else.
async fn tools_list_result(core: &Core, resp: &mut Response) -> Option<serde_json::Value> {
    let answer = |text: &str| {
        let v: serde_json::Value = serde_json::from_str(text).ok()?;
        (v["id"] == "switchyard-tools").then(|| v["result"].clone()).filter(|r| r.is_object())
    };
    if !resp.status().is_success() {
        return None;
    }
    if !is_event_stream(resp) {
        let body = core.read_body(resp, core.limit, For::Other).await.ok()?.ok()?;
        return answer(String::from_utf8_lossy(&body).trim());
    }
    let mut parser = Parser::new(core.limit);
    while let Ok(Some(event)) = core.next_event(resp, &mut parser, For::Other).await {
        if let Event::Data { data, .. } = event
            && let Some(result) = answer(&data)
        {
            return Some(result);
        }
    }
    None
}
