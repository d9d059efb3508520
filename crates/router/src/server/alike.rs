//! Clients of different profiles that a server cannot tell apart. A client whose profile differs
//! from the one a server's instances were started for may share them when the evidence says the
//! difference is lost on that server: it answered both profiles alike (its `initialize` but for
//! the protocol version, and every list it offers) and it never asked a client for anything the
//! two differ in. The evidence is kept with the server's answers (so a daemon started again
//! knows it) and read afresh at every placement: the moment the server asks a client something
//! new, or answers one profile differently, new clients of the other profile get instances of
//! their own again. See docs/daemon.md, "Clients of different kinds".

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::Value;

use super::Server;
use super::profile::Profile;
use crate::upstream::Instance;

/// What a server may ask a client for, as far as sharing goes: each is a client capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Feature {
    /// `roots/list`: its answer becomes the instance's own (a filesystem server confines itself
    /// to it), so it is the one thing a client sets that its instance keeps.
    Roots,
    /// `sampling/createMessage`.
    Sampling,
    /// `elicitation/create`.
    Elicitation,
    /// `tasks/*` of a task the server gave the client to run.
    Tasks,
    /// A request switchyard knows nothing of: it cannot tell what the server uses.
    Other,
}

impl Feature {
    const ALL: [Feature; 5] = [Feature::Roots, Feature::Sampling, Feature::Elicitation, Feature::Tasks, Feature::Other];

    /// What a server's request to a client (`method`) shows it uses; None for a `ping`.
    pub fn of_request(method: &str) -> Option<Feature> {
        Some(match method {
            "roots/list" => Feature::Roots,
            "sampling/createMessage" => Feature::Sampling,
            "elicitation/create" => Feature::Elicitation,
            "ping" => return None,
            m if m.starts_with("tasks/") => Feature::Tasks,
            _ => Feature::Other,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Feature::Roots => "roots",
            Feature::Sampling => "sampling",
            Feature::Elicitation => "elicitation",
            Feature::Tasks => "tasks",
            Feature::Other => "other requests",
        }
    }

    fn parse(name: &str) -> Option<Feature> {
        Feature::ALL.into_iter().find(|f| f.name() == name)
    }

    /// The features a difference in client capability `key` matters for; None for a
    /// capability whose use switchyard cannot see (`experimental`, extensions, any other).
    fn of_capability(key: &str) -> Option<&'static [Feature]> {
        Some(match key {
            "roots" => &[Feature::Roots],
            "sampling" => &[Feature::Sampling],
            "elicitation" => &[Feature::Elicitation],
            // A client's `tasks` says which of the server's requests it runs as tasks.
            "tasks" => &[Feature::Tasks, Feature::Sampling, Feature::Elicitation],
            _ => return None,
        })
    }
}

/// The features a server was seen to ask clients for, as kept in its answers (`a,b`).
pub fn parse_asked(text: &str) -> BTreeSet<Feature> {
    text.split(',').filter_map(Feature::parse).collect()
}

fn asked_text(asked: &BTreeSet<Feature>) -> String {
    asked.iter().map(|f| f.name()).collect::<Vec<_>>().join(",")
}

/// The lists a client is shown: method, the server capability that offers it, its items' field.
pub const LISTS: [(&str, &str, &str); 4] = [
    ("tools/list", "tools", "tools"),
    ("prompts/list", "prompts", "prompts"),
    ("resources/list", "resources", "resources"),
    ("resources/templates/list", "resources", "resourceTemplates"),
];

/// What a server answered clients of one profile: its initialize result and its whole lists
/// (sorted), those of every capability it declared.
#[derive(Debug, Clone, PartialEq)]
pub struct Answered {
    /// The initialize result without `protocolVersion`.
    pub result: Value,
    /// The protocol version it answered.
    pub version: String,
    pub lists: Vec<(&'static str, Vec<Value>)>,
}

impl Answered {
    /// The evidence from an initialize result and a way to find each whole list (None: some
    /// list its capabilities offer is not known, so the evidence is not complete).
    pub fn of(result: &str, mut list: impl FnMut(&'static str) -> Option<Vec<Value>>) -> Option<Answered> {
        let mut result: Value = serde_json::from_str(result).ok()?;
        let version = result.as_object_mut()?.remove("protocolVersion")?.as_str()?.to_string();
        let mut lists = Vec::new();
        for (method, capability, _) in LISTS {
            if result["capabilities"].get(capability).is_some_and(|c| !c.is_null()) {
                let mut items = list(method)?;
                super::fanout::sort_list(&mut items);
                lists.push((method, items));
            }
        }
        Some(Answered { result, version, lists })
    }
}

/// The versions of the initialize era whose clients an instance of the other may serve. What
/// 2025-11-25 added over 2025-06-18 that a server sends is in its initialize (`tasks`), in its
/// lists (`icons`, `execution`) or in its requests to a client (URL elicitation, sampling with
/// tools, elicitation defaults), all of which the rule compares. The steps before added what a
/// server may put in any result, unseen in its lists (audio content in 2025-03-26, resource links
/// and structured content in 2025-06-18), which a client of the older version may not read: an
/// instance never serves across them.
const QUIET_STEPS: &[(&str, &str)] = &[("2025-06-18", "2025-11-25")];

/// Why a client of protocol `b` may not be served by an instance that answered protocol `a`
/// (Ok: it may), given what the server `asked` clients for.
fn versions_share(a: &str, b: &str, asked: &BTreeSet<Feature>) -> Result<(), String> {
    if a == b {
        return Ok(());
    }
    let pair = if a < b { (a, b) } else { (b, a) };
    if !QUIET_STEPS.contains(&pair) {
        return Err(format!("protocol {} and {} differ in what a server may send in any answer", pair.0, pair.1));
    }
    let requests = [Feature::Sampling, Feature::Elicitation, Feature::Tasks];
    if let Some(f) = requests.into_iter().find(|f| asked.contains(f)) {
        return Err(format!(
            "the server asks clients for {}, whose requests differ between protocol {} and {}",
            f.name(),
            pair.0,
            pair.1
        ));
    }
    Ok(())
}

/// The features two clients' `capabilities` (canonical JSON) differ in; Err names a differing
/// capability whose use switchyard cannot see.
fn capability_differences(a: &str, b: &str) -> Result<BTreeSet<Feature>, String> {
    let parse =
        |t: &str| serde_json::from_str::<Value>(t).ok().and_then(|v| v.as_object().cloned()).unwrap_or_default();
    let (a, b) = (parse(a), parse(b));
    let mut features = BTreeSet::new();
    for key in a.keys().chain(b.keys()) {
        let (x, y) = (a.get(key).filter(|v| !v.is_null()), b.get(key).filter(|v| !v.is_null()));
        if x == y {
            continue;
        }
        let Some(fs) = Feature::of_capability(key) else {
            return Err(format!("they differ in capability `{key}`, whose use switchyard cannot see"));
        };
        features.extend(fs.iter().copied());
    }
    Ok(features)
}

/// Whether a client of profile `want` may share the instances started for `claimed` although
/// the two differ in protocol version or capabilities (Err: why not). `asked`: what the server
/// was seen to ask clients for; `answered`: its evidence of a profile, when complete. Roots are
/// not judged here: see [`Server::joins`].
pub fn judge(
    claimed: &Profile,
    want: &Profile,
    asked: &BTreeSet<Feature>,
    answered: impl Fn(&Profile) -> Option<Answered>,
) -> Result<(), String> {
    if claimed.owner != want.owner {
        return Err("another client".into());
    }
    if asked.contains(&Feature::Other) {
        return Err("the server sends clients requests switchyard does not know".into());
    }
    let differ = capability_differences(&claimed.capabilities, &want.capabilities)?;
    if let Some(f) = differ.iter().find(|f| asked.contains(f)) {
        return Err(format!("the server asks clients for {} and they differ in it", f.name()));
    }
    let (Some(a), Some(b)) = (answered(claimed), answered(want)) else {
        return Err("the server's answers to one of them are not known yet".into());
    };
    if a.result != b.result || a.lists != b.lists {
        return Err("the server answers them differently".into());
    }
    versions_share(&a.version, &b.version, asked)
}

impl Server {
    /// What this server (any of its family) was seen to ask clients for, from its answers.
    pub fn asked(&self) -> BTreeSet<Feature> {
        let Some((answers, key)) = self.answers.get() else { return BTreeSet::new() };
        answers.get(&format!("{key}:asked")).map(|t| parse_asked(&t)).unwrap_or_default()
    }

    /// The server sent a client request `method`: what it shows the server uses is remembered
    /// (for later runs too), and from now on clients that differ in it get instances of their own.
    pub(super) fn saw_request(self: &Arc<Self>, method: &str) {
        let Some(feature) = Feature::of_request(method) else { return };
        let Some((answers, key)) = self.answers.get() else { return };
        // One update at a time across the family (they share the entry).
        let base = self.base();
        let one = base.family.asked_lock.lock().expect("lock");
        let mut asked = self.asked();
        if !asked.insert(feature) {
            return;
        }
        answers.put(&format!("{key}:asked"), &asked_text(&asked));
        drop(one);
        tracing::info!(
            server = %self.name,
            "the server asks clients for {}: from now on clients that differ in it get instances of their own (those sharing some now keep them)",
            feature.name()
        );
    }

    /// The evidence of `profile`: what this server's config answered clients of it, if complete.
    pub fn answered(&self, profile: &Profile) -> Option<Answered> {
        let (answers, key) = self.answers.get()?;
        let result = self.remembered_initialize(profile)?;
        Answered::of(&result, |method| serde_json::from_str(&answers.get(&profile.key_for(key, method))?).ok())
    }

    /// [`judge`] with this server's evidence.
    pub fn judge(&self, claimed: &Profile, want: &Profile) -> Result<(), String> {
        judge(claimed, want, &self.asked(), |p| self.answered(p))
    }

    /// Once this server's first instance is up, the evidence of its profile: its initialize
    /// result and every list it offers, fetched whole from that instance and remembered (later
    /// list changes are remembered as they pass). The tools list is the one switchyard fetches
    /// anyway (see [`Server::refresh_tools`]): that fetch is the evidence, never a second one.
    pub(super) async fn gather_evidence(self: Arc<Self>, inst: Arc<Instance>) {
        let Some(profile) = self.profile() else { return };
        let Some(result) = self.init.result.get().cloned() else { return };
        self.remember_initialize(&profile, &result);
        for (method, capability, field) in LISTS {
            if !self.declares(capability) {
                continue;
            }
            if method == "tools/list" {
                if self.tools_fetched().await {
                    continue;
                }
                return tracing::debug!(server = %self.name, "tools/list could not be fetched whole: no evidence of this profile yet");
            }
            match self.all_pages(&inst, method, field).await {
                Some(items) => self.remember_list(method, &items),
                None => {
                    return tracing::debug!(server = %self.name, "{method} could not be fetched whole: no evidence of this profile yet");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const CLAUDE: &str = r#"{"protocolVersion":"2025-11-25","capabilities":{"roots":{"listChanged":true},"elicitation":{"form":{},"url":{}}}}"#;
    const CODEX: &str = r#"{"protocolVersion":"2025-06-18","capabilities":{"elicitation":{"form":{},"url":{}}}}"#;
    const GEMINI: &str = r#"{"protocolVersion":"2025-06-18","capabilities":{}}"#;

    fn profile(params: &str) -> Profile {
        Profile::of_initialize(params, None)
    }

    /// A server that answers every profile with `tools` and the version it asked.
    fn answering(tools: Value) -> impl Fn(&Profile) -> Option<Answered> {
        move |p| {
            let result = json!({"protocolVersion": p.version, "capabilities": {"tools": {}}, "serverInfo": {"name": "s", "version": "1"}});
            Answered::of(&result.to_string(), |_| tools.as_array().cloned())
        }
    }

    fn asked(fs: &[Feature]) -> BTreeSet<Feature> {
        fs.iter().copied().collect()
    }

    #[test]
    fn clients_of_other_kinds_share_a_server_that_answers_them_alike_and_asks_nothing() {
        let tools = json!([{"name": "b"}, {"name": "a"}]);
        let none = asked(&[]);
        for (a, b) in [(CLAUDE, CODEX), (CODEX, GEMINI), (GEMINI, CLAUDE)] {
            assert_eq!(judge(&profile(a), &profile(b), &none, answering(tools.clone())), Ok(()), "{a} / {b}");
        }
        // Asking for what they do not differ in changes nothing (both declare elicitation alike).
        assert_eq!(
            judge(&profile(CLAUDE), &profile(CODEX), &asked(&[Feature::Roots]), answering(tools)),
            Err("the server asks clients for roots and they differ in it".into())
        );
    }

    #[test]
    fn what_the_server_asked_or_answered_differently_splits_them() {
        let tools = json!([{"name": "a"}]);
        let why =
            |a, b, fs: &[Feature]| judge(&profile(a), &profile(b), &asked(fs), answering(tools.clone())).unwrap_err();
        assert!(why(CODEX, GEMINI, &[Feature::Elicitation]).contains("elicitation"));
        assert!(why(CLAUDE, GEMINI, &[Feature::Roots]).contains("roots"));
        // Same capabilities, other versions: the 2025-11-25 step carries elicitation changes.
        let claude_like = r#"{"protocolVersion":"2025-06-18","capabilities":{"roots":{"listChanged":true},"elicitation":{"form":{},"url":{}}}}"#;
        assert!(
            why(CLAUDE, claude_like, &[Feature::Elicitation])
                .contains("differ between protocol 2025-06-18 and 2025-11-25")
        );
        assert!(why(CLAUDE, claude_like, &[Feature::Other]).contains("does not know"));
        // A list that differs by profile (tools registered for a capability) splits.
        let by_caps = |p: &Profile| {
            let mut tools = vec![json!({"name": "echo"})];
            if p.capabilities.contains("elicitation") {
                tools.push(json!({"name": "elicit"}));
            }
            let result =
                json!({"protocolVersion": p.version, "capabilities": {"tools": {}}, "serverInfo": {"name": "s"}});
            Answered::of(&result.to_string(), |_| Some(tools.clone()))
        };
        assert_eq!(
            judge(&profile(CODEX), &profile(GEMINI), &asked(&[]), by_caps),
            Err("the server answers them differently".into())
        );
        // Without the evidence of one of them, nothing is shared.
        let unknown = |p: &Profile| if p.version == "2025-11-25" { None } else { answering(tools.clone())(p) };
        assert!(judge(&profile(CODEX), &profile(CLAUDE), &asked(&[]), unknown).unwrap_err().contains("not known yet"));
        // An instructions text that differs by profile is an answer that differs.
        let instructions = |p: &Profile| {
            let result = json!({"protocolVersion": p.version, "capabilities": {}, "serverInfo": {"name": "s"}, "instructions": p.version});
            Answered::of(&result.to_string(), |_| None)
        };
        assert!(judge(&profile(CLAUDE), &profile(CODEX), &asked(&[]), instructions).is_err());
    }

    #[test]
    fn a_capability_switchyard_cannot_watch_and_other_clients_are_never_shared() {
        let tools = json!([]);
        let experimental = r#"{"protocolVersion":"2025-06-18","capabilities":{"experimental":{"x":{}}}}"#;
        let why = judge(&profile(GEMINI), &profile(experimental), &asked(&[]), answering(tools.clone())).unwrap_err();
        assert!(why.contains("`experimental`"), "{why}");
        // A null capability is one not declared.
        let null = r#"{"protocolVersion":"2025-06-18","capabilities":{"sampling":null}}"#;
        assert_eq!(
            judge(&profile(GEMINI), &profile(null), &asked(&[Feature::Sampling]), answering(tools.clone())),
            Ok(())
        );
        // A client's `tasks` matters once the server asks for sampling.
        let tasks = r#"{"protocolVersion":"2025-06-18","capabilities":{"tasks":{"requests":{}}}}"#;
        assert!(
            judge(&profile(GEMINI), &profile(tasks), &asked(&[Feature::Sampling]), answering(tools.clone())).is_err()
        );
        let mine = Profile::of_initialize(GEMINI, Some("cursor in /a".into()));
        assert_eq!(judge(&profile(CODEX), &mine, &asked(&[]), answering(tools)), Err("another client".into()));
    }

    #[test]
    fn only_versions_whose_difference_the_rule_sees_share_an_instance() {
        let none = asked(&[]);
        assert_eq!(versions_share("2025-06-18", "2025-11-25", &none), Ok(()));
        assert_eq!(versions_share("2025-11-25", "2025-06-18", &none), Ok(()));
        assert_eq!(versions_share("2025-03-26", "2025-03-26", &asked(&[Feature::Other])), Ok(()));
        for (a, b) in [("2025-03-26", "2025-06-18"), ("2025-03-26", "2025-11-25"), ("2024-11-05", "2025-03-26")] {
            assert!(versions_share(a, b, &none).unwrap_err().contains("in any answer"), "{a} {b}");
        }
        assert!(versions_share("2025-06-18", "2025-11-25", &asked(&[Feature::Tasks])).is_err());
        assert_eq!(versions_share("2025-06-18", "2025-11-25", &asked(&[Feature::Roots])), Ok(()));
    }

    #[test]
    fn requests_name_their_feature_and_the_record_reads_back() {
        assert_eq!(Feature::of_request("roots/list"), Some(Feature::Roots));
        assert_eq!(Feature::of_request("tasks/get"), Some(Feature::Tasks));
        assert_eq!(Feature::of_request("ping"), None);
        assert_eq!(Feature::of_request("x/y"), Some(Feature::Other));
        let all: BTreeSet<Feature> = Feature::ALL.into_iter().collect();
        assert_eq!(parse_asked(&asked_text(&all)), all);
        assert_eq!(parse_asked(""), BTreeSet::new());
        // Evidence is complete only with every list the server offers.
        let result = r#"{"protocolVersion":"2025-06-18","capabilities":{"tools":{},"resources":{}},"serverInfo":{}}"#;
        assert!(Answered::of(result, |m| (m != "resources/templates/list").then(Vec::new)).is_none());
        let a = Answered::of(result, |_| Some(vec![json!({"uri": "b"}), json!({"uri": "a"})])).unwrap();
        assert_eq!(a.lists.len(), 3);
        assert_eq!(a.lists[0].1[0]["uri"], "a", "sorted");
    }
}
