//! Whom a server's instances serve: the sessions on it with their profiles (so that one client's
//! roots never reach instances another client uses), and the clients it served lately, which
//! `switchyard status` names (a sibling that outlives its clients still says whom it is for).

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde_json::{Value, json};

use super::Server;
use super::profile::Profile;
use switchyard_core::ids::SessionId;

/// How many clients a server remembers having served (the oldest go first).
const KEPT: usize = 16;

/// The sessions on one server and the clients it served.
#[derive(Default)]
pub struct Served {
    /// Each session on it: its profile, and whether it shares instances started for another
    /// profile by the evidence (`joined`).
    now: Mutex<BTreeMap<SessionId, (Profile, bool)>>,
    /// The clients it served, newest last: their profile (roots left out) and `joined`.
    lately: Mutex<Vec<(Profile, bool)>>,
}

impl Served {
    /// `session`, of profile `profile`, is served here.
    pub(super) fn enter(&self, session: SessionId, profile: &Profile, joined: bool) {
        self.now.lock().expect("lock").insert(session, (profile.clone(), joined));
        // One entry per client and profile, whatever its roots.
        let seen = Profile { roots: None, ..profile.clone() };
        let mut lately = self.lately.lock().expect("lock");
        lately.retain(|(p, _)| !(p == &seen && p.client == seen.client));
        lately.push((seen, joined));
        if lately.len() > KEPT {
            lately.remove(0);
        }
    }

    /// `session` is no longer served here.
    pub(super) fn leave(&self, session: SessionId) {
        self.now.lock().expect("lock").remove(&session);
    }
}

impl Server {
    /// Why this server's instances may not be told one client's roots now (None: they may): a
    /// session on them shares them by the evidence while its roots differ from those of the
    /// profile they were started for, or are not known yet (or one of the two declares roots and
    /// the other does not).
    /// The server had never asked for roots; answering one client would show its roots to the
    /// others, so the request is refused, and from now on such clients get instances of their own.
    pub fn roots_unshared(&self) -> Option<String> {
        let claimed = self.profile()?;
        let now = self.family.served.now.lock().expect("lock");
        // Roots not known yet are not known to agree.
        let mixed = now.values().any(|(p, joined)| {
            *joined
                && (p.declares_roots() != claimed.declares_roots()
                    || (p.declares_roots() && (p.roots.is_none() || p.roots != claimed.roots)))
        });
        mixed.then(|| {
            "its instances serve clients whose roots differ (they share them because the server had never asked for roots), and one client's roots must not reach instances another client uses; from now on such clients get instances of their own, and a client started again is asked for its roots there".to_string()
        })
    }

    /// The clients this server serves and served lately, as `switchyard status --json` shows
    /// them: name, version and title from their `clientInfo`, their kind (protocol version and
    /// capabilities), their sessions on it now, and whether they share instances started for
    /// another kind of client (`joined`).
    pub(super) fn clients_status(&self) -> Vec<Value> {
        let now = self.family.served.now.lock().expect("lock");
        let lately = self.family.served.lately.lock().expect("lock");
        lately
            .iter()
            .rev()
            .map(|(p, joined)| {
                let sessions = now.values().filter(|(q, _)| q.same_client(p) && q.client == p.client).count();
                json!({
                    "name": p.client.name,
                    "version": p.client.version,
                    "title": p.client.title,
                    "protocol": p.version,
                    "capabilities": p.capability_names(),
                    "kind": p.kind(),
                    "sessions": sessions,
                    "joined": joined,
                })
            })
            .collect()
    }

    /// The clients of the sessions `owner` names (all of this server's, for a shared
    /// instance), as `name version`.
    pub(super) fn clients_of(&self, owner: Option<SessionId>) -> Vec<String> {
        let now = self.family.served.now.lock().expect("lock");
        let mut names: Vec<String> = now
            .iter()
            .filter(|(s, _)| owner.is_none_or(|o| o == **s))
            .map(|(_, (p, _))| {
                let name = p.client.name.clone().unwrap_or_else(|| "a client without clientInfo".into());
                match &p.client.version {
                    Some(v) => format!("{name} {v}"),
                    None => name,
                }
            })
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_is_named_once_per_profile_and_the_oldest_go_first() {
        let served = Served::default();
        let p = |name: &str, version: &str| {
            Profile::of_initialize(
                &format!(r#"{{"protocolVersion":"{version}","capabilities":{{}},"clientInfo":{{"name":"{name}"}}}}"#),
                None,
            )
        };
        served.enter(1, &p("a", "2025-06-18"), false);
        served.enter(2, &Profile { roots: Some("[]".into()), ..p("a", "2025-06-18") }, false);
        served.enter(3, &p("b", "2025-06-18"), true);
        assert_eq!(served.lately.lock().unwrap().len(), 2, "roots make no second entry");
        served.leave(1);
        assert_eq!(served.now.lock().unwrap().len(), 2);
        for n in 0..KEPT {
            served.enter(10 + n as u64, &p(&format!("c{n}"), "2025-06-18"), false);
        }
        let lately = served.lately.lock().unwrap();
        assert_eq!(lately.len(), KEPT);
        assert_eq!(lately[0].0.client.name.as_deref(), Some("c0"), "the oldest went first");
    }
}
