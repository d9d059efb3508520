//! `redact`: replaces secrets in what servers return with `[redacted: KIND]` before a client
//! (and so a model) sees them.
//!
//! Config (every key optional): `{"patterns": {"<kind>": "<regular expression>", ...},
//! "skip": ["<built-in kind>", ...], "methods": ["<method glob>", ...], "tools": ["<tool
//! glob>", ...]}`. The built-in kinds are AWS access key ids and secret keys, Google API keys
//! and service-account key ids, Azure storage keys and SAS signatures, GitHub and Slack
//! tokens, Slack webhooks, bearer tokens, PEM private keys and JWTs ([`secrets`]); `patterns`
//! adds kinds of your own (a group named `secret` replaces only that part of a match), `skip`
//! turns built-in ones off. `methods` (default `tools/call` and `resources/read`) and `tools`
//! (default: all) say which results are read. Only text is changed: the text of content items
//! and embedded resources, string values of `structuredContent`, the text of a
//! `resources/read`; blobs, images and every other field pass as they are. The same result
//! always gives the same answer. Built against `switchyard:policy@0.3.0`.

wit_bindgen::generate!({ path: "../../../wit/0.3", world: "policy" });

pub mod secrets;

use std::cell::RefCell;

use plugin_util::content::texts_mut;
use plugin_util::{interest_globs, parse_config};
use serde_json::Value;

use secrets::Redactor;

struct Redact;

thread_local! {
    // Filled by `init`; a component instance is single-threaded, so a RefCell is enough.
    static STATE: RefCell<Option<(Redactor, Interest)>> = const { RefCell::new(None) };
}

impl Guest for Redact {
    fn init(config: String) -> Result<(), String> {
        let config = parse_config(&config)?;
        let known = [secrets::KEYS, &["methods", "tools"]].concat();
        if let Some(k) = config.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(format!("unknown key `{k}` (redact knows {})", known.join(", ")));
        }
        let redactor = Redactor::from_config(&config)?;
        let (methods, tools) = interest_globs(&config, &["tools/call", "resources/read"])?;
        let interest = Interest { methods, tools, request: false, result: true };
        STATE.with(|s| *s.borrow_mut() = Some((redactor, interest)));
        Ok(())
    }

    fn decide(_call: Call, current: Decision) -> Verdict {
        Verdict::Continue(current)
    }

    fn list_tool(_tool: Tool, current: Listing) -> Listing {
        current
    }

    fn interest() -> Interest {
        STATE.with(|s| s.borrow().as_ref().map(|(_, i)| i.clone())).unwrap_or(Interest {
            methods: Vec::new(),
            tools: Vec::new(),
            request: false,
            result: false,
        })
    }

    fn on_request(_call: HookCall, _params: String) -> HookVerdict {
        HookVerdict::Continue
    }

    fn on_result(_call: HookCall, result: String) -> HookVerdict {
        STATE.with(|s| {
            let state = s.borrow();
            let Some((redactor, _)) = state.as_ref() else { return HookVerdict::Continue };
            match redact_result(redactor, &result) {
                Some(changed) => HookVerdict::Modify(changed),
                None => HookVerdict::Continue,
            }
        })
    }
}

/// The result (JSON text) with its secrets replaced, or `None` when it had none. A result that
/// is not JSON is passed on: the host checked it, so this does not happen.
pub fn redact_result(redactor: &Redactor, result: &str) -> Option<String> {
    let mut v: Value = serde_json::from_str(result).ok()?;
    let mut changed = false;
    texts_mut(&mut v, &mut |text| {
        if let Some((new, _)) = redactor.redact(text) {
            *text = new;
            changed = true;
        }
    });
    changed.then(|| v.to_string())
}

export!(Redact);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_result_changes_only_where_it_holds_a_secret() {
        let r = Redactor::from_config(&serde_json::Map::new()).unwrap();
        let clean = json!({"content": [{"type": "text", "text": "nothing here"}]}).to_string();
        assert_eq!(redact_result(&r, &clean), None);
        let dirty = json!({"content": [{"type": "text", "text": "id=AKIAIOSFODNN7EXAMPLE"},
            {"type": "image", "data": "AKIAIOSFODNN7EXAMPLE", "mimeType": "image/png"}], "isError": false});
        let out: Value = serde_json::from_str(&redact_result(&r, &dirty.to_string()).unwrap()).unwrap();
        assert_eq!(
            out,
            json!({"content": [{"type": "text", "text": "id=[redacted: aws-access-key]"},
                {"type": "image", "data": "AKIAIOSFODNN7EXAMPLE", "mimeType": "image/png"}], "isError": false})
        );
    }
}
