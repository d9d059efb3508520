//! What a server answered its clients before, kept in the answers file (see [`super::answers`]):
//! its initialize answers and whole lists by client profile, and what a configuration it
//! replaced told the clients that move to it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{Server, answers, profile};

impl Server {
    /// Keeps what this server answers in `answers`, under `key` (its config's digest); a server
    /// known to refuse server/discover refuses it at once from now on, with its own error.
    pub fn keep_answers(&self, answers: Arc<answers::Answers>, key: String) {
        if let Some(error) = answers.get(&format!("{key}:discover")) {
            let _ = self.stateless.discover_refusal.set(error);
            self.stateless.discover_refused.store(true, Ordering::Relaxed);
        }
        if answers.get(&format!("{key}:asks-clients")).is_some() {
            self.apart.store(true, Ordering::Relaxed);
        }
        let _ = self.answers.set((answers, key));
    }

    /// The initialize result this server gave a client of `profile` before, if it did.
    /// Only an answer of the shape a server gives is used (a version of the initialize era, and
    /// `capabilities` and `serverInfo` objects): the file is the user's to edit, and a broken
    /// answer is learned anew rather than handed to a client.
    pub fn remembered_initialize(&self, profile: &profile::Profile) -> Option<String> {
        let (answers, key) = self.answers.get()?;
        let answer = answers.get(&profile.answer_key(key))?;
        let v: serde_json::Value = serde_json::from_str(&answer).ok()?;
        let version = v.get("protocolVersion").and_then(|x| x.as_str()).unwrap_or_default();
        let plausible = switchyard_mcp::version::SESSION_ERA.contains(&version)
            && v.get("capabilities").is_some_and(serde_json::Value::is_object)
            && v.get("serverInfo").is_some_and(serde_json::Value::is_object);
        if !plausible {
            tracing::warn!(server = %self.name, "the remembered initialize answer is not one a server gives (version {version:?}); not used, the server's own is awaited and kept");
            return None;
        }
        Some(answer)
    }

    /// Remembers a whole list (the items of `method`'s result, in the server's order) as the
    /// server gave it to clients of this server's profile.
    pub(super) fn remember_list(&self, method: &str, items: &[serde_json::Value]) {
        if let (Some((answers, key)), Some(p)) = (self.answers.get(), self.profile()) {
            answers.put(&p.key_for(key, method), &serde_json::Value::from(items.to_vec()).to_string());
        }
    }

    /// The whole list `method` last gave clients of this server's profile (whatever their roots).
    pub fn remembered_list(&self, method: &str) -> Option<Vec<serde_json::Value>> {
        let (answers, key) = self.answers.get()?;
        let text = answers.get(&self.profile()?.key_for(key, method))?;
        serde_json::from_str(&text).ok()
    }

    /// This server takes over the clients of `old` (the config file changed it). They were
    /// shown `old`'s tools (its own list, or one from memory) and call them before this one's
    /// own list comes: those names are labels here from the first call, as the names of a list
    /// from memory are (see [`Server::declare_listed_tools`]), not `other` meanwhile.
    pub fn replaces(&self, old: &Server) {
        if let Some((_, key)) = old.answers.get() {
            let _ = self.replaced.set(key.clone());
        }
        self.tool_labels.declare_all_of(&old.tool_labels);
        let listed = old.known_names(switchyard_policy::Kind::Tool);
        self.tool_labels.declare(listed.iter().map(String::as_str));
    }

    /// What a client of `profile` moved here from the configuration this one replaced was told
    /// at its initialize there, if that is known.
    pub fn told_before(&self, profile: &profile::Profile) -> Option<String> {
        let (answers, _) = self.answers.get()?;
        answers.get(&profile.answer_key(self.replaced.get()?))
    }

    /// Remembers the initialize result for clients of `profile`, when they are of the profile
    /// this server's instances were started for (a client sharing them by the evidence was told
    /// its own answer: theirs is not its).
    pub fn remember_initialize(&self, profile: &profile::Profile, result: &str) {
        if self.profile().is_some_and(|p| !p.same_client(profile)) {
            return;
        }
        if let Some((answers, key)) = self.answers.get() {
            answers.put(&profile.answer_key(key), result);
        }
    }

    /// The initialize result a client of `profile` is told, given `result`, this server's own:
    /// a client sharing instances started for another profile (by the evidence) is told what
    /// the server answered clients of its own profile (its protocol version, first of all).
    pub fn answer_for(&self, profile: Option<&profile::Profile>, result: String) -> String {
        match profile {
            Some(p) if self.profile().is_some_and(|c| !c.same_client(p)) => {
                self.remembered_initialize(p).unwrap_or(result)
            }
            _ => result,
        }
    }
}
