//! `tool-filter`: which tools each client is shown, and by what name.
//!
//! Config: `{"clients": {"<glob on the client's name>": {"hide": ["<tool glob>", ...],
//! "only": ["<tool glob>", ...], "rename": {"<server's name>": "<name shown>"}}}}`. The most
//! specific client glob that matches the client's `clientInfo.name` applies (a client that gave
//! no name is matched as ""). `hide` leaves the matching tools out; `only`, when given, leaves
//! out every tool it does not match; `rename` shows a tool under another name, and the host
//! routes calls under that name to it. A tool left out and called anyway is refused by the host
//! with an error naming this plugin. Built against `switchyard:policy@0.2.0`.

wit_bindgen::generate!({ path: "../../../wit/0.2", world: "policy" });

use std::cell::RefCell;
use std::collections::BTreeMap;

use plugin_util::{GlobList, GlobMap, parse_config};
use serde_json::Value;
use switchyard::policy::host::{Level, log};

struct ToolFilter;

/// What one client glob says.
struct Rule {
    hide: GlobList,
    only: Option<GlobList>,
    rename: BTreeMap<String, String>,
}

thread_local! {
    // Filled by `init`; a component instance is single-threaded, so a RefCell is enough.
    static RULES: RefCell<GlobMap<Rule>> = RefCell::new(GlobMap::new());
}

fn parse_rule(client: &str, v: &Value) -> Result<Rule, String> {
    let obj = v.as_object().ok_or_else(|| format!("clients.{client} must be an object"))?;
    if let Some(k) = obj.keys().find(|k| !matches!(k.as_str(), "hide" | "only" | "rename")) {
        return Err(format!("clients.{client}: unknown key `{k}` (the keys are hide, only, rename)"));
    }
    let hide = match obj.get("hide") {
        None => GlobList::default(),
        Some(v) => GlobList::from_json(v, &format!("clients.{client}.hide"))?,
    };
    let only = obj.get("only").map(|v| GlobList::from_json(v, &format!("clients.{client}.only"))).transpose()?;
    let mut rename = BTreeMap::new();
    if let Some(r) = obj.get("rename") {
        let r = r.as_object().ok_or_else(|| format!("clients.{client}.rename must be an object of old -> new name"))?;
        for (old, new) in r {
            let new = new.as_str().filter(|n| !n.is_empty()).ok_or_else(|| {
                format!("clients.{client}.rename.{old} must be the tool's new name (a non-empty string)")
            })?;
            if let Some((other, _)) = rename.iter().find(|(_, n)| *n == new) {
                return Err(format!("clients.{client}.rename gives `{other}` and `{old}` the same name `{new}`"));
            }
            rename.insert(old.clone(), new.to_string());
        }
    }
    Ok(Rule { hide, only, rename })
}

impl Guest for ToolFilter {
    fn init(config: String) -> Result<(), String> {
        let config = parse_config(&config)?;
        if let Some(k) = config.keys().find(|k| *k != "clients") {
            return Err(format!("unknown key `{k}` (tool-filter knows only `clients`)"));
        }
        let mut rules = GlobMap::new();
        if let Some(clients) = config.get("clients") {
            let clients = clients.as_object().ok_or("`clients` must be an object of client glob -> rule")?;
            for (glob, v) in clients {
                rules.insert(glob.clone(), parse_rule(glob, v)?);
            }
        }
        if rules.is_empty() {
            log(Level::Warn, "no `clients` configured: this plugin changes nothing");
        }
        RULES.with(|r| *r.borrow_mut() = rules);
        Ok(())
    }

    fn decide(_call: Call, current: Decision) -> Verdict {
        // The host refuses a call to a tool `list-tool` hides from its client, and routes a
        // renamed tool's calls: nothing is left to decide here.
        Verdict::Continue(current)
    }

    fn list_tool(tool: Tool, mut current: Listing) -> Listing {
        let client = tool.client.name.as_deref().unwrap_or("");
        RULES.with(|r| {
            let rules = r.borrow();
            let Some(rule) = rules.get(client) else { return };
            let kept = rule.only.as_ref().is_none_or(|only| only.matches(&tool.name));
            if !kept || rule.hide.matches(&tool.name) {
                current.hidden = true;
                return;
            }
            if let Some(new) = rule.rename.get(&tool.name) {
                current.name = new.clone();
            }
        });
        current
    }
}

export!(ToolFilter);
