//! `tool-filter`: which tools (and prompts, and resource templates) each client is shown, and
//! by what name.
//!
//! Config: `{"clients": {"<glob on the client's name>": {"hide": ["<tool glob>", ...],
//! "only": ["<tool glob>", ...], "rename": {"<server's name>": "<name shown>"},
//! "prompts": {<hide, only, rename of prompts>}, "resource_templates": {<the same>}}}}`. The
//! most specific client glob that matches the client's `clientInfo.name` applies (a client that
//! gave no name is matched as ""). `hide` leaves the matching items out; `only`, when given,
//! leaves out every item it does not match; `rename` shows an item under another name, and the
//! host routes calls (`tools/call`, `prompts/get`) under that name to it. The top-level keys
//! are about tools; prompts and resource templates are left as listed unless their own key
//! says otherwise. A tool or prompt left out and asked for anyway is refused by the host with
//! an error naming this plugin. Built against `switchyard:policy@0.2.0`.

wit_bindgen::generate!({ path: "../../../wit/0.2", world: "policy" });

use std::cell::RefCell;
use std::collections::BTreeMap;

use plugin_util::{GlobList, GlobMap, parse_config};
use serde_json::{Map, Value};
use switchyard::policy::host::{Level, log};

struct ToolFilter;

/// What a rule says of one kind of listed item.
#[derive(Default)]
struct Names {
    hide: GlobList,
    only: Option<GlobList>,
    rename: BTreeMap<String, String>,
}

/// What one client glob says.
struct Rule {
    tools: Names,
    prompts: Names,
    resource_templates: Names,
}

thread_local! {
    // Filled by `init`; a component instance is single-threaded, so a RefCell is enough.
    static RULES: RefCell<GlobMap<Rule>> = RefCell::new(GlobMap::new());
}

/// `hide`, `only` and `rename` of `obj` (whose path in the config is `at`).
fn parse_names(at: &str, obj: &Map<String, Value>) -> Result<Names, String> {
    let hide = match obj.get("hide") {
        None => GlobList::default(),
        Some(v) => GlobList::from_json(v, &format!("{at}.hide"))?,
    };
    let only = obj.get("only").map(|v| GlobList::from_json(v, &format!("{at}.only"))).transpose()?;
    let mut rename = BTreeMap::new();
    if let Some(r) = obj.get("rename") {
        let r = r.as_object().ok_or_else(|| format!("{at}.rename must be an object of old -> new name"))?;
        for (old, new) in r {
            let new = new
                .as_str()
                .filter(|n| !n.is_empty())
                .ok_or_else(|| format!("{at}.rename.{old} must be the new name (a non-empty string)"))?;
            if let Some((other, _)) = rename.iter().find(|(_, n)| *n == new) {
                return Err(format!("{at}.rename gives `{other}` and `{old}` the same name `{new}`"));
            }
            rename.insert(old.clone(), new.to_string());
        }
    }
    Ok(Names { hide, only, rename })
}

fn parse_rule(client: &str, v: &Value) -> Result<Rule, String> {
    let at = format!("clients.{client}");
    let obj = v.as_object().ok_or_else(|| format!("{at} must be an object"))?;
    let keys = ["hide", "only", "rename", "prompts", "resource_templates"];
    if let Some(k) = obj.keys().find(|k| !keys.contains(&k.as_str())) {
        return Err(format!("{at}: unknown key `{k}` (the keys are {})", keys.join(", ")));
    }
    let of_kind = |key: &str| -> Result<Names, String> {
        let Some(v) = obj.get(key) else { return Ok(Names::default()) };
        let at = format!("{at}.{key}");
        let kind = v.as_object().ok_or_else(|| format!("{at} must be an object"))?;
        if let Some(k) = kind.keys().find(|k| !matches!(k.as_str(), "hide" | "only" | "rename")) {
            return Err(format!("{at}: unknown key `{k}` (the keys are hide, only, rename)"));
        }
        parse_names(&at, kind)
    };
    Ok(Rule {
        tools: parse_names(&at, obj)?,
        prompts: of_kind("prompts")?,
        resource_templates: of_kind("resource_templates")?,
    })
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
            let names = match tool.kind {
                ItemKind::Tool => &rule.tools,
                ItemKind::Prompt => &rule.prompts,
                ItemKind::ResourceTemplate => &rule.resource_templates,
            };
            let kept = names.only.as_ref().is_none_or(|only| only.matches(&tool.name));
            if !kept || names.hide.matches(&tool.name) {
                current.hidden = true;
                return;
            }
            if let Some(new) = names.rename.get(&tool.name) {
                current.name = new.clone();
            }
        });
        current
    }
}

export!(ToolFilter);
