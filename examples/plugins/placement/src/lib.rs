//! `placement`: which instances of a pool run the calls of each tool.
//!
//! Config: `{"tools": {"<glob>": "shared" | "client" | "session" | {"key": "<name>"}}}`. The
//! most specific glob that matches the tool's name applies; a tool no glob matches is left as
//! the plugins before this one placed it. `client` gives each client (its name, project and
//! token) instances of its own, `session` each session, and `{"key": "k"}` every call of the
//! matching tools the same instances of their own, whoever calls. Only `tools/call` is placed.
//! Built against `switchyard:policy@0.2.0`.

wit_bindgen::generate!({ path: "../../../wit/0.2", world: "policy" });

use std::cell::RefCell;

use plugin_util::{GlobMap, parse_config};
use serde_json::Value;

struct Placer;

thread_local! {
    // Filled by `init`; a component instance is single-threaded, so a RefCell is enough.
    static RULES: RefCell<GlobMap<Placement>> = RefCell::new(GlobMap::new());
}

fn parse_placement(pattern: &str, v: &Value) -> Result<Placement, String> {
    let at = format!("tools.{pattern}");
    match v {
        Value::String(s) => match s.as_str() {
            "shared" => Ok(Placement::Shared),
            "client" => Ok(Placement::Client),
            "session" => Ok(Placement::Session),
            other => Err(format!(
                "{at}: unknown placement `{other}` (give \"shared\", \"client\", \"session\" or {{\"key\": \"NAME\"}})"
            )),
        },
        Value::Object(o) => {
            if let Some(k) = o.keys().find(|k| *k != "key") {
                return Err(format!("{at}: unknown key `{k}` (a keyed placement is {{\"key\": \"NAME\"}})"));
            }
            match o.get("key").and_then(Value::as_str) {
                Some(k) if !k.is_empty() => Ok(Placement::Key(k.to_string())),
                _ => Err(format!("{at}.key must be the key's name (a non-empty string)")),
            }
        }
        _ => Err(format!("{at} must be \"shared\", \"client\", \"session\" or {{\"key\": \"NAME\"}}")),
    }
}

impl Guest for Placer {
    fn init(config: String) -> Result<(), String> {
        let config = parse_config(&config)?;
        if let Some(k) = config.keys().find(|k| *k != "tools") {
            return Err(format!("unknown key `{k}` (placement knows only `tools`)"));
        }
        let mut rules = GlobMap::new();
        if let Some(tools) = config.get("tools") {
            let tools = tools.as_object().ok_or("`tools` must be an object of tool glob -> placement")?;
            for (pattern, v) in tools {
                rules.insert(pattern.clone(), parse_placement(pattern, v)?);
            }
        }
        RULES.with(|r| *r.borrow_mut() = rules);
        Ok(())
    }

    fn decide(call: Call, mut current: Decision) -> Verdict {
        if call.method == "tools/call"
            && let Some(tool) = call.tool.as_deref()
            && let Some(placement) = RULES.with(|r| r.borrow().get(tool).cloned())
        {
            current.placement = Some(placement);
        }
        Verdict::Continue(current)
    }

    fn list_tool(_tool: Tool, current: Listing) -> Listing {
        current
    }
}

export!(Placer);
