//! `timeouts`: per-tool deadlines and retry rules from config.
//!
//! Config: `{"tools": {"<glob>": {"timeout_ms": 120000, "retry": {"attempts": 2,
//! "backoff_ms": 500}}}}`. The most specific matching glob wins; `"*"` sets a default.

wit_bindgen::generate!({ path: "../../../wit/0.2", world: "policy" });

use std::cell::RefCell;

use plugin_util::{GlobMap, parse_config};
use serde_json::Value;

#[derive(Debug, Clone, Copy, Default)]
struct Rule {
    timeout_ms: Option<u64>,
    retry: Option<Retry>,
}

thread_local! {
    static RULES: RefCell<GlobMap<Rule>> = RefCell::new(GlobMap::new());
}

fn uint(v: &Value, what: &str) -> Result<u64, String> {
    v.as_u64().ok_or_else(|| format!("{what} must be a non-negative integer"))
}

fn parse_rule(pattern: &str, v: &Value) -> Result<Rule, String> {
    let obj = v.as_object().ok_or_else(|| format!("tools.{pattern} must be an object"))?;
    let mut rule = Rule::default();
    for (k, v) in obj {
        match k.as_str() {
            "timeout_ms" => rule.timeout_ms = Some(uint(v, &format!("tools.{pattern}.timeout_ms"))?),
            "retry" => {
                let r = v.as_object().ok_or_else(|| format!("tools.{pattern}.retry must be an object"))?;
                let field = |name: &str| -> Result<u32, String> {
                    let what = format!("tools.{pattern}.retry.{name}");
                    match r.get(name) {
                        None => Ok(0),
                        Some(v) => u32::try_from(uint(v, &what)?).map_err(|_| format!("{what} is too large")),
                    }
                };
                rule.retry = Some(Retry { attempts: field("attempts")?, backoff_ms: field("backoff_ms")? });
            }
            other => return Err(format!("tools.{pattern}: unknown key `{other}`")),
        }
    }
    Ok(rule)
}

struct Timeouts;

impl Guest for Timeouts {
    fn init(config: String) -> Result<(), String> {
        let config = parse_config(&config)?;
        if let Some(k) = config.keys().find(|k| *k != "tools") {
            return Err(format!("unknown key `{k}` (timeouts knows only `tools`)"));
        }
        let mut rules = GlobMap::new();
        if let Some(tools) = config.get("tools") {
            let tools = tools.as_object().ok_or("`tools` must be an object of glob -> rule")?;
            for (pattern, v) in tools {
                rules.insert(pattern.clone(), parse_rule(pattern, v)?);
            }
        }
        RULES.with(|r| *r.borrow_mut() = rules);
        Ok(())
    }

    fn decide(call: Call, mut current: Decision) -> Verdict {
        if let Some(tool) = call.tool.as_deref()
            && let Some(rule) = RULES.with(|r| r.borrow().get(tool).copied())
        {
            current.timeout_ms = rule.timeout_ms.or(current.timeout_ms);
            current.retry = rule.retry.or(current.retry);
        }
        Verdict::Continue(current)
    }

    fn list_tool(_tool: Tool, current: Listing) -> Listing {
        current
    }
}

export!(Timeouts);
