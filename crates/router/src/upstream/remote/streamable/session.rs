//! Session loss: recognising it, and re-initialising a new session in place of the lost one.

use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use reqwest::header::{CONTENT_TYPE, HeaderValue};

use super::post::own_answer;
use super::{Inner, negotiated_version};
use crate::upstream::remote::{For, describe, snippet_of};
use switchyard_core::codec;
use switchyard_mcp as mcp;

/// How long each step of a re-initialisation may take.
const REINIT_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether a 400 body says the session id is not (or no longer) valid, as the reference SDK
/// servers word it ("Bad Request: No valid session ID provided", "Session not found",
/// "Server not initialized" from a restarted single-session server).
pub(super) fn says_session_lost(body: &str) -> bool {
    let b = body.to_ascii_lowercase();
    (b.contains("session")
        && ["no valid", "not valid", "invalid", "unknown", "not found", "expired", "terminated"]
            .iter()
            .any(|w| b.contains(w)))
        || b.contains("not initialized")
}

impl Inner {
    pub(super) fn with_session(&self, req: reqwest::RequestBuilder, session: &str) -> reqwest::RequestBuilder {
        match HeaderValue::from_str(session) {
            Ok(v) => req.header(mcp::header::SESSION_ID, v),
            Err(_) => req,
        }
    }

    /// Starts a new session in place of a lost one (once for all the requests that found it
    /// lost together): the stored initialize again, under an id of the transport's own, then
    /// `notifications/initialized`.
    pub(super) async fn renew(self: &Arc<Self>, failed: u64, why: &str) -> Result<(), String> {
        let _one = self.renewing.lock().await;
        let init = {
            let st = self.state.lock().unwrap();
            if st.generation != failed {
                return Ok(());
            }
            st.init_line.clone()
        };
        let core = &self.core;
        let url = core.shown_url();
        let fail =
            |what: String| format!("the session at {url} was lost ({why}) and could not be re-established: {what}");
        let init = init.ok_or_else(|| fail("no initialize was sent on this connection".into()))?;
        let env = codec::parse(&init).map_err(|e| fail(e.message()))?;
        let id_range = env.id.ok_or_else(|| fail("the initialize has no id".into()))?;
        let own_id = format!("\"switchyard-reinit-{}\"", failed + 1);
        let line = codec::splice(&init, id_range, &own_id);
        let req = core
            .request(Method::POST, core.url.clone())
            .header(reqwest::header::ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .body(line);
        let mut resp = match tokio::time::timeout(REINIT_TIMEOUT, req.send()).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(fail(describe(&e))),
            Err(_) => return Err(fail("the initialize timed out".into())),
        };
        if !resp.status().is_success() {
            let code = resp.status().as_u16();
            let body = match core.read_body(&mut resp, 4096, For::Other).await {
                Ok(Ok(b)) => b,
                _ => Vec::new(),
            };
            return Err(fail(format!("the initialize was answered HTTP {code}: {}", snippet_of(&body))));
        }
        let session = resp.headers().get(mcp::header::SESSION_ID).and_then(|v| v.to_str().ok()).map(str::to_string);
        let answer = tokio::time::timeout(REINIT_TIMEOUT, own_answer(core, &mut resp, &own_id, core.limit))
            .await
            .map_err(|_| fail("the initialize got no answer in time".into()))?
            .map_err(fail)?;
        let env = codec::parse(&answer).map_err(|e| fail(e.message()))?;
        if env.is_error {
            return Err(fail(format!("the initialize was refused: {}", snippet_of(answer.as_bytes()))));
        }
        let version = negotiated_version(&answer);
        let mut note = core
            .request(Method::POST, core.url.clone())
            .header(reqwest::header::ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .body(codec::notification("notifications/initialized", "{}"));
        if let Some(s) = &session {
            note = self.with_session(note, s);
        }
        if let Some(v) = version.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
            note = note.header(mcp::header::PROTOCOL_VERSION, v);
        }
        match tokio::time::timeout(REINIT_TIMEOUT, note.send()).await {
            Ok(Ok(r)) if r.status().is_success() => {}
            Ok(Ok(r)) => {
                return Err(fail(format!("notifications/initialized was answered HTTP {}", r.status().as_u16())));
            }
            Ok(Err(e)) => return Err(fail(describe(&e))),
            Err(_) => return Err(fail("notifications/initialized timed out".into())),
        }
        {
            let mut st = self.state.lock().unwrap();
            st.session = session;
            if version.is_some() {
                st.version = version;
            }
            st.generation += 1;
        }
        tracing::info!(instance = %core.label, "the session at {url} was lost ({why}); re-initialised a new one and replaying");
        core.renewed();
        core.reconnected("reinit_404");
        self.listen();
        Ok(())
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn session_loss_wordings_of_the_reference_servers() {
        assert!(says_session_lost(
            r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}"#
        ));
        assert!(says_session_lost(r#"{"error":{"code":-32001,"message":"Session not found"}}"#));
        assert!(says_session_lost("Bad Request: Server not initialized"));
        assert!(!says_session_lost(r#"{"error":{"code":-32602,"message":"Invalid params"}}"#));
    }
}
