//! `result-cap`: cuts a result over a size, and says so in a note the model reads.
//!
//! Config (every key optional): `{"max_bytes": 262144, "hint": "<how to ask for less>",
//! "per_tool": {"<tool glob>": {"max_bytes": N, "hint": "..."}}, "methods": ["<method glob>",
//! ...], "tools": ["<tool glob>", ...]}`. A result whose JSON is over `max_bytes` (at least
//! 1024) keeps its first texts up to the cap: the text that crosses it is cut at a character
//! boundary, items after it are left out, and the long strings of `structuredContent` are cut
//! from their end the same way (its keys, numbers and shape stay, so it is still valid against
//! the tool's output schema). A last text item then says how many bytes of text the result
//! had, how many are shown and were cut and, in `hint`'s words, how to see the rest. The most specific
//! `per_tool` glob that matches the tool sets its own cap. `methods` (default `tools/call` and
//! `resources/read`) and `tools` (default: all) say which results are read. Built against
//! `switchyard:policy@0.3.0`.

wit_bindgen::generate!({ path: "../../../wit/0.3", world: "policy" });

pub mod cap;

use std::cell::RefCell;

use plugin_util::{GlobMap, interest_globs, parse_config};
use serde_json::Value;

use cap::{Cap, DEFAULT_BYTES, DEFAULT_HINT};

struct ResultCap;

struct Config {
    cap: Cap,
    per_tool: GlobMap<Cap>,
    interest: Interest,
}

thread_local! {
    static STATE: RefCell<Option<Config>> = const { RefCell::new(None) };
}

fn parse(config: &str) -> Result<Config, String> {
    let config = parse_config(config)?;
    let known = ["max_bytes", "hint", "per_tool", "methods", "tools"];
    if let Some(k) = config.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(format!("unknown key `{k}` (result-cap knows {})", known.join(", ")));
    }
    let cap = Cap::from_json(&config, "", &Cap { max_bytes: DEFAULT_BYTES, hint: DEFAULT_HINT.to_string() })?;
    let mut per_tool = GlobMap::new();
    if let Some(v) = config.get("per_tool") {
        let table = v.as_object().ok_or("`per_tool` must be an object of tool glob -> {max_bytes, hint}")?;
        for (glob, rule) in table {
            let at = format!("per_tool.{glob}.");
            let rule =
                rule.as_object().ok_or_else(|| format!("per_tool.{glob} must be an object {{max_bytes, hint}}"))?;
            if let Some(k) = rule.keys().find(|k| !matches!(k.as_str(), "max_bytes" | "hint")) {
                return Err(format!("{at}{k}: unknown key (the keys are max_bytes, hint)"));
            }
            per_tool.insert(glob.clone(), Cap::from_json(rule, &at, &cap)?);
        }
    }
    let (methods, tools) = interest_globs(&config, &["tools/call", "resources/read"])?;
    Ok(Config { cap, per_tool, interest: Interest { methods, tools, request: false, result: true } })
}

impl Guest for ResultCap {
    fn init(config: String) -> Result<(), String> {
        let config = parse(&config)?;
        STATE.with(|s| *s.borrow_mut() = Some(config));
        Ok(())
    }

    fn decide(_call: Call, current: Decision) -> Verdict {
        Verdict::Continue(current)
    }

    fn list_tool(_tool: Tool, current: Listing) -> Listing {
        current
    }

    fn interest() -> Interest {
        STATE.with(|s| s.borrow().as_ref().map(|c| c.interest.clone())).unwrap_or(Interest {
            methods: Vec::new(),
            tools: Vec::new(),
            request: false,
            result: false,
        })
    }

    fn on_request(_call: HookCall, _params: String) -> HookVerdict {
        HookVerdict::Continue
    }

    fn on_result(call: HookCall, result: String) -> HookVerdict {
        STATE.with(|s| {
            let state = s.borrow();
            let Some(config) = state.as_ref() else { return HookVerdict::Continue };
            let cap = call.tool.as_deref().and_then(|t| config.per_tool.get(t)).unwrap_or(&config.cap);
            if result.len() <= cap.max_bytes {
                return HookVerdict::Continue; // the common case: not even parsed
            }
            let Ok(v) = serde_json::from_str::<Value>(&result) else { return HookVerdict::Continue };
            match cap.apply(v, result.len()) {
                Some(cut) => HookVerdict::Modify(cut.to_string()),
                None => HookVerdict::Continue,
            }
        })
    }
}

export!(ResultCap);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_tool_caps_take_the_top_level_as_their_default() {
        let c = parse(r#"{"max_bytes": 4096, "hint": "page", "per_tool": {"read_*": {"max_bytes": 2048}}}"#).unwrap();
        let read = c.per_tool.get("read_file").unwrap();
        assert_eq!((read.max_bytes, read.hint.as_str()), (2048, "page"));
        assert!(c.per_tool.get("list").is_none());
        assert_eq!(c.cap.max_bytes, 4096);
        let e = parse(r#"{"per_tool": {"x": {"max": 1}}}"#).err().unwrap();
        assert!(e.contains("per_tool.x.max"), "{e}");
        assert!(parse(r#"{"maxbytes": 1}"#).err().unwrap().contains("unknown key `maxbytes`"));
    }
}
