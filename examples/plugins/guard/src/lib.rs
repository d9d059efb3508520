//! `guard`: refuses calls of tools matching configured globs.
//!
//! Config: `{"deny": ["delete_*", "rm"], "reason": "..."}` or, with a reason per pattern,
//! `{"deny": {"delete_*": "deleting is off in this workspace"}}`.

wit_bindgen::generate!({ path: "../../../wit/0.2", world: "policy" });

use std::cell::RefCell;

use plugin_util::{GlobMap, parse_config};
use serde_json::Value;
use switchyard::policy::host::{Level, log};

struct Guard;

thread_local! {
    // Pattern -> reason (None: use the default reason).
    static DENY: RefCell<GlobMap<Option<String>>> = RefCell::new(GlobMap::new());
    static REASON: RefCell<Option<String>> = const { RefCell::new(None) };
}

impl Guest for Guard {
    fn init(config: String) -> Result<(), String> {
        let config = parse_config(&config)?;
        if let Some(k) = config.keys().find(|k| !matches!(k.as_str(), "deny" | "reason")) {
            return Err(format!("unknown key `{k}` (guard knows `deny` and `reason`)"));
        }
        let mut deny = GlobMap::new();
        match config.get("deny") {
            None => log(Level::Warn, "no `deny` configured: this guard refuses nothing"),
            Some(Value::Array(list)) => {
                for p in list {
                    let p = p.as_str().ok_or("`deny` must contain strings only")?;
                    deny.insert(p, None);
                }
            }
            Some(Value::Object(map)) => {
                for (p, reason) in map {
                    let reason = reason.as_str().ok_or("`deny` reasons must be strings")?;
                    deny.insert(p.clone(), Some(reason.to_string()));
                }
            }
            Some(_) => return Err("`deny` must be a list of globs or an object glob -> reason".into()),
        }
        let reason = match config.get("reason") {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err("`reason` must be a string".into()),
        };
        DENY.with(|d| *d.borrow_mut() = deny);
        REASON.with(|r| *r.borrow_mut() = reason);
        Ok(())
    }

    fn decide(call: Call, current: Decision) -> Verdict {
        let Some(tool) = call.tool.as_deref() else { return Verdict::Continue(current) };
        match DENY.with(|d| d.borrow().get(tool).cloned()) {
            None => Verdict::Continue(current),
            Some(reason) => Verdict::Reject(reason.unwrap_or_else(|| {
                REASON.with(|r| r.borrow().clone()).unwrap_or_else(|| format!("tool `{tool}` is blocked by policy"))
            })),
        }
    }

    fn list_tool(_tool: Tool, current: Listing) -> Listing {
        current
    }
}

export!(Guard);
