//! Where a session is served: its profile from its initialize, its client's roots (asked for,
//! and asked again when they change), and the server (this one or a sibling) made for them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Opening, Session};
use crate::server::Server;
use crate::server::profile::{Placed, Profile};
use switchyard_config::Share;
use switchyard_core::codec;

/// Where a session stands in finding the server instances that serve its profile.
pub(super) struct Placement {
    /// Its profile, once it sent initialize.
    profile: Mutex<Option<Profile>>,
    /// Its initialize params: a server it moves to is initialised with them.
    pub(super) init_params: Mutex<Option<String>>,
    /// False while switchyard asks the client for its roots to place it: its requests wait.
    settled: tokio::sync::watch::Sender<bool>,
    /// The roots are being asked for, or were.
    asked: std::sync::atomic::AtomicBool,
    /// The client's project directory, when `connect` said it (for `share = "client"`).
    client_dir: Option<String>,
    /// The name of the HTTP front's named token that serves the client (for `share = "client"`).
    client_token: Option<String>,
    /// A roots change is being taken up, and another was said meanwhile.
    refreshing: std::sync::atomic::AtomicBool,
    again: std::sync::atomic::AtomicBool,
}

impl Placement {
    /// Where a session opened by `opening` stands before its initialize: settled, nothing asked.
    pub(super) fn new(opening: &Opening) -> Placement {
        Placement {
            profile: Mutex::new(None),
            init_params: Mutex::new(None),
            settled: tokio::sync::watch::channel(true).0,
            asked: Default::default(),
            client_dir: opening.client_dir.clone(),
            client_token: opening.client_token.clone(),
            refreshing: Default::default(),
            again: Default::default(),
        }
    }
}

/// How long a session whose roots are known waits for those of a client served before it, to
/// share that client's instances when their roots agree.
const RESERVED_WAIT: Duration = Duration::from_millis(300);

/// How long a session waits for its client's roots before it is placed without them (a
/// client answers in milliseconds; one that does not answer is served as one with no roots).
const ROOTS_WAIT: Duration = Duration::from_secs(2);

impl Session {
    /// At `initialize`: the session's profile, and the server that serves it (this one, or a
    /// sibling made for it). A client that declares roots is placed again once they are known.
    pub(super) fn place_at_initialize(self: &Arc<Self>, params: &str) {
        let server = self.server();
        let owner = match server.share() {
            Share::Client => {
                let v: serde_json::Value = serde_json::from_str(params).unwrap_or_default();
                let name = v["clientInfo"]["name"].as_str().unwrap_or_default();
                let dir = self.placement.client_dir.as_deref().unwrap_or("");
                // Holders of two named tokens are two clients, whatever their names say.
                match &self.placement.client_token {
                    Some(token) => Some(format!("{name} in {dir} with token {token}")),
                    None => Some(format!("{name} in {dir}")),
                }
            }
            Share::Session => Some(format!("session {}", self.id)),
            Share::All | Share::Profile => None,
        };
        let profile = Profile::of_initialize(params, owner);
        *self.placement.init_params.lock().expect("lock") = Some(params.to_string());
        *self.placement.profile.lock().expect("lock") = Some(profile.clone());
        let server = self.place(&server, &profile, false).unwrap_or(server);
        // switchyard asks a client that declares roots for them once it is initialised. Where
        // its requests could be served by instances set up for other roots (the server's roots
        // are known, another client's; or it has other clients), they wait for the answer; a
        // client alone on a server new to roots is served meanwhile, and the server takes its
        // roots when they come.
        let ask = profile.declares_roots() && server.has_family();
        if ask {
            let others = server.profile().is_some_and(|p| p.roots.is_some()) || server.hub.session_count() > 1;
            if others {
                self.placement.settled.send_replace(false);
            } else {
                server.reserve_roots(self.id);
            }
            server.hub.expect_roots(self.id);
        }
        self.placement.asked.store(!ask, std::sync::atomic::Ordering::Relaxed);
    }

    /// Sends the session to the server for `profile` when that is not `server`; returns it then.
    fn place(self: &Arc<Self>, server: &Arc<Server>, profile: &Profile, roots_changed: bool) -> Option<Arc<Server>> {
        // Gone (its client left while its roots were awaited): nothing is started for it.
        if self.leaving.load(std::sync::atomic::Ordering::SeqCst) {
            return None;
        }
        match server.place(self.id, profile, roots_changed) {
            Ok(Placed::Stay) => None,
            Ok(Placed::Move(to)) => {
                *self.server.write().expect("lock") = to.clone();
                to.hub.attach(self.link.clone());
                server.hub.detach(self.id);
                let (from, id) = (server.clone(), self.id);
                server.tasks.spawn(async move { from.detach(id).await });
                tracing::info!(
                    session = %self.label,
                    "served by {}: what the server sees of this client differs from the clients of {}",
                    to.instance_label_prefix(),
                    server.instance_label_prefix()
                );
                Some(to)
            }
            Err(why) => {
                tracing::warn!(
                    session = %self.label,
                    server = %server.name,
                    "could not start instances for this client's profile ({why}); it shares those of {}",
                    server.instance_label_prefix()
                );
                None
            }
        }
    }

    /// Once the client is initialised, where its initialize asked for it (see
    /// [`Session::place_at_initialize`]): asks for its roots and places the session by them. Its
    /// requests wait meanwhile (at most [`ROOTS_WAIT`]).
    pub(super) fn settle_roots(self: &Arc<Self>) {
        // A client that never sent initialize declared no roots: it is asked for none (its
        // requests are refused anyway).
        if !self.sent_initialize() {
            return;
        }
        // Once per initialize that asks for it (cheap on every later request).
        if self.placement.asked.swap(true, std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            let server = me.server();
            // No answer in time, or an error: the client's roots are unknown, and it must not
            // be served by instances set up for another client's roots. It gets instances of
            // its own (which ask it for its roots themselves).
            let roots = server.hub.fetch_roots(&me.link, ROOTS_WAIT).await;
            // A client served here first, whose roots are not known yet, decides whether this
            // one may share: wait a moment for them (two clients starting together answer within
            // milliseconds of each other) rather than start instances for clients that may well
            // be alike; past that, this one gets its own.
            let waited = tokio::time::Instant::now();
            while server.roots_reserved_for_other(me.id) && waited.elapsed() < RESERVED_WAIT {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            me.place_by_roots(&server, roots, false);
            me.placement.settled.send_replace(true);
        });
    }

    /// The client's roots are `roots` (None: unknown, it did not say): the session goes to the
    /// server for them (initialised for it when it is not yet). True when it moved.
    fn place_by_roots(self: &Arc<Self>, server: &Arc<Server>, roots: Option<serde_json::Value>, changed: bool) -> bool {
        let profile = {
            let mut p = self.placement.profile.lock().expect("lock");
            let Some(p) = p.as_mut() else { return false };
            p.roots = Some(match &roots {
                Some(r) => crate::server::profile::canonical_roots(r),
                None => crate::server::profile::UNKNOWN_ROOTS.to_string(),
            });
            p.clone()
        };
        let Some(to) = self.place(server, &profile, changed) else { return false };
        to.hub.set_roots(self.id, roots);
        let params = self.placement.init_params.lock().expect("lock").clone();
        if let Some(params) = params {
            to.begin_initialize(&params);
            let (me, to) = (self.clone(), to.clone());
            to.clone().tasks.spawn(async move {
                match to.initialize(me.id, &params).await {
                    Ok(_) => to.refresh_tools().await,
                    Err(e) => tracing::warn!(session = %me.label, "{} could not start for this client: {e}", to.instance_label_prefix()),
                }
            });
        }
        true
    }

    /// A client's roots/list_changed: switchyard learns the new roots; a session that shares its
    /// instances with clients of the old roots moves to instances for the new ones, else the
    /// change goes on to its instances.
    pub(super) async fn roots_changed(self: &Arc<Self>, line: String) {
        use std::sync::atomic::Ordering::SeqCst;
        // One refresh at a time: a change said while one runs is taken up by it (asked again
        // once it ends), so a client that keeps saying so holds neither asks nor its lines.
        if self.placement.refreshing.swap(true, SeqCst) {
            self.placement.again.store(true, SeqCst);
            return;
        }
        let mut line = line;
        loop {
            let server = self.server();
            let moved = match server.hub.refresh_roots(&self.link).await {
                Some(roots) if server.has_family() => self.place_by_roots(&server, Some(roots), true),
                _ => false,
            };
            // Instances started for clients that declare no roots, which this client shares
            // by the evidence, are not told of its roots: their server knows of none. A client
            // of the profile they were started for has its change passed on, as ever.
            if !moved && !self.shares_rootless(&server) {
                server.hub.pass_roots_changed(self.id, line);
            }
            self.placement.refreshing.store(false, SeqCst);
            if !self.placement.again.swap(false, SeqCst) || self.placement.refreshing.swap(true, SeqCst) {
                return;
            }
            line = codec::notification("notifications/roots/list_changed", "{}");
        }
    }

    /// Whether this session shares, by the evidence, instances of `server` started for clients
    /// of another profile that declare no roots.
    fn shares_rootless(&self, server: &Server) -> bool {
        let Some(claimed) = server.profile() else { return false };
        !claimed.declares_roots() && self.profile().is_some_and(|me| !me.same_client(&claimed))
    }

    /// Its profile, once it sent initialize.
    pub(super) fn profile(&self) -> Option<Profile> {
        self.placement.profile.lock().expect("lock").clone()
    }

    /// Whether the client sent initialize (without copying its profile: asked on every request).
    pub(super) fn sent_initialize(&self) -> bool {
        self.placement.profile.lock().expect("lock").is_some()
    }

    /// Waits until the session is placed (see [`Session::settle_roots`]).
    pub(super) async fn placed(&self) {
        let mut rx = self.placement.settled.subscribe();
        while !*rx.borrow_and_update() {
            if rx.changed().await.is_err() {
                return;
            }
        }
    }
}
