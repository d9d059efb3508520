//! The legacy HTTP+SSE transport (protocol 2024-11-05): one GET stream carries everything the
//! server sends; messages are POSTed to the endpoint the stream names first. The stream
//! ending ends the transport: the instance answers or retries what was in flight, and the pool
//! opens a new instance (a new stream, a new endpoint, a new initialize).

use std::sync::Arc;

use reqwest::header::CONTENT_TYPE;
use reqwest::{Response, StatusCode, Url};

use super::event::{Event, Parser};
use super::liveness::{Probe, ProbeKind};
use super::{
    Core, For, MAX_SIGN_INS, describe, display_url, is_event_stream, maybe_delivered, never_sent, not_delivered,
    refused, with_bearer,
};
use crate::upstream::transport::{BoxFuture, Closed, Failure, Outbound, Transport};
use switchyard_core::codec;

/// A live legacy SSE connection.
pub struct Legacy {
    core: Arc<Core>,
    /// Where messages are POSTed, as the stream's `endpoint` event named it.
    endpoint: Url,
}

impl Legacy {
    /// GETs the stream and waits (at most the connect timeout) for its `endpoint` event. A 401
    /// (or a 403 asking for scope) starts a sign-in, outside that timeout, and the GET goes again.
    pub(super) async fn open(core: Arc<Core>) -> Result<Arc<Legacy>, Failure> {
        let mut sign_ins = 0;
        let (resp, parser, endpoint) = loop {
            // The token is refreshed first when it is about to expire.
            let token = core.bearer().await;
            let opened = tokio::time::timeout(core.connect_timeout, handshake(&core)).await;
            let refusal = match opened {
                Ok(Ok(Handshake::Open(resp, parser, endpoint))) => break (resp, *parser, endpoint),
                Ok(Ok(Handshake::Refused(resp))) => resp,
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    return Err(Failure {
                        reason: format!(
                            "{} sent no endpoint event within {} ms: is it a legacy SSE server (its GET stream URL)?",
                            core.shown_url(),
                            core.connect_timeout.as_millis()
                        ),
                        transient: true,
                    });
                }
            };
            let may_sign_in = sign_ins < MAX_SIGN_INS;
            // The stream opens for a client's request (an instance starts for it).
            let signed = if may_sign_in { core.sign_in(&refusal, token.as_ref(), true).await } else { None };
            let status = refusal.status();
            // A refusal no sign-in answered is final: starting again meets it again.
            let reason = match signed {
                Some(Ok(())) => {
                    sign_ins += 1;
                    continue;
                }
                Some(Err(cause)) => cause,
                None if core.auth.is_some() && !may_sign_in => format!(
                    "{} still refused the SSE stream request (HTTP {}) after {MAX_SIGN_INS} sign-ins",
                    core.shown_url(),
                    status.as_u16()
                ),
                None => core.refused(status),
            };
            return Err(Failure { reason, transient: false });
        };
        tracing::debug!(instance = %core.label, "SSE stream open; messages go to {}", display_url(&endpoint));
        core.watch.share_stream();
        core.spawn(read_stream(core.clone(), resp, parser));
        let legacy = Arc::new(Legacy { core: core.clone(), endpoint });
        let weak = Arc::downgrade(&legacy);
        let probe: Probe = Arc::new(move || {
            let legacy = weak.upgrade();
            Box::pin(async move {
                match legacy {
                    Some(l) => l.probe().await,
                    None => Ok(()),
                }
            })
        });
        core.watch_with(probe, ProbeKind(PROBE));
        Ok(legacy)
    }

    /// Posts a ping of switchyard's own on a fresh connection and waits for the stream to carry
    /// anything after it (the pong, or whatever the server had to say): the stream is what must be
    /// alive, since every answer comes on it.
    pub(super) fn probe(&self) -> BoxFuture<'static, Result<(), String>> {
        let core = self.core.clone();
        let endpoint = self.endpoint.clone();
        Box::pin(async move {
            let client = core.fresh_client()?.clone();
            let since = tokio::time::Instant::now();
            let ping = r#"{"jsonrpc":"2.0","id":"switchyard-probe","method":"ping"}"#;
            let mut post = client.post(endpoint).headers(core.headers.clone());
            if let Some(token) = core.auth.as_ref().and_then(|a| a.current()) {
                post = with_bearer(post, &token);
            }
            let post = post.header(CONTENT_TYPE, "application/json").body(ping).send();
            match post.await {
                Ok(r) if r.status().is_success() => {}
                Ok(r) => return Err(format!("answered HTTP {}", r.status().as_u16())),
                Err(e) => return Err(format!("failed: {}", describe(&e))),
            }
            core.watch.stream_heard_after(since).await;
            Ok(())
        })
    }
}

/// What the GET of the stream came to.
enum Handshake {
    /// The stream, its parser (boxed: it holds its buffer), and the endpoint it named.
    Open(Response, Box<Parser>, Url),
    /// HTTP 401 or 403: a sign-in may answer it.
    Refused(Response),
}

/// What the legacy probe is, for the message when it fails.
pub(super) const PROBE: &str = "a ping posted on a fresh connection, whose answer comes on the stream,";

/// Whether `data` is the answer to a probe of switchyard's own (not for the instance).
fn is_probe_answer(data: &str) -> bool {
    data.contains("\"switchyard-probe\"")
        && codec::parse(data)
            .is_ok_and(|e| e.id.is_some_and(|r| &data[r] == "\"switchyard-probe\"") && e.method.is_none())
}

async fn handshake(core: &Core) -> Result<Handshake, Failure> {
    let url = core.shown_url();
    let mut resp = core
        .get_stream(core.url.clone())
        .send()
        .await
        .map_err(|e| Failure { reason: format!("could not connect to {url}: {}", describe(&e)), transient: true })?;
    let status = resp.status();
    if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
        return Ok(Handshake::Refused(resp));
    }
    if !status.is_success() {
        let transient = status.is_server_error()
            || status == StatusCode::TOO_MANY_REQUESTS
            || status == StatusCode::REQUEST_TIMEOUT;
        let body = super::snippet(resp).await;
        return Err(Failure {
            reason: core.redact(format!("{url} answered the SSE stream request with HTTP {}: {body}", status.as_u16())),
            transient,
        });
    }
    if !is_event_stream(&resp) {
        return Err(Failure {
            reason: format!(
                "{url} did not answer with an SSE stream (Content-Type {:?}): is it the stream URL of a legacy SSE server?",
                super::content_type(&resp)
            ),
            transient: false,
        });
    }
    let mut parser = Parser::new(core.limit);
    loop {
        match core.next_event(&mut resp, &mut parser, For::Stream).await {
            Ok(Some(Event::Data { kind: Some(kind), data })) if kind == "endpoint" => {
                let endpoint = core.url.join(data.trim()).map_err(|e| Failure {
                    reason: format!("{url} named an endpoint that is not a valid URL ({:?}): {e}", data.trim()),
                    transient: false,
                })?;
                // The configured headers (credentials) go only where the user pointed them.
                if endpoint.origin() != core.url.origin() {
                    return Err(Failure {
                        reason: format!(
                            "{url} named an endpoint on another origin ({}); switchyard only posts to the server's own",
                            display_url(&endpoint)
                        ),
                        transient: false,
                    });
                }
                return Ok(Handshake::Open(resp, Box::new(parser), endpoint));
            }
            // Nothing is expected before the endpoint; whatever comes is not for a call.
            Ok(Some(_)) => {}
            Ok(None) => {
                return Err(Failure {
                    reason: format!("{url} closed the SSE stream before naming its endpoint"),
                    transient: true,
                });
            }
            Err(e) => {
                return Err(Failure {
                    reason: format!("the SSE stream from {url} broke before naming its endpoint: {}", describe(&e)),
                    transient: true,
                });
            }
        }
    }
}

/// Passes every message of the stream on; its end ends the transport.
async fn read_stream(core: Arc<Core>, mut resp: Response, mut parser: Parser) {
    let url = core.shown_url();
    let status = loop {
        match core.next_event(&mut resp, &mut parser, For::Stream).await {
            Ok(Some(Event::Data { kind, data })) => match kind.as_deref() {
                None | Some("message") if is_probe_answer(&data) => {}
                None | Some("message") if !data.trim().is_empty() => {
                    for id in super::streamable::response_ids(&data) {
                        core.watch.settled(id);
                    }
                    core.message(data)
                }
                None | Some("message") | Some("endpoint") => {}
                Some(other) => tracing::debug!(instance = %core.label, "ignored an SSE event of type {other:?}"),
            },
            Ok(Some(Event::TooLong { bytes, head, tail })) => {
                core.too_long(bytes, codec::skipped_response_id(&head, &tail))
            }
            Ok(Some(Event::NotUtf8)) => {
                tracing::warn!(instance = %core.label, "skipped an SSE event that is not UTF-8")
            }
            Ok(None) => break format!("the SSE stream from {url} ended"),
            Err(e) => break format!("the SSE stream from {url} broke: {}", describe(&e)),
        }
    };
    core.end(status);
}

/// POSTs one message to the endpoint; its answer comes on the stream. A 401 (a token that
/// expired or was revoked mid-session) signs in, and the message, refused unread, goes again once.
async fn post(core: Arc<Core>, endpoint: Url, msg: Outbound) {
    let shown = display_url(&endpoint);
    let mut signed_in = false;
    let (resp, status) = loop {
        // The token is refreshed first when it is about to expire.
        let token = core.bearer().await;
        let mut req = core
            .request(reqwest::Method::POST, endpoint.clone())
            .header(CONTENT_TYPE, "application/json")
            .body(msg.line.clone());
        // The trace context in `_meta` is in the W3C header as well, where HTTP servers look.
        if let Some(tp) = msg.traceparent.as_deref() {
            req = req.header(switchyard_mcp::meta::TRACEPARENT, tp);
        }
        // A server that lost the session can take the connection and never answer.
        let resp = match tokio::time::timeout(core.post_timeout, req.send()).await {
            Ok(Ok(r)) => r,
            Err(_) => {
                let cause = format!("{shown} did not accept the message within {} ms", core.post_timeout.as_millis());
                match msg.request {
                    Some(id) => core.lost(id, maybe_delivered(cause)),
                    None => tracing::warn!(instance = %core.label, "{cause}"),
                }
                return;
            }
            Ok(Err(e)) if never_sent(&e) => {
                let cause = format!("could not reach {shown}: {}", describe(&e));
                if let Some(id) = msg.request {
                    core.lost(id, not_delivered(cause.clone()));
                }
                core.end(cause);
                return;
            }
            Ok(Err(e)) => {
                let cause = format!("posting to {shown} failed: {}", describe(&e));
                match msg.request {
                    Some(id) => core.lost(id, maybe_delivered(cause)),
                    None => tracing::warn!(instance = %core.label, "{cause}"),
                }
                return;
            }
        };
        let status = resp.status();
        if status.is_success() {
            return;
        }
        if status != StatusCode::UNAUTHORIZED && status != StatusCode::FORBIDDEN {
            break (resp, status);
        }
        let signed = if signed_in { None } else { core.sign_in(&resp, token.as_ref(), !msg.quiet).await };
        let cause = match signed {
            Some(Ok(())) => {
                signed_in = true;
                continue;
            }
            // The stream stays: the next message may sign in (or a `switchyard login` may have
            // signed in meanwhile).
            Some(Err(cause)) => {
                match msg.request {
                    Some(id) => core.lost(id, refused(cause)),
                    None => tracing::warn!(instance = %core.label, "{cause}"),
                }
                return;
            }
            None if signed_in => {
                format!("{shown} still refused the message (HTTP {}) after a sign-in", status.as_u16())
            }
            None => core.refused(status),
        };
        if let Some(id) = msg.request {
            core.lost(id, not_delivered(cause.clone()));
        }
        core.end(cause);
        return;
    };
    let body = super::snippet(resp).await;
    if status == StatusCode::NOT_FOUND {
        // The server no longer knows this stream's session (it restarted, or dropped it): the
        // message was not taken, and nothing more will come on this stream.
        let cause = format!("{shown} no longer knows this SSE session (HTTP 404: {body})");
        if let Some(id) = msg.request {
            core.lost(id, not_delivered(cause.clone()));
        }
        core.end(cause);
        return;
    }
    let cause = format!("{shown} refused the message with HTTP {}: {body}", status.as_u16());
    match msg.request {
        Some(id) => core.lost(id, maybe_delivered(cause)),
        None => tracing::warn!(instance = %core.label, "{cause}"),
    }
}

impl Transport for Legacy {
    fn send(&self, msg: Outbound) -> Result<(), Closed> {
        if self.core.is_closed() {
            return Err(Closed);
        }
        if let Some(id) = msg.request {
            self.core.watch.sent(id);
        }
        self.core.spawn(post(self.core.clone(), self.endpoint.clone(), msg));
        Ok(())
    }

    fn abandon(&self, id: u64) {
        self.core.watch.settled(id);
    }

    fn silent_for(&self, id: u64) -> Option<std::time::Duration> {
        self.core.watch.silent_for(id)
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        // The protocol has no goodbye: closing the stream ends the session.
        Box::pin(self.core.finish("closed".into()))
    }

    fn kill(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.core.finish("killed".into()))
    }

    fn endpoint(&self) -> String {
        self.core.shown_url()
    }
}

impl Drop for Legacy {
    fn drop(&mut self) {
        self.core.cancel.cancel();
    }
}
