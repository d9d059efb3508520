//! A client's `initialize` (answered from the server's earlier answer while it starts, when it
//! is known), and which era a request is of.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::{Session, same_answer};
use crate::server::Server;
use switchyard_core::call::Call;
use switchyard_core::codec;

impl Session {
    /// Answers the client's `initialize` (`params`, request `id`).
    pub(super) async fn initialize(
        self: &Arc<Self>,
        server: &Arc<Server>,
        params: &str,
        id: &str,
        token: &CancellationToken,
    ) -> Option<String> {
        let profile = self.profile();
        // `connect` sets a moved session up again with the client's initialize: the
        // client keeps what the configuration it left told it, which is what this one
        // must keep to (as with an answer from memory).
        if crate::control::is_replay_id(id)
            && let Some(told) = profile.as_ref().and_then(|p| server.base().told_before(p))
        {
            let _ = self.promised.set(told);
        }
        // A server known from before is answered at once with what it answered then;
        // its start goes on, and requests wait for it.
        if !server.is_initialized()
            && let Some(p) = &profile
            && let Some(remembered) = server.remembered_initialize(p)
        {
            let _ = self.promised.set(remembered.clone());
            let (me, server, params, p) = (self.clone(), server.clone(), params.to_string(), p.clone());
            let answered = remembered.clone();
            server.clone().tasks.spawn(async move {
                match server.initialize(me.id, &params).await {
                    Ok(result) => {
                        server.remember_initialize(&p, &result);
                        let result = server.answer_for(Some(&p), result);
                        if !same_answer(&result, &answered) {
                            me.tell_lists_changed(&result);
                        }
                        server.refresh_tools().await;
                    }
                    Err(e) => tracing::warn!(
                        session = %me.label, server = %server.name,
                        "initialize was answered from the server's earlier answer, but the server did not start: {e}; the client's requests get this error"
                    ),
                }
            });
            return Some(codec::response_ok(id, &remembered));
        }
        let r = tokio::select! {
            r = server.initialize(self.id, params) => r,
            _ = token.cancelled() => return None,
        };
        Some(match r {
            Ok(result) => {
                if let Some(p) = &profile {
                    server.remember_initialize(p, &result);
                }
                // A client sharing instances started for another profile gets its own answer.
                let result = server.answer_for(profile.as_ref(), result);
                let s = server.clone();
                server.tasks.spawn(async move { s.refresh_tools().await });
                codec::response_ok(id, &result)
            }
            Err(e) => e.to_response(id),
        })
    }

    /// Whether a request is of the 2026-07-28 era (its protocol version in `_meta`), or the
    /// answer for a version switchyard does not serve per request.
    pub(super) fn era(&self, server: &Server, call: &Call, id: &str) -> Result<bool, String> {
        let method = call.method();
        // A request of the 2026-07-28 era carries its protocol version in `_meta` and needs no
        // initialize: it goes to instances of that era, as it is (`initialize` stays a handshake).
        match call.protocol_version() {
            // A version switchyard does not serve per request gets the spec's answer, as the
            // HTTP front gives it: the server behind may not check.
            Some(version)
                if !matches!(method, "initialize" | "server/discover")
                    && !switchyard_mcp::version::STATELESS.contains(&&*version) =>
            {
                let shown: String = version.chars().take(40).collect();
                let supported = switchyard_mcp::version::STATELESS;
                let message = format!(
                    "Unsupported protocol version {shown:?}: switchyard serves {} per request (in `_meta`), and {} after initialize",
                    supported.join(", "),
                    switchyard_mcp::version::SESSION_ERA.join(", ")
                );
                let data = serde_json::json!({ "supported": supported, "requested": shown });
                Err(codec::response_error(id, codec::UNSUPPORTED_PROTOCOL_VERSION, &message, Some(&data)))
            }
            Some(version) if method != "initialize" => {
                server.saw_modern_version(&version);
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}
