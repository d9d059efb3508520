//! Where a call runs: which of a pool's instances (its scope) serve it, from the policy's
//! placement and the pool's affinity.

use std::sync::Arc;
use std::time::Duration;

use sha2::Digest;

use switchyard_core::decision::{Caller, Placement};
use switchyard_core::ids::SessionId;

/// How long instances that outlive their sessions run on once unused: a server's sibling
/// after its last session left, and the instances of a `client` or `key` placement once idle
/// in a pool whose `idle_timeout_ms` is 0 ("never"), which must not run for ever once their
/// client is gone. A client that comes back meanwhile finds them, with their state.
pub const LINGER: Duration = Duration::from_secs(600);

/// Which of a pool's instances serve a call (the key of the pool's scopes).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ScopeKey {
    /// The pool's shared instances.
    Shared,
    /// One session's own: the pool's `affinity = "session"`, a call placed `session`, or placed
    /// `client` by a client that gave no name. Stopped when the session ends.
    Session(SessionId),
    /// One client's own (placed `client`), for all its sessions; stopped once idle.
    Client(Arc<ClientId>),
    /// Every call placed under one key, whoever calls; stopped once idle.
    Key(Arc<str>),
}

/// A client as `client` placement tells clients apart: its name, the project its `connect`
/// ran in and the name of the token the HTTP front was sent (never the token itself).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClientId {
    pub name: String,
    pub dir: Option<String>,
    pub token: Option<String>,
}

impl ScopeKey {
    /// The scope a call asks for: `placement` (none: shared) for `session` of `caller`.
    pub fn wanted(placement: Option<&Placement>, session: SessionId, caller: &Caller) -> ScopeKey {
        match placement {
            None | Some(Placement::Shared) => ScopeKey::Shared,
            Some(Placement::Session) => ScopeKey::Session(session),
            // Two clients that gave no name cannot be told apart: each session is its own client.
            Some(Placement::Client) => match &caller.name {
                None => ScopeKey::Session(session),
                Some(name) => ScopeKey::Client(Arc::new(ClientId {
                    name: name.to_string(),
                    dir: caller.dir.as_deref().map(str::to_string),
                    token: caller.token.as_deref().map(str::to_string),
                })),
            },
            Some(Placement::Key(k)) => ScopeKey::Key(Arc::from(k.as_str())),
        }
    }

    /// Whether its instances outlive the sessions that use them (and so stop once idle).
    pub fn lingers(&self) -> bool {
        matches!(self, ScopeKey::Client(_) | ScopeKey::Key(_))
    }

    /// How status and errors name it: `shared`, `session 3`, `client cursor (project 1a2b3c,
    /// token ci)`, `key docs`. A project directory is shown as a short digest only (status
    /// never shows a client's paths), so two projects of one client still read apart.
    pub fn describe(&self) -> String {
        match self {
            ScopeKey::Shared => "shared".into(),
            ScopeKey::Session(s) => format!("session {s}"),
            ScopeKey::Client(c) => {
                let mut about = Vec::new();
                if let Some(dir) = &c.dir {
                    let digest = sha2::Sha256::digest(dir.as_bytes());
                    about.push(format!(
                        "project {}",
                        digest.iter().take(3).map(|b| format!("{b:02x}")).collect::<String>()
                    ));
                }
                if let Some(token) = &c.token {
                    about.push(format!("token {token}"));
                }
                match about.is_empty() {
                    true => format!("client {}", c.name),
                    false => format!("client {} ({})", c.name, about.join(", ")),
                }
            }
            ScopeKey::Key(k) => format!("key {k}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_placement_names_its_scope_and_an_anonymous_client_is_its_session() {
        let cursor = Caller { name: Some("cursor".into()), dir: Some("/w/p".into()), ..Caller::default() };
        let want = |p: Option<Placement>, caller: &Caller| ScopeKey::wanted(p.as_ref(), 7, caller);
        assert_eq!(want(None, &cursor), ScopeKey::Shared);
        assert_eq!(want(Some(Placement::Shared), &cursor), ScopeKey::Shared);
        assert_eq!(want(Some(Placement::Session), &cursor), ScopeKey::Session(7));
        assert_eq!(want(Some(Placement::Client), &Caller::default()), ScopeKey::Session(7));
        let other_dir = Caller { dir: Some("/w/q".into()), ..cursor.clone() };
        assert_ne!(want(Some(Placement::Client), &cursor), want(Some(Placement::Client), &other_dir));
        let with_token = Caller { token: Some("ci".into()), ..cursor.clone() };
        let shown = want(Some(Placement::Client), &with_token).describe();
        assert!(shown.starts_with("client cursor (project ") && shown.ends_with(", token ci)"), "{shown}");
        assert!(!shown.contains("/w/p"), "a directory is never shown: {shown}");
        assert_eq!(want(Some(Placement::Key("docs".into())), &cursor).describe(), "key docs");
    }
}
