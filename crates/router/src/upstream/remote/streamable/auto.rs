//! `transport = "auto"`: the probe's modes, and the switch to legacy SSE when the server refuses it.

use std::sync::Arc;

use super::Inner;
use crate::upstream::remote::legacy::Legacy;
use crate::upstream::remote::not_delivered;
use crate::upstream::transport::{Outbound, RemoteKind, Transport};

#[derive(Clone)]
pub(super) enum Mode {
    /// `auto`, nothing sent yet: the first request is the probe.
    Unknown,
    /// `auto`: the probe is on its way; other messages wait for its outcome.
    Probing,
    Http,
    /// `auto` found a legacy server: everything goes there.
    Legacy(Arc<Legacy>),
}

impl Inner {
    /// `auto`: the server refused the probe as a legacy server does; reach it over legacy SSE
    /// at the same URL and send the probe again there.
    pub(super) async fn fall_back(self: &Arc<Self>, msg: Outbound, why: String) {
        let core = &self.core;
        match Legacy::open(core.clone()).await {
            Ok(legacy) => {
                self.resolved(RemoteKind::Sse, &why);
                self.mode.send_replace(Mode::Legacy(legacy.clone()));
                if legacy.send(msg.clone()).is_err()
                    && let Some(id) = msg.request
                {
                    core.lost(id, not_delivered("the connection closed before the message was sent".into()));
                }
            }
            Err(f) => {
                let cause = format!(
                    "{} refused Streamable HTTP ({why}) and legacy SSE did not work either: {}",
                    core.shown_url(),
                    f.reason
                );
                if let Some(id) = msg.request {
                    core.lost(id, not_delivered(cause.clone()));
                }
                core.end(cause);
            }
        }
    }

    /// `auto`: records what the server speaks (logged once per connector).
    pub(super) fn resolved(&self, kind: RemoteKind, why: &str) {
        if !matches!(&*self.mode.borrow(), Mode::Probing) {
            return;
        }
        if let Some(probe) = &self.probe {
            let mut known = probe.lock().unwrap();
            if known.as_ref() != Some(&kind) {
                match kind {
                    RemoteKind::Sse => tracing::info!(
                        "server {}: {} speaks legacy SSE ({why}); using it",
                        self.core.server,
                        self.core.shown_url()
                    ),
                    _ => {
                        tracing::info!("server {}: {} speaks Streamable HTTP", self.core.server, self.core.shown_url())
                    }
                }
                *known = Some(kind.clone());
            }
        }
        if kind == RemoteKind::StreamableHttp {
            self.mode.send_replace(Mode::Http);
        }
    }
}
