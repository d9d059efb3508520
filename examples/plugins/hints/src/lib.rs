//! `hints`: overrides the annotations of matching tools and lets read-only ones run in parallel.
//!
//! Config: `{"tools": {"<glob>": {"readOnlyHint": true, "idempotentHint": true,
//! "destructiveHint": false, "openWorldHint": false, "title": "..."}}}`. Only the fields given
//! are overridden; the most specific matching glob wins.

wit_bindgen::generate!({ path: "../../../wit/0.2", world: "policy" });

use std::cell::RefCell;

use plugin_util::{GlobMap, parse_config};
use serde_json::Value;
use switchyard::policy::host::{Level, log};

struct HintsPlugin;

thread_local! {
    // Filled by `init`; a component instance is single-threaded, so a RefCell is enough.
    static RULES: RefCell<GlobMap<Hints>> = RefCell::new(GlobMap::new());
}

fn parse_override(pattern: &str, v: &Value) -> Result<Hints, String> {
    let obj = v.as_object().ok_or_else(|| format!("tools.{pattern} must be an object"))?;
    let flag = |k: &str| -> Result<Option<bool>, String> {
        match obj.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(format!("tools.{pattern}.{k} must be true or false")),
        }
    };
    for k in obj.keys() {
        if !matches!(k.as_str(), "readOnlyHint" | "destructiveHint" | "idempotentHint" | "openWorldHint" | "title") {
            return Err(format!("tools.{pattern}: unknown hint `{k}`"));
        }
    }
    Ok(Hints {
        read_only: flag("readOnlyHint")?,
        destructive: flag("destructiveHint")?,
        idempotent: flag("idempotentHint")?,
        open_world: flag("openWorldHint")?,
        title: match obj.get("title") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err(format!("tools.{pattern}.title must be a string")),
        },
    })
}

impl Guest for HintsPlugin {
    fn init(config: String) -> Result<(), String> {
        let config = parse_config(&config)?;
        if let Some(k) = config.keys().find(|k| *k != "tools") {
            return Err(format!("unknown key `{k}` (hints knows only `tools`)"));
        }
        let mut rules = GlobMap::new();
        if let Some(tools) = config.get("tools") {
            let tools = tools.as_object().ok_or("`tools` must be an object of glob -> hints")?;
            for (pattern, v) in tools {
                rules.insert(pattern.clone(), parse_override(pattern, v)?);
            }
        }
        if rules.is_empty() {
            log(Level::Warn, "no `tools` configured: this plugin changes nothing");
        }
        RULES.with(|r| *r.borrow_mut() = rules);
        Ok(())
    }

    fn decide(call: Call, mut current: Decision) -> Verdict {
        // The router only lets a call run in parallel when it is safe; a tool this plugin
        // declares read-only is promised safe, so it joins the shared gate.
        let read_only = call
            .tool
            .as_deref()
            .is_some_and(|tool| RULES.with(|r| r.borrow().get(tool).and_then(|h| h.read_only)) == Some(true));
        if read_only {
            current.concurrency = Some(Concurrency::Shared);
        }
        Verdict::Continue(current)
    }

    fn list_tool(tool: Tool, mut current: Listing) -> Listing {
        // Prompts and resource templates have no annotations.
        if tool.kind != ItemKind::Tool {
            return current;
        }
        RULES.with(|r| {
            if let Some(o) = r.borrow().get(&tool.name) {
                let hints = &mut current.hints;
                hints.read_only = o.read_only.or(hints.read_only);
                hints.destructive = o.destructive.or(hints.destructive);
                hints.idempotent = o.idempotent.or(hints.idempotent);
                hints.open_world = o.open_world.or(hints.open_world);
                if o.title.is_some() {
                    hints.title = o.title.clone();
                }
            }
        });
        current
    }
}

export!(HintsPlugin);
