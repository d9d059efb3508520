//! `tool-filter`: which tools (and prompts, and resource templates) each client is shown, and
//! by what name.
//!
//! Config: `{"clients": {"<glob on the client's name>": {"hide": ["<tool glob>", ...],
//! "only": ["<tool glob>", ...], "rename": {"<server's name>": "<name shown>"},
//! "prompts": {<hide, only, rename of prompts>}, "resource_templates": {<the same>}}},
//! "tokens": {"<glob on a token's name>": {<a rule, as for clients>}}}`. The most specific
//! client glob that matches the client's `clientInfo.name` applies (a client that gave no name
//! is matched as ""); for a client the HTTP front served with a named token (`[http.tokens]`),
//! a `tokens` rule that matches the token's name applies instead: a name is the client's own
//! say, a token is the daemon's. `hide` leaves the matching items out; `only`, when given,
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
    static TOKEN_RULES: RefCell<GlobMap<Rule>> = RefCell::new(GlobMap::new());
}

/// `hide`, `only` and `rename` of `obj` (whose path in the config is `at`); `tools`: the names
/// are tool names, which the spec gives a form.
fn parse_names(at: &str, obj: &Map<String, Value>, tools: bool) -> Result<Names, String> {
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
            if tools && !is_tool_name(new) {
                return Err(format!(
                    "{at}.rename.{old}: {new:?} is not a tool name clients take (1 to 128 of A-Z, a-z, 0-9, `_`, `-` and `.`)"
                ));
            }
            if let Some((other, _)) = rename.iter().find(|(_, n)| *n == new) {
                return Err(format!("{at}.rename gives `{other}` and `{old}` the same name `{new}`"));
            }
            rename.insert(old.clone(), new.to_string());
        }
    }
    Ok(Names { hide, only, rename })
}

/// Whether `name` is a tool name as the MCP spec advises them (1 to 128 ASCII letters, digits,
/// `_`, `-` and `.`): clients refuse others, some by failing the whole list.
fn is_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// A rule; `at` is where it is in the config (`clients.NAME`, `tokens.NAME`).
fn parse_rule(at: &str, v: &Value) -> Result<Rule, String> {
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
        parse_names(&at, kind, false)
    };
    Ok(Rule {
        tools: parse_names(at, obj, true)?,
        prompts: of_kind("prompts")?,
        resource_templates: of_kind("resource_templates")?,
    })
}

impl Guest for ToolFilter {
    fn init(config: String) -> Result<(), String> {
        let config = parse_config(&config)?;
        if let Some(k) = config.keys().find(|k| !matches!(k.as_str(), "clients" | "tokens")) {
            return Err(format!("unknown key `{k}` (tool-filter knows `clients` and `tokens`)"));
        }
        let rules_of = |key: &str| -> Result<GlobMap<Rule>, String> {
            let mut rules = GlobMap::new();
            if let Some(table) = config.get(key) {
                let table = table.as_object().ok_or_else(|| format!("`{key}` must be an object of glob -> rule"))?;
                for (glob, v) in table {
                    // A token's name has ASCII letters, digits, `-` and `_` ([http.tokens]).
                    let token_glob = |c: char| c.is_ascii_alphanumeric() || "-_*?".contains(c);
                    if key == "tokens" && !glob.chars().all(token_glob) {
                        return Err(format!(
                            "tokens.{glob}: no token can have that name (a token's name has ASCII letters, digits, `-` and `_`; a glob adds `*` and `?`)"
                        ));
                    }
                    rules.insert(glob.clone(), parse_rule(&format!("{key}.{glob}"), v)?);
                }
            }
            Ok(rules)
        };
        let (rules, token_rules) = (rules_of("clients")?, rules_of("tokens")?);
        if rules.is_empty() && token_rules.is_empty() {
            log(Level::Warn, "no `clients` or `tokens` configured: this plugin changes nothing");
        }
        RULES.with(|r| *r.borrow_mut() = rules);
        TOKEN_RULES.with(|r| *r.borrow_mut() = token_rules);
        Ok(())
    }

    fn decide(_call: Call, current: Decision) -> Verdict {
        // The host refuses a call to a tool `list-tool` hides from its client, and routes a
        // renamed tool's calls: nothing is left to decide here.
        Verdict::Continue(current)
    }

    fn list_tool(tool: Tool, mut current: Listing) -> Listing {
        let client = tool.client.name.as_deref().unwrap_or("");
        let by_token = tool.client.token.as_deref().filter(|t| TOKEN_RULES.with(|r| r.borrow().get(t).is_some()));
        let (table, key) = match by_token {
            Some(token) => (&TOKEN_RULES, token),
            None => (&RULES, client),
        };
        table.with(|r| {
            let rules = r.borrow();
            let Some(rule) = rules.get(key) else { return };
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
