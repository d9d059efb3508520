//! A test fixture (`switchyard:policy@0.3.0`): content hooks that answer as configured, so a
//! test can see the order the host runs them in, enforce against audit, and fail open against
//! closed.
//!
//! Config (all optional):
//! - `methods`, `tools`: its interest (globs; default `["tools/call"]` and every tool);
//! - `request`, `result`: what each hook does: `continue` (the default), `modify`, `deny`,
//!   `trap` or `spin` (loops past any deadline);
//! - `tag`: its name in what it changes (default `probe`). `modify` appends the tag to the
//!   array `trail` of the request's `arguments`, or of the result, and to the result's first
//!   text content (`... [tag]`), so the order of the plugins is readable in the answer.

wit_bindgen::generate!({ path: "../../../../wit/0.3", world: "policy" });

use std::cell::RefCell;

use serde_json::{Value, json};

struct Probe;

#[derive(Default, Clone)]
struct Setup {
    methods: Vec<String>,
    tools: Vec<String>,
    request: String,
    result: String,
    tag: String,
}

thread_local! {
    static SETUP: RefCell<Setup> = RefCell::new(Setup::default());
}

fn strings(v: &Value, key: &str, default: &[&str]) -> Result<Vec<String>, String> {
    match v.get(key) {
        None => Ok(default.iter().map(|s| s.to_string()).collect()),
        Some(Value::Array(a)) => {
            a.iter().map(|m| m.as_str().map(str::to_string).ok_or(format!("`{key}` holds strings"))).collect()
        }
        Some(_) => Err(format!("`{key}` is a list of strings")),
    }
}

fn action(v: &Value, key: &str) -> Result<String, String> {
    let a = v.get(key).and_then(Value::as_str).unwrap_or("continue").to_string();
    match a.as_str() {
        "continue" | "modify" | "deny" | "trap" | "spin" => Ok(a),
        other => Err(format!("`{key} = {other:?}`: use continue, modify, deny, trap or spin")),
    }
}

impl Guest for Probe {
    fn init(config: String) -> Result<(), String> {
        let v: Value = serde_json::from_str(&config).map_err(|e| format!("config is not JSON: {e}"))?;
        let setup = Setup {
            methods: strings(&v, "methods", &["tools/call"])?,
            tools: strings(&v, "tools", &[])?,
            request: action(&v, "request")?,
            result: action(&v, "result")?,
            tag: v.get("tag").and_then(Value::as_str).unwrap_or("probe").to_string(),
        };
        SETUP.with(|s| *s.borrow_mut() = setup);
        Ok(())
    }

    fn decide(_call: Call, current: Decision) -> Verdict {
        Verdict::Continue(current)
    }

    fn list_tool(_tool: Tool, current: Listing) -> Listing {
        current
    }

    fn interest() -> Interest {
        let s = SETUP.with(|s| s.borrow().clone());
        Interest { methods: s.methods, tools: s.tools, request: true, result: true }
    }

    fn on_request(call: HookCall, params: String) -> HookVerdict {
        let s = SETUP.with(|s| s.borrow().clone());
        answer(&s.request, &s.tag, &call, &params, |v, tag| {
            let args = v.as_object_mut()?.entry("arguments").or_insert_with(|| json!({}));
            push_trail(args, tag)
        })
    }

    fn on_result(call: HookCall, result: String) -> HookVerdict {
        let s = SETUP.with(|s| s.borrow().clone());
        answer(&s.result, &s.tag, &call, &result, |v, tag| {
            push_trail(v, tag)?;
            if let Some(text) = v.pointer_mut("/content/0/text") {
                let t = format!("{} [{tag}]", text.as_str().unwrap_or(""));
                *text = Value::String(t);
            }
            Some(())
        })
    }
}

fn push_trail(v: &mut Value, tag: &str) -> Option<()> {
    let trail = v.as_object_mut()?.entry("trail").or_insert_with(|| json!([]));
    trail.as_array_mut()?.push(json!(tag));
    Some(())
}

fn answer(
    action: &str,
    tag: &str,
    call: &HookCall,
    json: &str,
    modify: impl FnOnce(&mut Value, &str) -> Option<()>,
) -> HookVerdict {
    match action {
        "modify" => {
            let mut v: Value = serde_json::from_str(json).unwrap_or(json!({}));
            match modify(&mut v, tag) {
                Some(()) => HookVerdict::Modify(v.to_string()),
                None => HookVerdict::Continue,
            }
        }
        "deny" => HookVerdict::Deny(format!("{tag} denies {} `{}`", call.method, call.tool.as_deref().unwrap_or(""))),
        "trap" => panic!("{tag} traps as configured"),
        "spin" => {
            let mut n: u64 = 0;
            loop {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        }
        _ => HookVerdict::Continue,
    }
}

export!(Probe);
