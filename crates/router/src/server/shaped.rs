//! A server's tool list as one client is shown it, after the plugins: kept within the client's
//! budget (names too long shortened, a list too long said), or two tools that search it
//! (search mode); and what each client was last shown, so that a client hears its list changed
//! only when the list it sees did.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::Server;
use crate::budget::{self, Budget, Plan};
use crate::peer::{ClientPeer, ShownTools};
use crate::search;
use switchyard_config::{BudgetConfig, Expose};
use switchyard_policy::Kind;

/// What shapes the server's tool list per client, from its config, and what was said of it.
#[derive(Default)]
pub(super) struct Shaping {
    budgets: BTreeMap<String, BudgetConfig>,
    /// `expose` of the server's own table (None: as each client's budget says).
    expose: Option<Expose>,
    /// Per client kind: what its budget did to the last whole list (for status and the log).
    reports: Mutex<BTreeMap<String, Value>>,
}

impl Shaping {
    pub(super) fn new(config: &switchyard_config::Config) -> Shaping {
        Shaping { budgets: config.budgets.clone(), expose: config.server.expose, reports: Mutex::default() }
    }
}

impl Server {
    /// The file's `[budgets]` (the same for every server of the file).
    pub fn budgets(&self) -> &BTreeMap<String, BudgetConfig> {
        &self.shaping.budgets
    }

    /// The budget of the client of `link`, by its clientInfo.name (a group's member session
    /// counts the names as the group shows them).
    pub fn budget_of(&self, link: &ClientPeer) -> Budget {
        let budget = Budget::for_client(link.caller().name.as_deref(), &self.shaping.budgets);
        match link.in_group() {
            Some((group, prefix)) => budget.in_group(&group, &prefix),
            None => budget,
        }
    }

    /// Whether the client of `link` is given `search_tools` and `call_tool` for this server's
    /// tools: the server's `expose` says so, or else the client's budget does.
    /// A group's member session never is: the group shows its client one list of all members.
    pub fn searching(&self, link: &ClientPeer) -> bool {
        if link.in_group().is_some() {
            return false;
        }
        match self.shaping.expose {
            Some(expose) => expose == Expose::Search,
            // No budget gives search mode unless the config says so: no client looked up per call.
            None => {
                self.shaping.budgets.values().any(|b| b.expose == Some(Expose::Search))
                    && self.budget_of(link).expose == Expose::Search
            }
        }
    }

    /// A tools/list `result` (JSON text, after the plugins) as the client of `link` is shown
    /// it: names over its budget shortened (recorded on the link, so a call by that name comes
    /// back to the tool), the whole list's digest recorded. None: the result stays as it is.
    pub fn shape_tools(&self, link: &ClientPeer, result: &str) -> Option<String> {
        let mut v: Value = serde_json::from_str(result).ok()?;
        let whole = v.get("nextCursor").is_none_or(Value::is_null);
        let items = v.get_mut("tools")?.as_array_mut()?;
        let budget = self.budget_of(link);
        let plan = self.plan_for(&budget, items);
        let changed = plan.renamed().next().is_some();
        for item in items.iter_mut() {
            let shown = item.get("name").and_then(Value::as_str).and_then(|name| plan.shortened(name));
            if let Some(shown) = shown {
                item["name"] = shown.to_string().into();
            }
        }
        let mut shown = ShownTools { digest: whole.then(|| budget::list_digest(items)), ..Default::default() };
        if let Some(before) = link.shown_tools(&self.name) {
            shown.index = before.index.clone();
            if !whole {
                shown.renamed = before.renamed.clone();
            }
        }
        shown.renamed.extend(plan.renamed().map(|(s, o)| (s.to_string(), o.to_string())));
        link.set_shown_tools(&self.name, shown);
        if whole {
            self.report(&budget, &plan);
        }
        changed.then(|| v.to_string())
    }

    /// The plan that keeps `items` within `budget`.
    fn plan_for(&self, budget: &Budget, items: &[Value]) -> Plan {
        let names: Vec<&str> = items.iter().filter_map(|t| t.get("name").and_then(Value::as_str)).collect();
        Plan::new(budget, &self.name, &names)
    }

    /// The tools/list result a client in search mode is given: the two tools, and those its
    /// searches found that joined its list (their digest recorded: a change of the server's
    /// list changes nothing here).
    pub fn search_list(&self, link: &ClientPeer) -> String {
        let mut tools = search::fixed_tools();
        let before = link.shown_tools(&self.name);
        let (index, added) = before.map(|b| (b.index.clone(), b.added.clone())).unwrap_or_default();
        if let Some(index) = &index {
            tools.extend(added.iter().filter_map(|name| index.get(name).cloned()));
        }
        let digest = Some(budget::list_digest(&tools));
        link.set_shown_tools(&self.name, ShownTools { digest, index, added, ..Default::default() });
        json!({ "tools": tools }).to_string()
    }

    /// Adds the tools named `found` (a search's answer) to the list of a client in search mode
    /// whose budget says so; whether any is new (the client is then to be told its list changed).
    pub fn add_found(&self, link: &ClientPeer, found: &[String]) -> bool {
        if !self.budget_of(link).add_found {
            return false;
        }
        let Some(before) = link.shown_tools(&self.name) else { return false };
        let new: Vec<&String> = found.iter().filter(|n| !before.added.contains(*n)).collect();
        if new.is_empty() {
            return false;
        }
        let mut added = before.added.clone();
        added.extend(new.into_iter().cloned());
        tracing::debug!(server = %self.name, "{} tools found by search join the client's list", added.len());
        link.set_shown_tools(
            &self.name,
            ShownTools { digest: before.digest, index: before.index.clone(), added, ..Default::default() },
        );
        true
    }

    /// Keeps `items` (the whole tool list, after the plugins) as what `search_tools` searches
    /// for the client of `link`.
    pub fn keep_search_index(&self, link: &ClientPeer, items: Vec<Value>) -> Arc<search::Index> {
        let index = Arc::new(search::Index::new(items));
        let before = link.shown_tools(&self.name);
        let digest = before.as_ref().and_then(|b| b.digest);
        let added = before.map(|b| b.added.clone()).unwrap_or_default();
        link.set_shown_tools(
            &self.name,
            ShownTools { digest, index: Some(index.clone()), added, ..Default::default() },
        );
        index
    }

    /// The server's name of the tool the client of `link` calls `called`, when its budget
    /// shortened it: from the list this session was shown, else (a client that keeps its list
    /// across a restart of the daemon) from the plan of the tools the server is known to list.
    pub fn unshortened(&self, link: &ClientPeer, called: &str) -> Option<String> {
        if let Some(original) = link.shown_tools(&self.name).and_then(|s| s.renamed.get(called).cloned()) {
            return Some(original);
        }
        if self.lists(Kind::Tool, called) {
            return None;
        }
        let budget = self.budget_of(link);
        budget.room(&self.name)?;
        let known = self.known_names(Kind::Tool);
        let names: Vec<&str> = known.iter().map(String::as_str).collect();
        Plan::new(&budget, &self.name, &names).original(called).map(str::to_string)
    }

    /// Whether the client of `link` would be shown another tool list than it was, now that the
    /// server lists `items`: through the plugins, then its budget (or, in search mode, never:
    /// its two tools stay; what they search is renewed). A client that never listed: yes.
    pub async fn tools_differ_for(&self, link: &Arc<ClientPeer>, items: &[Value]) -> bool {
        let Some(before) = link.shown_tools(&self.name) else { return true };
        let set = self.policy.current();
        let caller = link.caller();
        let raw = json!({ "tools": items }).to_string();
        let result = self.list_for_client(&set, "", &caller, link, Kind::Tool, &raw).await.unwrap_or(raw);
        let Ok(v) = serde_json::from_str::<Value>(&result) else { return true };
        let mut shown: Vec<Value> = v.get("tools").and_then(Value::as_array).cloned().unwrap_or_default();
        if self.searching(link) {
            if before.index.is_some() {
                self.keep_search_index(link, shown);
            }
            return false;
        }
        let plan = self.plan_for(&self.budget_of(link), &shown);
        for item in &mut shown {
            if let Some(name) = item.get("name").and_then(Value::as_str).map(str::to_string) {
                item["name"] = plan.shown(&name).into();
            }
        }
        let digest = budget::list_digest(&shown);
        if before.digest == Some(digest) {
            return false;
        }
        let renamed = plan.renamed().map(|(s, o)| (s.to_string(), o.to_string())).collect();
        link.set_shown_tools(&self.name, ShownTools { digest: Some(digest), renamed, ..Default::default() });
        true
    }

    /// Says (in status, and once in the log) what a client kind's budget did to a whole list.
    fn report(&self, budget: &Budget, plan: &Plan) {
        let report = (!plan.is_quiet()).then(|| {
            json!({
                "client": budget.kind,
                "name_max": budget.name_max,
                "name_prefix": budget.name_prefix,
                "renamed": plan.renamed().map(|(s, o)| json!({"shown": s, "tool": o})).collect::<Vec<_>>(),
                "unfit": plan.unfit,
                "ascii_names": budget.ascii_names,
                "tools": plan.count,
                "tools_max": plan.tools_max,
            })
        });
        let mut reports = self.shaping.reports.lock().expect("lock");
        if reports.get(&budget.kind) == report.as_ref() {
            return;
        }
        let Some(report) = report else {
            reports.remove(&budget.kind);
            return;
        };
        let renamed = plan.renamed().count();
        let mut said = Vec::new();
        if renamed > 0 {
            let room = plan.room.unwrap_or_default();
            let only = if budget.ascii_names { " of ASCII letters, digits, `_` and `-`" } else { "" };
            said.push(format!("{renamed} tool names renamed to fit {room} characters{only} (see `switchyard status`)"));
        }
        if !plan.unfit.is_empty() {
            said.push(format!(
                "{} names left too long: the prefix `{}` leaves no room; give the server a shorter name or set [budgets.{}] name_max",
                plan.unfit.len(),
                budget.name_prefix.replace("{server}", &self.name),
                budget.kind
            ));
        }
        if plan.over_count() {
            said.push(format!(
                "{} tools, over the {} this client takes: set `expose = \"search\"` in [servers.{}] or [budgets.{}] to give it a search instead",
                plan.count, plan.tools_max, self.name, budget.kind
            ));
        }
        tracing::warn!(server = %self.name, client = %budget.kind, "tool list over the client's budget: {}", said.join("; "));
        reports.insert(budget.kind.clone(), report);
    }

    /// What the budgets did to the lists clients were shown, per client kind (for status).
    pub fn budget_status(&self) -> Vec<Value> {
        self.shaping.reports.lock().expect("lock").values().cloned().collect()
    }
}
