//! Which clients share a server's instances. A client's profile is what the server can observe of
//! it: the protocol version and capabilities of its initialize, its roots, and (by `share`) the
//! client or session itself. The server as configured (the base) serves the first profile that
//! initialises it; a client whose profile differs gets a sibling: a server of the same config,
//! with its own instances, initialised with that client's initialize, labelled `NAME~N`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use tokio::time::Instant;

use serde_json::Value;

use super::Server;
use switchyard_config::Share;

/// What a server can observe of a client, as far as it is known.
#[derive(Debug, Clone)]
pub struct Profile {
    /// The `protocolVersion` of its initialize.
    pub version: String,
    /// Its declared `capabilities`, in one canonical form.
    pub capabilities: String,
    /// Its roots (canonical, in one order) once switchyard has asked for them; `None` until then
    /// and for a client that declares no roots.
    pub roots: Option<String>,
    /// By `share`: the client (`client`) or the session (`session`) the instances are for.
    pub owner: Option<String>,
    /// Who the client says it is: for status only, never compared.
    pub client: ClientInfo,
}

/// Profiles compare by what a server sees of them that may change what it does; `clientInfo` is
/// not among it (clients of one kind and version differ in nothing else).
impl PartialEq for Profile {
    fn eq(&self, other: &Profile) -> bool {
        self.same_client(other) && self.roots == other.roots
    }
}

impl Eq for Profile {}

/// A client's `clientInfo`, as far as it gave it (each part cut to 80 characters).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientInfo {
    pub name: Option<String>,
    pub version: Option<String>,
    pub title: Option<String>,
}

impl Profile {
    /// The profile in `initialize` params (roots not known yet). A string in them that is not
    /// valid Unicode is read lossily, and costs no other field (see [`crate::peer::lenient`]).
    pub fn of_initialize(params: &str, owner: Option<String>) -> Profile {
        let v: Value = crate::peer::lenient::parse(params).unwrap_or(Value::Null);
        let info = |k: &str| v["clientInfo"][k].as_str().map(|s| s.chars().take(80).collect::<String>());
        Profile {
            version: v["protocolVersion"].as_str().unwrap_or_default().to_string(),
            capabilities: canonical(v.get("capabilities").unwrap_or(&Value::Null)),
            roots: None,
            owner,
            client: ClientInfo { name: info("name"), version: info("version"), title: info("title") },
        }
    }

    /// The names of the capabilities it declares, in order.
    pub fn capability_names(&self) -> Vec<String> {
        let caps: Value = serde_json::from_str(&self.capabilities).unwrap_or_default();
        caps.as_object()
            .map(|m| m.iter().filter(|(_, v)| !v.is_null()).map(|(k, _)| k.clone()).collect())
            .unwrap_or_default()
    }

    /// What kind of client it is to a server: `protocol 2025-11-25; roots, elicitation`.
    pub fn kind(&self) -> String {
        let caps = self.capability_names();
        let caps = if caps.is_empty() { "no capabilities".to_string() } else { caps.join(", ") };
        format!("protocol {}; {caps}", self.version)
    }

    /// Whether a client with this profile declared the roots capability (so its roots are part
    /// of what the server sees).
    pub fn declares_roots(&self) -> bool {
        serde_json::from_str::<Value>(&self.capabilities).is_ok_and(|c| c.get("roots").is_some_and(|r| !r.is_null()))
    }

    /// Where the initialize result for this profile is kept, for a server whose config key is
    /// `server` (the roots play no part: they are learned after initialize).
    pub fn answer_key(&self, server: &str) -> String {
        self.key_for(server, "initialize")
    }

    /// Where the server's answer to `what` (a method) for this profile is kept (see
    /// [`Profile::answer_key`]).
    pub fn key_for(&self, server: &str, what: &str) -> String {
        let owner = self.owner.as_deref().unwrap_or("");
        format!("{server}:{what}:{}", super::answers::digest(&[&self.version, &self.capabilities, owner]))
    }

    /// Whether the client declared roots but did not say them (see [`UNKNOWN_ROOTS`]).
    pub fn roots_unknown(&self) -> bool {
        self.roots.as_deref() == Some(UNKNOWN_ROOTS)
    }

    /// Everything but the roots agrees.
    pub fn same_client(&self, other: &Profile) -> bool {
        self.version == other.version && self.capabilities == other.capabilities && self.owner == other.owner
    }
}

/// The roots of a client that declares roots but did not say them (no answer in time, an error
/// answer, or no way to ask it, as an HTTP session without a stream). Such clients must not be
/// served by instances set up for another client's roots; they share one set of instances
/// among themselves, which stops as soon as the last of them leaves: a burst of them costs one
/// set, not one each kept for minutes. (A `roots/list` result is a JSON array: never this.)
pub const UNKNOWN_ROOTS: &str = "unknown";

/// A `roots/list` result's roots in one order (by URI), so that equal sets compare equal.
pub fn canonical_roots(result: &Value) -> String {
    let mut roots: Vec<Value> = result.get("roots").and_then(Value::as_array).cloned().unwrap_or_default();
    roots.sort_by_cached_key(|r| r.get("uri").map(Value::to_string).unwrap_or_default());
    canonical(&Value::Array(roots))
}

/// JSON text with every object's keys in order.
fn canonical(v: &Value) -> String {
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                Value::Object(keys.into_iter().map(|k| (k.clone(), sorted(&m[k]))).collect())
            }
            Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(v).to_string()
}

/// Makes a sibling of a base server, labelled as given (set by the router, which builds servers).
pub type MakeSibling = Box<dyn Fn(&str) -> anyhow::Result<Arc<Server>> + Send + Sync>;

/// A server's place among the servers of one config: the base keeps its siblings.
#[derive(Default)]
pub struct Family {
    /// On a sibling: its base.
    base: OnceLock<Weak<Server>>,
    /// On the base: the siblings serving now.
    siblings: Mutex<Vec<Arc<Server>>>,
    /// On the base: how siblings are made (None: this server never gets siblings).
    make: OnceLock<MakeSibling>,
    next: AtomicU64,
    /// The profile this server serves, once a client claimed it (an initialised server keeps it).
    claimed: Mutex<Option<Profile>>,
    /// When a client was last sent here: a sibling is not stopped just as a client arrives.
    touched: Mutex<Option<Instant>>,
    /// The session served here before its roots were known: the roots this server takes are
    /// its, not those of a client that came later and answered first.
    reserved: Mutex<Option<u64>>,
    /// The sessions it serves, with their profiles, and the clients it served lately (status).
    pub(super) served: super::served::Served,
    /// On the base: one update of what the server was seen to ask clients at a time.
    pub(super) asked_lock: Mutex<()>,
    /// Its evidence is being gathered, or was (once per server).
    pub(super) gathering: std::sync::atomic::AtomicBool,
    /// The profiles (`kind`) said in the log to share its instances by the evidence.
    joined_said: Mutex<std::collections::BTreeSet<String>>,
}

/// Whether a server serves a profile.
#[derive(Debug, PartialEq)]
enum Claim {
    /// It serves that profile (or took it).
    Serves,
    /// It serves another that the evidence says it cannot tell from this one.
    Joins,
    /// It does not; why not, when the evidence was weighed.
    No(Option<String>),
}

/// Where a client goes.
pub enum Placed {
    /// The server it is on serves its profile.
    Stay,
    /// Another server of the family serves it.
    Move(Arc<Server>),
}

impl Server {
    /// How this server's instances are shared.
    pub fn share(&self) -> Share {
        self.share
    }

    /// Whether a client of `want` may share instances started for `claimed` (Err: why not):
    /// [`Server::judge`], and one set of roots where the server asks for them.
    fn may_join(&self, claimed: &Profile, want: &Profile) -> Result<(), String> {
        self.judge(claimed, want)?;
        let roots_agree = match (&claimed.roots, &want.roots) {
            _ if !self.asked().contains(&super::alike::Feature::Roots) => true,
            (_, None) => true,
            (Some(a), Some(b)) => a == b,
            // This server's roots are its own profile's to set.
            (None, Some(_)) => false,
        };
        if roots_agree { Ok(()) } else { Err("the server asks clients for roots and theirs differ".into()) }
    }

    /// Whether the clients of `sibling` would share the base or an older sibling now (by the
    /// evidence): then it stops when its last session leaves, and its clients go there. (Only
    /// older ones: of two siblings whose clients could share either, the younger goes.)
    fn redundant(base: &Arc<Server>, sibling: &Arc<Server>) -> bool {
        let Some(mine) = sibling.profile() else { return false };
        let older =
            std::iter::once(base.clone()).chain(base.siblings().into_iter().take_while(|s| !Arc::ptr_eq(s, sibling)));
        older.into_iter().any(|m| {
            !m.shutdown.is_cancelled()
                && m.share == Share::Profile
                && m.profile().is_some_and(|c| !c.same_client(&mine) && m.may_join(&c, &mine).is_ok())
        })
    }

    /// Lets this server make siblings for clients of other profiles.
    pub fn allow_siblings(&self, make: MakeSibling) {
        let _ = self.family.make.set(make);
    }

    /// Whether clients of other profiles get instances of their own here (`share` is not `all`,
    /// and the router lets this server have siblings).
    pub fn has_family(&self) -> bool {
        self.share != Share::All && (self.family.make.get().is_some() || self.family.base.get().is_some())
    }

    /// The server as configured (itself, unless it is a sibling).
    pub fn base(self: &Arc<Self>) -> Arc<Server> {
        self.family.base.get().and_then(Weak::upgrade).unwrap_or_else(|| self.clone())
    }

    /// The siblings serving now (on the base; none on a sibling).
    pub fn siblings(&self) -> Vec<Arc<Server>> {
        self.family.siblings.lock().expect("lock").clone()
    }

    /// This server, then the others of its family (its base and the base's siblings).
    pub fn family_members(self: &Arc<Self>) -> Vec<Arc<Server>> {
        let base = self.base();
        let mut all = vec![self.clone()];
        all.extend(std::iter::once(base.clone()).chain(base.siblings()).filter(|s| !Arc::ptr_eq(s, self)));
        all
    }

    /// The live instance numbered `number` in this server's family (numbers are unique there),
    /// and the server it belongs to.
    pub fn family_instance(self: &Arc<Self>, number: u64) -> Option<(Arc<Server>, Arc<crate::upstream::Instance>)> {
        self.family_members().into_iter().find_map(|s| {
            let inst = s.all_instances().into_iter().find(|i| i.number() == number && !i.is_dead())?;
            Some((s, inst))
        })
    }

    /// The profile this server serves, if one was claimed.
    pub fn profile(&self) -> Option<Profile> {
        self.family.claimed.lock().expect("lock").clone()
    }

    /// Claims this server for `want` if it is free or serves a profile `want` fits (filling in
    /// the roots, when the server's are not known yet), or one the evidence says this server
    /// cannot tell from it (see [`super::alike`]). Whether it serves `want` now.
    fn claim(&self, session: u64, want: &Profile) -> Claim {
        // Reserved for a session still on it whose roots are not known yet: only it may set them.
        let reserved = *self.family.reserved.lock().expect("lock");
        let held_for_other = reserved.is_some_and(|r| r != session && self.hub.session(r).is_some());
        let mut claimed = self.family.claimed.lock().expect("lock");
        let fits = match claimed.as_mut() {
            None => {
                *claimed = Some(want.clone());
                true
            }
            Some(p) if !p.same_client(want) => {
                let p = p.clone();
                drop(claimed);
                return self.joins(&p, want);
            }
            Some(p) => match (&p.roots, &want.roots) {
                (_, None) => true,
                (None, Some(_)) if held_for_other => false,
                (None, Some(_)) => {
                    p.roots = want.roots.clone();
                    *self.family.reserved.lock().expect("lock") = None;
                    true
                }
                (Some(a), Some(b)) => a == b,
            },
        };
        if fits { Claim::Serves } else { Claim::No(None) }
    }

    /// Whether `want`, a profile other than `claimed` (this server's), shares its instances by
    /// the evidence ([`Server::judge`]). The instances must have been started (or be starting)
    /// for `claimed`: `want`'s initialize never starts them. A server that asks clients for
    /// their roots keeps to one set of roots, as for clients of one profile.
    fn joins(&self, claimed: &Profile, want: &Profile) -> Claim {
        if self.share != Share::Profile {
            return Claim::No(None);
        }
        if !self.is_initialized() && self.init.params.lock().expect("lock").is_none() {
            return Claim::No(Some("its instances have not started yet".into()));
        }
        if let Err(why) = self.may_join(claimed, want) {
            return Claim::No(Some(why));
        }
        if self.family.joined_said.lock().expect("lock").insert(want.kind()) {
            tracing::info!(
                server = %self.name,
                "clients of {} share {}, started for clients of {}: the server answered both alike and never asked a client for what they differ in",
                want.kind(),
                self.instance_label_prefix(),
                claimed.kind()
            );
        }
        Claim::Joins
    }

    /// `session` is served here before its roots are known: the roots this server takes are
    /// its (see [`Family`]).
    pub fn reserve_roots(&self, session: u64) {
        let claimed = self.family.claimed.lock().expect("lock");
        if claimed.as_ref().is_some_and(|p| p.roots.is_none() && p.declares_roots()) {
            self.family.reserved.lock().expect("lock").get_or_insert(session);
        }
    }

    /// Whether this server waits for the roots of another session than `session`, served here
    /// before its roots were known (they decide whether `session` may share it).
    pub fn roots_reserved_for_other(&self, session: u64) -> bool {
        let reserved = *self.family.reserved.lock().expect("lock");
        let unknown = self.family.claimed.lock().expect("lock").as_ref().is_some_and(|p| p.roots.is_none());
        unknown && reserved.is_some_and(|r| r != session && self.hub.session(r).is_some())
    }

    /// The server's client answered its roots/list: a server whose profile has no roots yet
    /// takes them (a client alone on a server is not asked by switchyard itself; the server's
    /// own question tells them).
    pub(super) fn take_roots(&self, session: u64, roots: &Value) {
        if self.family.reserved.lock().expect("lock").is_some_and(|r| r != session) {
            return;
        }
        if let Some(p) = self.family.claimed.lock().expect("lock").as_mut()
            && p.roots.is_none()
            && p.declares_roots()
        {
            p.roots = Some(canonical_roots(roots));
        }
    }

    /// Whether only this session is on this server (or none): a session alone may change the
    /// server's roots rather than move.
    fn alone(&self, session: u64) -> bool {
        self.hub.session_ids().iter().all(|s| *s == session)
    }

    /// Where a client of profile `want`, a session on this server, is served: here, when this
    /// server serves that profile (or is free to); else the sibling that does, made if none.
    /// `roots_changed`: the client's roots changed, so a server it is alone on takes them.
    pub fn place(self: &Arc<Self>, session: u64, want: &Profile, roots_changed: bool) -> Result<Placed, String> {
        let placed = self.place_in_family(session, want, roots_changed)?;
        let (to, joined) = match &placed {
            (Placed::Stay, joined) => (self, *joined),
            (Placed::Move(to), joined) => {
                self.family.served.leave(session);
                (to, *joined)
            }
        };
        to.family.served.enter(session, want, joined);
        Ok(placed.0)
    }

    /// [`Server::place`]: where the session goes, and whether it joins a server started for
    /// another profile by the evidence.
    fn place_in_family(
        self: &Arc<Self>,
        session: u64,
        want: &Profile,
        roots_changed: bool,
    ) -> Result<(Placed, bool), String> {
        if !self.has_family() {
            return Ok((Placed::Stay, false));
        }
        if roots_changed && self.alone(session) {
            let mut claimed = self.family.claimed.lock().expect("lock");
            if let Some(p) = claimed.as_mut().filter(|p| p.same_client(want)) {
                p.roots = want.roots.clone();
                return Ok((Placed::Stay, false));
            }
        }
        let base = self.base();
        // With `share = "session"` the base serves no session: it would outlive it, keeping
        // that session's state; each session's sibling stops with it.
        let base_serves = self.share != Share::Session;
        let is_base = Arc::ptr_eq(&base, self);
        // Why the servers weighed by the evidence could not take it (for the log).
        let mut why_not = None;
        let mut fits = |s: &Arc<Server>| match s.claim(session, want) {
            Claim::No(why) => {
                why_not = why_not.take().or(why);
                None
            }
            c => Some(c == Claim::Joins),
        };
        if (base_serves || !is_base)
            && let Some(joined) = fits(self)
        {
            return Ok((Placed::Stay, joined));
        }
        if base_serves
            && !is_base
            && let Some(joined) = fits(&base)
        {
            return Ok((Placed::Move(base), joined));
        }
        let mut siblings = base.family.siblings.lock().expect("lock");
        let found = siblings.iter().filter(|s| !Arc::ptr_eq(s, self) && !s.shutdown.is_cancelled()).find_map(|s| {
            let joined = fits(s)?;
            Some((s.clone(), joined))
        });
        if let Some((s, joined)) = found {
            *s.family.touched.lock().expect("lock") = Some(Instant::now());
            return Ok((Placed::Move(s), joined));
        }
        let Some(make) = base.family.make.get() else { return Ok((Placed::Stay, false)) };
        let label =
            format!("{}~{}", base.instance_label_prefix(), base.family.next.fetch_add(1, Ordering::Relaxed) + 2);
        let sibling = make(&label).map_err(|e| format!("{e:#}"))?;
        let _ = sibling.family.base.set(Arc::downgrade(&base));
        sibling.set_instance_prefix(&label);
        // Its pools' instances count against the base's pools' `max`.
        for (name, pool) in &sibling.pools {
            if let Some(own) = base.pools.get(name) {
                pool.share_budget(own.budget());
            }
        }
        sibling.claim(session, want);
        siblings.push(sibling.clone());
        drop(siblings);
        base.tasks.spawn(expire(Arc::downgrade(&base), sibling.clone()));
        let unshared = why_not.map(|w| format!("; not shared with other clients' instances: {w}")).unwrap_or_default();
        tracing::info!(
            server = %base.name,
            "{label} started: a client differs from those of the running instances in what the server sees ({}); it gets instances of its own (share = \"{}\"){unshared}",
            differs(&base, want),
            self.share.as_str()
        );
        Ok((Placed::Move(sibling), false))
    }
}

/// How long a sibling goes on running after its last session left: a client that comes back
/// (a restarted chat, a `connect` started again) finds its instances and their state there.
/// A sibling of `share = "session"` stops when its session ends: no other session is its; so
/// does one for clients whose roots are unknown: no later client is known to be theirs.
pub const SIBLING_IDLE: Duration = crate::placement::LINGER;
/// How often a sibling checks whether it has been idle that long.
const SIBLING_CHECK: Duration = Duration::from_secs(1);

/// Stops `sibling` once it has had no session for [`SIBLING_IDLE`] (or at once, for
/// `share = "session"` and for clients whose roots are unknown), or when it or its base stops.
async fn expire(base: Weak<Server>, sibling: Arc<Server>) {
    let mut used = Instant::now();
    loop {
        tokio::select! {
            _ = sibling.shutdown.cancelled() => break,
            _ = tokio::time::sleep(SIBLING_CHECK) => {}
        }
        let Some(base) = base.upgrade() else { break };
        if base.shutdown.is_cancelled() {
            break;
        }
        if sibling.hub.session_count() > 0 {
            used = Instant::now();
            continue;
        }
        // Asked each time: a sibling made before its client's roots were known takes them later.
        // So does one whose clients another server of the family serves now by the evidence.
        let ephemeral = sibling.share == Share::Session
            || sibling.profile().is_some_and(|p| p.roots_unknown())
            || Server::redundant(&base, &sibling);
        let linger = if ephemeral { Duration::ZERO } else { SIBLING_IDLE };
        if used.elapsed() < linger {
            continue;
        }
        // Under the lock a client finding a sibling takes, so none is sent to it now.
        let mut siblings = base.family.siblings.lock().expect("lock");
        let touched = *sibling.family.touched.lock().expect("lock");
        if sibling.hub.session_count() > 0 || touched.is_some_and(|t| t.elapsed() < SIBLING_CHECK * 2) {
            continue;
        }
        siblings.retain(|s| !Arc::ptr_eq(s, &sibling));
        drop(siblings);
        let label = sibling.instance_label_prefix();
        match linger.as_secs() {
            0 if sibling.share == Share::Profile && !sibling.profile().is_some_and(|p| p.roots_unknown()) => {
                tracing::info!(server = %base.name, "{label}: its last session left, and clients like it share other instances now; its instances stop")
            }
            0 => tracing::info!(server = %base.name, "{label}: its last session left; its instances stop"),
            s => tracing::info!(server = %base.name, "{label}: no session for {s} s; its instances stop"),
        }
        break;
    }
    sibling.shutdown.cancel();
    sibling.stop().await;
}

/// How `want` differs from the base's profile, in words (never the values: roots name paths).
fn differs(base: &Server, want: &Profile) -> String {
    let Some(p) = base.profile() else { return "another profile".into() };
    let mut parts = Vec::new();
    if p.version != want.version {
        parts.push(format!("protocol {} instead of {}", want.version, p.version));
    }
    if p.capabilities != want.capabilities {
        parts.push("other capabilities".into());
    }
    if want.roots_unknown() {
        parts.push("roots it did not say".into());
    } else if p.roots != want.roots {
        parts.push("other roots".into());
    }
    if p.owner != want.owner {
        parts.push("another client".into());
    }
    if parts.is_empty() { "another profile".into() } else { parts.join(", ") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_compare_by_content_not_by_form() {
        let a = Profile::of_initialize(
            r#"{"protocolVersion":"2025-11-25","capabilities":{"sampling":{},"roots":{"listChanged":true}}}"#,
            None,
        );
        let b = Profile::of_initialize(
            r#"{"capabilities":{"roots":{"listChanged":true},"sampling":{}},"protocolVersion":"2025-11-25","clientInfo":{"name":"x"}}"#,
            None,
        );
        assert_eq!(a, b);
        assert!(a.declares_roots());
        let c = Profile::of_initialize(r#"{"protocolVersion":"2025-11-25","capabilities":{"roots":{}}}"#, None);
        assert_ne!(a, c);
        let none = Profile::of_initialize(r#"{"protocolVersion":"2025-11-25","capabilities":{"roots":null}}"#, None);
        assert!(!none.declares_roots());
        let x: Value =
            serde_json::from_str(r#"{"roots":[{"uri":"file:///b"},{"uri":"file:///a","name":"A"}]}"#).unwrap();
        let y: Value =
            serde_json::from_str(r#"{"roots":[{"name":"A","uri":"file:///a"},{"uri":"file:///b"}]}"#).unwrap();
        assert_eq!(canonical_roots(&x), canonical_roots(&y));
    }

    #[test]
    fn a_lone_surrogate_in_client_info_costs_that_field_only() {
        let p = Profile::of_initialize(
            r#"{"protocolVersion":"2025-11-25","capabilities":{"roots":{}},"clientInfo":{"name":"\ud800x","version":"1.2.3","title":"T \udc00\ud83d\ude00"}}"#,
            None,
        );
        assert_eq!(p.version, "2025-11-25");
        assert!(p.declares_roots(), "{}", p.capabilities);
        assert_eq!(p.client.name.as_deref(), Some("\u{fffd}x"));
        assert_eq!(p.client.version.as_deref(), Some("1.2.3"));
        assert_eq!(p.client.title.as_deref(), Some("T \u{fffd}\u{1f600}"), "a pair is one character");
        // The same client as one that sent its name intact: clientInfo is not compared.
        let intact = Profile::of_initialize(
            r#"{"protocolVersion":"2025-11-25","capabilities":{"roots":{}},"clientInfo":{"name":"x"}}"#,
            None,
        );
        assert_eq!(p, intact);
    }
}
