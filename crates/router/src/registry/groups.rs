//! The groups of a router (`[groups.NAME]` and the implicit `all`): which one a client asks
//! for, and the group sessions live now, for status.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock, Weak};

use serde_json::{Value, json};

use super::Servers;
use switchyard_config::{ALL_GROUP, Group, GroupConfig};

/// What status shows of one live group session (None once it is gone).
pub type GroupShown = Box<dyn Fn() -> Option<Value> + Send + Sync>;
/// Gives one live group session its group as the config now has it (after a reload).
pub type Regroup = Box<dyn Fn(Option<&Group>) + Send + Sync>;

/// The groups in force and their live sessions.
#[derive(Default)]
pub struct Groups {
    /// Set by a daemon from its file; the implicit `all` is made from the servers when unset.
    defined: RwLock<Option<BTreeMap<String, Group>>>,
    live: Mutex<BTreeMap<String, (String, GroupShown)>>,
    /// Each live session's [`Regroup`], by label.
    regroup: Mutex<BTreeMap<String, Regroup>>,
    /// Groups whose table does not load and that have no version in force, with why.
    refused: RwLock<BTreeMap<String, String>>,
}

/// Takes a group session out of status when dropped.
pub struct Shown {
    router: Weak<Servers>,
    label: String,
}

impl Drop for Shown {
    fn drop(&mut self) {
        if let Some(r) = self.router.upgrade() {
            r.groups.live.lock().expect("lock").remove(&self.label);
            r.groups.regroup.lock().expect("lock").remove(&self.label);
        }
    }
}

impl Servers {
    /// The groups of the config file in force (each `[groups.NAME]`, and `all`).
    /// Open sessions of a group are given it as it now is (a server taken out of it leaves them).
    pub fn set_groups(&self, groups: BTreeMap<String, Group>) {
        let sessions: Vec<(String, String)> =
            self.groups.live.lock().expect("lock").iter().map(|(l, (g, _))| (l.clone(), g.clone())).collect();
        let regroup = self.groups.regroup.lock().expect("lock");
        for (label, group) in sessions {
            if let Some(f) = regroup.get(&label) {
                f(groups.get(&group));
            }
        }
        drop(regroup);
        *self.groups.defined.write().expect("lock") = Some(groups);
    }

    /// Group `name` as it is in force (not looked for in the config file).
    pub fn group_in_force(&self, name: &str) -> Option<Group> {
        self.groups.defined.read().expect("lock").as_ref()?.get(name).cloned()
    }

    /// The groups whose table does not load and that have no version in force, with why: a
    /// client that asks for one is told that.
    pub fn refuse_groups(&self, refused: BTreeMap<String, String>) {
        *self.groups.refused.write().expect("lock") = refused;
    }

    /// The group a client asks for. One the router does not know is looked for again in the
    /// config file first (it may have just been saved).
    pub fn group(self: &Arc<Self>, name: &str) -> Result<Group, String> {
        if let Some(g) = self.known_group(name) {
            return Ok(g);
        }
        if let Some(reread) = self.reread.get() {
            reread(self);
            if let Some(g) = self.known_group(name) {
                return Ok(g);
            }
        }
        if let Some(why) = self.groups.refused.read().expect("lock").get(name) {
            return Err(format!("group `{name}` cannot be used: {why}"));
        }
        let config = match &self.about.config {
            Some(p) => format!(" in {}", p.display()),
            None => String::new(),
        };
        let known: Vec<String> = match &*self.groups.defined.read().expect("lock") {
            Some(d) => d.keys().cloned().collect(),
            None => vec![ALL_GROUP.to_string()],
        };
        Err(format!(
            "no group named `{}`{config}; it has: {}. Add a [groups.{0}] table with `servers = [...]` to the config (the group `{ALL_GROUP}` has every server)",
            name.chars().take(64).collect::<String>(),
            known.join(", ")
        ))
    }

    fn known_group(&self, name: &str) -> Option<Group> {
        match &*self.groups.defined.read().expect("lock") {
            Some(defined) => defined.get(name).cloned(),
            None if name == ALL_GROUP => GroupConfig::default().resolve(ALL_GROUP, &self.names()).ok(),
            None => None,
        }
    }

    /// Shows a group session in status until the returned guard is dropped.
    /// `regroup` is given the group when the config changes it.
    pub fn show_group_session(
        self: &Arc<Self>,
        group: &str,
        label: String,
        shown: GroupShown,
        regroup: Regroup,
    ) -> Shown {
        self.groups.regroup.lock().expect("lock").insert(label.clone(), regroup);
        self.groups.live.lock().expect("lock").insert(label.clone(), (group.to_string(), shown));
        Shown { router: Arc::downgrade(self), label }
    }

    /// The groups and their live sessions, for status.
    pub(super) fn groups_status(&self) -> Value {
        let live = self.groups.live.lock().expect("lock");
        let session_of = |name: &str| -> Vec<Value> {
            live.values().filter(|(g, _)| g == name).filter_map(|(_, shown)| shown()).collect()
        };
        let defined = self.groups.defined.read().expect("lock").clone();
        let defined = defined.unwrap_or_else(|| {
            GroupConfig::default()
                .resolve(ALL_GROUP, &self.names())
                .map(|g| BTreeMap::from([(ALL_GROUP.to_string(), g)]))
                .unwrap_or_default()
        });
        let groups: Vec<Value> = defined
            .values()
            .map(|g| {
                json!({
                    "name": g.name,
                    "separator": g.separator,
                    "servers": g.members.iter().map(|m| json!({"server": m.server, "prefix": m.prefix})).collect::<Vec<_>>(),
                    "sessions": session_of(&g.name),
                })
            })
            .collect();
        json!(groups)
    }
}
