//! The standalone GET stream for server-initiated messages, and the SSE reading it shares with requests.

use std::sync::Arc;

use reqwest::header::HeaderValue;
use reqwest::{Response, StatusCode};

use super::{Inner, answers, negotiated_version};
use crate::upstream::remote::event::{Event, Parser};
use crate::upstream::remote::retry::Reconnect;
use crate::upstream::remote::{For, describe, is_event_stream};
use switchyard_core::codec;
use switchyard_mcp as mcp;

impl Inner {
    /// Passes on the messages of one SSE body until it ends. `answered` holds the request id
    /// still waiting for its response, and is cleared when it arrives (reading stops there).
    pub(super) async fn read_stream(
        &self,
        resp: &mut Response,
        mut reconnect: Option<&mut Reconnect>,
        parser: &mut Parser,
        answered: &mut Option<u64>,
        is_init: bool,
    ) -> Result<(), reqwest::Error> {
        let core = &self.core;
        loop {
            let what = answered.map_or(For::Other, For::Request);
            let event = core.next_event(resp, parser, what).await?;
            let Some(event) = event else { return Ok(()) };
            match event {
                Event::Data { kind, data } => {
                    if !matches!(kind.as_deref(), None | Some("message")) || data.trim().is_empty() {
                        // Priming events (an id and no data) and other event types carry no
                        // message, and do not count as progress: a server that only primes and
                        // closes must not be resumed for ever.
                        continue;
                    }
                    if let Some(r) = reconnect.as_deref_mut() {
                        r.progress();
                    }
                    let done = answered.is_some_and(|id| answers(&data, id));
                    if done
                        && is_init
                        && let Some(v) = negotiated_version(&data)
                    {
                        self.state.lock().unwrap().version = Some(v);
                    }
                    core.message(data);
                    if done {
                        *answered = None;
                        return Ok(());
                    }
                }
                Event::TooLong { bytes, head, tail } => {
                    // On a request's stream an over-long event that is not a request or a
                    // notification is that request's response.
                    let id = codec::skipped_response_id(&head, &tail).or_else(|| {
                        let shows_method = String::from_utf8_lossy(&head).contains("\"method\"");
                        answered.filter(|_| !shows_method)
                    });
                    core.too_long(bytes, id);
                    if id.is_some() && id == *answered {
                        *answered = None;
                        return Ok(());
                    }
                }
                Event::NotUtf8 => tracing::warn!(instance = %core.label, "skipped an SSE event that is not UTF-8"),
            }
        }
    }

    /// Opens the standalone GET stream for server-initiated messages, once.
    pub(super) fn listen(self: &Arc<Self>) {
        {
            let mut st = self.state.lock().unwrap();
            if st.listening || st.no_listen || self.core.is_closed() {
                return;
            }
            st.listening = true;
        }
        let me = self.clone();
        self.core.spawn(async move { me.run_listen().await });
    }

    async fn run_listen(self: Arc<Self>) {
        let core = &self.core;
        let mut reconnect = Reconnect::listen();
        let mut parser = Parser::new(core.limit);
        let mut opened_before = false;
        loop {
            let (session, version) = {
                let st = self.state.lock().unwrap();
                (st.session.clone(), st.version.clone())
            };
            let mut req = core.get_stream(core.url.clone());
            if let Some(s) = &session {
                req = self.with_session(req, s);
            }
            if let Some(v) = version.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
                req = req.header(mcp::header::PROTOCOL_VERSION, v);
            }
            if !parser.last_id().is_empty() {
                req = req.header(mcp::header::LAST_EVENT_ID, parser.last_id());
            }
            match req.send().await {
                Ok(mut r) if r.status().is_success() && is_event_stream(&r) => {
                    if std::mem::replace(&mut opened_before, true) {
                        core.reconnected("reconnect");
                    }
                    let result = self.read_stream(&mut r, Some(&mut reconnect), &mut parser, &mut None, false).await;
                    tracing::debug!(instance = %core.label, "the GET stream ended ({})",
                        result.err().map_or("closed by the server".to_string(), |e| describe(&e)));
                }
                Ok(r) if r.status() == StatusCode::METHOD_NOT_ALLOWED => {
                    tracing::debug!(instance = %core.label, "the server offers no GET stream (HTTP 405)");
                    let mut st = self.state.lock().unwrap();
                    st.no_listen = true;
                    st.listening = false;
                    return;
                }
                Ok(r) if r.status().is_client_error() => {
                    // The session is gone or the server has no GET here: a request finds out
                    // which, and a re-initialisation opens the stream again.
                    tracing::debug!(instance = %core.label, "the GET stream was refused (HTTP {})", r.status().as_u16());
                    self.state.lock().unwrap().listening = false;
                    return;
                }
                Ok(r) => {
                    tracing::debug!(instance = %core.label, "the GET stream answered HTTP {}", r.status().as_u16())
                }
                Err(e) => tracing::debug!(instance = %core.label, "the GET stream failed: {}", describe(&e)),
            }
            if let Some(retry) = parser.retry() {
                reconnect.hint(retry);
            }
            reconnect.wait().await;
        }
    }
}
